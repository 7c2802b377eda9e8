"""Walking the input paths: which files exist, their hashes, and which cannot be read (symlink loops…)."""

from __future__ import annotations

import errno
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from ingest.parse import is_supported, sidecar_of
from ingest.safe_read import Identity, hash_inside, read_optional

# Names that editors, office suites and downloads give files while they are being written: never documents.
TEMPORARY_SUFFIXES = (".swp", ".swo", ".swx", ".tmp", ".temp", ".part", ".partial", ".crdownload", ".download", "~")
TEMPORARY_PREFIXES = (".", "~$")  # hidden (our uploads, LibreOffice's `.~lock.*#`), Office's owner files


@dataclass(frozen=True, slots=True)
class FoundFile:
    """A supported file found under an ingest root."""

    path: Path
    root: Path
    source: str
    size: int
    mtime_ns: int
    identity: Identity  # device and inode of what the path resolved to: a later read must open this very file


@dataclass(slots=True)
class Scan:
    """Everything found under one root (or one file given on the command line)."""

    root: Path
    prune: bool
    files: list[FoundFile] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def scan_path(path: Path, within: Path | None = None) -> Scan:
    """Scan a directory recursively (or a single file: named relative to `within`, the folder that a sync of it
    would scan, else its own folder); a directory root allows pruning."""
    if path.is_file():
        root = (within or path.parent).resolve()
        if not path.resolve().is_relative_to(root):
            raise ValueError(f"{path} is not inside {root}")
        scan = Scan(root=root, prune=False)
        _add(scan, path.resolve(), root)
        return scan
    root = path.resolve()
    scan = Scan(root=root, prune=True)
    seen: set[str] = set()
    for current, dirs, files in os.walk(root, followlinks=True, onerror=lambda e: _walk_error(scan, root, e)):
        real = os.path.realpath(current)
        if real in seen:
            scan.failed[_rel(Path(current), root)] = f"symlink loop: directory resolves to {real}, already scanned"
            dirs.clear()
            continue
        seen.add(real)
        dirs[:] = [d for d in sorted(dirs) if not d.startswith(".") and _inside(scan, Path(current) / d, root)]
        for name in sorted(files):
            if not is_temporary(name) and _inside(scan, Path(current) / name, root):
                _add(scan, Path(current) / name, root)
    return scan


def is_temporary(name: str) -> bool:
    """Whether a file name is hidden or an editor's, office suite's or download's file in progress."""
    autosave = name.startswith("#") and name.endswith("#")  # Emacs
    return autosave or name.startswith(TEMPORARY_PREFIXES) or name.lower().endswith(TEMPORARY_SUFFIXES)


def _inside(scan: Scan, path: Path, root: Path) -> bool:
    """Whether the path (through any symlinks) stays inside the root; a link out of it is reported and skipped,
    so a link placed in a shared folder cannot pull in files from elsewhere on the server."""
    real = Path(os.path.realpath(path))
    if real.is_relative_to(root):
        return True
    scan.failed[_rel(path, root)] = f"skipped: a symlink to {real}, outside {root} (links are followed only " \
                                    "inside the folder being ingested)"
    return False


def _add(scan: Scan, path: Path, root: Path) -> None:
    source = _rel(path, root)
    if not is_supported(path):
        if not path.name.endswith(".meta.yaml"):
            scan.skipped.append(source)
        return
    try:
        stat = path.stat()
    except OSError as exc:
        reason = "symlink loop" if exc.errno == errno.ELOOP else "broken symlink" if path.is_symlink() else None
        scan.failed[source] = reason or f"cannot read: {exc.strerror}"
        return
    scan.files.append(FoundFile(path, root, source, stat.st_size, stat.st_mtime_ns, (stat.st_dev, stat.st_ino)))


def _walk_error(scan: Scan, root: Path, error: OSError) -> None:
    where = _rel(Path(error.filename), root) if error.filename else str(root)
    if not error.filename or Path(error.filename) == root:
        # The root itself cannot be listed (gone, unmounted, no permission): finding nothing in it must not
        # prune every document it held.
        scan.prune = False
    scan.failed[where] = f"cannot read directory: {error.strerror}"


def _rel(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def content_hash(found: FoundFile) -> str:
    """SHA-256 of the file (its sidecar is hashed apart: a change there relabels chunks, it does not re-embed)."""
    return hash_inside(found.root, found.path, found.identity)


def file_hash(path: Path) -> str:
    """SHA-256 of a file's bytes, read a MiB at a time."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# Not UTF-8, so no YAML reader accepts it: a sidecar that cannot be read safely locks its document.
LOCKING_SIDECAR = b"\xff unreadable sidecar"


def sidecar_bytes(found: FoundFile) -> bytes | None:
    """A document's metadata sidecar, None when it has none, LOCKING_SIDECAR when it cannot be read safely
    (a link out of the folder, a broken link, a swap during the sync)."""
    try:
        return read_optional(found.root, sidecar_of(found.path))
    except OSError:
        return LOCKING_SIDECAR


def sidecar_hash(found: FoundFile) -> str:
    """SHA-256 of a document's metadata sidecar, or "" when it has none."""
    data = sidecar_bytes(found)
    return hashlib.sha256(data).hexdigest() if data is not None else ""


def document_id(root: Path, source: str) -> str:
    """Stable id of a file: its ingest root and relative path."""
    return hashlib.sha256(f"{root.as_posix()}\0{source}".encode()).hexdigest()[:24]
