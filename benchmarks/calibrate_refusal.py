"""Calibrate RAG_REFUSAL_THRESHOLD on the dev set: the Python FAQ (answerable) and off-topic questions.

    .venv/bin/python -m benchmarks.calibrate_refusal [--quick]

Ingests every FAQ answer passage as a document, takes the best retrieval score of each FAQ question (should be
answered) and of each question in data/eval/offtopic.jsonl (should be refused), and picks the threshold with the
best balanced accuracy. `--quick` (20 FAQ passages, 10 off-topic questions) checks that the benchmark runs.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from benchmarks.common import REPO, faq_pairs
from ingest import service
from rag.config import Settings
from rag.core.access import LOCAL_OPERATOR
from rag.core.retrieve import Retriever
from rag.wiring import build_embedder, build_store

OFFTOPIC = REPO / "data" / "eval" / "offtopic.jsonl"


def best_scores(questions: list[str], retriever: Retriever) -> list[float]:
    """Top-1 cosine score of each question."""
    return [retriever.search(q, 1, LOCAL_OPERATOR)[0].score for q in questions]


def sweep(answerable: list[float], offtopic: list[float]) -> tuple[float, float, float, float]:
    """(threshold, balanced accuracy, refusal precision, refusal recall) of the best threshold."""
    best = (0.0, 0.0, 0.0, 0.0)
    for step in range(0, 101):
        t = step / 100
        kept = sum(s >= t for s in answerable) / len(answerable)
        refused = sum(s < t for s in offtopic)
        wrongly = sum(s < t for s in answerable)
        balanced = (kept + refused / len(offtopic)) / 2
        precision = refused / (refused + wrongly) if refused + wrongly else 1.0
        if balanced > best[1]:
            best = (t, balanced, precision, refused / len(offtopic))
    return best


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 FAQ passages, 10 off-topic questions")
    quick = parser.parse_args(argv).quick
    pairs = faq_pairs()[:20] if quick else faq_pairs()
    offtopic = [json.loads(line)["question"] for line in OFFTOPIC.read_text().splitlines() if line.strip()]
    offtopic = offtopic[:10] if quick else offtopic
    with tempfile.TemporaryDirectory() as tmp:
        docs = Path(tmp) / "faq"
        docs.mkdir()
        for i, (_, answer) in enumerate(pairs):
            (docs / f"{i:03d}.txt").write_text(answer, encoding="utf-8")
        settings = Settings(data_dir=Path(tmp) / "data", _env_file=None)  # type: ignore[call-arg]
        embedder = build_embedder(settings)
        service.sync([docs], settings, embedder=embedder)
        retriever = Retriever(embedder, build_store(settings))
        good = best_scores([q for q, _ in pairs], retriever)
        bad = best_scores(offtopic, retriever)
    threshold, balanced, precision, recall = sweep(good, bad)
    median = sorted(good)[len(good) // 2]
    print(f"answerable: {len(good)} questions, best score min {min(good):.3f} median {median:.3f}")
    print(f"off-topic:  {len(bad)} questions, best score max {max(bad):.3f} median {sorted(bad)[len(bad) // 2]:.3f}")
    print(f"threshold {threshold:.2f}: balanced accuracy {balanced:.3f}, refusal precision {precision:.3f}, "
          f"refusal recall {recall:.3f}")


if __name__ == "__main__":
    main()
