"""SIGKILL right after each write step of a folder sync (add, replace, relabel and delete in one run), of an API
upload (accepted and refused) and of an API delete: after the next start and sync, the manifest, Chroma and the
keyword index hold exactly what a clean run over the same folder gives, and no file is lost or left half-way."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest import service
from rag.config import Settings
from rag.wiring import App, build_store, keyword_path
from tests.docs_factory import pdf_bytes
from tests.kill_points import STEPS, HashEmbedder

REPO = Path(__file__).resolve().parent.parent
BEFORE: dict[str, str | bytes] = {
    "a.md": "# Alpha\n\nThe alpha procedure restarts the pump. " * 30,
    "b.md": "# Beta\n\nBeta covers payroll dates for staff. " * 30,
    "b.md.meta.yaml": "groups: [hr]\n",
    "c.md": "# Gamma\n\nGamma explains the badge office hours. " * 30,
    "e.pdf": pdf_bytes(["Epsilon page one about printers.", "Epsilon page two about toner."]),
}


def _change_folder(docs: Path) -> None:
    (docs / "a.md").write_text("# Alpha v2\n\nThe alpha procedure now drains the tank first. " * 40)
    (docs / "d.md").write_text("# Delta\n\nDelta lists the parking rules. " * 30)
    (docs / "c.md").unlink()
    (docs / "b.md.meta.yaml").write_text("groups: [eng]\n")


def _settings(data_dir: Path, docs: Path) -> Settings:
    return Settings(data_dir=data_dir, docs_dir=docs, _env_file=None)  # type: ignore[call-arg]


def _write(folder: Path, files: dict[str, str | bytes]) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for name, content in files.items():
        path = folder / name
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)


def state(settings: Settings) -> dict[str, Any]:
    """What the three stores hold, checked to agree with each other."""
    with service.library(App(settings)).manifest() as manifest:
        entries = {e.source: (e.doc_id, e.content_hash, sorted(e.chunk_ids), e.access) for e in manifest}
        assert manifest.pending() == [], "a change was left pending"
    store = build_store(settings)
    stored = store.dense._collection.get(include=["metadatas"])
    dense = {i: str((m or {}).get("access", "")) for i, m in zip(stored["ids"], stored["metadatas"] or [], strict=True)}
    with sqlite3.connect(keyword_path(settings, store.name)) as db:
        keyword = dict(db.execute("SELECT chunk_id, access FROM tokens").fetchall())
    recorded = {i for _, _, ids, _ in entries.values() for i in ids}
    assert recorded == set(dense) == set(keyword), "manifest, Chroma and the keyword index disagree"
    assert store.count() == len(recorded)
    labels = {i: access for _, _, ids, access in entries.values() for i in ids}
    assert {i: keyword[i] for i in recorded} == labels, "the keyword index holds other access labels"
    return {"entries": entries, "dense": dense}


class Children:
    """The kill-point server (tests/kill_points.py serve): imports once, forks a child per change."""

    def __init__(self) -> None:
        self._process = subprocess.Popen([sys.executable, "-m", "tests.kill_points", "serve"], cwd=REPO, text=True,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def run(self, mode: str, data_dir: Path, docs: Path, *change: str) -> tuple[int, list[str]]:
        """The child's exit status (-9: killed) and the steps it printed (mode `trace`)."""
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps([mode, str(data_dir), str(docs), *change]) + "\n")
        self._process.stdin.flush()
        lines = []
        while (line := self._process.stdout.readline()) and not line.startswith('{"exit"'):
            lines.append(json.loads(line))
        assert line, "the kill-point server ended"
        return json.loads(line)["exit"], [step for step in lines if isinstance(step, str)]

    def close(self) -> None:
        """Stop the server."""
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait(timeout=30)


def _recover(settings: Settings) -> None:
    """What the next server start and sync do."""
    service.library(App(settings)).settle_when_idle()
    service.sync([settings.documents_dir], settings, embedder=HashEmbedder())  # type: ignore[arg-type]


