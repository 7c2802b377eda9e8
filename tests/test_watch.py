"""rag-ingest --watch as a user runs it: a real process (real MiniLM, embedded Chroma) fed real file events, with
the manifest, Chroma and the keyword index checked to agree after every change."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from watchfiles import Change

from ingest import service
from ingest.pipeline import plan_sync
from ingest.service import library
from ingest.watch import Relevant
from rag.config import Settings
from rag.wiring import App
from tests.conftest import CountingEmbedder
from tests.test_crash_steps import state

BIN = Path(sys.executable).parent
DEBOUNCE_MS = 300
HOLD = """
import sys, time
from pathlib import Path
from rag.components import filelock
with filelock.exclusive(Path(sys.argv[1]), "rag-ingest other-folder", deadline=time.monotonic()):
    print("held", flush=True)
    sys.stdin.read()
"""


def _doc(topic: str) -> str:
    return f"# {topic.title()}\n\nThis page explains the {topic} procedure for staff in two short sentences.\n"


class Watching:
    """`rag-ingest --watch DOCS` in the background, its output collected line by line."""

    def __init__(self, docs: Path, env: dict[str, str]) -> None:
        self.process = subprocess.Popen([str(BIN / "rag-ingest"), "--watch", str(docs)], text=True,
                                        env={**env, "RAG_WATCH_DEBOUNCE_MS": str(DEBOUNCE_MS)},
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def syncs(self) -> int:
        """Syncs that changed something (a sync that changes nothing prints nothing)."""
        return sum(line.startswith("synced:") for line in self.lines)

    def wait_for(self, text: str, timeout: float = 60) -> None:
        _until(lambda: text in self.output, timeout, lambda: f"no {text!r} in:\n{self.output}")

    def stop(self, signum: signal.Signals, timeout: float = 30) -> int:
        """Send the signal; the exit status."""
        self.process.send_signal(signum)
        status = self.process.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return status


@pytest.fixture
def watching(docs: Path, cli_env: dict[str, str]) -> Iterator[Callable[[], Watching]]:
    started: list[Watching] = []

    def start() -> Watching:
        started.append(Watching(docs, cli_env))
        return started[-1]

    yield start
    for each in started:
        if each.process.poll() is None:
            each.process.kill()
            each.process.wait(timeout=10)


def _until(done: Callable[[], bool], timeout: float, why: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, why()
        time.sleep(0.2)


def _index(settings: Settings) -> dict[str, Any]:
    """The index's documents (source → hash, access), once manifest, Chroma and keyword index agree."""
    return {source: (digest, access) for source, (_, digest, _, access) in state(settings)["entries"].items()}


def _label(settings: Settings, source: str) -> str | None:
    try:
        return str(_index(settings)[source][1])
    except (AssertionError, KeyError):  # mid-sync
        return None


def converge(settings: Settings, docs: Path, timeout: float = 45) -> dict[str, Any]:
    """Wait until the index holds exactly the documents in the folder, at their current content."""
    last: list[str] = []

    def agrees() -> bool:
        try:
            index = _index(settings)
        except AssertionError as disagreement:  # mid-sync: the stores are checked again next round
            last[:] = [str(disagreement)]
            return False
        files = {p.relative_to(docs).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                 for p in docs.rglob("*.md") if p.is_file() and not p.name.startswith(".")}
        last[:] = [f"index {sorted(index)} vs folder {sorted(files)}"]
        return {source: digest for source, (digest, _) in index.items()} == files

    _until(agrees, timeout, lambda: f"the index did not follow the folder: {last}")
    return _index(settings)


