"""The cost of access filtering in retrieval at 100k chunks: unfiltered vs filtered p50/p95/p99 and their ratios.

    .venv/bin/python -m benchmarks.access_latency [--unique N] [--data-dir DIR] [--quick]

The first run builds the collection under data/cache/access-100k/ (a RAG data dir; skipped when it already holds
100k chunks). Its text is real: the HTML pages of python3.11-doc, postgresql-doc-15 and debian-reference-zh-cn
(`apt-get download` and `dpkg -x` into a temporary folder, read with ingest.html's loader), cut into passages of 60
words (a page's last one 40–60; a Han character counts as half a word). Its vectors are partly synthetic: embedding
100k chunks with MiniLM on 2 CPU cores takes too long, so only --unique passages (8,000 by default) are embedded for
real, and the 100k chunks are copies of them: copy c of a passage gets the passage's vector plus N(0, 0.02) noise
per dimension, re-normalized (copy 0 keeps the real vector), its own chunk id, and the passage text behind a short
distinct prefix (its document and position). BM25 scores of the copies of one passage tie on the query's terms.
Documents hold 20 consecutive chunks; each belongs to one group g0..g9 (about 9% each) or to none (about 10%, public
under the default ungrouped policy).

Readers: the local operator (no filter), one group (g3; sees ~19% of chunks), three groups (g3, g5, g7; ~38%).
Every question of the dev sets (Python FAQ, Chinese) runs in every variant back to back, the order rotating per
question and round, so the machine's noise falls on all alike (the load average is printed before and after). A
query is the whole retrieval, as in retrieval_latency: embedding the question, the dense search (Chroma, filtered
however rag.core.retrieve filters it), BM25 (with its mask), fetching keyword-only finds, fusion. Filtered hits are
checked against the labels this script assigned, not the labels the store returns.

Build: ~20 minutes on 2 shared cores (15 embedding 8,000 passages at 7–9/s, 4 writing 100k chunks).
`--quick` (800 chunks copied from 40 passages of the Python FAQ dev set, in a temporary data dir, 10 questions,
1 round; no download) checks that the benchmark runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from benchmarks.common import CACHE, FAQ, REPO
from rag.components.index import Index
from rag.config import Settings
from rag.core.access import LOCAL_OPERATOR, AccessPolicy, DocAccess, Principal
from rag.core.ports import Embedder, Vectors
from rag.core.retrieve import Retriever
from rag.core.types import Chunk
from rag.tools.evaluate import load_cases, percentiles
from rag.wiring import build_embedder, build_store, prefer_passive_threads

ROUNDS = 3
TOP_K = 3
TOTAL = 100_000
UNIQUE = 8_000  # ~7 passages/s embedded on this 2-core machine while it was shared: ~20 min
DOC_CHUNKS = 20
NOISE = 0.02
SEED = 20240611
GROUPS = tuple(f"g{i}" for i in range(10))
PUBLIC_SHARE = 0.10
WRITE_BATCH = 2_000
EMBED_BATCH = 512
QUICK_UNIQUE, QUICK_TOTAL = 40, 800  # --quick: seconds
# Package → (folder of its HTML pages inside the package, share of the unique passages).
PACKAGES = {
    "python3.11-doc": ("usr/share/doc/python3.11/html", 0.45),
    "postgresql-doc-15": ("usr/share/doc/postgresql-doc-15/html", 0.40),
    "debian-reference-zh-cn": ("usr/share/debian-reference", 0.15),
}
SKIP_PAGES = re.compile(r"(^|/)(genindex|bookindex|py-modindex|search|index)[^/]*\.html$")
HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
UNIT = re.compile(f"[{HAN}]|[^\\s{HAN}]+")  # a Han character, or a run of anything else but spaces
HAN_CHAR = re.compile(f"[{HAN}]")
READERS = {
    "all": LOCAL_OPERATOR,
    "1 group": Principal("bench", frozenset({"g3"})),
    "3 groups": Principal("bench", frozenset({"g3", "g5", "g7"})),
}


def questions() -> list[str]:
    """Every question of the dev sets."""
    eval_dir = REPO / "data" / "eval"
    files = [eval_dir / "python-faq" / "questions.jsonl", eval_dir / "zh" / "questions.jsonl"]
    return [case.question for path in files for case in load_cases(path)]


def unpack(package: str, into: Path) -> Path:
    """Download a Debian package and unpack it under `into`; the root of its files."""
    subprocess.run(["apt-get", "download", package], cwd=into, check=True, capture_output=True)
    root = into / package
    deb = next(into.glob(f"{package}_*.deb"))
    subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True)
    return root


def page_text(path: Path) -> str:
    """The main text of one HTML page (ingest's loader), or "" when it has none."""
    from ingest.html import load_html
    from ingest.loaders import LoadError

    try:
        doc = load_html(path.read_bytes(), path.name)
    except LoadError:
        return ""
    return "\n".join(section.text for section in doc.sections)


def split_passages(text: str, target: float = 60, least: float = 40) -> Iterator[str]:
    """Passages of about `target` words (at least `least`), cut from a text without changing its words."""
    start, weight, end = None, 0.0, 0
    for unit in UNIT.finditer(text):
        start = unit.start() if start is None else start
        weight += 0.5 if HAN_CHAR.fullmatch(unit.group()) else 1.0
        end = unit.end()
        if weight >= target:
            yield " ".join(text[start:end].split())
            start, weight = None, 0.0
    if start is not None and weight >= least:
        yield " ".join(text[start:end].split())


def package_passages(package: str, quota: int, tmp: Path) -> list[tuple[str, str]]:
    """Up to `quota` distinct (source, passage) pairs from a package's pages, pages taken in a seeded shuffle."""
    folder, _ = PACKAGES[package]
    root = unpack(package, tmp) / folder
    pages = sorted(p for p in root.rglob("*.html") if not SKIP_PAGES.search(p.as_posix()))
    random.Random(SEED).shuffle(pages)
    found: dict[str, str] = {}
    for page in pages:
        source = f"{package}/{page.relative_to(root).as_posix()}"
        for passage in split_passages(page_text(page)):
            found.setdefault(passage, source)
        if len(found) >= quota:
            break
    return [(source, text) for text, source in list(found.items())[:quota]]


def collect_passages(unique: int) -> list[tuple[str, str]]:
    """The unique passages of every package, in package order."""
    with tempfile.TemporaryDirectory() as tmp:
        out: list[tuple[str, str]] = []
        for package, (_, share) in PACKAGES.items():
            out += package_passages(package, round(unique * share), Path(tmp))
            print(f"  {package}: {len(out)} passages so far", flush=True)
    return out


def embed_all(embedder: Embedder, texts: Sequence[str]) -> Vectors:
    """Real embeddings of every text, in batches, with progress."""
    parts, started = [], time.perf_counter()
    for start in range(0, len(texts), EMBED_BATCH):
        parts.append(embedder.embed_documents(texts[start : start + EMBED_BATCH]))
        done, spent = start + len(parts[-1]), time.perf_counter() - started
        print(f"  embedded {done}/{len(texts)} ({done / spent:.0f}/s, {spent:.0f} s)", flush=True)
    return np.concatenate(parts)


def faq_passages(unique: int) -> list[tuple[str, str]]:
    """Up to `unique` distinct passages of the Python FAQ dev set's documents (in the repository: no download)."""
    found: dict[str, str] = {}
    for path in sorted((FAQ / "docs").glob("*.txt")):
        for passage in split_passages(path.read_text(encoding="utf-8")):
            found.setdefault(passage, f"python-faq/{path.name}")
    return [(source, text) for text, source in list(found.items())[:unique]]


Passages = Callable[[int], list[tuple[str, str]]]


def cached_passages(data_dir: Path, embedder: Embedder, unique: int,
                    collect: Passages = collect_passages) -> tuple[list[tuple[str, str]], Vectors]:
    """The unique passages and their real vectors, computed once and kept beside the index (a rebuild reuses them)."""
    text_file, vector_file = data_dir / "passages.json", data_dir / "passages.npy"
    if text_file.exists() and vector_file.exists():
        passages = [(s, t) for s, t in json.loads(text_file.read_text(encoding="utf-8"))]
        if len(passages) == unique or unique <= 0:
            return passages, np.load(vector_file)
    passages = collect(unique)
    vectors = embed_all(embedder, [text for _, text in passages])
    data_dir.mkdir(parents=True, exist_ok=True)
    text_file.write_text(json.dumps(passages, ensure_ascii=False), encoding="utf-8")
    np.save(vector_file, vectors)
    return passages, vectors


def document_access(doc: int) -> DocAccess:
    """The access label of document `doc`: public ~10%, else one of the ten groups (seeded, so reproducible)."""
    draw = random.Random(SEED * 1_000_003 + doc).random()
    if draw < PUBLIC_SHARE:
        return DocAccess()
    return DocAccess((GROUPS[min(len(GROUPS) - 1, int((draw - PUBLIC_SHARE) / (1 - PUBLIC_SHARE) * 10))],))


def chunk_access(chunk_id: str) -> DocAccess:
    """The access this script gave a chunk, from its id alone (`acc-NNNNNN`)."""
    return document_access(int(chunk_id.removeprefix("acc-")) // DOC_CHUNKS)


def make_chunk(i: int, source: str, text: str) -> Chunk:
    """Chunk number `i` of the collection: a copy of a passage, in document i // 20 with that document's access."""
    doc, position = divmod(i, DOC_CHUNKS)
    body = f"d{doc:05d}p{position:02d} {text}"
    return Chunk(chunk_id=f"acc-{i:06d}", text=body, source=source, doc_id=f"doc-{doc:05d}",
                 content_hash=hashlib.sha256(body.encode()).hexdigest()[:16], position=position,
                 title=source.rsplit("/", 1)[-1], access=document_access(doc))


def copy_vectors(vectors: Vectors, copy: int) -> Vectors:
    """Copy `copy` of the real vectors: unchanged for copy 0, else with N(0, NOISE) noise, re-normalized."""
    if copy == 0:
        return vectors
    noisy = vectors + np.random.default_rng(SEED + copy).normal(0, NOISE, vectors.shape).astype(np.float32)
    normalized: Vectors = (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)
    return normalized


def write_collection(store: Index, passages: list[tuple[str, str]], vectors: Vectors, total: int) -> None:
    """Upsert `total` chunks (copies of the passages, in order) to Chroma and the keyword index, with progress."""
    started, unique = time.perf_counter(), len(passages)
    copies = {copy: copy_vectors(vectors, copy) for copy in range(-(-total // unique))}
    for start in range(0, total, WRITE_BATCH):
        ids = range(start, min(total, start + WRITE_BATCH))
        chunks = [make_chunk(i, *passages[i % unique]) for i in ids]
        store.upsert(chunks, np.stack([copies[i // unique][i % unique] for i in ids]))
        print(f"  wrote {ids.stop}/{total} chunks ({time.perf_counter() - started:.0f} s)", flush=True)


def ensure_collection(settings: Settings, embedder: Embedder, store: Index, unique: int, total: int,
                      collect: Passages = collect_passages) -> None:
    """Build the collection of `total` chunks unless the data dir already holds it."""
    if store.count() >= total:
        return
    started = time.perf_counter()
    print(f"building {total} chunks in {settings.data_dir} from {unique} real passages", flush=True)
    passages, vectors = cached_passages(settings.data_dir, embedder, unique, collect)
    print(f"  {len(passages)} passages, {len(vectors)} vectors ({time.perf_counter() - started:.0f} s)", flush=True)
    write_collection(store, passages, vectors, total)
    print(f"built in {time.perf_counter() - started:.0f} s", flush=True)


def variants(embedder: Embedder, store: Index) -> dict[str, tuple[Retriever, Principal]]:
    """Mode × reader: the retriever and the principal of each measured variant."""
    modes = {mode: Retriever(embedder, store, mode) for mode in ("hybrid", "dense")}
    return {f"{mode} {reader}": (modes[mode], principal) for mode in modes for reader, principal in READERS.items()}


class Tally:
    """Latencies per variant, plus the checks on filtered results."""

    def __init__(self, names: Sequence[str]) -> None:
        self.times: dict[str, list[float]] = {name: [] for name in names}
        self.violations = 0
        self.short = 0  # filtered queries with fewer than TOP_K hits
        self.filtered = 0

    def run(self, name: str, retriever: Retriever, principal: Principal, question: str) -> None:
        """One timed retrieval; filtered hits are checked against the labels assigned at build time."""
        started = time.perf_counter()
        hits = retriever.search(question, TOP_K, principal)
        self.times[name].append((time.perf_counter() - started) * 1000)
        if principal.all_groups:
            return
        self.filtered += 1
        self.short += len(hits) < TOP_K
        policy = AccessPolicy()
        self.violations += sum(not policy.allows(principal, chunk_access(hit.chunk_id)) for hit in hits)


def measure(runs: dict[str, tuple[Retriever, Principal]], asked: list[str], rounds: int) -> Tally:
    """Every question in every variant, `rounds` times, the order rotating per question and round."""
    tally, names = Tally(list(runs)), list(runs)
    for round_ in range(rounds):
        for i, question in enumerate(asked):
            shift = (i + round_) % len(names)
            order = names[shift:] + names[:shift]
            if (i + round_) % 2:
                order.reverse()
            for name in order:
                tally.run(name, *runs[name], question)
        print(f"  round {round_ + 1}/{rounds} done", flush=True)
    return tally


def visible_share(principal: Principal, total: int) -> float:
    """The share of the collection's chunks that a reader may see."""
    docs = max(1, total // DOC_CHUNKS)
    return sum(AccessPolicy().allows(principal, document_access(doc)) for doc in range(docs)) / docs


def report(tally: Tally, asked: int, rounds: int, total: int) -> None:
    """Percentiles per variant, filtered/unfiltered ratios, and the access checks."""
    stats = {name: percentiles(values) for name, values in tally.times.items()}
    print(f"{asked} questions x {rounds} rounds, top-{TOP_K}; per variant {asked * rounds} queries")
    print(f"{'variant':<18}{'sees':>6}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'p50 ratio':>11}{'p99 ratio':>11}")
    for name, row in stats.items():
        mode, reader = name.split(" ", 1)
        base = stats[f"{mode} all"]
        print(f"{name:<18}{visible_share(READERS[reader], total):>6.0%}{row['p50']:>9.1f}{row['p95']:>9.1f}"
              f"{row['p99']:>9.1f}{row['p50'] / base['p50']:>11.2f}{row['p99'] / base['p99']:>11.2f}")
    worst = max(stats[name]["p50"] / stats[f"{name.split()[0]} all"]["p50"] for name in stats)
    print(f"worst filtered/unfiltered p50 ratio: {worst:.2f} (goal <= 1.2: {'met' if worst <= 1.2 else 'NOT met'})")
    print(f"access violations in filtered results: {tally.violations} (must be 0)")
    print(f"filtered queries with fewer than {TOP_K} hits: {tally.short} of {tally.filtered}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--unique", type=int, default=UNIQUE, help="passages embedded for real (build only)")
    parser.add_argument("--data-dir", type=Path, default=CACHE / "access-100k")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_TOTAL} chunks from {QUICK_UNIQUE} FAQ passages in a temporary data dir, 1 round")
    return parser.parse_args(argv)


def warm_up(runs: dict[str, tuple[Retriever, Principal]], asked: list[str]) -> None:
    """Load the keyword index and warm the caches (HNSW pages, jieba, tokenizer, metadata) before timing."""
    started = time.perf_counter()
    runs["hybrid all"][0].warm()
    print(f"keyword index loaded in {time.perf_counter() - started:.1f} s", flush=True)
    for question in asked[:10]:
        for retriever, principal in runs.values():
            retriever.search(question, TOP_K, principal)


def load() -> str:
    """The load average (1, 5, 15 minutes)."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def run(data_dir: Path, unique: int, total: int, rounds: int, asked: list[str],
        collect: Passages = collect_passages) -> None:
    """Build (if needed) and measure one collection."""
    settings = Settings(data_dir=data_dir, _env_file=None)  # type: ignore[call-arg]
    embedder, store = build_embedder(settings), build_store(settings)
    ensure_collection(settings, embedder, store, unique, total, collect)
    print(f"{store.count()} chunks in {settings.data_dir}", flush=True)
    runs = variants(embedder, store)
    warm_up(runs, asked)
    print(f"load average before: {load()}", flush=True)
    tally = measure(runs, asked, rounds)
    print(f"load average after: {load()}")
    report(tally, len(asked), rounds, total)


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    prefer_passive_threads()
    args = parse_args(argv)
    if not args.quick:
        run(args.data_dir, args.unique, TOTAL, ROUNDS, questions())
        return
    with tempfile.TemporaryDirectory() as tmp:
        run(Path(tmp) / "data", QUICK_UNIQUE, QUICK_TOTAL, 1, questions()[:10], faq_passages)


if __name__ == "__main__":
    main()
