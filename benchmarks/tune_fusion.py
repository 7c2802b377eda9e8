"""Grid-search the hybrid fusion's dense share for one embedder on ingested dev sets, and suggest refusal thresholds.

    .venv/bin/python -m benchmarks.tune_fusion DATA_DIR:CASES.jsonl [DATA_DIR:CASES.jsonl ...]
    .venv/bin/python -m benchmarks.tune_fusion --quick   # 12 Python FAQ documents and their questions, ingested here

Each argument pairs a data dir (a corpus ingested with RAG_EMBED_MODEL) with a case file. For every dense share in
GRID it runs `rag eval`'s measure (rag.tools.evaluate) over the **tune half** of every pair (the test half is what
docs
reports, so it is never fitted) — the share applies to the questions' language
(English questions: RAG_HYBRID_DENSE_WEIGHT, Chinese ones: RAG_HYBRID_DENSE_WEIGHT_CJK) — and prints recall@1/@3
and MRR per case file, with the refusal threshold `rag eval` suggests at that share. Questions are embedded
once per pair; only the fusion changes between rows.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from benchmarks.common import FAQ
from ingest import service
from rag.config import Settings
from rag.core.access import LOCAL_OPERATOR
from rag.core.ports import Embedder
from rag.core.retrieve import Fusion
from rag.tools.evaluate import evaluate, load_cases
from rag.wiring import build_embedder, build_retriever, build_store, prefer_passive_threads

GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def tune(settings: Settings, embedder: Embedder, pairs: list[str]) -> None:
    """Print the grid for every DATA_DIR:CASES pair."""
    print(f"embedder {settings.embed_model}; share applies to each question's language")
    for pair in pairs:
        data_dir, cases_file = pair.split(":", 1)
        local = settings.model_copy(update={"data_dir": Path(data_dir)})
        store = build_store(local)
        cases = load_cases(Path(cases_file), "tune")
        print(f"\n{cases_file} (tune half, {len(cases)} cases) over {data_dir}")
        for share in GRID:
            retriever = build_retriever(local, embedder, store)
            retriever.fusion = Fusion(share, share, retriever.fusion.margin_pull)
            report = evaluate(cases, lambda q, k, r=retriever: r.search(q, k, LOCAL_OPERATOR), lambda q: 0.0)
            print(f"  share {share:.1f}: @1 {report.recall['@1']:.3f}  @3 {report.recall['@3']:.3f}  "
                  f"mrr {report.mrr:.3f}  suggested threshold {report.suggested_threshold}")


def quick_pair(settings: Settings, embedder: Embedder, tmp: Path, documents: int = 12) -> str:
    """A DATA_DIR:CASES pair made here: the first Python FAQ documents ingested, their questions and two
    off-topic ones."""
    docs = tmp / "docs"
    docs.mkdir()
    lines = (FAQ / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    cases = [json.loads(line) for line in lines[:documents]]
    for case in cases:
        shutil.copy(FAQ / "docs" / case["expected_source"], docs / case["expected_source"])
    cases += [{"question": "What is the capital of Peru?", "answerable": False},
              {"question": "How do I bake sourdough bread?", "answerable": False}]
    (tmp / "cases.jsonl").write_text("".join(json.dumps(case) + "\n" for case in cases), encoding="utf-8")
    service.sync([docs], settings.model_copy(update={"data_dir": tmp / "data"}), embedder=embedder)
    return f"{tmp / 'data'}:{tmp / 'cases.jsonl'}"


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pairs", nargs="*", metavar="DATA_DIR:CASES.jsonl")
    parser.add_argument("--quick", action="store_true", help="12 Python FAQ documents and their questions")
    args = parser.parse_args(argv)
    if not args.quick and not args.pairs:
        parser.error("give DATA_DIR:CASES.jsonl pairs, or --quick")
    prefer_passive_threads()
    settings = Settings()
    embedder = build_embedder(settings)
    if not args.quick:
        tune(settings, embedder, args.pairs)
        return
    with tempfile.TemporaryDirectory() as tmp:
        tune(settings, embedder, [quick_pair(settings, embedder, Path(tmp))])


if __name__ == "__main__":
    main()
