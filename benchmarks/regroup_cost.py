"""What a groups-only change costs against the file's first ingest (goal ≤ 5 %), measured in one run.

    .venv/bin/python -m benchmarks.regroup_cost [--quick]

For each sample file (a PDF, an HTML page, a Markdown file): ingest it into a fresh index (the embedder loaded
beforehand, as in a running server), then give it a sidecar with other groups and sync again. Both times are whole
`sync` calls (plan, parse or relabel, write, keyword repair), so the ratio is what an admin's re-sync costs.
`--quick` (the Markdown file only, no warm-up) checks that the benchmark runs.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from benchmarks.common import REPO
from ingest import service
from rag.config import Settings
from rag.core.ports import Embedder
from rag.wiring import build_embedder, prefer_passive_threads

FILES = ("debian-history.pdf", "postgresql-routine-vacuuming.html", "systemd-uids-gids.md")


def timed_sync(folder: Path, settings: Settings, embedder: Embedder) -> tuple[float, dict[str, object]]:
    """Seconds for one sync of the folder, and its report."""
    started = time.perf_counter()
    report = service.sync([folder], settings, embedder=embedder)[1]
    return time.perf_counter() - started, report.as_json()


def measure(name: str, embedder: Embedder) -> tuple[float, float, int]:
    """(first ingest s, regroup s, chunks) for one sample file in a fresh data dir."""
    with tempfile.TemporaryDirectory() as tmp:
        docs = Path(tmp) / "docs"
        docs.mkdir()
        shutil.copy(REPO / "data" / "samples" / "en" / name, docs / name)
        settings = Settings(data_dir=Path(tmp) / "data", _env_file=None)  # type: ignore[call-arg]
        first, report = timed_sync(docs, settings, embedder)
        (docs / f"{name}.meta.yaml").write_text("groups: [hr, finance]\n")
        regroup, again = timed_sync(docs, settings, embedder)
        assert again["regrouped"] == 1 and again["updated"] == 0, again
        return first, regroup, int(str(report["chunks"]))


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the Markdown file only, no warm-up")
    quick = parser.parse_args(argv).quick
    prefer_passive_threads()
    embedder = build_embedder(Settings(_env_file=None))  # type: ignore[call-arg]
    if not quick:
        measure(FILES[-1], embedder)  # warm: parser fork server, tokenizer, Chroma's first client
    print(f"{'file':<38}{'chunks':>7}{'ingest s':>10}{'regroup s':>11}{'ratio':>8}")
    for name in FILES[-1:] if quick else FILES:
        first, regroup, chunks = measure(name, embedder)
        print(f"{name:<38}{chunks:>7}{first:>10.2f}{regroup:>11.3f}{regroup / first:>8.3f}")


if __name__ == "__main__":
    main()
