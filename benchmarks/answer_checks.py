"""What checking answers costs, against the real vLLM server, in one run:

1. the support check per answer: splitting the excerpts into passages and checking every sentence the model wrote
   (p50 over the questions; goal ≤ 15 ms), and the extractive answer where one was made;
2. sentence streaming against token streaming: the first text shown (a checked sentence, or quotes) minus the
   model's first token in the same request — what a client would have seen first with raw token streaming
   (p50; goal ≤ +300 ms on the offline model).

    .venv/bin/python -m benchmarks.answer_checks      # starts vLLM if RAG_LLM_BASE_URL does not answer
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import ensure_llm_server
from benchmarks.query_path import QUESTIONS
from ingest import service
from rag.access import LOCAL_OPERATOR
from rag.answer import Answer, QueryEngine
from rag.config import Settings
from rag.extract import extract
from rag.grounding import SupportChecker
from rag.sentences import question_language
from rag.wiring import build_embedder, build_engine, prefer_passive_threads

REPO = Path(__file__).resolve().parent.parent


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
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def measure(engine: QueryEngine) -> tuple[list[float], list[float], list[float], list[str]]:
    """(check ms, extract ms, first-shown delay ms, modes) over the questions."""
    engine.ask("warm-up: what is apt-get?", principal=LOCAL_OPERATOR)
    checks, extracts, delays, modes = [], [], [], []
    for question in QUESTIONS:
        answer = engine.ask(question, principal=LOCAL_OPERATOR)
        modes.append(answer.mode)
        checks.append(check_ms(question, answer))
        extracts.append(extract_ms(engine, question, answer))
        timings = answer.timings
        if timings.first_token_ms is not None and timings.draft_first_token_ms is not None:
            delays.append(timings.first_token_ms - timings.draft_first_token_ms)
    return checks, extracts, delays, modes


def main() -> None:
    prefer_passive_threads()  # as `rag ask` and `rag serve` do
    settings = Settings()
    process = ensure_llm_server(settings)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            local = settings.model_copy(update={"data_dir": Path(tmp)})
            embedder = build_embedder(local)
            service.sync([REPO / "data" / "samples"], local, embedder=embedder)
            checks, extracts, delays, modes = measure(build_engine(local, embedder=embedder))
    finally:
        if process is not None:
            process.terminate()
    counts = {mode: modes.count(mode) for mode in sorted(set(modes))}
    print(f"{len(QUESTIONS)} questions, RAG_ANSWER_MODE={settings.answer_mode}: {counts}")
    print(f"support check per answer: p50 {statistics.median(checks):.2f} ms, p90 {percentile(checks, 0.9):.2f} ms "
          "(goal ≤ 15 ms p50)")
    print(f"extractive answer (with the embedder): p50 {statistics.median(extracts):.1f} ms, "
          f"p90 {percentile(extracts, 0.9):.1f} ms")
    print(f"first text shown − model's first token, {len(delays)} answers that called the model: "
          f"p50 {statistics.median(delays):+.0f} ms, p90 {percentile(delays, 0.9):+.0f} ms (goal ≤ +300 ms p50)")


if __name__ == "__main__":
    main()
