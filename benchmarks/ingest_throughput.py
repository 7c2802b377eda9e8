"""Ingest benchmark: our pipeline vs the embedder alone, vs a plain LangChain ingest, and a re-run; one run.

    .venv/bin/python -m benchmarks.ingest_throughput [--subdirs all | faq tutorial howto ...] [--no-langchain]

Prints (a) pipeline throughput ÷ encode() of the same chunk texts, (b) our MB/min ÷ LangChain's MB/min with
recall@3 of both on the Python FAQ questions, (c) unchanged re-run time ÷ first run time.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

from benchmarks.common import corpus_bytes, faq_pairs, python_docs, recall_at
from ingest import service
from ingest.runner import warm_parsers
from rag.access import LOCAL_OPERATOR
from rag.config import Settings
from rag.retrieve import Retriever
from rag.wiring import build_embedder, build_store, embed_dtype, resolve_embed_model


def ours(corpus: Path, work: Path) -> dict[str, float]:
    """First ingest, encode()-only on the same texts, unchanged re-run, and recall@3."""
    settings = Settings(data_dir=work / "ours", _env_file=None)  # type: ignore[call-arg]
    warm_parsers().join()  # as in rag-ingest, where the parser server starts while the model loads
    embedder = build_embedder(settings)
    embedder.embed_documents(["warm up the model"] * 8)
    started = time.perf_counter()
    report = service.sync([corpus], settings, embedder=embedder)[1]
    first = time.perf_counter() - started
    store = build_store(settings)
    texts = store._collection.get(include=["documents"])["documents"] or []
    started = time.perf_counter()
    embedder.embed_documents(texts)
    encode_only = time.perf_counter() - started
    started = time.perf_counter()
    service.sync([corpus], settings, embedder=embedder)
    rerun = time.perf_counter() - started
    retriever = Retriever(embedder, store)
    pairs = faq_pairs()
    results = [[hit.text for hit in retriever.search(q, 3, LOCAL_OPERATOR)] for q, _ in pairs]
    return {"seconds": first, "chunks": report.chunks, "encode_seconds": encode_only, "rerun_seconds": rerun,
            "recall3": recall_at(results, pairs, 3), "failed": len(report.failed)}


def langchain_plain(corpus: Path, work: Path) -> dict[str, float]:
    """TextLoader → RecursiveCharacterTextSplitter → HuggingFaceEmbeddings → Chroma.from_documents."""
    from langchain_chroma import Chroma
    from langchain_community.document_loaders import DirectoryLoader, TextLoader
    from langchain_huggingface import HuggingFaceEmbeddings
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    embeddings = HuggingFaceEmbeddings(model_name=resolve_embed_model("bundled:all-MiniLM-L6-v2"),
                                       encode_kwargs={"normalize_embeddings": True})
    embeddings.embed_documents(["warm up the model"] * 8)
    started = time.perf_counter()
    docs = DirectoryLoader(str(corpus), glob="**/*.txt", loader_cls=TextLoader).load()
    chunks = RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=200).split_documents(docs)
    store = Chroma.from_documents(chunks, embeddings, persist_directory=str(work / "langchain"),
                                  collection_metadata={"hnsw:space": "cosine"})
    seconds = time.perf_counter() - started
    pairs = faq_pairs()
    results = [[d.page_content for d in store.similarity_search(q, k=3)] for q, _ in pairs]
    return {"seconds": seconds, "chunks": len(chunks), "recall3": recall_at(results, pairs, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subdirs", nargs="+", default=["all"], help="python3.11-doc folders, or all")
    parser.add_argument("--no-langchain", action="store_true", help="Measure (a) and (c) only.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        corpus = python_docs(args.subdirs, work / "corpus")
        mb = corpus_bytes(corpus) / 1e6
        a = ours(corpus, work)
        b = {"seconds": float("nan"), "chunks": 0, "recall3": float("nan")} if args.no_langchain \
            else langchain_plain(corpus, work)
    dtype = embed_dtype(Settings(_env_file=None))  # type: ignore[call-arg]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; embedder dtype {dtype}")
    print(f"corpus: python3.11-doc {'+'.join(args.subdirs)}: {mb:.2f} MB, ours {a['chunks']} chunks "
          f"(failed {a['failed']}), LangChain {b['chunks']} chunks")
    print(f"ours:      {a['seconds']:.1f} s  {mb / a['seconds'] * 60:.2f} MB/min  recall@3 {a['recall3']:.3f}")
    print(f"langchain: {b['seconds']:.1f} s  {mb / b['seconds'] * 60:.2f} MB/min  recall@3 {b['recall3']:.3f}")
    print(f"(a) pipeline ÷ encode() of the same {a['chunks']} chunks: {a['encode_seconds'] / a['seconds']:.3f}"
          "  (goal ≥ 0.95)")
    print(f"(b) our MB/min ÷ LangChain's: {b['seconds'] / a['seconds']:.2f}  (goal ≥ 2, recall not lower)")
    print(f"(c) unchanged re-run ÷ first run: {a['rerun_seconds'] / a['seconds']:.4f}  (goal ≤ 0.02)")


if __name__ == "__main__":
    main()
