"""Loaders per format: page numbers, heading paths, Chinese text, navigation removed."""

from __future__ import annotations

import pytest

from ingest.html import load_html
from ingest.loaders import LoadError, decode_text, load_docx, load_markdown, load_pdf, load_text
from rag.core.access import DocAccess
from tests.conftest import SAMPLES
from tests.docs_factory import docx_bytes, pdf_bytes


def test_pdf_keeps_one_section_per_page_with_page_numbers() -> None:
    doc = load_pdf(pdf_bytes(["first page alpha", "", "third page gamma"]), "report.pdf")
    assert [(s.page, s.text) for s in doc.sections] == [(1, "first page alpha"), (3, "third page gamma")]
    assert doc.title == "report"


def test_real_chinese_pdf_pages_and_text() -> None:
    doc = load_pdf((SAMPLES / "zh" / "install-guide-ch1-2.pdf").read_bytes(), "install-guide-ch1-2.pdf")
    pages = {s.page: s.text for s in doc.sections}
    assert len(pages) == 9
    assert "780MB" in pages[9]
    assert "内存" in pages[9]


def test_markdown_heading_paths_front_matter_and_fences() -> None:
    text = (
        "---\ntitle: Leave policy\ngroups: [hr, managers]\n---\n"
        "# Leave\nintro\n## Annual leave\n25 days.\n```\n# not a heading\n```\n"
        "### Carry over\n5 days.\n# Sick\nCall in.\n"
    )
    doc = load_markdown(text.encode(), "leave.md")
    assert doc.title == "Leave policy"
    assert doc.access == DocAccess(("hr", "managers"))
    assert [(s.headings, s.text) for s in doc.sections] == [
        (("Leave",), "intro"),
        (("Leave", "Annual leave"), "25 days.\n```\n# not a heading\n```"),
        (("Leave", "Annual leave", "Carry over"), "5 days."),
        (("Sick",), "Call in."),
    ]


def test_html_main_text_without_navigation() -> None:
    raw = (SAMPLES / "en" / "python-tutorial-venv.html").read_bytes()
    doc = load_html(raw, "python-tutorial-venv.html")
    body = "\n".join(s.text for s in doc.sections)
    assert "12. Virtual Environments and Packages" in doc.title
    assert "python3 -m venv tutorial-env" in body
    # Sphinx navigation: the "related" bar, sidebar and footer must be gone.
    assert "Table of Contents" not in body
    assert "Previous topic" not in body
    assert "index" not in [line.strip() for line in body.splitlines()]
    assert any(s.headings[-1].startswith("12.2.") for s in doc.sections if s.headings)


def test_html_chinese_page_keeps_chinese_text() -> None:
    doc = load_html((SAMPLES / "zh" / "debian-faq-pkg-basics.html").read_bytes(), "faq.html")
    body = "\n".join(s.text for s in doc.sections)
    assert "软件包" in body


def test_html_strips_nav_elements() -> None:
    html = b"<html><head><title>T</title></head><body><nav>Home | Next</nav><div class='sidebar'>links</div>" \
           b"<main><h1>Policy</h1><p>Keep it.</p></main><footer>copyright</footer></body></html>"
    doc = load_html(html, "p.html")
    assert [(s.headings, s.text) for s in doc.sections] == [(("Policy",), "Keep it.")]


def test_docx_headings_and_tables() -> None:
    data = docx_bytes([(1, "Expenses"), (0, "Submit receipts."), (2, "Travel"), (0, "Book economy.")])
    doc = load_docx(data, "policy.docx")
    assert [(s.headings, s.text) for s in doc.sections] == [
        (("Expenses",), "Submit receipts."),
        (("Expenses", "Travel"), "Book economy."),
    ]


def test_text_and_chinese_text() -> None:
    assert load_text("你好，世界。".encode(), "a.txt").sections[0].text == "你好，世界。"
    assert load_text("\ufeffBOM text".encode(), "b.txt").sections[0].text == "BOM text"


@pytest.mark.parametrize(
    ("data", "message"),
    [(b"\x00\x01binary", "binary file"), (b"caf\xe9 latin-1", "not valid UTF-8 text (bad byte 0xe9 at offset 3)")],
)
def test_text_errors_are_clear(data: bytes, message: str) -> None:
    with pytest.raises(LoadError, match=message.replace("(", r"\(").replace(")", r"\)")):
        decode_text(data)


def test_markdown_setext_headings() -> None:
    doc = load_markdown(b"Architecture\n============\n\nIntro.\n\nClusters\n--------\nOne per port.\n", "a.md")
    assert [(s.headings, s.text) for s in doc.sections] == [
        (("Architecture",), "Intro."),
        (("Architecture", "Clusters"), "One per port."),
    ]


def test_rst_titles_become_heading_paths() -> None:
    text = (
        "====================\nGeneral Python FAQ\n====================\n\n.. contents::\n\n"
        "General Information\n===================\n\nWhat is Python?\n---------------\n\nA language.\n\n"
        "Why indentation?\n----------------\n\nFor clarity.\n\nCode\n\n  x = 1\n  -----\n"
    )
    doc = load_text(text.encode(), "faq/general.rst.txt")
    assert doc.title == "General Python FAQ"
    assert [(s.headings, s.text) for s in doc.sections] == [
        (("General Python FAQ",), ".. contents::"),
        (("General Python FAQ", "General Information", "What is Python?"), "A language."),
        (("General Python FAQ", "General Information", "Why indentation?"), "For clarity.\n\nCode\n\n  x = 1\n  -----"),
    ]
