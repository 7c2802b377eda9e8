"""GPU ingest benchmark: `rag-ingest` into a Chroma server, MB/min end to end and per stage, with the settings that
attack each stage (parse workers, embedding batch, concurrent writers) measured side by side in one run.

    python -m benchmarks.gpu_ingest --out results.json             # on the GPU host (RAG_EMBED_DEVICE=cuda)
    python -m benchmarks.gpu_ingest --quick                        # anywhere, in seconds: small data on the CPU
    python -m benchmarks.gpu_ingest --report results.json [...]    # the tables of earlier result files

- Corpora: python3.11-doc's reStructuredText sources (benchmarks/fetch_corpus.sh; `--docs DIR` to give them), and a
  synthetic one of ~`--chunks` chunks (100,000): copies of those files with every 7th word replaced by another
  word of the corpus (a seed per copy), so that no two chunks are equal.
- End to end: each variant is a fresh `rag-ingest --json` process (a new data dir and collection on the same
  Chroma server) with its RAG_* settings; MB/min counts the corpus's bytes over the process's wall time (start-up,
  model load and the closing keyword check included) and over the pipeline's own time (the report's `seconds`).
- Stages, isolated, in this process, over the same corpus: parse (loaders), chunk (token-bounded splitting),
  embed (the embedder at each batch size), Chroma write (one writer and several), keyword index write (tokenize
  and SQLite). The slowest stage bounds the pipeline, whose stages overlap (parse ahead, write behind).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.common import corpus_bytes, python_docs  # noqa: E402

MB = 1e6
WORD = re.compile(r"[A-Za-z]{4,}")


def variants(cpus: int) -> dict[str, dict[str, str]]:
    """Settings compared end to end: the defaults, each attack alone, and all of them together."""
    parse = str(max(2, min(cpus - 4, 12)))  # cores left for the main process, the writers and Chroma
    return {
        "defaults": {},
        "embed-batch-256": {"RAG_EMBED_BATCH_SIZE": "256"},
        f"parse-{parse}": {"RAG_PARSE_WORKERS": parse},
        f"parse-{parse}-writers-4": {"RAG_PARSE_WORKERS": parse, "RAG_INGEST_WRITERS": "4"},
        "tuned": {"RAG_PARSE_WORKERS": parse, "RAG_INGEST_WRITERS": "4", "RAG_EMBED_BATCH_SIZE": "256",
                  "RAG_INGEST_BATCH_CHUNKS": "2048"},
    }


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(url: str, process: subprocess.Popen[bytes], log: Path, seconds: float = 120) -> None:
    """Return once `url` answers 200; raise with the log's tail if the process exits or time runs out."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: the server exited:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer in {seconds:g} s:\n{log.read_text(errors='replace')[-3000:]}")


@contextmanager
def chroma_server(folder: Path, port: int = 0) -> Iterator[str]:
    """A `chroma run` server (the chromadb package's, as compose runs it) for the block: its URL; stopped after."""
    folder.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    log = folder / "chroma.log"
    command = [sys.executable, "-c", "import sys; from chromadb.cli.cli import app; sys.argv[0] = 'chroma'; app()",
               "run", "--path", str(folder / "db"), "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{port}/api/v2/heartbeat", process, log)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def synthesize(docs: Path, dest: Path, target_chunks: int, base_chunks: int, seed: int = 0) -> Path:
    """Copies of the corpus, every 7th word replaced (one seed per copy), until ~target_chunks chunks: whole copies,
    then the first files of one more (by their share of the corpus's bytes). Made once per dest and target."""
    marker = dest / ".synthesized"
    if marker.is_file() and marker.read_text() == f"{target_chunks}/{seed}":
        return dest
    files = sorted(p for p in docs.rglob("*") if p.is_file())
    vocabulary = sorted({w for p in files[:50] for w in WORD.findall(p.read_text(errors="replace"))})
    total = sum(p.stat().st_size for p in files)
    copies = target_chunks / max(1, base_chunks)
    for copy in range(int(copies) + 1):
        budget = total * min(1.0, copies - copy)
        rng = random.Random(seed * 1000 + copy)
        written = 0
        for path in files:
            if written >= budget:
                break
            words = path.read_text(errors="replace").split(" ")
            for i in range(rng.randrange(7), len(words), 7):
                words[i] = rng.choice(vocabulary)
            out = dest / f"copy{copy:02d}" / path.relative_to(docs)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(" ".join(words))
            written += path.stat().st_size
    marker.write_text(f"{target_chunks}/{seed}")
    return dest


