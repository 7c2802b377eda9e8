"""Incremental sync against the real MiniLM, on embedded Chroma and on a real Chroma server (the same contract)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ingest import service
from ingest.pipeline import Report
from rag.components.store import ChromaStore
from rag.config import Settings
from rag.core.access import LOCAL_OPERATOR
from rag.core.retrieve import Retriever
from rag.wiring import App, build_store
from tests.conftest import STORE_MODES, CountingEmbedder
from tests.docs_factory import pdf_bytes

pytestmark = STORE_MODES

Write = Callable[[str, str | bytes], Path]


def _sync(docs: Path, settings: Settings, embedder: CountingEmbedder, prune: bool = True) -> Report:
    return service.sync([docs], settings, prune=prune, embedder=embedder)[1]


def _sources(store: ChromaStore) -> dict[str, int]:
    metas = store.dense._collection.get(include=["metadatas"])["metadatas"] or []
    counts: dict[str, int] = {}
    for meta in metas:
        counts[str(meta["source"])] = counts.get(str(meta["source"]), 0) + 1
    return counts


def test_add_change_delete_cycle(docs: Path, write: Write, settings: Settings, embedder: CountingEmbedder) -> None:
    write("handbook/leave.md", "# Leave\nStaff get 25 days of annual leave.\n")
    write("it/vpn.txt", "Connect to the VPN with the WireGuard client before using the intranet.")
    write("scan.pdf", pdf_bytes(["Page one about printers.", "Page two about toner cartridges."]))

    first = _sync(docs, settings, embedder)
    assert (first.added, first.updated, first.unchanged, first.deleted, first.failed) == (3, 0, 0, 0, {})
    store = build_store(settings)
    assert first.chunks == store.count() == 4
    assert _sources(store) == {"handbook/leave.md": 1, "it/vpn.txt": 1, "scan.pdf": 2}

    embedded = embedder.embedded
    again = _sync(docs, settings, embedder)
    assert (again.added, again.updated, again.unchanged, again.deleted) == (0, 0, 3, 0)
    assert embedder.embedded == embedded, "unchanged files must not be re-embedded"

    write("handbook/leave.md", "# Leave\nStaff get 30 days of annual leave.\n## Sick leave\nCall your manager.\n")
    (docs / "it" / "vpn.txt").unlink()
    changed = _sync(docs, settings, embedder)
    assert (changed.added, changed.updated, changed.unchanged, changed.deleted) == (0, 1, 1, 1)
    assert _sources(store) == {"handbook/leave.md": 2, "scan.pdf": 2}
    texts = store.dense._collection.get(where={"source": "handbook/leave.md"})["documents"] or []
    assert any("30 days" in t for t in texts) and not any("25 days" in t for t in texts)


def test_touch_without_change_is_unchanged(docs: Path, write: Write, settings: Settings,
                                           embedder: CountingEmbedder) -> None:
    path = write("a.txt", "Alpha text.")
    _sync(docs, settings, embedder)
    os.utime(path, ns=(1, 1))  # new mtime, same bytes: hashed again, found equal
    report = _sync(docs, settings, embedder)
    assert (report.unchanged, report.updated) == (1, 0)


def test_no_prune_keeps_documents_of_missing_files(docs: Path, write: Write, settings: Settings,
                                                   embedder: CountingEmbedder) -> None:
    write("a.txt", "Alpha text.")
    write("b.txt", "Beta text.")
    _sync(docs, settings, embedder)
    (docs / "b.txt").unlink()
    kept = _sync(docs, settings, embedder, prune=False)
    assert (kept.deleted, kept.chunks) == (0, 2)
    pruned = _sync(docs, settings, embedder)
    assert (pruned.deleted, pruned.chunks) == (1, 1)


def test_dry_run_plans_and_changes_nothing(docs: Path, write: Write, settings: Settings,
                                           embedder: CountingEmbedder) -> None:
    write("keep.txt", "Keep me.")
    write("old.txt", "Old.")
    _sync(docs, settings, embedder)
    write("keep.txt", "Keep me, edited.")
    write("new.md", "# New\nBrand new.")
    write("image.png", b"\x89PNG")
    (docs / "old.txt").unlink()
    before = build_store(settings).all_ids()
    plan = service.library(App(settings)).dry_run([docs])
    assert [(t.action, t.found.source) for t in plan.tasks] == [("update", "keep.txt"), ("add", "new.md")]
    assert [e.source for e in plan.deletions] == ["old.txt"]
    assert plan.skipped == ["image.png"]
    assert build_store(settings).all_ids() == before


def test_access_groups_from_sidecar_and_front_matter(docs: Path, write: Write, settings: Settings,
                                                     embedder: CountingEmbedder) -> None:
    write("salaries.txt", "Salary bands are reviewed in March.")
    write("salaries.txt.meta.yaml", "groups: [hr, finance]\n")
    write("board.md", "---\ngroups: board\n---\n# Minutes\nApproved.")
    report = _sync(docs, settings, embedder)
    assert (report.added, report.skipped) == (2, 0)
    metas = {m["source"]: m["groups"] for m in build_store(settings).dense._collection.get()["metadatas"] or []}
    assert metas == {"salaries.txt": "|finance|hr|", "board.md": "|board|"}
    write("salaries.txt.meta.yaml", "groups: [hr]\n")
    embedded = embedder.embedded
    report = _sync(docs, settings, embedder)
    assert (report.regrouped, report.updated, embedder.embedded) == (1, 0, embedded)  # relabelled, not re-embedded


def test_search_finds_the_right_document_and_page(docs: Path, write: Write, settings: Settings,
                                                  embedder: CountingEmbedder) -> None:
    pages = ["Printer setup overview.", "To replace the toner cartridge, open the front door."]
    write("printers.pdf", pdf_bytes(pages))
    write("vpn.md", "# VPN\nInstall WireGuard and import the company profile.")
    _sync(docs, settings, embedder)
    hits = Retriever(embedder, build_store(settings)).search("How do I change the toner?", 2, LOCAL_OPERATOR)
    assert (hits[0].source, hits[0].page) == ("printers.pdf", 2)
    assert hits[0].score > hits[1].score


def test_a_file_named_alone_is_hashed_even_with_the_recorded_size_and_mtime(docs: Path, write: Write,
                                                                            settings: Settings,
                                                                            embedder: CountingEmbedder) -> None:
    """An upload swapped into place can have the size and mtime of the version it replaced (staged in the same clock
    tick: ten concurrent uploads of one name did): a file named alone is hashed, not trusted by its stat."""
    old = write("hours.md", "# Hours\nThe office opens at 8 o'clock.\n")
    _sync(docs, settings, embedder)
    stat = old.stat()
    staged = docs / ".upload-new"
    staged.write_text("# Hours\nThe office opens at 9 o'clock.\n")
    os.utime(staged, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    staged.replace(old)
    assert old.stat().st_size == stat.st_size and old.stat().st_mtime_ns == stat.st_mtime_ns
    library = service.library(App(settings))
    assert [task.found.source for task in library.dry_run([old]).tasks] == ["hours.md"]
    assert library.dry_run([docs]).tasks == []  # a folder's scan still trusts size and mtime (as rsync does)