def _leftovers(docs: Path) -> list[str]:
    return sorted(p.name for p in docs.iterdir() if p.name.startswith("."))


@pytest.fixture(scope="module")
def children() -> Iterator[Children]:
    """One kill-point server for the module."""
    server = Children()
    yield server
    server.close()


@pytest.fixture(scope="module")
def initial(tmp_path_factory: pytest.TempPathFactory, children: Children) -> tuple[Path, Path]:
    """The folder before the change, ingested: (data dir to copy, documents folder path every case reuses)."""
    root = tmp_path_factory.mktemp("crash-steps")
    docs, data = root / "docs", root / "initial"
    _write(docs, BEFORE)
    assert children.run("run", data, docs, "sync")[0] == 0
    return data, docs


Check = Callable[[Path], None]
Initial = tuple[Path, Path]  # the ingested data dir to copy, the documents folder


def _every_step(children: Children, initial: tuple[Path, Path], tmp_path: Path, prepare: Callable[[Path], None],
                change: list[str], check: Check) -> list[str]:
    """Kill the change after each of its steps in turn; the steps."""
    template, docs = initial
    _write(docs, BEFORE)
    prepare(docs)
    shutil.copytree(template, tmp_path / "trace")
    status, steps = children.run("trace", tmp_path / "trace", docs, *change)
    assert status == 0 and len(steps) >= 2, steps
    clean_states: dict[frozenset[tuple[str, bytes]], dict[str, Any]] = {}  # by the folder's content
    for n in range(1, len(steps) + 1):
        _write(docs, BEFORE)
        prepare(docs)
        crashed = tmp_path / f"crashed-{n}"
        shutil.copytree(template, crashed)
        assert children.run(str(n), crashed, docs, *change)[0] == -9, f"step {n} ({steps[n - 1]})"
        _recover(_settings(crashed, docs))
        assert _leftovers(docs) == [], f"after a kill at step {n} ({steps[n - 1]})"
        check(docs)
        folder = frozenset((p.name, p.read_bytes()) for p in docs.iterdir())
        if folder not in clean_states:
            clean = _settings(tmp_path / f"clean-{n}", docs)
            service.sync([docs], clean, embedder=HashEmbedder())  # type: ignore[arg-type]
            clean_states[folder] = state(clean)
        assert state(_settings(crashed, docs)) == clean_states[folder], f"step {n}: {steps[n - 1]}"
    return steps


def test_kill_after_each_step_of_a_sync_converges(children: Children, initial: Initial, tmp_path: Path) -> None:
    steps = _every_step(children, initial, tmp_path, _change_folder, ["sync"], lambda docs: None)
    assert set(steps) == set(STEPS) - {step for step in STEPS if step.startswith("ingest.files")}, steps


def test_kill_after_each_step_of_an_upload_converges(children: Children, initial: Initial, tmp_path: Path) -> None:
    new = tmp_path / "a-new.md"
    new.write_text("# Alpha v3\n\nThe alpha procedure is retired. " * 25)

    def whole(docs: Path) -> None:  # the old version or the new one, never a mix or nothing
        assert (docs / "a.md").read_text() in (BEFORE["a.md"], new.read_text())

    _every_step(children, initial, tmp_path, lambda docs: None, ["upload", "a.md", str(new)], whole)


def test_kill_after_each_step_of_a_refused_upload_keeps_the_old_file(children: Children, initial: Initial,
                                                                     tmp_path: Path) -> None:
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.7 not really a pdf")

    def kept(docs: Path) -> None:
        assert (docs / "e.pdf").read_bytes() == BEFORE["e.pdf"]

    _every_step(children, initial, tmp_path, lambda docs: None, ["upload", "e.pdf", str(broken)], kept)


def test_kill_after_each_step_of_a_delete_converges(children: Children, initial: Initial, tmp_path: Path) -> None:
    def gone(docs: Path) -> None:  # once its file was moved aside, the document does not come back
        assert not (docs / "c.md").exists()

    _every_step(children, initial, tmp_path, lambda docs: None, ["delete", "c.md"], gone)
