"""SIGKILL during an ingest, then re-run: the collection equals a clean ingest (same ids, same count)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from ingest import service
from rag.components.models import BUNDLED_EMBED_MODEL
from rag.config import Settings
from rag.wiring import build_embedder, build_store

BIN = Path(sys.executable).parent
FILES = 24


def _corpus(folder: Path) -> None:
    for i in range(FILES):
        # A few chunks a file (~85 in all): enough that the kill lands between files, little to embed three times.
        paragraphs = [f"Document {i}, paragraph {p}: " + " ".join(f"term{i}_{p}_{w}" for w in range(24))
                      for p in range(4)]
        (folder / f"doc{i:02d}.md").write_text(f"# Doc {i}\n\n" + "\n\n".join(paragraphs), encoding="utf-8")


def _recorded(data_dir: Path) -> int:
    try:
        with sqlite3.connect(data_dir / "index" / "manifest.sqlite3", timeout=1) as db:
            return int(db.execute("SELECT COUNT(*) FROM documents").fetchone()[0])
    except sqlite3.Error:
        return 0


def _ingest(docs: Path, data_dir: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAG_")}
    # Files commit one by one; MiniLM alone (a third of the pair's cost: what is stored when does not depend on it).
    env |= {"RAG_DATA_DIR": str(data_dir), "RAG_INGEST_BATCH_CHUNKS": "24", "RAG_EMBED_MODEL": BUNDLED_EMBED_MODEL}
    return subprocess.Popen([str(BIN / "rag-ingest"), str(docs), "--json"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_sigkill_mid_run_then_rerun_converges(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    _corpus(docs)
    crashed, clean = tmp_path / "crashed", tmp_path / "clean"

    process = _ingest(docs, crashed)
    deadline = time.monotonic() + 240
    while _recorded(crashed) == 0 and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    done_before_kill = _recorded(crashed)
    assert 0 < done_before_kill < FILES, "the kill must land mid-run"

    assert _ingest(docs, crashed).wait(timeout=600) == 0
    # The reference: a clean ingest in this process (same code path and model, no second interpreter).
    clean_settings = Settings(data_dir=clean, ingest_batch_chunks=24, embed_model=BUNDLED_EMBED_MODEL,
                              _env_file=None)  # type: ignore[call-arg]
    assert not service.sync([docs], clean_settings, embedder=build_embedder(clean_settings))[1].failed

    after_crash = build_store(clean_settings.model_copy(update={"data_dir": crashed}))
    reference = build_store(clean_settings)
    assert after_crash.count() == reference.count() > FILES
    assert after_crash.all_ids() == reference.all_ids()
    assert _recorded(crashed) == _recorded(clean) == FILES