def ingest_process(docs: Path, env: dict[str, str], data: Path) -> dict[str, Any]:
    """One `rag-ingest --json DOCS` process: its wall time and its report."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", "from ingest.cli import main; main()", "--json", str(docs)],
                          env={**os.environ, **env, "RAG_DATA_DIR": str(data)}, capture_output=True, text=True,
                          cwd=REPO, timeout=3600)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"rag-ingest failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return {"wall_s": round(wall, 2), "report": json.loads(done.stdout.strip().splitlines()[-1])}


def end_to_end(docs: Path, corpus: str, chroma_url: str, device: str, chosen: dict[str, dict[str, str]],
               scratch: Path, rows: list[dict[str, Any]], save: Callable[[], None]) -> None:
    """Every variant as its own rag-ingest process into a fresh collection: MB/min by wall and by pipeline time,
    appended to rows (saved after each)."""
    size = corpus_bytes(docs) / MB
    for name, env in chosen.items():
        collection = f"bench{uuid.uuid4().hex[:10]}"
        settings = {"RAG_CHROMA_URL": chroma_url, "RAG_COLLECTION": collection, "RAG_EMBED_DEVICE": device, **env}
        run = ingest_process(docs, settings, scratch / collection)
        seconds = run["report"]["seconds"]
        rows.append({"corpus": corpus, "variant": name, "settings": env, "mb": round(size, 2),
                     "files": run["report"]["added"], "chunks": run["report"]["chunks"], "wall_s": run["wall_s"],
                     "pipeline_s": seconds, "mb_per_min": round(size / run["wall_s"] * 60, 1),
                     "pipeline_mb_per_min": round(size / seconds * 60, 1) if seconds else None,
                     "failed": run["report"]["failed"]})
        print(json.dumps(rows[-1]), flush=True)
        save()


def timed(work: Callable[[], object]) -> float:
    """Seconds one call takes."""
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def stages(docs: Path, chroma_url: str, device: str, batch_sizes: Sequence[int], writers: Sequence[int],
           scratch: Path) -> dict[str, Any]:
    """Each stage alone over the corpus: seconds and MB/min (the corpus's bytes over the stage's time)."""
    from ingest.chunker import chunk_document
    from ingest.parse import SUPPORTED, is_supported, token_counter
    from rag.components.keyword import KeywordIndex
    from rag.config import Settings
    from rag.core.text import tokenize
    from rag.core.types import Chunk
    from rag.wiring import build_chroma_client, build_embedder, tokenizer_path

    settings = Settings(_env_file=None, embed_device=device, chroma_url=chroma_url)  # type: ignore[call-arg]
    size = corpus_bytes(docs) / MB
    files = sorted(p for p in docs.rglob("*") if p.is_file() and is_supported(p))
    out: dict[str, Any] = {"mb": round(size, 2), "files": len(files)}
    loaded: list[Any] = []
    out["parse_s"] = timed(lambda: loaded.extend(SUPPORTED[p.suffix.lower()](p.read_bytes(), p.name) for p in files))
    count = token_counter(tokenizer_path(settings.embed_model))
    pieces: list[tuple[int, str]] = []
    out["chunk_s"] = timed(lambda: pieces.extend(
        (n, piece.text) for n, doc in enumerate(loaded) for piece in chunk_document(doc, count, 250, 32, 254)))
    texts = [text for _, text in pieces]
    out["chunks"] = len(texts)
    out["keyword_tokenize_s"] = timed(lambda: [tokenize(text) for text in texts])
    embed_s = {}
    vectors = None
    for batch in batch_sizes:
        embedder = build_embedder(settings.model_copy(update={"embed_batch_size": batch}))
        embedder.embed_documents(texts[:256])  # warm-up: CUDA kernels, allocator
        parts: list[Any] = []
        embed_s[batch] = timed(lambda e=embedder, p=parts: p.extend(   # type: ignore[misc]
            e.embed_documents(texts[i : i + 1024]) for i in range(0, len(texts), 1024)))
        vectors = parts
    out["embed_s"] = embed_s
    import numpy as np

    matrix = np.concatenate(vectors or [np.zeros((0, 384), dtype=np.float32)])
    chunks = [Chunk(uuid.uuid4().hex, text, f"f{n}.txt", f"d{n}", "h", i) for i, (n, text) in enumerate(pieces)]
    out["chroma_write_s"] = {k: chroma_write(build_chroma_client(settings), chunks, matrix, k) for k in writers}
    keyword = KeywordIndex(scratch / f"kw{uuid.uuid4().hex[:8]}.sqlite3")
    out["keyword_write_s"] = timed(lambda: [keyword.add(chunks[i : i + 1024])  # type: ignore[func-returns-value]
                                            for i in range(0, len(chunks), 1024)])
    out["mb_per_min"] = _rates(out, size)
    print(json.dumps({"stages": out}), flush=True)
    return out


def chroma_write(client: Any, chunks: list[Any], vectors: Any, writers: int) -> float:
    """Seconds to upsert every chunk into a fresh collection through ChromaStore, `writers` batches at a time."""
    from rag.components.store import ChromaStore

    store = ChromaStore(client, f"stage{uuid.uuid4().hex[:10]}", "bench")
    batches = [(chunks[i : i + 1024], vectors[i : i + 1024]) for i in range(0, len(chunks), 1024)]
    with concurrent.futures.ThreadPoolExecutor(writers) as pool:
        return timed(lambda: list(pool.map(lambda b: store.upsert(*b), batches)))


def _rates(out: dict[str, Any], size: float) -> dict[str, float]:
    rates = {"parse": out["parse_s"], "chunk": out["chunk_s"], "keyword_write": out["keyword_write_s"]}
    rates |= {f"embed_batch_{b}": s for b, s in out["embed_s"].items()}
    rates |= {f"chroma_write_{k}_writers": s for k, s in out["chroma_write_s"].items()}
    return {name: round(size / seconds * 60, 1) for name, seconds in rates.items() if seconds}


def facts(device: str) -> dict[str, Any]:
    """The machine: GPU and driver (nvidia-smi), CPU cores, library versions."""
    import chromadb
    import sentence_transformers
    import torch

    found = {"date": time.strftime("%Y-%m-%d"), "device": device, "cpus": os.cpu_count(), "torch": torch.__version__,
             "sentence_transformers": sentence_transformers.__version__, "chromadb": chromadb.__version__}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        found["gpu"] = smi or None
    except OSError:
        found["gpu"] = None
    return found


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Corpora, the Chroma server, stages and end-to-end variants; the results as one JSON object."""
    scratch = Path(tempfile.mkdtemp(prefix="gpu-ingest-"))
    result: dict[str, Any] = {**facts(args.device), "runs": [], "stages": {}}

    def save() -> None:
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=1))

    try:
        docs = Path(args.docs) if args.docs else python_docs(["all"], scratch / "python-docs")
        if args.quick:
            docs = sample(docs, scratch / "sample", args.quick_files)
        every = variants(os.cpu_count() or 2)
        chosen = {name: every[name] for name in args.variants} if args.variants else every
        with chroma_server(scratch / "chroma") as url:
            if args.stages:
                result["stages"]["python-docs"] = stages(docs, url, args.device, args.batch_sizes, args.writers,
                                                         scratch)
                save()
            if "python-docs" in args.corpora:
                end_to_end(docs, "python-docs", url, args.device, chosen, scratch, result["runs"], save)
            if "synthetic" in args.corpora:
                base = result["stages"].get("python-docs", {}).get("chunks") or _count_chunks(result["runs"])
                synthetic = synthesize(docs, Path(args.synthetic_dir or scratch / "synthetic"), args.chunks,
                                       base or 19_000)
                synth_variants = {n: every[n] for n in args.synthetic_variants} if args.synthetic_variants else chosen
                end_to_end(synthetic, f"synthetic-{args.chunks}", url, args.device, synth_variants, scratch,
                           result["runs"], save)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        save()
    return result


