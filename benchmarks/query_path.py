"""Query-path benchmarks against the real vLLM server, in one run:

1. overhead: the model's first-token time through `QueryEngine` minus that of a direct streaming call to vLLM with
   the same final messages (median over the questions; goal ≤ 25 ms);
2. prefix caching: vLLM's /metrics prefix-cache hits per query over 20 different questions after one warm-up,
   against the full KV blocks that the byte-stable template (chat header + system prompt) fills (goal ≥ 90 %).

    .venv/bin/python -m benchmarks.query_path [--quick]  # starts vLLM if RAG_LLM_BASE_URL does not answer

`--quick` (2 questions over 3 small documents; the overhead on the first) checks that the benchmark runs.
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.common import llm_server, sample_docs
from ingest import service
from rag.components.llm import LLM
from rag.config import Settings
from rag.core.access import LOCAL_OPERATOR
from rag.core.answer import QueryEngine, Retrieved, Token
from rag.core.prompt import answer_messages
from rag.wiring import build_embedder, build_engine, build_llm, prefer_passive_threads

QUESTIONS = [
    "How do I create a Python virtual environment?", "What does VACUUM FULL do?",
    "Which UID range does systemd use for dynamic users?", "When was the Debian project founded?",
    "How much memory does a Debian installation need?", "How do I install a package with apt-get?",
    "What is zstd?", "How do I upgrade all packages with apt?", "What is autovacuum?",
    "Where does the name Debian come from?", "How do I activate a virtual environment on Windows?",
    "What is the transaction ID wraparound problem?", "Which UIDs are reserved for system users?",
    "How do I remove a package and its configuration files?", "What compression levels does zstd offer?",
    "How do I list installed packages with pip?", "What is the Debian social contract?",
    "How do clusters work in postgresql-common?", "What is a dictionary training mode in zstd?",
    "How do I keep my Debian system up to date?", "What does apt-get autoremove do?",
]
# --quick's questions (two: the template's length needs two prompts): Markdown samples answer them.
QUICK_QUESTIONS = ["Which UID range does systemd use for dynamic users?", "What is zstd?"]
METRIC = re.compile(r"^(vllm:prefix_cache_(?:hits|queries)_total)\{[^}]*\}\s+([0-9.e+]+)", re.MULTILINE)


def first_token_ms(events: object) -> float:
    """Milliseconds until the first streamed text (the rest of the stream is drained)."""
    started, first = time.perf_counter(), None
    for event in events:  # type: ignore[attr-defined]
        text = event.text if isinstance(event, Token) else getattr(event, "text", "")
        if text and first is None:
            first = (time.perf_counter() - started) * 1000
    assert first is not None, "no token streamed"
    return first


def model_first_token_ms(engine: QueryEngine, question: str) -> float:
    """Milliseconds until the model's first token through the engine (text is shown later, once checked:
    benchmarks.answer_checks measures that)."""
    first = engine.ask(question, principal=LOCAL_OPERATOR).timings.draft_first_token_ms
    assert first is not None, "the model was not called"
    return first


def overhead(engine: QueryEngine, llm: LLM, questions: list[str]) -> list[float]:
    """Per question: engine first-token time minus a direct call's, both on a warm prefix cache."""
    deltas = []
    for i, question in enumerate(questions):
        hits = next(e.hits for e in engine.stream(question, principal=LOCAL_OPERATOR) if isinstance(e, Retrieved))
        messages = answer_messages(question, hits)
        list(llm.stream(messages))  # warm the whole prompt into the prefix cache
        if i % 2:  # alternate the order so neither side always runs second
            ours, direct = model_first_token_ms(engine, question), first_token_ms(llm.stream(messages))
        else:
            direct, ours = first_token_ms(llm.stream(messages)), model_first_token_ms(engine, question)
        deltas.append(ours - direct)
    return deltas


def prefix_counters(base_url: str) -> dict[str, float]:
    """vLLM's prefix-cache counters (queried and hit tokens)."""
    text = httpx.get(base_url.rsplit("/v1", 1)[0] + "/metrics", timeout=10).text
    return {name: float(value) for name, value in METRIC.findall(text)}


def template_tokens(engine: QueryEngine, base_url: str, model: str, questions: list[str]) -> int:
    """Tokens of the byte-stable prefix: the common start of two templated prompts (vLLM's /tokenize)."""
    root = base_url.rsplit("/v1", 1)[0]
    prompts = []
    for question in questions[:2]:
        hits = next(e.hits for e in engine.stream(question, principal=LOCAL_OPERATOR) if isinstance(e, Retrieved))
        body = {"model": model, "messages": answer_messages(question, hits)}
        prompts.append(httpx.post(f"{root}/tokenize", json=body, timeout=10).json()["tokens"])
    return next((i for i, (a, b) in enumerate(zip(*prompts, strict=False)) if a != b), len(prompts[0]))


def prefix_hit_share(engine: QueryEngine, settings: Settings, block: int,
                     questions: list[str]) -> tuple[float, int, float]:
    """(hit tokens per query, template tokens, hit share of the template's full blocks)."""
    engine.ask("warm-up: what is apt-get?", principal=LOCAL_OPERATOR)
    before = prefix_counters(settings.llm_base_url)
    for question in questions:
        engine.ask(question, principal=LOCAL_OPERATOR)
    after = prefix_counters(settings.llm_base_url)
    hits = (after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]) / len(questions)
    template = template_tokens(engine, settings.llm_base_url, settings.llm_model, questions)
    return hits, template, hits / (template // block * block)


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 questions over 3 small documents")
    quick = parser.parse_args(argv).quick
    prefer_passive_threads()  # as `rag ask` and `rag serve` do
    settings = Settings()
    questions = QUICK_QUESTIONS if quick else QUESTIONS
    with llm_server(settings), tempfile.TemporaryDirectory() as tmp:
        # Short answers: the benchmark is about the time to the first token and the prompt's cache blocks.
        local = settings.model_copy(update={"data_dir": Path(tmp) / "data", "max_answer_tokens": 16})
        embedder = build_embedder(local)
        service.sync([sample_docs(quick, Path(tmp) / "docs")], local, embedder=embedder)
        engine = build_engine(local, embedder=embedder)
        engine.refusal_threshold = -1.0  # measure the full path for every question
        # Prefix caching first: these prompts have never been sent, so only the template can hit.
        hits, template, share = prefix_hit_share(engine, local, 128, questions[:20])
        deltas = overhead(engine, build_llm(local), questions[:1] if quick else questions)
    print(f"query-path overhead (engine first token − direct vLLM first token), {len(deltas)} questions: "
          f"median {statistics.median(deltas):.1f} ms, p90 {sorted(deltas)[int(len(deltas) * 0.9)]:.1f} ms "
          "(goal ≤ 25 ms median)")
    print(f"prefix cache: {hits:.0f} hit tokens per query; template {template} tokens = {template // 128} full "
          f"128-token blocks; hit share of the template's blocks {share:.2f} (goal ≥ 0.90)")


if __name__ == "__main__":
    main()
