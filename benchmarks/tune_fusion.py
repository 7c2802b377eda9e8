"""Grid-search the hybrid fusion's dense share for one embedder on ingested dev sets, and suggest refusal thresholds.

    .venv/bin/python -m benchmarks.tune_fusion DATA_DIR:CASES.jsonl [DATA_DIR:CASES.jsonl ...]

Each argument pairs a data dir (a corpus ingested with RAG_EMBED_MODEL) with a case file. For every dense share in
GRID it runs `rag eval`'s measure (rag.evaluate) over every pair — the share applies to the questions' language
(English questions: RAG_HYBRID_DENSE_WEIGHT, Chinese ones: RAG_HYBRID_DENSE_WEIGHT_CJK) — and prints recall@1/@3
and MRR per case file, with the refusal threshold `rag eval` suggests at that share. Questions are embedded
once per pair; only the fusion changes between rows.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rag.access import LOCAL_OPERATOR
from rag.config import Settings
from rag.evaluate import evaluate, load_cases
from rag.retrieve import Fusion
from rag.wiring import build_embedder, build_retriever, build_store, prefer_passive_threads

GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def main(pairs: list[str]) -> None:
    prefer_passive_threads()
    settings = Settings()
    embedder = build_embedder(settings)
    print(f"embedder {settings.embed_model}; share applies to each question's language")
    for pair in pairs:
        data_dir, cases_file = pair.split(":", 1)
        local = settings.model_copy(update={"data_dir": Path(data_dir)})
        store = build_store(local)
        cases = load_cases(Path(cases_file))
        print(f"\n{cases_file} over {data_dir}")
        for share in GRID:
            retriever = build_retriever(local, embedder, store)
            retriever.fusion = Fusion(share, share, retriever.fusion.margin_pull)
            report = evaluate(cases, lambda q, k, r=retriever: r.search(q, k, LOCAL_OPERATOR), lambda q: 0.0)
            print(f"  share {share:.1f}: @1 {report.recall['@1']:.3f}  @3 {report.recall['@3']:.3f}  "
                  f"mrr {report.mrr:.3f}  suggested threshold {report.suggested_threshold}")


if __name__ == "__main__":
    main(sys.argv[1:])
