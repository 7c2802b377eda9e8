"""Bad input: each bad file gets one clear failure, the run goes on, and nothing already indexed is lost."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ingest import service
from rag.config import Settings
from rag.wiring import App, build_store
from tests.conftest import CountingEmbedder
from tests.docs_factory import encrypted_pdf_bytes, pdf_bytes, symlink_loops, zip_bomb_docx

Write = Callable[[str, str | bytes], Path]


def test_every_bad_file_fails_clearly_and_good_files_are_indexed(
    docs: Path, write: Write, settings: Settings, embedder: CountingEmbedder
) -> None:
    good = pdf_bytes(["A good page about holidays."])
    write("good.md", "# Good\nThe canteen opens at noon.")
    write("encrypted.pdf", encrypted_pdf_bytes("secret salaries"))
    write("corrupt.pdf", b"%PDF-1.7\n" + b"garbage " * 200)
    write("truncated.pdf", good[: len(good) // 2])
    write("scanned.pdf", pdf_bytes(["", ""]))
    write("binary.pdf", bytes(range(256)) * 10)
    write("binary.txt", b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 10)
    write("latin1.txt", "Café menu".encode("latin-1"))
    write("empty.txt", b"")
    write("big.txt", "word " * 300_000)
    write("bomb.docx", zip_bomb_docx(300))
    write("notes.xyz", "unsupported")
    symlink_loops(docs)
    settings = settings.model_copy(update={"max_file_mb": 1.0})

    report = service.sync([docs], settings, embedder=embedder)[1]

    assert report.added == 1
    assert report.skipped == 1
    errors = report.failed
    expected = {
        "encrypted.pdf": "encrypted PDF: a password is needed",
        "corrupt.pdf": "PDF",
        "truncated.pdf": "PDF",
        "scanned.pdf": "no extractable text in 2 page(s)",
        "binary.pdf": "not a PDF file",
        "binary.txt": "binary file, not text",
        "latin1.txt": "not valid UTF-8 text (bad byte 0xe9 at offset 3)",
        "empty.txt": "empty file",
        "big.txt": "over the limit of 1.0 MiB (RAG_MAX_FILE_MB)",
        "bomb.docx": "decompression bomb",
        "a.txt": "symlink loop",
        "b.txt": "symlink loop",
        "loop/back": "symlink loop",
    }
    assert set(errors) == set(expected)
    for name, fragment in expected.items():
        assert fragment in errors[name], (name, errors[name])
        assert "\n" not in errors[name]
    assert build_store(settings).count() == report.chunks == 1


def test_a_file_turned_bad_keeps_its_previous_chunks(
    docs: Path, write: Write, settings: Settings, embedder: CountingEmbedder
) -> None:
    write("manual.pdf", pdf_bytes(["Reset the router by holding the button.", "Call IT on 555."]))
    service.sync([docs], settings, embedder=embedder)
    before = build_store(settings).all_ids()
    write("manual.pdf", b"%PDF-1.4 truncated")
    report = service.sync([docs], settings, embedder=embedder)[1]
    assert "manual.pdf" in report.failed
    assert build_store(settings).all_ids() == before


def test_a_parser_that_overruns_its_time_limit_is_stopped(
    docs: Path, write: Write, settings: Settings, embedder: CountingEmbedder
) -> None:
    # Seconds of chunking: distinct sentences, so no cached token count helps.
    write("slow.md", "# Slow\n" + " ".join(f"Sentence {i} says {i * 7} things." for i in range(400_000)))
    write("quick.md", "# Quick\nDone.")
    settings = settings.model_copy(update={"parse_timeout_s": 1.0})
    report = service.sync([docs], settings, embedder=embedder)[1]
    assert report.failed == {"slow.md": "parsing took longer than 1 s (RAG_PARSE_TIMEOUT_S); stopped"}
    assert report.added == 1


@pytest.mark.parametrize("name", ["encrypted.pdf", "scanned.pdf"])
def test_single_file_argument_fails_cleanly(name: str, write: Write, settings: Settings,
                                            embedder: CountingEmbedder) -> None:
    data = encrypted_pdf_bytes("x") if name == "encrypted.pdf" else pdf_bytes([""])
    path = write(name, data)
    report = service.sync([path], settings, embedder=embedder)[1]
    assert list(report.failed) == [name]
    assert report.chunks == 0


def test_symlinks_are_followed_only_inside_the_folder(docs: Path, write: Write, settings: Settings,
                                                      embedder: CountingEmbedder, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    (outside / "private").mkdir(parents=True)
    (outside / "secret.md").write_text("# Secret\nThe root password is hunter2.\n")
    (outside / "private" / "payroll.md").write_text("# Payroll\nSalaries of every employee.\n")
    write("guide.md", "# Guide\nHow to book a meeting room.\n")
    (docs / "secret.md").symlink_to(outside / "secret.md")
    (docs / "private").symlink_to(outside / "private", target_is_directory=True)
    (docs / "alias.md").symlink_to(docs / "guide.md")  # inside the folder: followed

    report = service.sync([docs], settings, embedder=embedder)[1]

    assert report.added == 2  # guide.md and alias.md
    assert set(report.failed) == {"secret.md", "private"}
    assert f"a symlink to {outside / 'secret.md'}, outside {docs}" in report.failed["secret.md"]
    assert "links are followed only inside the folder" in report.failed["private"]
    sources = {entry.source for entry in service.library(App(settings)).documents()}
    assert sources == {"guide.md", "alias.md"}
