"""rag-ingest --watch: keep the index in sync with folders as files change. A loop around the same sync as a plain
run (same plan, manifest, lock, journal and bad-input rules): one sync once a burst of changes has settled."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType

from rich.console import Console
from watchfiles import Change, watch
from watchfiles.main import FileChange

from ingest.parse import SIDECAR_SUFFIX, is_supported
from ingest.pipeline import NoProgress, Plan, Progress, Report
from ingest.scan import is_temporary
from ingest.service import library
from ingest.terminal import plain
from rag.core.errors import IngestBusy, RagError
from rag.wiring import App

LOCK_POLL_S = 1.0  # how long one try for the ingest lock lasts; a short hold (an API upload) passes unannounced
LISTED = 20  # files named per kind of change after a sync
MAX_WAIT_FACTOR = 30  # changes that never settle are synced anyway after this many quiet periods


class FolderGone(RagError):
    """A watched folder was deleted, moved away or unmounted."""


class Stopped(Exception):
    """SIGTERM or SIGINT arrived: the watcher ends at the next safe point."""


class Relevant:
    """watchfiles filter: the changes that can alter the index (documents, sidecars, folders), not hidden files,
    editors' temporary files, files of unsupported types, or the index's own files."""

    def __init__(self, roots: Sequence[Path], index_dir: Path) -> None:
        self._roots = [root.resolve() for root in roots]
        self._index_dir = index_dir.resolve()

    def __call__(self, change: Change, name: str) -> bool:
        path = Path(name)
        if path.is_relative_to(self._index_dir):
            return False
        root = next((root for root in self._roots if path.is_relative_to(root)), None)
        parts = path.relative_to(root).parts if root else (path.name,)
        if any(part.startswith(".") for part in parts) or is_temporary(path.name):
            return False
        if change == Change.deleted:  # a folder or a document: nothing left to tell which
            return True
        return path.is_dir() or is_supported(path) or path.name.endswith(SIDECAR_SUFFIX)


def watched_folders(roots: Sequence[Path]) -> list[Path]:
    """Every folder a sync of the roots reads, each once: not hidden ones, and none reached through a symbolic
    link that leads out of its root (a link to /usr would cost thousands of inotify watches for nothing)."""
    folders: dict[str, Path] = {}
    for root in roots:
        real_root = root.resolve()
        for current, dirs, _ in os.walk(real_root, followlinks=True):
            real = os.path.realpath(current)
            if real in folders or not Path(real).is_relative_to(real_root):
                dirs.clear()
                continue
            folders[real] = Path(real)
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
    return sorted(folders.values())


def _nothing() -> None:
    """The ready callback once it has been called."""


class _StopCheck(NoProgress):
    """Ends a sync between two documents once a stop is asked (run_sync calls chunks_added on its own thread,
    before a batch is embedded; batches already queued are stored and recorded whole)."""

    def __init__(self, stop: threading.Event) -> None:
        self._stop = stop

    def chunks_added(self, n: int) -> None:
        if self._stop.is_set():
            raise Stopped


class Watcher:
    """Syncs `paths` now and again after every settled burst of changes until stopped."""

    def __init__(self, paths: Sequence[Path], app: App, console: Console, *, prune: bool = True) -> None:
        self.paths, self.app, self.console, self.prune = list(paths), app, console, prune
        self.settings, self.library = app.settings, library(app)
        self.stop = threading.Event()
        self.what = " ".join(["rag-ingest --watch", *map(str, paths)])
        self._failed: dict[str, str] = {}
        self._chunks: int | None = None
        self._on_ready: Callable[[], None] = _nothing

    @contextlib.contextmanager
    def signals(self) -> Iterator[None]:
        """SIGTERM (compose stop) and SIGINT (Ctrl-C) ask for a stop instead of killing the process mid-write."""
        def ask(signum: int, _: FrameType | None) -> None:
            if not self.stop.is_set():
                self.console.print(f"{signal.Signals(signum).name}: stopping at the next safe point", style="dim")
            self.stop.set()

        previous = {signum: signal.signal(signum, ask) for signum in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def sync(self, progress: Progress | None = None) -> tuple[Plan, Report]:
        """One sync of every path under the ingest lock, waiting for the lock as long as it takes; raises Stopped
        or FolderGone."""
        self._check_folders()
        with self._lock():
            self._check_folders()  # the scan of a vanished root would find nothing; it must not sync that
            progress = _Both(progress, _StopCheck(self.stop)) if progress else _StopCheck(self.stop)
            plan, report = self.library.sync(self.paths, prune=self.prune, progress=progress, locked=True)
        self._failed = dict(report.failed)
        self._chunks = report.chunks
        return plan, report

    def run(self, on_ready: Callable[[], None] = lambda: None) -> None:
        """Watch until stopped: one sync after each burst of changes, once the folders were quiet for
        RAG_WATCH_DEBOUNCE_MS; calls `on_ready` once the first watches are live; raises FolderGone when a folder
        disappears."""
        # A file saved after the first sync's scan but before the watches were set up raises no event: one more
        # sync once they are live catches it (a sync that finds nothing changed prints nothing).
        pending: set[FileChange] = {(Change.modified, str(self.paths[0]))}
        self._on_ready = on_ready
        while not self.stop.is_set():
            folders = watched_folders(self.paths)
            pending = self._watch(folders, pending)

    def _watch(self, folders: list[Path], pending: set[FileChange]) -> set[FileChange]:
        """Watch these folders (each on its own, never through a link out of the roots) and sync after bursts,
        until stopped or a sync finds the folders changed; returns what is still to sync then (a new folder's
        files may have come before its watch: the next round syncs once more)."""
        quiet = self.settings.watch_debounce_ms / 1000
        first = last = time.monotonic()
        changes_of = watch(*folders, watch_filter=Relevant(self.paths, self.settings.index_dir),
                           debounce=self.settings.watch_debounce_ms, step=50, stop_event=self.stop,
                           rust_timeout=max(50, self.settings.watch_debounce_ms // 4), yield_on_timeout=True,
                           raise_interrupt=False, recursive=False)
        for changes in changes_of:
            self._on_ready()  # watchfiles sets its watches up before its first yield
            self._on_ready = _nothing
            self._check_folders()
            now = time.monotonic()
            if changes:
                first, last = (first if pending else now), now
                pending |= changes
                if now - first < quiet * MAX_WAIT_FACTOR:
                    continue
            elif not pending or now - last < quiet:
                continue
            started = time.perf_counter()
            before, failed_before = self._chunks, self._failed
            plan, report = self.sync()
            self._print(plan, report, before, failed_before, time.perf_counter() - started)
            pending = set()
            if watched_folders(self.paths) != folders:
                return {(Change.added, str(self.paths[0]))}  # sync again once the new folders are watched
        return pending

    def _print(self, plan: Plan, report: Report, before: int | None, failed_before: dict[str, str],
               seconds: float) -> None:
        """What one sync changed, one line each, and a summary; nothing when nothing changed."""
        failed = {source: error for source, error in report.failed.items() if failed_before.get(source) != error}
        stored = [task for task in plan.tasks if task.found.source not in report.failed]
        lines = _listed("[green]+[/green]", [task.found.source for task in stored if task.action == "add"])
        lines += _listed("[cyan]~[/cyan]", [task.found.source for task in stored if task.action == "update"])
        lines += _listed("[cyan]=[/cyan]", [task.found.source for task in plan.regroups] if report.regrouped else [])
        lines += _listed("[red]-[/red]", [entry.source for entry in plan.deletions])
        lines += [f"[red]failed[/red] {plain(source)}: {plain(error)}" for source, error in sorted(failed.items())]
        if not lines and not report.regrouped:
            return
        for line in lines:
            self.console.print(line, highlight=False, soft_wrap=True)
        delta = report.chunks - (before or 0)
        self.console.print(
            f"synced: {report.added} added, {report.updated} updated, {report.regrouped} relabelled, "
            f"{report.deleted} deleted, {len(report.failed)} failed; {report.chunks} chunks ({delta:+d}) "
            f"in {seconds:.1f} s", highlight=False, soft_wrap=True)

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        """The ingest lock, however long another ingest holds it (said once); Stopped if a stop comes first."""
        told = False
        while True:
            with contextlib.ExitStack() as held:
                try:
                    held.enter_context(self.library.lock(self.what, deadline=time.monotonic() + LOCK_POLL_S))
                except IngestBusy as busy:
                    if self.stop.is_set():
                        raise Stopped from None
                    if not told:
                        self.console.print(f"[yellow]waiting[/yellow]: {plain(busy.args[0].split('; ')[0])}; syncing "
                                           "when it ends", highlight=False, soft_wrap=True)
                        told = True
                    continue
                if told:
                    self.console.print("the other ingest ended: syncing", highlight=False)
                yield
                return

    def _check_folders(self) -> None:
        for path in self.paths:
            if not path.is_dir():
                raise FolderGone(f"the watched folder {path} is gone (deleted, moved or unmounted); stopped "
                                 "watching, and nothing was removed from the index")


def _listed(mark: str, sources: list[str]) -> list[str]:
    """One line per file, the first LISTED of them (a large copy is not a page of names)."""
    more = [f"{mark} … and {len(sources) - LISTED} more"] if len(sources) > LISTED else []
    return [f"{mark} {plain(source)}" for source in sources[:LISTED]] + more


class _Both(NoProgress):
    """Progress to two receivers: the bars and the stop check."""

    def __init__(self, first: Progress, second: Progress) -> None:
        self._pair = (first, second)

    def files_total(self, n: int) -> None:
        for each in self._pair:
            each.files_total(n)

    def file_done(self, source: str, error: str | None) -> None:
        for each in self._pair:
            each.file_done(source, error)

    def chunks_added(self, n: int) -> None:
        for each in self._pair:
            each.chunks_added(n)

    def chunks_written(self, n: int) -> None:
        for each in self._pair:
            each.chunks_written(n)
