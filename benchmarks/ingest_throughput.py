"""Ingest benchmark: our pipeline vs the embedder alone, vs a plain LangChain ingest, and a re-run; one run.

    .venv/bin/python -m benchmarks.ingest_throughput [--subdirs all | faq tutorial howto ...] [--no-langchain]
    .venv/bin/python -m benchmarks.ingest_throughput --quick   # data/samples' Markdown: seconds (make test)

Prints (a) pipeline throughput ÷ encode() of the same chunk texts, (b) our MB/min ÷ LangChain's MB/min with
recall@3 of both on the Python FAQ questions, (c) unchanged re-run time ÷ first run time, (d) whole processes as
a user runs them (`rag-ingest DIR` against a process doing the LangChain ingest), start-up included.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

from benchmarks.common import corpus_bytes, faq_pairs, python_docs, recall_at, sample_docs
from ingest import service
from ingest.runner import warm_parsers
from rag.components.cpu import BF16_FLAGS, cpu_flags
from rag.components.models import BUNDLED_EMBED_MODEL, resolve_embed_model
from rag.components.onnx_embedder import ModelFolder
from rag.config import Settings
from rag.core.access import LOCAL_OPERATOR
from rag.wiring import build_embedder, build_retriever, build_store, embed_backend, embed_dtype, tokenizer_path

NAN = float("nan")


def ours(corpus: Path, work: Path, backend: str = "auto", recall: bool = True,
         model: str = BUNDLED_EMBED_MODEL) -> dict[str, float]:
    """First ingest, encode()-only on the same texts, unchanged re-run, and recall@3."""
    settings = Settings(data_dir=work / f"ours-{backend}-{len(model)}", embed_backend=backend,  # type: ignore[call-arg]
                        embed_model=model, _env_file=None)
    warm_parsers().join()  # as in rag-ingest, where the parser server starts while the model loads
    embedder = build_embedder(settings)
    embedder.embed_documents(["warm up the model"] * 8)
    started = time.perf_counter()
    report = service.sync([corpus], settings, embedder=embedder)[1]
    first = time.perf_counter() - started
    store = build_store(settings)
    texts = store.dense._collection.get(include=["documents"])["documents"] or []
    started = time.perf_counter()
    embedder.embed_documents(texts)
    encode_only = time.perf_counter() - started
    started = time.perf_counter()
    service.sync([corpus], settings, embedder=embedder)
    rerun = time.perf_counter() - started
    retriever = build_retriever(settings, embedder, store)
    pairs = faq_pairs() if recall else []
    results = [[hit.text for hit in retriever.search(q, 3, LOCAL_OPERATOR)] for q, _ in pairs]
    return {"seconds": first, "chunks": report.chunks, "encode_seconds": encode_only, "rerun_seconds": rerun,
            "recall3": recall_at(results, pairs, 3) if pairs else NAN, "failed": len(report.failed)}


def langchain_plain(corpus: Path, work: Path, recall: bool = True) -> dict[str, float]:
    """TextLoader → RecursiveCharacterTextSplitter → HuggingFaceEmbeddings → Chroma.from_documents."""
    from langchain_chroma import Chroma
    from langchain_community.document_loaders import DirectoryLoader, TextLoader
    from langchain_huggingface import HuggingFaceEmbeddings
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    embeddings = HuggingFaceEmbeddings(model_name=resolve_embed_model("bundled:all-MiniLM-L6-v2"),
                                       encode_kwargs={"normalize_embeddings": True})
    embeddings.embed_documents(["warm up the model"] * 8)
    started = time.perf_counter()
    docs = DirectoryLoader(str(corpus), glob="**/*.*", loader_cls=TextLoader).load()
    chunks = RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=200).split_documents(docs)
    store = Chroma.from_documents(chunks, embeddings, persist_directory=str(work / "langchain"),
                                  collection_metadata={"hnsw:space": "cosine"})
    seconds = time.perf_counter() - started
    pairs = faq_pairs() if recall else []
    results = [[d.page_content for d in store.similarity_search(q, k=3)] for q, _ in pairs]
    return {"seconds": seconds, "chunks": len(chunks), "recall3": recall_at(results, pairs, 3) if pairs else NAN}


def whole_processes(corpus: Path, work: Path, backend: str, langchain: bool) -> dict[str, float]:
    """Seconds from start to exit of `rag-ingest CORPUS` and of a process running the LangChain ingest, as a user
    runs them: imports, model load and start-up included."""
    env = {**os.environ, "RAG_DATA_DIR": str(work / "process-ours"), "RAG_EMBED_BACKEND": backend,
           "RAG_EMBED_MODEL": BUNDLED_EMBED_MODEL, "HF_HUB_OFFLINE": "1"}  # LangChain's model
    started = time.perf_counter()
    subprocess.run([str(Path(sys.executable).parent / "rag-ingest"), str(corpus)], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    ours_s = time.perf_counter() - started
    if not langchain:
        return {"ours": ours_s, "langchain": NAN}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "benchmarks.ingest_throughput", "--langchain-process", str(corpus),
                    str(work / "process-langchain")], check=True, stdout=subprocess.DEVNULL)
    return {"ours": ours_s, "langchain": time.perf_counter() - started}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subdirs", nargs="+", default=["all"], help="python3.11-doc folders, or all")
    parser.add_argument("--no-langchain", action="store_true", help="Measure (a) and (c) only.")
    parser.add_argument("--quick", action="store_true", help="data/samples' Markdown, no recall: seconds.")
    parser.add_argument("--backends", default="auto", help="Comma-separated RAG_EMBED_BACKEND values to compare "
                        "in (a)-(c), e.g. auto,torch,onnx-int8 ((d) runs the first).")
    parser.add_argument("--models", default=BUNDLED_EMBED_MODEL, help="Comma-separated RAG_EMBED_MODEL values to "
                        "compare in (a)-(c), e.g. bundled:all-MiniLM-L6-v2,"
                        "bundled:all-MiniLM-L6-v2+bundled:multilingual-e5-small ((b) and (d) run MiniLM).")
    parser.add_argument("--langchain-process", nargs=2, metavar=("CORPUS", "WORK"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.langchain_process:
        langchain_plain(Path(args.langchain_process[0]), Path(args.langchain_process[1]), recall=False)
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        corpus = sample_docs(True, work / "corpus") if args.quick else python_docs(args.subdirs, work / "corpus")
        name = "data/samples/en *.md" if args.quick else f"python3.11-doc {'+'.join(args.subdirs)}"
        mb = corpus_bytes(corpus) / 1e6
        backends = args.backends.split(",")
        results = {(model, backend): ours(corpus, work, backend, not args.quick, model)
                   for model in args.models.split(",") for backend in backends}
        b = {"seconds": NAN, "chunks": 0, "recall3": NAN} if args.no_langchain \
            else langchain_plain(corpus, work, recall=not args.quick)
        d = whole_processes(corpus, work, backends[0], langchain=not args.no_langchain)
    bf16 = "native bf16" if cpu_flags() & BF16_FLAGS else "no native bf16"
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, {bf16}")
    for (model, backend), a in results.items():
        _print(name, mb, model, backend, a, b)
    print(f"(d) whole processes, start to exit: rag-ingest ({_embedder(backends[0])}) {d['ours']:.1f} s, "
          f"LangChain {d['langchain']:.1f} s: {d['langchain'] / d['ours']:.2f}×  (goal ≥ 2)")


def _embedder(backend: str, model: str = BUNDLED_EMBED_MODEL) -> str:
    settings = Settings(embed_backend=backend, embed_model=model, _env_file=None)  # type: ignore[call-arg]
    chosen = embed_backend(settings, ModelFolder.read(Path(tokenizer_path(settings.embed_model))))
    return f"{chosen} {'int8' if chosen == 'onnx-int8' else 'float32' if chosen == 'onnx' else embed_dtype(settings)}"


def _print(name: str, mb: float, model: str, backend: str, a: dict[str, float], b: dict[str, float]) -> None:
    print(f"-- RAG_EMBED_MODEL={model} RAG_EMBED_BACKEND={backend}: {_embedder(backend, model)}")
    print(f"corpus: {name}: {mb:.2f} MB, ours {a['chunks']} chunks (failed {a['failed']}), "
          f"LangChain {b['chunks']} chunks")
    print(f"ours:      {a['seconds']:.1f} s  {mb / a['seconds'] * 60:.2f} MB/min  recall@3 {a['recall3']:.3f}")
    print(f"langchain: {b['seconds']:.1f} s  {mb / b['seconds'] * 60:.2f} MB/min  recall@3 {b['recall3']:.3f}")
    print(f"(a) pipeline ÷ encode() of the same {a['chunks']} chunks: {a['encode_seconds'] / a['seconds']:.3f}"
          "  (goal ≥ 0.95)")
    print(f"(b) our MB/min ÷ LangChain's: {b['seconds'] / a['seconds']:.2f}  (goal ≥ 2, recall not lower)")
    print(f"(c) unchanged re-run ÷ first run: {a['rerun_seconds'] / a['seconds']:.4f}  (goal ≤ 0.02)")


if __name__ == "__main__":
    main()
