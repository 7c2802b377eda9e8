"""Document use cases for a principal: what they may list, and the admin-only changes (upload, delete, sync) and
feedback listing. Everything a principal may not see is answered as if it did not exist."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ingest import service
from ingest.manifest import Entry
from ingest.pipeline import Report
from rag.access import Principal
from rag.errors import Conflict, Forbidden, InvalidDocument, NotFound
from rag.feedback import Feedback
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
    return [entry for entry in service.list_documents(services.settings)
            if policy.label_allows(principal, entry.access)]


def delete_document(services: Services, principal: Principal, doc_id: str) -> Entry:
    """Remove a visible document from the index, and its file when it lives in the documents folder."""
    require_admin(principal, "deleting documents")
    if not any(entry.doc_id == doc_id for entry in visible_documents(services, principal)):
        raise NotFound(f"no document with id {doc_id!r}")
    entry = service.delete_document(doc_id, services.settings, services.store)
    if entry is None:
        raise NotFound(f"no document with id {doc_id!r}")
    path = Path(entry.root) / entry.source
    if path.resolve().parent.is_relative_to(services.settings.documents_dir.resolve()):
        path.unlink(missing_ok=True)
    return entry


def sync_folder(services: Services, principal: Principal) -> Report:
    """Re-sync the documents folder: add new files, replace changed ones, relabel regrouped ones, remove gone."""
    require_admin(principal, "syncing the documents folder")
    folder = services.settings.documents_dir
    folder.mkdir(parents=True, exist_ok=True)
    return service.sync([folder], services.settings, embedder=services.embedder, store=services.store)[1]


def check_upload(services: Services, principal: Principal, target: Path, replace: bool) -> None:
    """Before any byte is stored: admins only, and an existing document is replaced only when asked to."""
    require_admin(principal, "uploading documents")
    existing = _entry_at(services, target)
    if existing is None:
        return
    if not services.settings.access_policy.label_allows(principal, existing.access):
        raise Forbidden(f"{target.name} exists and belongs to groups you are not in")
    if not replace:
        raise Conflict(f"{target.name} already exists; upload with replace=true to replace it")


def ingest_upload(services: Services, principal: Principal, staged: Path, target: Path, replace: bool) -> Uploaded:
    """Move a staged upload into the documents folder and ingest it; a failed ingest keeps what was there."""
    check_upload(services, principal, target, replace)  # again: another upload may have landed meanwhile
    backup = target.with_name(f".backup-{target.name}")
    if target.exists():
        os.replace(target, backup)
    os.replace(staged, target)
    _, report = service.sync([target], services.settings, prune=False, embedder=services.embedder,
                             store=services.store)
    if report.failed:
        if backup.exists():
            os.replace(backup, target)  # the previous version stays, as its chunks did
        else:
            target.unlink()
        raise InvalidDocument(f"{target.name}: {next(iter(report.failed.values()))}")
    backup.unlink(missing_ok=True)
    entry = _entry_at(services, target)
    assert entry is not None, "a successful sync records the file"
    status = "unchanged" if report.unchanged else "updated" if report.updated or report.regrouped else "added"
    return Uploaded(entry, status)


def _entry_at(services: Services, target: Path) -> Entry | None:
    return next((entry for entry in service.list_documents(services.settings)
                 if Path(entry.root) / entry.source == target), None)


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
