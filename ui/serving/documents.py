"""Document use cases for a principal: what they may list, and the admin-only changes (upload, delete, sync) and
feedback listing. Everything a principal may not see is answered as if it did not exist."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ingest import files
from ingest.loaders import LoadError, decode_text, front_matter
from ingest.manifest import Entry
from ingest.parse import has_front_matter, sidecar_access, sidecar_of
from ingest.pipeline import Report
from rag.components.feedback import Feedback
from rag.core.access import DocAccess, Principal, document_access
from rag.core.errors import Conflict, Forbidden, InvalidDocument, NotFound
from ui.serving.services import Services

FEEDBACK_SCAN = 10_000  # ratings read to find the newest visible ones (feedback tables stay small)


@dataclass(frozen=True, slots=True)
class Uploaded:
    """A stored upload: its manifest entry and what happened (added, updated or unchanged)."""

    entry: Entry
    status: str


def require_admin(principal: Principal, action: str) -> None:
    """Forbidden unless the principal is an admin."""
    if not principal.is_admin:
        raise Forbidden(f"{action} needs an admin key or account (role admin)")


def visible_documents(services: Services, principal: Principal) -> list[Entry]:
    """The ingested documents the principal may see, by source."""
    policy = services.settings.access_policy
    return [entry for entry in services.library.documents() if policy.label_allows(principal, entry.access)]


def delete_document(services: Services, principal: Principal, doc_id: str, deadline: float | None = None) -> Entry:
    """Remove a visible document from the index, and its file when it lives in the documents folder: the file is
    moved aside first (a sync no longer sees it), then the chunks go, then the record, as one locked change."""
    require_admin(principal, "deleting documents")
    if not any(entry.doc_id == doc_id for entry in visible_documents(services, principal)):
        raise NotFound(f"no document with id {doc_id!r}")
    # What holds the lock is shown to whoever waits for it: no document names (another admin's may be hidden).
    with services.library.change("a delete (API)", deadline):
        entry = services.library.find(doc_id)
        if entry is None:  # deleted by another request meanwhile
            raise NotFound(f"no document with id {doc_id!r}")
        aside = _move_aside(services, entry)
        services.library.delete(doc_id, locked=True)
        if aside is not None:
            aside.unlink(missing_ok=True)
    return entry


def _move_aside(services: Services, entry: Entry) -> Path | None:
    path = Path(entry.root) / entry.source
    return files.move_aside(path) if path.parent.resolve() == services.library.documents_dir.resolve() else None


def sync_folder(services: Services, principal: Principal, deadline: float | None = None) -> Report:
    """Re-sync the documents folder: add new files, replace changed ones, relabel regrouped ones, remove gone."""
    require_admin(principal, "syncing the documents folder")
    folder = services.library.documents_dir
    folder.mkdir(parents=True, exist_ok=True)
    with services.library.change("sync of the documents folder (API)", deadline):
        return services.library.sync([folder], locked=True)[1]


def check_upload(services: Services, principal: Principal, target: Path, replace: bool) -> None:
    """Before any byte is stored: admins only, and an existing document is replaced only when asked to. A document
    the admin may not see gets the answer a visible one gets without `replace`, so that no answer tells which
    names exist outside the admin's groups."""
    require_admin(principal, "uploading documents")
    existing = _entry_at(services, target)
    if existing is None:
        return
    if not replace or not services.settings.access_policy.label_allows(principal, existing.access):
        raise Conflict(f"{target.name} already exists; upload with replace=true to replace it")


def upload_folder(services: Services, principal: Principal) -> Path:
    """Where the principal's uploads go: the documents folder for an admin of every group, else a folder of its
    own groups (`hr`, `finance+hr`), so that admins of different groups never share a file name."""
    folder = services.library.documents_dir.resolve()
    if principal.all_groups:
        return folder
    if not principal.groups:
        raise Forbidden("uploading documents needs an admin with groups (or `*`): what an admin without groups "
                        "added would be open to every reader")
    return folder / "+".join(sorted(principal.groups))