def _count_chunks(runs: list[dict[str, Any]]) -> int:
    return max((r["chunks"] for r in runs if r["corpus"] == "python-docs"), default=0)


def sample(docs: Path, dest: Path, count: int) -> Path:
    """The first `count` files of the corpus (the quick mode's data)."""
    for path in sorted(p for p in docs.rglob("*") if p.is_file())[:count]:
        target = dest / path.relative_to(docs)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    return dest


def report(paths: list[Path]) -> None:
    """The end-to-end table and the stage table of result files."""
    for path in paths:
        result = json.loads(path.read_text())
        print(f"{result['date']} · {result.get('gpu') or result['device']} · {result['cpus']} CPUs · torch "
              f"{result['torch']} · sentence-transformers {result['sentence_transformers']} · chromadb "
              f"{result['chromadb']}\n")
        print("| corpus | variant | MB | chunks | wall s | MB/min (process) | MB/min (pipeline) |")
        print("|---|---|---|---|---|---|---|")
        for r in result["runs"]:
            print(f"| {r['corpus']} | {r['variant']} | {r['mb']} | {r['chunks']:,} | {r['wall_s']} | "
                  f"{r['mb_per_min']} | {r['pipeline_mb_per_min']} |")
        for corpus, stage in result["stages"].items():
            print(f"\n{corpus} stages alone ({stage['mb']} MB, {stage['chunks']:,} chunks):\n")
            print("| stage | MB/min |\n|---|---|")
            for name, rate in sorted(stage["mb_per_min"].items(), key=lambda item: item[1]):
                print(f"| {name} | {rate} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few files on the CPU: a smoke test in seconds")
    parser.add_argument("--quick-files", type=int, default=6)
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when torch sees a GPU)")
    parser.add_argument("--docs", help="the python3.11-doc sources folder (default: fetched into data/cache)")
    parser.add_argument("--corpora", type=lambda s: s.split(","), default=["python-docs", "synthetic"])
    parser.add_argument("--variants", type=lambda s: [v for v in s.split(",") if v], default=None)
    parser.add_argument("--synthetic-variants", type=lambda s: [v for v in s.split(",") if v], default=None)
    parser.add_argument("--chunks", type=int, default=100_000, help="chunks of the synthetic corpus (about)")
    parser.add_argument("--synthetic-dir", help="write the synthetic corpus here (kept) instead of a temp dir")
    parser.add_argument("--no-stages", dest="stages", action="store_false")
    parser.add_argument("--batch-sizes", type=lambda s: [int(x) for x in s.split(",")], default=[64, 256, 1024])
    parser.add_argument("--writers", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4])
    parser.add_argument("--out", help="write the results here (JSON)")
    parser.add_argument("--report", nargs="+", type=Path, help="print the tables of earlier result files")
    args = parser.parse_args(argv)
    if args.report:
        report(args.report)
        return
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.quick:
        args.chunks = min(args.chunks, 300)
        args.batch_sizes, args.writers = args.batch_sizes[:1], args.writers[:2]
        args.variants = args.variants or ["defaults", "tuned"]
        args.synthetic_variants = args.synthetic_variants or ["tuned"]
    result = run(args)
    if args.out:
        report([Path(args.out)])
    else:
        print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
