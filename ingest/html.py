"""HTML loader: the page's main text and title, split by headings, with navigation junk and hidden text removed.

Hidden text is what a reader never sees but a model would read: elements with the `hidden` attribute, or an inline
style that hides them (display:none, visibility:hidden, zero or tiny font size, opacity 0, moved far off-screen,
clipped to nothing) or paints their text white or transparent on no background of their own.
"""

from __future__ import annotations

import re
from pathlib import PurePath

from ingest.loaders import LoadedDoc, LoadError, Section, SectionBuilder, decode_text

_JUNK_TAGS = ("script", "style", "noscript", "nav", "header", "footer", "aside", "form", "iframe", "svg", "button",
              "template")
# Class/id words used by Sphinx, DocBook, Publican and common site templates for non-content blocks.
_JUNK_WORDS = re.compile(
    r"\b(nav|navbar|navheader|navfooter|navigation|sidebar|sphinxsidebar|related|breadcrumbs?|footer|"
    r"header|toc|menu|skip|cookie|banner|searchbox|admonition-see-also-none)\b",
    re.IGNORECASE,
)
_MAIN_SELECTORS = ("main", "article", "[role=main]", "div.body", "div#content", "div.content", "body")
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
# Utility classes of common CSS frameworks that hide an element (Bootstrap, Tailwind, WordPress).
_HIDDEN_CLASSES = re.compile(r"^(hidden|d-none|invisible|sr-only|visually-hidden|screen-reader-text)$", re.IGNORECASE)
_LENGTH = re.compile(r"^(-?\d*\.?\d+)\s*(px|pt|em|rem|ex|ch|%|vw|vh)?$")
_TINY = {"px": 1.0, "pt": 1.0, "em": 0.1, "rem": 0.1, "ex": 0.2, "ch": 0.2, "%": 10.0, "vw": 0.1, "vh": 0.1}
_OFF_SCREEN = {"px": -500.0, "pt": -400.0, "em": -50.0, "rem": -50.0, "%": -100.0, "vw": -100.0, "vh": -100.0}
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
    for tag in [tag for tag in soup.find_all(True) if is_hidden(tag)]:
        if not tag.decomposed:
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


def is_hidden(tag: object) -> bool:
    """Whether an element is hidden from a reader by its attributes or inline style."""
    from bs4 import Tag

    if not isinstance(tag, Tag) or tag.name in ("html", "body"):
        return False
    classes: list[str] = list(tag.get("class") or [])
    if tag.has_attr("hidden") or any(_HIDDEN_CLASSES.match(name) for name in classes):
        return True
    if tag.name == "font" and _invisible_colour(str(tag.get("color", ""))):
        return True
    return hidden_style(str(tag.get("style", "")))


def hidden_style(style: str) -> bool:
    """Whether inline CSS hides the element's text."""
    rules = {name.strip().lower(): value.lower().replace("!important", "").strip()
             for name, _, value in (part.partition(":") for part in style.split(";")) if value.strip()}
    if rules.get("display") == "none" or rules.get("visibility") in ("hidden", "collapse"):
        return True
    if _number(rules.get("opacity", "")) == 0 or _below(rules.get("font-size", ""), _TINY):
        return True
    if any(_below(rules.get(name, ""), _OFF_SCREEN) for name in ("text-indent", "left", "top", "margin-left")):
        return True
    clipped = rules.get("clip", "") + rules.get("clip-path", "")
    if re.search(r"rect\(\s*0\D*0\D*0\D*0|inset\(\s*50%|circle\(\s*0", clipped):
        return True
    if rules.get("overflow") == "hidden" and any(_below(rules.get(name, ""), _TINY)
                                                 for name in ("height", "max-height", "width", "max-width")):
        return True
    background = any(name in rules for name in ("background", "background-color"))
    return _invisible_colour(rules.get("color", "")) and not background


def _number(value: str) -> float | None:
    try:
        return float(value.rstrip("%")) if value else None
    except ValueError:
        return None


def _below(value: str, limits: dict[str, float]) -> bool:
    """Whether a CSS length is at or below the limit for its unit (a bare number is in px)."""
    match = _LENGTH.match(value.strip())
    if match is None:
        return False
    unit = match[2] or "px"
    return unit in limits and float(match[1]) <= limits[unit]


def _invisible_colour(value: str) -> bool:
    """White (or nearly), or fully transparent."""
    colour = value.strip().lower()
    if colour in ("white", "transparent", "snow", "ivory", "ghostwhite", "whitesmoke", "floralwhite"):
        return True
    if re.fullmatch(r"#([0-9a-f]{3,4}|[0-9a-f]{6}|[0-9a-f]{8})", colour):
        digits = colour[1:] if len(colour) > 5 else "".join(c * 2 for c in colour[1:])
        channels = [int(digits[i:i + 2], 16) for i in range(0, len(digits), 2)]
        return all(c >= 0xF0 for c in channels[:3]) or (len(channels) == 4 and channels[3] == 0)
    parts = [p for p in re.split(r"[\s,/()]+", colour) if p]
    if parts[:1] in (["hsl"], ["hsla"]) and len(parts) >= 4:
        return (_number(parts[3]) or 0) >= 94 or (len(parts) > 4 and _number(parts[4]) == 0)
    if parts[:1] in (["rgb"], ["rgba"]) and len(parts) >= 4:
        values = [_number(p) for p in parts[1:]]
        if len(values) == 4 and values[3] == 0:
            return True
        floors = [94 if part.endswith("%") else 240 for part in parts[1:4]]
        return all(v is not None and v >= floor for v, floor in zip(values[:3], floors, strict=True))
    return False


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
