"""The quote ranking's sentence vectors made at ingest (RAG_QUOTE_VECTORS_AT_INGEST): what they cost the ingest, what
they save a quoted answer, and whether the quotes stay the same; one run.

    .venv/bin/python -m benchmarks.quote_vectors [--subdirs faq tutorial howto] [--rounds 2]
    .venv/bin/python -m benchmarks.quote_vectors --quick      # 12 FAQ dev-set documents, 20 questions: seconds

Ingests the corpus (python3.11-doc folders) into fresh data dirs with the setting off and on, alternately, `rounds`
times each (process CPU seconds and wall seconds of `service.sync`, with RAG_EMBED_MODEL as configured); then, on the
index made with it on, ranks quotes for every Python FAQ dev-set question over its retrieved excerpts twice: with
the model embedding the sentences (as with the setting off, nothing remembered) and with the kept vectors. Prints
the ingest ratio (on ÷ off), the file's size per chunk, the ranking's CPU ms each way and how many rankings gave
the same quotes (text, excerpt and score to 3 decimals: vectors made in ingest batches differ from a lone
question's by rounding).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import FAQ, faq_pairs, python_docs
from ingest import service
from rag.components.sentence_cache import RememberedSentences
from rag.config import Settings
from rag.core.access import LOCAL_OPERATOR
from rag.core.extract import Quote, extract
from rag.core.ports import Embedder, sentence_encoder
from rag.wiring import build_embedder, build_retriever, build_store, quote_vectors


def ingest(corpus: Path, data_dir: Path, embedder: Embedder, on: bool) -> dict[str, float]:
    """One fresh ingest of the corpus: CPU and wall seconds, chunks."""
    settings = Settings(data_dir=data_dir, quote_vectors_at_ingest=on)  # type: ignore[call-arg]
    cpu, wall = time.process_time(), time.perf_counter()
    report = service.sync([corpus], settings, embedder=embedder)[1]
    return {"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall, "chunks": report.chunks}


def rankings(data_dir: Path, embedder: Embedder, kept: bool, limit: int) -> tuple[list[list[Quote]], float]:
    """Quotes for the first `limit` FAQ questions over their retrieved excerpts, and the ranking's CPU ms per
    question."""
    settings = Settings(data_dir=data_dir)  # type: ignore[call-arg]
    retriever = build_retriever(settings, embedder, build_store(settings))
    encoder = sentence_encoder(embedder)
    found = [(question, retriever.search(question, settings.top_k, LOCAL_OPERATOR))
             for question, _ in faq_pairs()[:limit]]
    quotes, spent = [], 0.0
    for question, hits in found:
        ranker = RememberedSentences(encoder, kept=quote_vectors(settings).file(encoder) if kept else None)
        encoder.embed_query(question)  # the question's vector is the retrieval's, remembered: not the ranking's
        started = time.process_time()
        quotes.append(extract(question, hits, "en", ranker, confident=False))
        spent += time.process_time() - started
    return quotes, spent * 1000 / len(found)


def same(a: list[Quote], b: list[Quote], scores: bool = True) -> bool:
    """The same quotes, from the same excerpts (and with `scores`, scores equal to 3 decimals)."""
    return [(q.text, q.n) for q in a] == [(q.text, q.n) for q in b] and \
        (not scores or all(abs(x.score - y.score) < 1e-3 for x, y in zip(a, b, strict=True)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--subdirs", nargs="+", default=["faq", "tutorial", "howto"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="12 FAQ dev-set documents, 20 questions, one round")
    args = parser.parse_args(argv)
    settings = Settings()  # type: ignore[call-arg]
    embedder = build_embedder(settings)
    embedder.embed_documents(["warm up the model"] * 8)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        corpus = work / "corpus"
        if args.quick:  # a dozen of the FAQ dev set's documents
            corpus.mkdir()
            for path in sorted((FAQ / "docs").glob("*"))[:12]:
                shutil.copy(path, corpus / path.name)
        else:
            python_docs(args.subdirs, corpus)
        runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
        for n in range(1 if args.quick else args.rounds):
            for on in (False, True):
                runs[on].append(ingest(corpus, work / f"data-{on}-{n}", embedder, on))
        kept_file = work / f"data-True-{len(runs[True]) - 1}" / "index" / "quote-vectors.sqlite3"
        size = kept_file.stat().st_size if kept_file.exists() else 0
        limit = 20 if args.quick else len(faq_pairs())
        plain, plain_ms = rankings(kept_file.parent.parent, embedder, kept=False, limit=limit)
        kept, kept_ms = rankings(kept_file.parent.parent, embedder, kept=True, limit=limit)
    off_cpu, on_cpu = (statistics.median(r["cpu_s"] for r in runs[on]) for on in (False, True))
    off_wall, on_wall = (statistics.median(r["wall_s"] for r in runs[on]) for on in (False, True))
    chunks = runs[True][-1]["chunks"]
    name = "12 FAQ dev-set files" if args.quick else "+".join(args.subdirs)
    print(f"RAG_EMBED_MODEL={settings.embed_model}, corpus {name}, {chunks:.0f} chunks, {os.cpu_count()} cores, "
          f"{len(runs[True])} ingest(s) each way (median)")
    print(f"ingest CPU s: off {off_cpu:.1f}, on {on_cpu:.1f} ({on_cpu / off_cpu:.2f}x); wall s: off {off_wall:.1f}, "
          f"on {on_wall:.1f} ({on_wall / off_wall:.2f}x)")
    print(f"kept vectors: {size / 2**20:.1f} MiB, {size / max(chunks, 1) / 1024:.1f} KiB per chunk")
    print(f"quote ranking, CPU ms per question: model {plain_ms:.1f}, kept vectors {kept_ms:.1f} "
          f"({plain_ms / max(kept_ms, 1e-6):.1f}x less)")
    texts = sum(same(a, b, scores=False) for a, b in zip(plain, kept, strict=True))
    print(f"same quotes from the same excerpts: {texts}/{len(plain)}; with scores equal to 3 decimals: "
          f"{sum(map(same, plain, kept))}/{len(plain)}")


if __name__ == "__main__":
    main()
