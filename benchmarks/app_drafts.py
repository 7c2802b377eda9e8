"""Record a real model's drafts for benchmarks.app_cost's questions, so its stub LLM can replay them.

    .venv/bin/rag llm --detach      # the offline default LLM (or RAG_LLM_BASE_URL: any OpenAI-compatible server)
    .venv/bin/python -m benchmarks.app_drafts OUT.json [--docs 120] [--concurrent 4]

The instant stub of benchmarks.app_cost answers every question with one supported sentence: it measures the app's
cost for its cheapest kind of answer. A real model writes several sentences, some unsupported (withheld, and
quoted instead when none holds), says the excerpts do not answer, or loops; `app_cost --drafts OUT.json` replays
what it wrote, so the benchmark measures the mix of answers a GPU host serves. Each question's draft is what the
model streams for the exact messages the query path sends (the same index, retrieval and prompt builder), to
RAG_MAX_ANSWER_TOKENS, as the engine's `generate` mode reads it: a worker in `auto` mode stops reading where it
would have stopped.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.app_cost import corpus, questions
from rag.core.access import ANONYMOUS
from rag.core.answer import QueryEngine, relevant
from rag.core.prompt import answer_messages


def draft(engine: QueryEngine, question: str) -> str | None:
    """What the model writes for the question's excerpts (None when retrieval refuses: no LLM call)."""
    hits = relevant(engine.retriever.search(question, engine.top_k, ANONYMOUS), engine.threshold_for(question))
    if not hits:
        return None
    deltas = engine.llm.stream(answer_messages(question, hits), engine.max_answer_tokens)
    return "".join(delta.text for delta in deltas)


def record(out: Path, docs: int, concurrent: int) -> dict[str, str]:
    """Ingest the benchmark's corpus, ask the LLM each of its questions once, write {question: draft}."""
    from ingest import service
    from rag.config import Settings
    from rag.wiring import build_engine

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp) / "data")
        folder = corpus(docs, Path(tmp) / "docs")
        service.sync([folder], settings)
        engine = build_engine(settings)
        asked = list(dict.fromkeys(questions(1000, folder)))  # each answerable question once
        with ThreadPoolExecutor(concurrent) as pool:
            drafts = dict(zip(asked, pool.map(lambda question: draft(engine, question), asked), strict=True))
    kept = {question: text for question, text in drafts.items() if text is not None}
    out.write_text(json.dumps(kept, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return kept


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--docs", type=int, default=120, help="documents ingested, as app_cost --docs (default 120)")
    parser.add_argument("--concurrent", type=int, default=4, help="questions in flight at once (default 4)")
    args = parser.parse_args(argv)
    kept = record(args.out, args.docs, args.concurrent)
    print(f"{len(kept)} drafts written to {args.out}")


if __name__ == "__main__":
    main()
