"""What checking answers costs, against the real vLLM server, in one run:

1. the support check per answer: splitting the excerpts into passages and checking every sentence the model wrote
   (p50 over the questions; goal ≤ 15 ms), and the extractive answer where one was made;
2. sentence streaming against token streaming: the first text shown (a checked sentence, or quotes) minus the
   model's first token in the same request — what a client would have seen first with raw token streaming
   (p50; goal ≤ +300 ms on the offline model).

    .venv/bin/python -m benchmarks.answer_checks [--quick]  # starts vLLM if RAG_LLM_BASE_URL does not answer

`--quick` (2 questions, 3 small documents, 16-token answers) checks that the benchmark runs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks.common import llm_server, sample_docs
from benchmarks.query_path import QUESTIONS, QUICK_QUESTIONS
from ingest import service
from rag.config import Settings
from rag.core.access import LOCAL_OPERATOR
from rag.core.answer import Answer, QueryEngine
from rag.core.extract import extract
from rag.core.grounding import SupportChecker
from rag.core.sentences import question_language
from rag.wiring import build_embedder, build_engine, prefer_passive_threads


def check_ms(question: str, answer: Answer) -> float:
    """Milliseconds to check every sentence of the answer's draft against its excerpts, from scratch."""
    started = time.perf_counter()
    checker = SupportChecker([source.hit.text for source in answer.sources], question_language(question), question)
    for sentence in answer.sentences:
        checker.check(sentence.text)
    return (time.perf_counter() - started) * 1000


def extract_ms(engine: QueryEngine, question: str, answer: Answer) -> float:
    """Milliseconds to make the extractive answer from the answer's excerpts (embedder included)."""
    started = time.perf_counter()
    extract(question, [source.hit for source in answer.sources], question_language(question), engine._encoder)
    return (time.perf_counter() - started) * 1000


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile (NaN when there are no values)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def measure(engine: QueryEngine, questions: list[str]) -> tuple[list[float], list[float], list[float], list[str]]:
    """(check ms, extract ms, first-shown delay ms, modes) over the questions."""
    engine.ask("warm-up: what is apt-get?", principal=LOCAL_OPERATOR)
    checks, extracts, delays, modes = [], [], [], []
    for question in questions:
        answer = engine.ask(question, principal=LOCAL_OPERATOR)
        modes.append(answer.mode)
        checks.append(check_ms(question, answer))
        extracts.append(extract_ms(engine, question, answer))
        timings = answer.timings
        if timings.first_token_ms is not None and timings.draft_first_token_ms is not None:
            delays.append(timings.first_token_ms - timings.draft_first_token_ms)
    return checks, extracts, delays, modes


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 questions, 3 small documents, 16-token answers")
    quick = parser.parse_args(argv).quick
    prefer_passive_threads()  # as `rag ask` and `rag serve` do
    settings = Settings()
    questions = QUICK_QUESTIONS if quick else QUESTIONS
    with llm_server(settings), tempfile.TemporaryDirectory() as tmp:
        local = settings.model_copy(update={"data_dir": Path(tmp) / "data"})
        if quick:
            local = local.model_copy(update={"max_answer_tokens": 16})
        embedder = build_embedder(local)
        service.sync([sample_docs(quick, Path(tmp) / "docs")], local, embedder=embedder)
        checks, extracts, delays, modes = measure(build_engine(local, embedder=embedder), questions)
    counts = {mode: modes.count(mode) for mode in sorted(set(modes))}
    print(f"{len(questions)} questions, RAG_ANSWER_MODE={settings.answer_mode}: {counts}")
    print(f"support check per answer: p50 {percentile(checks, 0.5):.2f} ms, p90 {percentile(checks, 0.9):.2f} ms "
          "(goal ≤ 15 ms p50)")
    print(f"extractive answer (with the embedder): p50 {percentile(extracts, 0.5):.1f} ms, "
          f"p90 {percentile(extracts, 0.9):.1f} ms")
    print(f"first text shown − model's first token, {len(delays)} answers that called the model: "
          f"p50 {percentile(delays, 0.5):+.0f} ms, p90 {percentile(delays, 0.9):+.0f} ms (goal ≤ +300 ms p50)")


if __name__ == "__main__":
    main()
