"""Builders of real test documents (PDF via reportlab, DOCX via python-docx) and of bad inputs."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pypdf
from docx import Document
from reportlab.lib.pagesizes import A4
from reportlab.pdfgen import canvas


def pdf_bytes(pages: list[str]) -> bytes:
    """A PDF with one text block per page (empty strings make text-less pages)."""
    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer, pagesize=A4)
    for text in pages:
        y = 800
        for line in text.splitlines():
            pdf.drawString(50, y, line)
            y -= 14
        pdf.showPage()
    pdf.save()
    return buffer.getvalue()


def encrypted_pdf_bytes(text: str, password: str = "secret") -> bytes:
    """A PDF that needs a user password."""
    writer = pypdf.PdfWriter(clone_from=io.BytesIO(pdf_bytes([text])))
    writer.encrypt(user_password=password, owner_password=password)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def docx_bytes(blocks: list[tuple[int, str]]) -> bytes:
    """A DOCX: (level, text) with level 0 for a paragraph and 1..3 for headings."""
    document = Document()
    for level, text in blocks:
        if level:
            document.add_heading(text, level=level)
        else:
            document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def zip_bomb_docx(expanded_mib: int = 300) -> bytes:
    """A .docx-named zip whose one member expands to `expanded_mib` MiB of zeros."""
    out = io.BytesIO()
    with (
        zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive,
        archive.open("word/document.xml", "w", force_zip64=True) as member,
    ):
        for _ in range(expanded_mib):
            member.write(b"\0" * (1 << 20))
    return out.getvalue()


def symlink_loops(folder: Path) -> None:
    """A directory symlink pointing back up, and two file symlinks pointing at each other."""
    (folder / "loop").mkdir()
    (folder / "loop" / "back").symlink_to(folder, target_is_directory=True)
    (folder / "a.txt").symlink_to(folder / "b.txt")
    (folder / "b.txt").symlink_to(folder / "a.txt")
