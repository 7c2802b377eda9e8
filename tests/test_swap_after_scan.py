"""A file or sidecar swapped for a link after the scan (between planning and parsing, driven deterministically by
a hook before the plan runs): nothing outside the folder is ingested, the real MiniLM and embedded Chroma."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ingest import runner, service
from ingest.pipeline import Plan, Report
from rag.config import Settings
from rag.core.access import DocAccess
from rag.wiring import build_store
from tests.conftest import CountingEmbedder

pytestmark = pytest.mark.parametrize("chroma_mode", ["embedded"], indirect=True)
SECRET = "RAG_API_KEYS=swap-canary-0123456789:*"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A secret beside the documents folder, where a link can point."""
    secret = tmp_path / "outside" / ".env"
    secret.parent.mkdir()
    secret.write_text(SECRET + "\n", encoding="utf-8")
    return secret


def _sync_swapping(docs: Path, settings: Settings, embedder: CountingEmbedder, monkeypatch: pytest.MonkeyPatch,
                   swap: Callable[[], None]) -> Report:
    """A sync whose plan is made, then `swap` runs, then the plan is carried out."""
    original = runner.run_sync

    def swapped(plan: Plan, *args: Any, **kwargs: Any) -> Report:
        swap()
        return original(plan, *args, **kwargs)

    monkeypatch.setattr(service, "run_sync", swapped)
    return service.sync([docs], settings, embedder=embedder)[1]


def _texts(settings: Settings) -> list[str]:
    store = build_store(settings)
    return list(store.dense._collection.get()["documents"] or [])


def _relink(path: Path, target: Path) -> Callable[[], None]:
    def swap() -> None:
        stat = path.stat()
        path.unlink()
        path.symlink_to(target)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns), follow_symlinks=False)
    return swap


def test_a_document_swapped_for_a_link_out_is_not_read(docs: Path, settings: Settings, embedder: CountingEmbedder,
                                                       outside: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    notes = docs / "notes.txt"
    notes.write_text("The canteen opens at noon.\n", encoding="utf-8")
    (docs / "other.txt").write_text("Parking permits cost 30 euros.\n", encoding="utf-8")
    report = _sync_swapping(docs, settings, embedder, monkeypatch, _relink(notes, outside))
    assert "notes.txt" in report.failed and "outside" in report.failed["notes.txt"], report
    assert report.added == 1
    assert not any("swap-canary" in text for text in _texts(settings))
    # The real file back with the size and time it had: the next sync reads and ingests it (nothing stale stays).
    monkeypatch.undo()
    notes.unlink()
    notes.write_text("The canteen opens at noon.\n", encoding="utf-8")
    again = service.sync([docs], settings, embedder=embedder)[1]
    assert (again.added, again.failed) == (1, {}), again
    assert any("canteen" in text for text in _texts(settings))


def test_a_directory_swapped_for_a_link_out_is_not_read(docs: Path, settings: Settings, embedder: CountingEmbedder,
                                                        outside: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = docs / "team"
    folder.mkdir()
    (folder / ".env").write_text("The team meets on Mondays.\n", encoding="utf-8")  # hidden: never scanned
    (folder / "notes.txt").write_text("The team meets on Mondays.\n", encoding="utf-8")
    (outside.parent / "notes.txt").write_text(SECRET + "\n", encoding="utf-8")

    def swap() -> None:
        folder.rename(docs / ".team-old")
        folder.symlink_to(outside.parent, target_is_directory=True)

    report = _sync_swapping(docs, settings, embedder, monkeypatch, swap)
    assert "team/notes.txt" in report.failed, report
    assert not any("swap-canary" in text for text in _texts(settings))


def test_a_document_swapped_for_another_file_inside_is_not_read(docs: Path, settings: Settings,
                                                                embedder: CountingEmbedder,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A link to a restricted file inside the folder, swapped in after the scan, would carry the public file's
    access: the read must open the very file the scan found."""
    (docs / "hr").mkdir()
    (docs / "hr" / "salaries.txt").write_text("Salary bands: swap-canary grade A.\n", encoding="utf-8")
    (docs / "hr" / "salaries.txt.meta.yaml").write_text("groups: [hr]\n", encoding="utf-8")
    public = docs / "public.txt"
    public.write_text("Salary bands are published each spring.\n", encoding="utf-8")
    report = _sync_swapping(docs, settings, embedder, monkeypatch, _relink(public, docs / "hr" / "salaries.txt"))
    assert "public.txt" in report.failed and "scan" in report.failed["public.txt"], report
    store = build_store(settings)
    got = store.dense._collection.get(include=["documents", "metadatas"])
    leaked = [meta for text, meta in zip(got["documents"] or [], got["metadatas"] or [], strict=True)
              if "swap-canary" in text and meta["source"] != "hr/salaries.txt"]
    assert leaked == []


def test_a_sidecar_swapped_for_a_link_out_locks_its_document(docs: Path, settings: Settings,
                                                             embedder: CountingEmbedder, outside: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A restriction replaced by a link (to a file that would open it) must not open the document."""
    (docs / "board.txt").write_text("The board meets in March.\n", encoding="utf-8")
    sidecar = docs / "board.txt.meta.yaml"
    sidecar.write_text("groups: [board]\n", encoding="utf-8")
    opener = outside.parent / "open.yaml"
    opener.write_text("groups: []\n", encoding="utf-8")
    report = _sync_swapping(docs, settings, embedder, monkeypatch, _relink(sidecar, opener))
    assert report.locked == ["board.txt"], report
    store = build_store(settings)
    metas = store.dense._collection.get(include=["metadatas"])["metadatas"] or []
    assert metas and all(meta["source"] == "board.txt" for meta in metas)
    assert all(DocAccess.from_metadata(dict(meta)).locked for meta in metas), metas
