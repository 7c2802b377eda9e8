"""Precision and recall of the support check on the labelled sentences of data/eval/support/labelled.jsonl.

    python -m benchmarks.support_calibration [--file F] [--split tune|test|all] [--show unsupported-accepted]

Each labelled row holds a question, its retrieved excerpts, one sentence (written by the offline model, or a
constructed hard case) and a label: "supported", "unsupported" or "filler". The check (rag.core.grounding) is run as the
answer path runs it; "supported" is the positive class, filler rows are left out. Precision is the constraint: a
sentence shown that the excerpts do not support is the failure the product must not have.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from rag.core.grounding import SupportChecker
from rag.core.sentences import question_language

LABELLED = Path(__file__).resolve().parent.parent / "data" / "eval" / "support" / "labelled.jsonl"


def load(path: Path, split: str) -> list[dict[str, object]]:
    """The labelled rows of one split ("all": every row), filler left out."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [row for row in rows if row["label"] in ("supported", "unsupported") and split in ("all", row["split"])]


def judge(row: dict[str, object]) -> tuple[bool, str]:
    """The check's verdict on one row: (accepted, reason)."""
    question = str(row["question"])
    checker = SupportChecker([str(text) for text in row["excerpts"]], question_language(question),  # type: ignore[attr-defined]
                             question)
    verdict = checker.check(str(row["sentence"]))
    return verdict.supported, verdict.reason


def score(rows: list[dict[str, object]]) -> dict[str, dict[str, float | int]]:
    """Precision and recall of "supported", per language and origin and in all."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])  # tp, fp, fn, tn
    for row in rows:
        accepted, _ = judge(row)
        truth = row["label"] == "supported"
        cell = {(True, True): 0, (True, False): 1, (False, True): 2, (False, False): 3}[(accepted, truth)]
        language = question_language(str(row["question"]))
        for key in ("all", language, f"{language}/{row.get('origin', 'model')}"):
            counts[key][cell] += 1
    return {key: _ratios(*cells) for key, cells in sorted(counts.items())}


def _ratios(tp: int, fp: int, fn: int, tn: int) -> dict[str, float | int]:
    return {"sentences": tp + fp + fn + tn, "supported": tp + fn,
            "precision": round(tp / (tp + fp), 3) if tp + fp else 1.0,
            "recall": round(tp / (tp + fn), 3) if tp + fn else 1.0, "false_accepts": fp}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--file", type=Path, default=LABELLED)
    parser.add_argument("--split", default="all", choices=["tune", "test", "all"])
    parser.add_argument("--show", choices=["false-accepts", "false-rejects"], help="print those rows")
    args = parser.parse_args(argv)
    rows = load(args.file, args.split)
    for key, ratios in score(rows).items():
        print(f"{key:12} " + "  ".join(f"{name} {value}" for name, value in ratios.items()))
    for row in rows if args.show else []:
        accepted, reason = judge(row)
        if (args.show == "false-accepts") == (accepted and row["label"] == "unsupported") and (
                args.show == "false-accepts" or (not accepted and row["label"] == "supported")):
            print(f"\n{row['label']} / check {accepted} {reason}: {row['sentence']}\n  Q: {row['question']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
