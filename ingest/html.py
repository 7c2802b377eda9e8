"""HTML loader: the page's main text and title, split by headings, with navigation junk removed."""

from __future__ import annotations

import re
from pathlib import PurePath

from ingest.loaders import LoadedDoc, LoadError, Section, SectionBuilder, decode_text

_JUNK_TAGS = ("script", "style", "noscript", "nav", "header", "footer", "aside", "form", "iframe", "svg", "button")
# Class/id words used by Sphinx, DocBook, Publican and common site templates for non-content blocks.
_JUNK_WORDS = re.compile(
    r"\b(nav|navbar|navheader|navfooter|navigation|sidebar|sphinxsidebar|related|breadcrumbs?|footer|"
    r"header|toc|menu|skip|cookie|banner|searchbox|admonition-see-also-none)\b",
    re.IGNORECASE,
)
_MAIN_SELECTORS = ("main", "article", "[role=main]", "div.body", "div#content", "div.content", "body")
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
_BLOCKS = ("p", "li", "pre", "dt", "dd", "td", "th", "blockquote", "caption", "figcaption", *_HEADINGS)


def load_html(data: bytes, name: str) -> LoadedDoc:
    """Parse HTML with BeautifulSoup (lxml), keep the main content, sections by h1–h6."""
    import warnings

    from bs4 import BeautifulSoup, XMLParsedAsHTMLWarning

    warnings.filterwarnings("ignore", category=XMLParsedAsHTMLWarning)  # XHTML pages parse fine as HTML

    text = _decode_html(data)
    soup = BeautifulSoup(text, "lxml")
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    for tag in soup.find_all(_JUNK_TAGS):
        tag.decompose()
    junk = soup.find_all(class_=_JUNK_WORDS) + soup.find_all(id=_JUNK_WORDS)
    for tag in junk:
        if tag.name not in ("body", "html") and not tag.decomposed:
            tag.decompose()
    root = next((found for sel in _MAIN_SELECTORS if (found := soup.select_one(sel)) is not None), soup)
    sections = _sections(root)
    if not sections:
        raise LoadError("HTML page has no text content")
    return LoadedDoc(title=title or PurePath(name).stem, sections=sections)


def _decode_html(data: bytes) -> str:
    try:
        return decode_text(data)
    except LoadError:
        # Legacy pages declare other charsets; fall back to the declared one, else fail as text would.
        match = re.search(rb"charset=[\"']?([A-Za-z0-9_-]+)", data[:4096])
        if b"\x00" in data[:8192] or not match:
            raise
        try:
            return data.decode(match.group(1).decode("ascii"))
        except (LookupError, UnicodeDecodeError) as exc:
            raise LoadError(f"cannot decode HTML as {match.group(1).decode('ascii', 'replace')}") from exc


def _sections(root: object) -> list[Section]:
    from bs4 import Tag

    assert isinstance(root, Tag)
    builder = SectionBuilder()
    for block in root.find_all(_BLOCKS):
        if block.find_parent(_BLOCKS) is not None:
            continue  # nested block: its text is part of the outer one
        if block.name == "pre":
            builder.add(block.get_text())
        elif block.name in _HEADINGS:
            builder.heading(int(block.name[1]), " ".join(block.get_text(" ").split()).rstrip("¶").strip())
        elif text := " ".join(block.get_text(" ").split()):
            builder.add(text)
    return builder.finish()