def test_the_watcher_follows_every_kind_of_change_and_stops_on_sigterm(
        settings: Settings, docs: Path, tmp_path: Path, watching: Callable[[], Watching]) -> None:
    (docs / "alpha.md").write_text(_doc("alpha"))
    (docs / "beta.md").write_text(_doc("beta"))
    watcher = watching()
    watcher.wait_for("watching")
    assert set(converge(settings, docs)) == {"alpha.md", "beta.md"}

    (docs / "gamma.md").write_text(_doc("gamma"))  # added, modified, deleted in one burst
    (docs / "alpha.md").write_text(_doc("alpha pump restart"))
    (docs / "beta.md").unlink()
    assert set(converge(settings, docs)) == {"alpha.md", "gamma.md"}

    (docs / "team" / "new").mkdir(parents=True)  # renamed into a new subfolder, moved in, moved out
    (docs / "gamma.md").rename(docs / "team" / "new" / "gamma2.md")
    (tmp_path / "delta.md").write_text(_doc("delta"))
    (tmp_path / "delta.md").rename(docs / "team" / "delta.md")
    (docs / "alpha.md").rename(tmp_path / "alpha-out.md")
    assert set(converge(settings, docs)) == {"team/new/gamma2.md", "team/delta.md"}

    (docs / "team" / "delta.md.meta.yaml").write_text("groups: [hr]\n")  # a label alone: relabelled in place
    _until(lambda: _label(settings, "team/delta.md") == "|hr|", 30, lambda: watcher.output)
    watcher.wait_for("= team/delta.md")
    assert "1 relabelled" in watcher.output

    (docs / "broken.pdf").write_bytes(b"not a pdf at all")
    watcher.wait_for("broken.pdf: not a PDF file (no %PDF header)")
    assert set(converge(settings, docs)) == {"team/new/gamma2.md", "team/delta.md"}  # nothing stored was lost

    syncs = watcher.syncs()
    for name in (".gamma2.md.swp", "notes.md~", "~$report.docx", ".~lock.delta.md#", "#delta.md#", "x.md.part"):
        (docs / "team" / name).write_text("an editor's file in progress")
    (docs / "photo.png").write_bytes(b"\x89PNG not a document")
    time.sleep(4 * DEBOUNCE_MS / 1000 + 1)
    assert watcher.syncs() == syncs, f"temporary files started a sync:\n{watcher.output}"
    assert set(converge(settings, docs)) == {"team/new/gamma2.md", "team/delta.md"}

    for n in range(25):  # a burst (a copy, or an editor saving): one sync once it settles
        (docs / "burst" / f"{n:02d}.md").parent.mkdir(exist_ok=True)
        (docs / "burst" / f"{n:02d}.md").write_text(_doc(f"topic {n}"))
        time.sleep(0.03)
    assert len(converge(settings, docs)) == 27
    watcher.wait_for("; 27 chunks (")  # the last sync's summary, printed after its files were recorded
    assert watcher.syncs() - syncs <= 2, f"a burst of 25 writes gave {watcher.syncs() - syncs} syncs"
    if watcher.syncs() - syncs == 1:  # (a loaded machine may pause the writer longer than the quiet period)
        assert "+ … and 5 more" in watcher.output  # a large change names 20 files, not all
    assert "~$report.docx" not in watcher.output  # the burst's sync scanned the folder: no editor file was tried

    assert watcher.stop(signal.SIGTERM) == 0, watcher.output
    assert watcher.lines[-1] == "stopped"
    assert len(converge(settings, docs, timeout=5)) == 27


def test_a_busy_ingest_lock_is_waited_out_then_synced(settings: Settings, docs: Path,
                                                      watching: Callable[[], Watching]) -> None:
    (docs / "alpha.md").write_text(_doc("alpha"))
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(settings.index_dir / "ingest.lock")], text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        watcher = watching()
        watcher.wait_for("waiting: another ingest is running: rag-ingest other-folder")
        time.sleep(1)
        assert watcher.process.poll() is None and "watching" not in watcher.output
        with library(App(settings)).manifest() as manifest:
            assert manifest.entries() == {}
    finally:
        holder.communicate(timeout=10)  # closing its stdin ends it: the lock is free
    watcher.wait_for("the other ingest ended: syncing")
    watcher.wait_for("watching")
    assert set(converge(settings, docs)) == {"alpha.md"}
    assert watcher.stop(signal.SIGINT) == 0, watcher.output


def test_a_stop_during_a_sync_ends_it_safely(settings: Settings, docs: Path, embedder: CountingEmbedder,
                                             watching: Callable[[], Watching]) -> None:
    for n in range(16):
        (docs / f"{n:02d}.md").write_text(_doc(f"topic {n}"))
    watcher = watching()
    lock = settings.index_dir / "ingest.lock"
    _until(lambda: lock.is_file() and "--watch" in lock.read_text(), 30, lambda: watcher.output)
    # While the models load or the files are parsed. A stop during the load is obeyed at the next safe point, once
    # both models are loaded: beyond 30 s twice under the full parallel suite on 2 cores (alone: a few seconds).
    assert watcher.stop(signal.SIGTERM, timeout=120) == 0, watcher.output
    assert "stopped before this sync ended" in watcher.output
    assert len(_index(settings)) < 16  # consistent (nothing pending, the three stores agree), and cut short
    service.sync([docs], settings, embedder=embedder)  # the next run completes it
    assert len(converge(settings, docs, timeout=5)) == 16


