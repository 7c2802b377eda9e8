"""How sure the extractive ranking is, on answerable questions and on questions the corpus does not answer.

    RAG_DATA_DIR=... python -m benchmarks.quote_confidence CASES.jsonl [--split tune]

For each case: retrieval as the answer path runs it (the principal sees everything), the excerpts it would give the
model, and the best score of rag.core.extract's quotes over them. Prints, per language, the best scores of answerable
questions whose passage was retrieved, and of unanswerable ones (near misses, off-topic) that got past retrieval,
and the share of each at or above candidate floors: rag.core.extract.CONFIDENT_SCORE is the floor under which a quote is
not shown after the model refused or its draft was withheld (docs, "Refusals mean not in the documents").
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from rag.config import load_settings
from rag.core.access import LOCAL_OPERATOR
from rag.core.answer import relevant
from rag.core.extract import extract
from rag.core.ports import sentence_encoder
from rag.core.sentences import question_language
from rag.tools.evaluate import load_cases
from rag.wiring import build_embedder, build_engine

FLOORS = (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("cases", type=Path)
    parser.add_argument("--split", choices=["tune", "test"], default=None)
    args = parser.parse_args(argv)
    settings = load_settings()
    embedder = build_embedder(settings)
    engine = build_engine(settings, embedder=embedder)
    best: dict[tuple[str, bool], list[float]] = defaultdict(list)
    for case in load_cases(args.cases, args.split):
        hits = relevant(engine.retriever.search(case.question, engine.top_k, LOCAL_OPERATOR),
                        engine.threshold_for(case.question))
        if not hits or (case.answerable and not any(case.matches(hit) for hit in hits)):
            continue  # refused by retrieval already, or the passage was not found: no quote can be right
        language = question_language(case.question)
        quotes = extract(case.question, hits, language, sentence_encoder(embedder))
        best[(language, case.answerable)].append(max((quote.score for quote in quotes), default=0.0))
    for (language, answerable), scores in sorted(best.items()):
        shares = "  ".join(f">={floor}: {sum(s >= floor for s in scores) / len(scores):.2f}" for floor in FLOORS)
        print(f"{language} {'answerable' if answerable else 'not answerable'} ({len(scores)}): {shares}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
