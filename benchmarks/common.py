"""Shared benchmark helpers: the Python-docs corpus and the FAQ relevance check."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rag.config import Settings

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / "data" / "cache"
FAQ = REPO.parent / "shared" / "data" / "python-faq.json"
_WORD = re.compile(r"[a-z0-9]+")


def python_docs(subdirs: list[str], dest: Path) -> Path:
    """Copy the chosen folders ("all": everything) of python3.11-doc's reStructuredText sources into dest."""
    source = CACHE / "python3.11-doc"
    subprocess.run([str(REPO / "benchmarks" / "fetch_corpus.sh"), "python3.11-doc", str(source)], check=True,
                   stdout=subprocess.DEVNULL)
    if subdirs == ["all"]:
        shutil.copytree(source, dest, dirs_exist_ok=True)
        return dest
    for sub in subdirs:
        shutil.copytree(source / sub, dest / sub, dirs_exist_ok=True)
    return dest


def corpus_bytes(folder: Path) -> int:
    """Total size of the files in a folder."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def faq_pairs() -> list[tuple[str, str]]:
    """(question, answer passage) pairs of the Python FAQ dev set."""
    return [(item["question"], item["answer_passage"]) for item in json.loads(FAQ.read_text())]


def words(text: str) -> list[str]:
    """Lower-case alphanumeric words (markup and punctuation dropped)."""
    return _WORD.findall(text.lower())


def answer_windows(answer: str, width: int = 8) -> set[tuple[str, ...]]:
    """Every run of `width` consecutive words of an answer."""
    tokens = words(answer)
    return {tuple(tokens[i : i + width]) for i in range(max(1, len(tokens) - width + 1))}


def holds_answer(chunk: str, windows: set[tuple[str, ...]], width: int = 8) -> bool:
    """True when the chunk contains some 8-word run of the answer passage."""
    tokens = words(chunk)
    return any(tuple(tokens[i : i + width]) in windows for i in range(max(1, len(tokens) - width + 1)))


def recall_at(results: list[list[str]], pairs: list[tuple[str, str]], k: int) -> float:
    """Share of questions with an answer-holding chunk among their first k results."""
    found = sum(any(holds_answer(text, answer_windows(answer)) for text in texts[:k])
                for texts, (_, answer) in zip(results, pairs, strict=True))
    return found / len(pairs)


def ensure_llm_server(settings: Settings) -> subprocess.Popen[bytes] | None:
    """Start vLLM for RAG_LLM_BASE_URL unless one answers there; the started process (to terminate), else None."""
    from rag.llm_server import is_healthy, start_llm_server, wait_until_healthy

    if is_healthy(settings.llm_base_url):
        return None
    log = settings.data_dir / "logs" / "vllm-bench.log"
    process = start_llm_server(settings, log)
    wait_until_healthy(settings, process, log)
    return process


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