def test_a_vanished_folder_stops_the_watcher_and_prunes_nothing(settings: Settings, docs: Path, tmp_path: Path,
                                                                cli_env: dict[str, str],
                                                                watching: Callable[[], Watching]) -> None:
    (docs / "alpha.md").write_text(_doc("alpha"))
    file_given = subprocess.run([str(BIN / "rag-ingest"), "--watch", str(docs / "alpha.md")], env=cli_env,
                                capture_output=True, text=True, timeout=60, check=False)
    assert file_given.returncode == 2 and "--watch takes folders" in file_given.stderr
    watcher = watching()
    watcher.wait_for("watching")
    converge(settings, docs)
    shutil.rmtree(docs)
    assert watcher.process.wait(timeout=30) == 2, watcher.output
    assert f"the watched folder {docs} is gone" in watcher.output
    assert set(_index(settings)) == {"alpha.md"}
    with library(App(settings)).manifest() as manifest:  # a plain run over the vanished folder prunes nothing either
        assert plan_sync([docs], manifest, 1 << 20).deletions == []


def test_only_changes_that_can_alter_the_index_count(tmp_path: Path) -> None:
    index_dir = tmp_path / "data" / "index"
    relevant = Relevant([tmp_path], index_dir)
    (tmp_path / "folder").mkdir()
    (tmp_path / "a.md").write_text("x")
    (tmp_path / "a.png").write_bytes(b"x")
    assert relevant(Change.added, str(tmp_path / "a.md"))
    assert relevant(Change.modified, str(tmp_path / "a.md.meta.yaml"))
    assert relevant(Change.added, str(tmp_path / "folder"))
    assert relevant(Change.deleted, str(tmp_path / "gone-folder"))  # a folder or a document: a sync tells
    assert not relevant(Change.added, str(tmp_path / "a.png"))
    assert not relevant(Change.added, str(tmp_path / ".upload-1a2b-a.md"))
    assert not relevant(Change.deleted, str(tmp_path / "sub" / ".hidden" / "b.md"))
    assert not relevant(Change.modified, str(tmp_path / "a.md.swp"))
    assert not relevant(Change.modified, str(index_dir / "manifest.sqlite3"))


def test_a_file_whose_error_looks_like_markup_does_not_stop_the_watcher(
        settings: Settings, docs: Path, watching: Callable[[], Watching]) -> None:
    """Its YAML error quotes the offending line, `[/x]` and all: printed as text, and the restriction that came in
    the same burst is applied."""
    (docs / "alpha.md").write_text(_doc("alpha"))
    watcher = watching()
    watcher.wait_for("watching")
    (docs / "bad.md").write_text('---\ntitle: "Leave" [/x] b"\n---\n# Leave\nStaff get 25 days.\n')
    (docs / "alpha.md.meta.yaml").write_text("groups: [hr]\n")
    watcher.wait_for("failed bad.md: invalid YAML front matter")
    _until(lambda: _label(settings, "alpha.md") is not None and "hr" in str(_label(settings, "alpha.md")), 30,
           lambda: f"alpha.md is still {_label(settings, 'alpha.md')}:\n{watcher.output}")
    assert '[/x] b"' in watcher.output and "MarkupError" not in watcher.output
    assert watcher.process.poll() is None
    assert watcher.stop(signal.SIGTERM) == 0, watcher.output


def _inotify_watches(pid: int) -> int:
    """How many inotify watches a process holds (its inotify descriptors' fdinfo lists one line per watch)."""
    total = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            if "inotify" in os.readlink(fd):
                total += Path(f"/proc/{pid}/fdinfo/{fd.name}").read_text().count("inotify wd:")
    return total


def test_a_link_out_of_the_folder_is_not_watched(settings: Settings, docs: Path, tmp_path: Path,
                                                 watching: Callable[[], Watching]) -> None:
    """A symbolic link to a large tree outside the folder: neither synced (the scan refuses it) nor watched."""
    outside = tmp_path / "outside"
    for n in range(300):
        (outside / f"d{n}").mkdir(parents=True)
    (docs / "alpha.md").write_text(_doc("alpha"))
    (docs / "team").mkdir()
    (docs / "team" / "elsewhere").symlink_to(outside, target_is_directory=True)
    watcher = watching()
    watcher.wait_for("watching")
    assert _inotify_watches(watcher.process.pid) < 20
    (docs / "team" / "beta.md").write_text(_doc("beta"))  # a folder inside is still watched
    (docs / "new").mkdir()
    (docs / "new" / "gamma.md").write_text(_doc("gamma"))  # and so is one made while watching
    assert set(converge(settings, docs)) == {"alpha.md", "team/beta.md", "new/gamma.md"}
    assert watcher.stop(signal.SIGTERM) == 0, watcher.output
