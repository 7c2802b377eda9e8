"""Reading a file under an ingest root without following a link placed there after the scan.

The scan follows symlinks only when they resolve inside the root, but a worker opens the file later. Between the
two, a file (or a directory above it) may be swapped for a link to `/etc/…` or `.env`. So every read after the
scan resolves the path again, refuses a target outside the root, then opens the resolved path one component at a
time with `O_NOFOLLOW` (a link swapped in meanwhile fails to open) and, for documents, checks that the opened file
is the one the scan found (same device and inode). Hash, front matter and parse all read through here.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

BLOCK = 1 << 20
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO swapped in must not hang the sync in open(); it fails the regular-file check instead.
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UnsafeFile(OSError):
    """The file is not (any more) a regular file inside the root, or not the one the scan found."""


Identity = tuple[int, int]  # (st_dev, st_ino)


@contextmanager
def open_inside(root: Path, path: Path, expected: Identity | None = None) -> Iterator[BinaryIO]:
    """The file at path, opened for reading only if it resolves inside root, no component of the resolved path is
    a link at open time, it is a regular file and (given `expected`) it is the file the scan found."""
    real = Path(os.path.realpath(path))
    if not real.is_relative_to(root) or real == root:
        raise UnsafeFile(errno.EPERM, f"now resolves to {real}, outside {root} (changed after the scan?)")
    handle = os.fdopen(_open_components(root, real.relative_to(root).parts), "rb")
    with handle:
        found = os.fstat(handle.fileno())
        if not stat.S_ISREG(found.st_mode):
            raise UnsafeFile(errno.EINVAL, "not a regular file")
        if expected is not None and (found.st_dev, found.st_ino) != expected:
            raise UnsafeFile(errno.ESTALE, "replaced by another file after the scan; read again on the next sync")
        os.set_blocking(handle.fileno(), True)
        yield handle


def _open_components(root: Path, parts: tuple[str, ...]) -> int:
    folder = os.open(root, _DIRECTORY)
    try:
        for part in parts[:-1]:
            inner = _open_step(part, _DIRECTORY, folder)
            os.close(folder)
            folder = inner
        return _open_step(parts[-1], _FILE, folder)
    finally:
        os.close(folder)


def _open_step(name: str, flags: int, folder: int) -> int:
    try:
        return os.open(name, flags, dir_fd=folder)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # what O_NOFOLLOW gives for a link swapped in
            raise UnsafeFile(exc.errno, f"{name!r} became a symlink (or a file) after the scan; not followed") from exc
        raise


def read_inside(root: Path, path: Path, expected: Identity | None = None) -> bytes:
    """All bytes of a file, read through `open_inside`."""
    with open_inside(root, path, expected) as handle:
        return handle.read()


def hash_inside(root: Path, path: Path, expected: Identity | None = None) -> str:
    """SHA-256 of a file's bytes read through `open_inside`, a MiB at a time."""
    digest = hashlib.sha256()
    with open_inside(root, path, expected) as handle:
        for block in iter(lambda: handle.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def read_optional(root: Path, path: Path) -> bytes | None:
    """A sidecar's bytes through `open_inside`, or None when there is none; one that exists but cannot be read
    safely (a link out, a broken link, a swap) raises, and its caller locks the document."""
    if not os.path.lexists(path):
        return None
    return read_inside(root, path)
