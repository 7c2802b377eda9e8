"""Format loaders: bytes of one file → titled sections with page numbers and heading paths.

Text a reader never sees is not loaded: invisible characters (zero-width, bidi controls, tag characters) are
stripped from every section, heading and title, and DOCX runs that are hidden (vanish) or white are left out.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

import yaml

from rag.core.access import DocAccess, document_access
from rag.core.sanitize import strip_invisible

# A zip member (DOCX) may not expand past this: guards against decompression bombs.
MAX_UNZIPPED_BYTES = 200 * 1024 * 1024
_MD_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_RST_ADORN = re.compile(r"^([=\-~^\"'`#*+.:_])\1{2,}\s*$")
_SETEXT = re.compile(r"^(=+|-+)\s*$")
_FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*\n", re.DOTALL)


class LoadError(Exception):
    """A file that cannot be read as a document; the message is shown to the user as is."""


@dataclass(frozen=True, slots=True)
class Section:
    """A run of text under one heading path (and, for PDF, on one page)."""

    text: str
    page: int | None = None
    headings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Hidden instructions ride in invisible characters; no loader lets them through.
        object.__setattr__(self, "text", strip_invisible(self.text))
        object.__setattr__(self, "headings", tuple(strip_invisible(heading) for heading in self.headings))


@dataclass(slots=True)
class LoadedDoc:
    """What a loader found in a file."""

    title: str
    sections: list[Section]
    access: DocAccess = field(default_factory=DocAccess)

    def __post_init__(self) -> None:
        self.title = strip_invisible(self.title)


class SectionBuilder:
    """Collects lines under the current heading path; emits one Section per heading run."""

    def __init__(self) -> None:
        self._path: list[tuple[int, str]] = []
        self._lines: list[str] = []
        self._sections: list[Section] = []

    def heading(self, level: int, text: str) -> None:
        """Close the running section and enter a heading of the given level (1 = top)."""
        self._flush()
        self._path = [(lvl, h) for lvl, h in self._path if lvl < level]
        if text:
            self._path.append((level, text))

    def add(self, line: str) -> None:
        """Append a line of body text under the current heading path."""
        self._lines.append(line)

    def finish(self) -> list[Section]:
        """All sections collected, in document order."""
        self._flush()
        return self._sections

    def _flush(self) -> None:
        body = "\n".join(self._lines).strip()
        if body:
            self._sections.append(Section(body, headings=tuple(h for _, h in self._path)))
        self._lines.clear()


def decode_text(data: bytes) -> str:
    """Strict UTF-8 (BOM allowed, UTF-16 with BOM accepted); binary and invalid bytes are errors."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16")
    if b"\x00" in data[:8192]:
        raise LoadError("binary file, not text (contains NUL bytes)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise LoadError(f"not valid UTF-8 text (bad byte 0x{data[exc.start]:02x} at offset {exc.start})") from exc


def load_text(data: bytes, name: str) -> LoadedDoc:
    """Plain text: one section; reStructuredText (.rst, .rst.txt) is split by its section titles."""
    if name.lower().endswith((".rst", ".rst.txt")):
        return load_rst(data, name)
    return LoadedDoc(title=PurePath(name).stem, sections=[Section(decode_text(data))])


def load_rst(data: bytes, name: str) -> LoadedDoc:
    """reStructuredText: titles are lines underlined (optionally overlined) with one punctuation character;
    levels follow the order in which the underline styles first appear, as docutils assigns them."""
    lines = decode_text(data).splitlines()
    builder, styles = SectionBuilder(), []
    i = 0
    while i < len(lines):
        line, following = lines[i], lines[i + 1] if i + 1 < len(lines) else ""
        over = _RST_ADORN.match(line) and i + 2 < len(lines) and lines[i + 2].strip() == line.strip()
        title, under = (lines[i + 1], lines[i + 2]) if over else (line, following)
        if title.strip() and not _RST_ADORN.match(title) and _RST_ADORN.match(under) \
                and len(under.strip()) >= len(title.strip()):
            style = (under.strip()[0], bool(over))
            styles += [] if style in styles else [style]
            builder.heading(styles.index(style) + 1, title.strip())
            i += 3 if over else 2
            continue
        builder.add(line)
        i += 1
    sections = builder.finish()
    title = next((s.headings[0] for s in sections if s.headings), PurePath(name).stem)
    return LoadedDoc(title=title, sections=sections)


def load_markdown(data: bytes, name: str) -> LoadedDoc:
    """Markdown: optional YAML front matter (title, groups), sections by heading path."""
    meta, text = front_matter(decode_text(data))
    sections = _markdown_sections(text)
    title = str(meta.get("title") or next((s.headings[0] for s in sections if s.headings), PurePath(name).stem))
    return LoadedDoc(title=title, sections=sections, access=document_access(meta.get("groups")))


def front_matter(text: str) -> tuple[dict[str, object], str]:
    """A Markdown text's YAML front matter (empty when there is none) and the text after it."""
    match = _FRONT_MATTER.match(text)
    if not match:
        return {}, text
    try:
        loaded = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        raise LoadError(f"invalid YAML front matter: {exc}") from exc
    return (loaded if isinstance(loaded, dict) else {}), text[match.end() :]


def _markdown_sections(text: str) -> list[Section]:
    builder = SectionBuilder()
    lines = text.splitlines()
    in_fence, skip = False, False
    for i, line in enumerate(lines):
        if skip:
            skip = False
            continue
        if line.lstrip().startswith(("```", "~~~")):
            in_fence = not in_fence
        following = lines[i + 1] if i + 1 < len(lines) else ""
        atx = None if in_fence else _MD_HEADING.match(line)
        if atx:
            builder.heading(len(atx.group(1)), atx.group(2))
        elif not in_fence and line.strip() and _SETEXT.match(following):
            builder.heading(1 if following.strip().startswith("=") else 2, line.strip())
            skip = True  # the underline
        else:
            builder.add(line)
    return builder.finish()


def load_pdf(data: bytes, name: str) -> LoadedDoc:
    """PDF via pypdf: one section per page with text; encrypted, corrupt and text-less files are errors."""
    import pypdf
    from pypdf.errors import PdfReadError

    if not data.lstrip()[:1024].startswith(b"%PDF") and b"%PDF" not in data[:1024]:
        raise LoadError("not a PDF file (no %PDF header)")
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise LoadError("encrypted PDF: a password is needed to read it")
        pages = [(number, page.extract_text() or "") for number, page in enumerate(reader.pages, start=1)]
        title = str(reader.metadata.get("/Title") or "") if reader.metadata else ""
    except LoadError:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise LoadError(f"corrupt or truncated PDF: {exc}") from exc
    sections = [Section(text.strip(), page=number) for number, text in pages if text.strip()]
    if not sections:
        raise LoadError(f"PDF has no extractable text in {len(pages)} page(s) (scanned? run OCR first)")
    # Generators often stamp placeholder titles; the file name says more than those.
    useful = title.strip() and title.strip().lower() not in {"untitled", "untitled document", "microsoft word"}
    return LoadedDoc(title=title.strip() if useful else PurePath(name).stem, sections=sections)


def check_zip(data: bytes) -> zipfile.ZipFile:
    """Open a zip container, refusing archives that expand beyond MAX_UNZIPPED_BYTES."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise LoadError(f"not a valid DOCX (zip) file: {exc}") from exc
    expanded = sum(info.file_size for info in archive.infolist())
    if expanded > MAX_UNZIPPED_BYTES:
        raise LoadError(f"decompression bomb: expands to {expanded // 2**20} MiB")
    return archive


def load_docx(data: bytes, name: str) -> LoadedDoc:
    """DOCX via python-docx: sections by Heading styles, tables as tab-separated rows."""
    import docx

    check_zip(data)
    try:
        document = docx.Document(io.BytesIO(data))
    except Exception as exc:  # python-docx raises KeyError/ValueError/PackageNotFoundError
        raise LoadError(f"corrupt DOCX file: {exc}") from exc
    builder = SectionBuilder()
    for para in document.paragraphs:
        style = (para.style.name if para.style is not None else "") or ""
        level = int(style.split()[-1]) if style.startswith("Heading") and style.split()[-1].isdigit() else 0
        text = visible_text(para)
        if level and text.strip():
            builder.heading(level, text.strip())
        elif text.strip():
            builder.add(text)
    for table in document.tables:
        builder.heading(1, "")  # tables stand on their own, outside the last heading
        builder.add("\n".join("\t".join(_cell_text(cell) for cell in row.cells) for row in table.rows))
    sections = builder.finish()
    first_heading = next((s.headings[0] for s in sections if s.headings), "")
    title = document.core_properties.title or first_heading or PurePath(name).stem
    return LoadedDoc(title=title, sections=sections)


def visible_text(paragraph: Any) -> str:
    """A DOCX paragraph's text without hidden runs: vanish (hidden text), white or tiny font, directly or by the
    run's or the paragraph's style."""
    from docx.text.hyperlink import Hyperlink

    styled = paragraph.style is not None and _hidden_font(paragraph.style.font)
    parts = []
    for item in paragraph.iter_inner_content():
        for run in item.runs if isinstance(item, Hyperlink) else [item]:
            hidden = styled or _hidden_font(run.font) or (run.style is not None and _hidden_font(run.style.font))
            if not hidden:
                parts.append(run.text)
    return "".join(parts)


def _cell_text(cell: Any) -> str:
    return "\n".join(visible_text(paragraph) for paragraph in cell.paragraphs).strip()


def _hidden_font(font: Any) -> bool:
    """Whether a font hides its text: vanish, white (without a highlight), or at most 1 pt."""
    from docx.enum.dml import MSO_THEME_COLOR
    from docx.shared import Pt

    if font.hidden or font.spec_vanish or (font.size is not None and font.size <= Pt(1)):
        return True
    colour = font.color
    if colour.type is None or font.highlight_color is not None:
        return False
    if colour.theme_color is not None:  # Word paints the theme colour, whatever w:val says
        return colour.theme_color in (MSO_THEME_COLOR.BACKGROUND_1, MSO_THEME_COLOR.LIGHT_1)
    return colour.rgb is not None and all(channel >= 0xF0 for channel in colour.rgb)


LOADERS: dict[str, Callable[[bytes, str], LoadedDoc]] = {
    ".pdf": load_pdf,
    ".md": load_markdown,
    ".markdown": load_markdown,
    ".txt": load_text,
    ".text": load_text,
    ".rst": load_text,
    ".docx": load_docx,
}