def ingest_upload(services: Services, principal: Principal, staged: Path, target: Path, replace: bool,
                  deadline: float | None = None, channel: str = "API") -> Uploaded:
    """Move a staged upload into the documents folder and ingest it, as one locked change; a failed ingest puts
    back what was there (a crash midway is settled by the next change: see ingest.files)."""
    with services.library.change(f"an upload ({channel})", deadline):
        check_upload(services, principal, target, replace)  # again, under the lock: no other upload lands now
        labelled = _label_for_scope(principal, staged, target)
        # A failed ingest raises inside: the previous version is put back (as its chunks stayed), then the sidecar
        # this upload was given removed.
        with _removed_on_error(labelled), files.swapped_in(staged, target):
            _, report = services.library.sync([target], prune=False, locked=True,
                                              within=services.library.documents_dir)
            if report.failed:
                raise InvalidDocument(f"{target.name}: {next(iter(report.failed.values()))}")
    entry = _entry_at(services, target)
    assert entry is not None, "a successful sync records the file"
    status = "unchanged" if report.unchanged else "updated" if report.updated or report.regrouped else "added"
    return Uploaded(entry, status)


def _label_for_scope(principal: Principal, staged: Path, target: Path) -> Path | None:
    """An admin of some groups labels documents with those groups only: an upload labelled with others is refused,
    and one without groups (open to every reader) gets the admin's, in a sidecar beside it (returned, so that a
    failed ingest removes it)."""
    if principal.all_groups:
        return None
    sidecar = sidecar_of(target)
    declared = _declared_access(staged, target, sidecar)
    if declared.locked:
        raise InvalidDocument(f"{target.name}: its access groups cannot be read")
    outside = sorted(set(declared.groups) - principal.groups)
    if outside:
        raise Forbidden(f"{target.name} is labelled with groups you are not in ({', '.join(outside)}); an admin "
                        f"of {', '.join(sorted(principal.groups))} labels documents with those groups only")
    if declared.groups:
        return None
    files.write_atomically(sidecar, f"groups: [{', '.join(sorted(principal.groups))}]\n".encode())
    return sidecar


def _declared_access(staged: Path, target: Path, sidecar: Path) -> DocAccess:
    """The groups an upload declares: a sidecar already beside its target, else its Markdown front matter."""
    with contextlib.suppress(FileNotFoundError):
        declared = sidecar_access(sidecar.read_bytes())
        if declared is not None:
            return declared
    if not has_front_matter(target):
        return DocAccess()
    try:
        meta, _ = front_matter(decode_text(staged.read_bytes()))
    except LoadError:
        return DocAccess(locked=True)
    return document_access(meta.get("groups"))


@contextlib.contextmanager
def _removed_on_error(labelled: Path | None) -> Iterator[None]:
    """The sidecar an upload was given (if any) removed when the block raises."""
    try:
        yield
    except BaseException:
        if labelled is not None:
            labelled.unlink(missing_ok=True)
        raise



def _entry_at(services: Services, target: Path) -> Entry | None:
    return services.library.entry_at(target)


def recent_feedback(services: Services, principal: Principal, limit: int) -> list[Feedback]:
    """The newest ratings whose cited documents the admin may all see (a rating of an HR answer stays in HR)."""
    require_admin(principal, "reading feedback")
    visible = visible_documents(services, principal)
    doc_ids, sources = {entry.doc_id for entry in visible}, {entry.source for entry in visible}
    ratings = services.feedback.recent(limit if principal.all_groups else FEEDBACK_SCAN)
    return [rating for rating in ratings if principal.all_groups
            or all(_source_visible(source, doc_ids, sources) for source in rating.sources)][:limit]


def _source_visible(source: dict[str, object], doc_ids: set[str], sources: set[str]) -> bool:
    doc_id = source.get("doc_id")
    return str(doc_id) in doc_ids if doc_id else str(source.get("source")) in sources
