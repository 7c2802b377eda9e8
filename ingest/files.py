"""File moves in the documents folder that uploads and deletes make, each step atomic (rename or link) so that a
crash at any point leaves either the old file or the new one under the document's name, plus hidden leftovers
(`.staging-*`, `.upload-*`, `.backup-*`, `.deleting-*`) that the next locked change settles. Syncs never read
hidden files."""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ingest.scan import file_hash
from rag.core.errors import ReadOnlyFolder

UPLOAD, BACKUP, DELETING, STAGING = ".upload-", ".backup-", ".deleting-", ".staging-"
# An upload file is created under STAGING, locked, then renamed to UPLOAD: between creation and lock no lock says
# it is live (ten concurrent uploads of one name lost one to a clean-up there). A STAGING file only outlives that
# instant when its process died in it; one older than this is such a leftover.
STAGING_LEFTOVER_S = 60.0


def _hidden(prefix: str, target: Path) -> Path:
    """A unique hidden name beside the target that still says whose it is."""
    return target.with_name(f"{prefix}{secrets.token_hex(6)}-{target.name}")


def target_of(leftover: Path) -> Path:
    """The document a `.backup-<token>-NAME` or `.deleting-<token>-NAME` belongs to."""
    return leftover.with_name(leftover.name.split("-", 2)[2])


@dataclass(slots=True)
class Swap:
    """An upload moved into place over (or beside) its target, with a way back until it is committed."""

    target: Path
    backup: Path | None = None

    def restore(self) -> None:
        """Put the previous file back (or remove the new one when there was none)."""
        if self.backup is not None:
            os.replace(self.backup, self.target)
            self.backup = None
        else:
            self.target.unlink(missing_ok=True)

    def commit(self) -> None:
        """Keep the new file; drop the backup."""
        if self.backup is not None:
            self.backup.unlink(missing_ok=True)
            self.backup = None


def swap_in(staged: Path, target: Path) -> Swap:
    """Move a staged upload to its target name; the previous file stays reachable as a hidden backup (a hard link,
    so the target name is never empty: it is the old file until the rename makes it the new one)."""
    swap = Swap(target)
    if target.exists():
        swap.backup = _hidden(BACKUP, target)
        try:
            os.link(target, swap.backup)
        except OSError:  # a file system without hard links: a copy keeps the old bytes as well
            shutil.copy2(target, swap.backup)
    os.replace(staged, target)
    return swap


def write_atomically(path: Path, data: bytes) -> None:
    """Write a small file (an upload's sidecar) under a hidden name, then rename it into place."""
    staged = _hidden(UPLOAD, path)
    try:
        staged.write_bytes(data)
        os.replace(staged, path)
    finally:
        staged.unlink(missing_ok=True)


def move_aside(path: Path) -> Path:
    """Rename a document's file to a hidden name (a sync no longer sees it) before its chunks are deleted; a
    clear error, with nothing changed, when the folder is read-only."""
    aside = _hidden(DELETING, path)
    try:
        os.replace(path, aside)
    except FileNotFoundError:
        return aside
    except OSError as exc:
        raise ReadOnlyFolder(f"cannot remove {path.name} from the documents folder ({exc.strerror}); the document "
                              "stays in the index, unchanged") from exc
    return aside


@contextmanager
def swapped_in(staged: Path, target: Path) -> Iterator[Swap]:
    """A staged upload in place of its target for the block: kept when the block ends, the previous file put back
    (or the new one removed) when it raises."""
    swap = swap_in(staged, target)
    try:
        yield swap
    except BaseException:
        swap.restore()
        raise
    swap.commit()


def staged_file(folder: Path) -> tuple[int, Path]:
    """A new hidden upload file, locked by this process while it is written, so that a clean-up can tell a live
    upload from one a crash left behind."""
    descriptor, name = tempfile.mkstemp(prefix=STAGING, dir=folder)
    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    staged = Path(name).with_name(UPLOAD + Path(name).name.removeprefix(STAGING))
    os.rename(name, staged)  # the lock belongs to the open file: it holds under the new name
    return descriptor, staged


def clean_leftovers(folder: Path, committed: dict[str, str]) -> list[str]:
    """Settle what crashed uploads and deletes left (call with the ingest lock held): a backup is restored when the
    index does not record the file now under its name (`committed`: name → content hash of its manifest entry),
    else dropped; files moved aside for a delete and uploads no live process writes are removed."""
    if not folder.is_dir():
        return []
    settled = []
    for path in sorted(folder.iterdir()):
        if path.name.startswith(BACKUP) and path.name.count("-") >= 2:
            _settle_backup(path, committed)
        elif path.name.startswith(DELETING) or (path.name.startswith(STAGING) and _older(path, STAGING_LEFTOVER_S)):
            path.unlink(missing_ok=True)
        elif not (path.name.startswith(UPLOAD) and _abandoned(path)):
            continue
        else:
            path.unlink(missing_ok=True)
        settled.append(path.name)
    return settled


def _settle_backup(backup: Path, committed: dict[str, str]) -> None:
    target = target_of(backup)
    if target.exists() and committed.get(target.name) == file_hash(target):
        backup.unlink()  # the upload was ingested; only the backup's removal was left
    else:
        os.replace(backup, target)  # the upload never completed: the previous version comes back


def _older(path: Path, seconds: float) -> bool:
    try:
        return time.time() - path.stat().st_mtime > seconds
    except FileNotFoundError:
        return False


def _abandoned(path: Path) -> bool:
    """Whether no process holds the upload's lock (its writer ended without removing it)."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        with contextlib.suppress(OSError):
            os.close(descriptor)
