"""Shared benchmark helpers: the Python-docs corpus, the FAQ relevance check, and servers that are always stopped."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rag.config import Settings

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / "data" / "cache"
FAQ = REPO / "data" / "eval" / "python-faq"
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
    """(question, answer passage) pairs of the Python FAQ dev set: its answerable cases, each with its document."""
    cases = [json.loads(line) for line in (FAQ / "questions.jsonl").read_text(encoding="utf-8").splitlines()
             if line.strip()]
    return [(case["question"], (FAQ / "docs" / case["expected_source"]).read_text(encoding="utf-8").strip())
            for case in cases if case.get("answerable", True)]


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


@contextmanager
def stopped_on_exit(process: subprocess.Popen[bytes]) -> Iterator[subprocess.Popen[bytes]]:
    """Yield the process; stop it, and what it started, on every way out (error, Ctrl-C, SIGTERM to this script)."""
    group = _own_group(process)  # read now: once the leader has exited, its children can no longer be found by it
    previous = _sigterm_as_exit()
    try:
        yield process
    finally:
        stop(process, group)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def stop(process: subprocess.Popen[bytes], group: int | None = None, grace_s: float = 30) -> None:
    """Terminate a process and, when it leads its own process group, everything it started (vLLM's engine core)."""
    if process.poll() is None:
        _signal(process, group, signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            _signal(process, group, signal.SIGKILL)
            process.wait(10)
    if group is not None:  # children that outlived their leader
        with suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)


def _own_group(process: subprocess.Popen[bytes]) -> int | None:
    with suppress(ProcessLookupError):
        if os.getpgid(process.pid) == process.pid:
            return process.pid
    return None


def _signal(process: subprocess.Popen[bytes], group: int | None, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError):
        if group is not None:
            os.killpg(group, sig)
        else:
            process.send_signal(sig)


def _sigterm_as_exit() -> Any:
    """Make SIGTERM raise SystemExit (so `finally` runs) while a child is held; the former handler, or None."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def leave(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, leave)


@contextmanager
def server_process(command: list[str], health_url: str, log: Path, env: dict[str, str] | None = None,
                   timeout_s: float = 120) -> Iterator[subprocess.Popen[bytes]]:
    """Start a server in its own session, wait until health_url answers 200, yield it; always stop it after."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    with stopped_on_exit(process):
        deadline = time.monotonic() + timeout_s
        while not _answers(health_url):
            if process.poll() is not None:
                raise RuntimeError(f"{Path(command[0]).name} exited with code {process.returncode}: {_tail(log)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{health_url} did not answer within {timeout_s:g} s: {_tail(log)}")
            time.sleep(0.3)
        yield process


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return int(response.status) == 200
    except (OSError, ValueError):
        return False


def _tail(log: Path, lines: int = 15) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else "(no log)"


@contextmanager
def llm_server(settings: Settings) -> Iterator[subprocess.Popen[bytes] | None]:
    """vLLM for RAG_LLM_BASE_URL: the one already answering there (None), else one started here and stopped after."""
    from rag.tools.llm_server import is_healthy, start_llm_server, wait_until_healthy

    if is_healthy(settings.llm_base_url):
        yield None
        return
    log = settings.data_dir / "logs" / "vllm-bench.log"
    with stopped_on_exit(start_llm_server(settings, log)) as process:
        wait_until_healthy(settings, process, log)
        yield process


def sample_docs(quick: bool, dest: Path) -> Path:
    """The documents to ingest: data/samples, or for --quick its three small Markdown files (copied into dest)."""
    if not quick:
        return REPO / "data" / "samples"
    dest.mkdir(parents=True, exist_ok=True)
    for path in sorted((REPO / "data" / "samples" / "en").glob("*.md")):
        shutil.copy(path, dest / path.name)
    return dest


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
