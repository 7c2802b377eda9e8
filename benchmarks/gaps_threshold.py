"""Pick rag.core.gaps.DISTANCE_THRESHOLD: how questions group into topics at each cosine-distance threshold.

    .venv/bin/python -m benchmarks.gaps_threshold

Two measurements with the configured embedder (MiniLM by default):
- a labelled set: Python FAQ questions of six subjects (threads, executables, strings and numbers, C extensions,
  keypresses, installing/removing Python), with a user's rewording of some of them, and three unrelated FAQ
  questions as singletons; pair precision and recall against those subjects, and the adjusted Rand index;
- all 171 questions of ../shared/data/python-faq.json (or data/eval/python-faq): how many topics, the largest one.
A gap report wants rewordings and close questions together (recall) without one topic swallowing unrelated ones
(precision, largest topic).
"""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import numpy as np
from sklearn.metrics import adjusted_rand_score

from benchmarks.common import REPO
from rag.config import Settings
from rag.core.gaps import cluster
from rag.wiring import build_embedder

THRESHOLDS = (0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.8)
SUBJECTS: dict[str, list[str]] = {
    "threads": ["How do I program using threads?", "None of my threads seem to run: why?",
                "How do I parcel out work among a bunch of worker threads?",
                "What kinds of global value mutation are thread-safe?", "how to use threading in python",
                "my worker threads never start"],
    "executables": ["How can I create a stand-alone binary from a Python script?",
                    "How do I make an executable from a Python script?", "How do I make Python scripts executable?",
                    "How do I make a Python script executable on Unix?", "turn my script into an exe"],
    "strings": ["How do I convert a string to a number?", "How do I convert a number to a string?",
                "How do I modify a string in place?", "convert str to int", "how to turn an integer into text"],
    "c-api": ["Can I create my own functions in C?", "Can I create my own functions in C++?",
              "How can I execute arbitrary Python statements from C?",
              "How can I evaluate an arbitrary Python expression from C?", "How do I call an object’s method from C?",
              "writing a C extension module for python"],
    "keypress": ["How do I get a single keypress at a time?", "How do I check for a keypress without blocking?",
                 "read one key from the keyboard without enter"],
    "install": ["Why is Python installed on my machine?", "Can I delete Python?", "is it safe to uninstall python"],
    "what-is-a-class": ["What is a class?"],
    "random": ["How do I generate random numbers in Python?"],
    "mail": ["How do I send mail from a Python script?"],
}


def faq_questions() -> list[str]:
    """The Python FAQ's questions."""
    for path in (REPO.parent / "shared" / "data" / "python-faq.json", REPO / "data" / "eval" / "python-faq.json"):
        if path.exists():
            return [case["question"] for case in json.loads(path.read_text(encoding="utf-8"))]
    lines = (REPO / "data" / "eval" / "python-faq" / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["question"] for line in lines if line.strip()]


def pair_scores(truth: list[str], found: list[int]) -> tuple[float, float]:
    """(precision, recall) of the pairs put together."""
    pairs = list(combinations(range(len(truth)), 2))
    same = {(i, j) for i, j in pairs if truth[i] == truth[j]}
    joined = {(i, j) for i, j in pairs if found[i] == found[j]}
    return (len(same & joined) / len(joined) if joined else 1.0, len(same & joined) / len(same) if same else 1.0)


def main() -> None:
    embedder = build_embedder(Settings(data_dir=Path("/tmp")))
    labelled = [(subject, q) for subject, questions in SUBJECTS.items() for q in questions]
    vectors = np.stack([embedder.embed_query(q) for _, q in labelled])
    faq = faq_questions()
    faq_vectors = np.stack([embedder.embed_query(q) for q in faq])
    truth = [subject for subject, _ in labelled]
    print(f"labelled: {len(labelled)} questions, {len(SUBJECTS)} subjects; FAQ: {len(faq)} questions")
    print("threshold  pair-precision  pair-recall  ARI    FAQ-topics  FAQ-largest")
    for threshold in THRESHOLDS:
        found = cluster(vectors, threshold).tolist()
        precision, recall = pair_scores(truth, found)
        faq_labels = cluster(faq_vectors, threshold)
        largest = int(np.bincount(faq_labels).max())
        print(f"{threshold:9.2f}  {precision:14.2f}  {recall:11.2f}  {adjusted_rand_score(truth, found):5.2f}  "
              f"{len(set(faq_labels.tolist())):10d}  {largest:11d}")


if __name__ == "__main__":
    main()
