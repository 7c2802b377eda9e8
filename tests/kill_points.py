"""A child process for the crash tests: runs one change (a folder sync, an API upload or an API delete) and
SIGKILLs itself right after the n-th call of the named steps, or lists the steps it passes (`trace`).

    python -m tests.kill_points trace|<n>|run DATA_DIR DOCS sync|upload NAME FROM|delete NAME
    python -m tests.kill_points serve     (the same arguments as JSON lists on stdin, one child forked per line)

Vectors come from a hashing embedder (the steps under test are the writes, not the model), so a child starts in
a second or two; everything else is real: Chroma, the keyword index, the manifest, the files, the kill."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

# Every write an ingest, upload or delete makes, in the modules that make it.
STEPS = (
    "ingest.manifest:Manifest.begin", "ingest.manifest:Manifest.put", "ingest.manifest:Manifest.remove",
    "rag.components.store:ChromaStore.upsert", "rag.components.store:ChromaStore.delete",
    "rag.components.store:ChromaStore.set_access",
    "rag.components.keyword:KeywordIndex.add", "rag.components.keyword:KeywordIndex.delete",
    "rag.components.keyword:KeywordIndex.set_access",
    "ingest.files:swap_in", "ingest.files:Swap.commit", "ingest.files:Swap.restore", "ingest.files:move_aside",
)
_WORD = re.compile(r"\w+")


class HashEmbedder:
    """Deterministic unit vectors from hashed words: stands in for the model in crash tests."""

    name = "hash"
    max_tokens = 250
    dimension = 64

    def embed_documents(self, texts: Sequence[str]) -> Any:
        """One vector per text."""
        return np.stack([self.embed_query(text) for text in texts]) if texts else np.zeros((0, self.dimension))

    def embed_query(self, text: str) -> Any:
        """The vector of one text."""
        vector = np.zeros(self.dimension, dtype=np.float32)
        for word in _WORD.findall(text.lower()):
            vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dimension] += 1.0
        return vector / (np.linalg.norm(vector) or 1.0)


def _arm(counter: Callable[[str], None]) -> None:
    """Wrap every step so that each call is reported to `counter` once it returned."""
    for step in STEPS:
        module_name, attribute = step.split(":")
        owner: Any = importlib.import_module(module_name)
        *path, name = attribute.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = getattr(owner, name)

        def wrapper(*args: Any, _original: Any = original, _step: str = step, _method: bool = bool(path),
                    **kwargs: Any) -> Any:
            result = _original(*args, **kwargs)
            if not _nothing(args[1:] if _method else args):
                counter(_step)
            return result

        setattr(owner, name, wrapper)  # callers reach these through their module or class: all see the wrapper


def _nothing(args: tuple[Any, ...]) -> bool:
    """Whether a call wrote nothing (e.g. a delete of no ids): not a step of its own."""
    return bool(args) and isinstance(args[0], (list, tuple)) and not args[0]


def _counter(mode: str) -> Callable[[str], None]:
    calls: list[str] = []

    def count(step: str) -> None:
        calls.append(step)
        if mode == "trace":
            print(json.dumps(step), flush=True)
        elif mode.isdigit() and len(calls) == int(mode):
            os.kill(os.getpid(), signal.SIGKILL)

    return count


def run_change(data_dir: Path, docs: Path, action: str, args: list[str]) -> None:
    """Carry out one change as rag-ingest or the API would."""
    from ingest import files, service
    from rag.config import Settings
    from rag.core.access import LOCAL_OPERATOR
    from rag.wiring import App, build_store

    settings = Settings(data_dir=data_dir, docs_dir=docs, _env_file=None)  # type: ignore[call-arg]
    embedder: Any = HashEmbedder()
    if action == "sync":
        service.sync([docs], settings, embedder=embedder)
        return
    from ui.serving import documents

    app = App(settings, embedder=embedder, store=build_store(settings))
    services: Any = SimpleNamespace(settings=settings, embedder=embedder, store=app.store,
                                    library=service.library(app))
    if action == "upload":
        descriptor, staged = files.staged_file(docs)  # held (locked) as the API holds an upload it receives
        os.write(descriptor, Path(args[1]).read_bytes())
        documents.ingest_upload(services, LOCAL_OPERATOR, staged, docs / args[0], replace=True)
    elif action == "delete":
        doc_id = next(entry.doc_id for entry in services.library.documents() if entry.source == args[0])
        documents.delete_document(services, LOCAL_OPERATOR, doc_id)


def child(argv: list[str]) -> None:
    """Run one change: mode, data dir, documents folder, action and its arguments."""
    mode, data_dir, docs, action, *args = argv
    _arm(_counter(mode))
    try:
        run_change(Path(data_dir), Path(docs), action, args)
    except Exception as exc:  # an expected refusal (e.g. an unreadable upload) ends the change; the test checks
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)


def serve() -> None:
    """Import once, then fork a child per line of arguments read from stdin (JSON list); after each, print
    `{"exit": status}` (-9: killed). Saves the seconds of imports per kill point (Chroma's among them: the app
    imports it only when it opens a store)."""
    import chromadb  # noqa: F401

    from ingest import service  # noqa: F401
    from ui.serving import documents  # noqa: F401

    for line in sys.stdin:
        pid = os.fork()
        if pid == 0:
            child(json.loads(line))
            sys.stdout.flush()
            os._exit(0)
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        print(json.dumps({"exit": status}), flush=True)


def main(argv: list[str]) -> None:
    """`serve`, or one change run in this process."""
    serve() if argv == ["serve"] else child(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
