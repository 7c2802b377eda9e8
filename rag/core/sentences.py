"""Sentences of answers and excerpts (English and Chinese punctuation), the language of a text, and [n] markers.

Splitting works on a growing text too (`SentenceBuffer`), so an answer can be checked and shown sentence by
sentence while the model is still writing.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from rag.core.text import HAN_CHAR, cjk_share, has_cjk

Language = Literal["en", "zh"]
CHINESE_CHUNK = 0.2  # a chunk is Chinese from this share of Han characters (as the pair embedder reads it)

MARKER = re.compile(r"\s*\[(\d{1,3})\]")
_MARKERS_AFTER = re.compile(r"(?:\s*\[\d{1,3}\])+")
# A sentence ends at Chinese end punctuation, or at . ! ? followed by space; the caller checks what follows.
_END = re.compile(r"[。！？]|[.!?](?=[\"'”’)]*(?:\s|$|\[\d))")
_CLOSERS = re.compile(r"[\"'”’)」』]*")
# A blank line, or a line break before or after a list item, ends a block (never mid-sentence line wraps of PDFs).
_LIST_ITEM = re.compile(r"[ \t]*(?:[-*•]|\d{1,2}[.)])\s")
# An indented line under a list item continues it (Markdown wraps an item's text so).
_CONTINUED = re.compile(r"[ \t]+\S")
_BREAK = re.compile(r"\n(?:[ \t]*\n)*")
_ABBREVIATED = "e.g i.e etc vs cf mr mrs ms dr prof no fig sec ch vol approx incl esp st"
_ABBREVIATIONS = frozenset(_ABBREVIATED.split())
# Latin tokens; only plain words count towards English (apt-get, sources.list or python3 are names, not prose).
_LATIN_TOKEN = re.compile(r"[A-Za-z][\w.+/'-]*")
_TAG = re.compile(r"</?[A-Za-z][^<>]{0,200}>")
_SCRIPT = re.compile(r"<(script|style)\b[^>]*>.*?(?:</\1\s*>|$)", re.IGNORECASE | re.DOTALL)


def language_of(text: str) -> Language | None:
    """"zh" or "en" by the share of Han characters among Han characters and Latin words; None when the text has
    no Han and fewer than four words (a number, a command), so it fits a question in any language."""
    han = len(HAN_CHAR.findall(text))
    words = sum(1 for token in _LATIN_TOKEN.findall(_strip_code(text)) if token.isalpha() and len(token) > 1)
    if han == 0 and words < 4:
        return None  # a command or a name (apt-get source foo) is no language
    return "zh" if han >= 0.3 * (han + words) else "en"


# Excerpts whose language is remembered: the same chunks come back answer after answer, and counting a chunk's Han
# characters and words each time was ~0.3 ms of a generated answer's ~17 CPU ms (the texts are kept: ~6 MiB).
LANGUAGE_MEMORY = 4096


@functools.lru_cache(maxsize=LANGUAGE_MEMORY)
def excerpt_language(text: str) -> Language | None:
    """`language_of` a stored excerpt, remembered across answers."""
    return language_of(text)


def question_language(question: str) -> Language:
    """The language an answer to this question must be in."""
    return "zh" if has_cjk(question) and language_of(question) == "zh" else "en"


def chunk_language(text: str) -> Language:
    """"zh" for a chunk a fifth or more of whose letters are Han characters (Chinese prose keeps English commands
    and names), else "en"."""
    return "zh" if cjk_share(text) >= CHINESE_CHUNK else "en"


def _strip_code(text: str) -> str:
    return re.sub(r"`[^`]*`", " ", text)


def is_list_item(line: str) -> bool:
    """Whether a line starts a list item ("- ", "* ", "• ", "1. ", "2) ")."""
    return _LIST_ITEM.match(line) is not None


def strip_markers(text: str) -> str:
    """The text without [n] citation markers."""
    return MARKER.sub("", text).strip()


def strip_tags(text: str) -> str:
    """The text without HTML/XML tags (the model's markup is not content; its words are), and without script and
    style elements (their content is code, not words)."""
    return _TAG.sub("", _SCRIPT.sub("", text))


def _is_boundary(text: str, end: int, final: bool) -> int | None:
    """Where the next sentence starts if the punctuation ending at `end` closes a sentence, else None."""
    stop = text[end - 1]
    closers = _CLOSERS.match(text, end)
    cursor = closers.end() if closers else end
    markers = _MARKERS_AFTER.match(text, cursor)
    cursor = markers.end() if markers else cursor
    rest = text[cursor:].lstrip()
    if not rest:
        return cursor if final else None  # undecided until more text arrives (a marker may follow)
    if stop in "。！？":
        return cursor
    word = re.search(r"([A-Za-z.]+)\.$", text[:end])
    if stop == "." and word and word.group(1).lower().rstrip(".") in _ABBREVIATIONS:
        return None
    if stop == "." and re.search(r"(?:^|\s)[A-Z]\.$", text[:end]):
        return None  # an initial, as in "J. Smith"
    first = rest[0]
    return None if first.islower() or first == "[" else cursor


def split_spans(text: str, final: bool = True) -> list[tuple[int, int]]:
    """(start, end) of each sentence; with final=False the last span is the unfinished rest."""
    spans: list[tuple[int, int]] = []
    start = 0
    for block in [*_block_breaks(text), None]:
        block_end = block.start() if block else len(text)
        start = _split_block(text, start, block_end, spans, final or block is not None)
        start = block.end() if block else start
    return [(a, b) for a, b in spans if text[a:b].strip()] + (
        [(start, len(text))] if start < len(text) and text[start:].strip() else [])


def _block_breaks(text: str) -> Iterator[re.Match[str]]:
    for match in _BREAK.finditer(text):
        line_start = text.rfind("\n", 0, match.start()) + 1
        after_item = _LIST_ITEM.match(text, line_start) and not _CONTINUED.match(text, match.end())
        if "\n" in match.group()[1:] or _LIST_ITEM.match(text, match.end()) or after_item:
            yield match


def _split_block(text: str, start: int, stop: int, spans: list[tuple[int, int]], final: bool) -> int:
    for match in _END.finditer(text, start, stop):
        cut = _is_boundary(text[:stop], match.end(), final)
        if cut is not None and cut > start:
            spans.append((start, cut))
            start = cut
    if final and text[start:stop].strip():
        spans.append((start, stop))
        return stop
    return start


def split_sentences(text: str) -> list[str]:
    """The sentences of a finished text, each stripped, lines inside a sentence joined."""
    return [" ".join(text[a:b].split()) for a, b in split_spans(text)]


@dataclass
class SentenceBuffer:
    """Collects streamed text and hands out each sentence once it is complete (its end and what follows seen)."""

    pending: str = ""
    _done: list[str] = field(default_factory=list)

    def feed(self, text: str) -> list[str]:
        """Add streamed text; returns the sentences that it completed."""
        self.pending += text
        spans = split_spans(self.pending, final=False)
        complete = spans[:-1] if spans and spans[-1][1] == len(self.pending) else spans
        if not complete:
            return []
        out = [" ".join(self.pending[a:b].split()) for a, b in complete]
        self.pending = self.pending[complete[-1][1]:]
        return out

    def flush(self) -> list[str]:
        """The rest of the text as finished sentences (at the end of the stream)."""
        rest, self.pending = self.pending, ""
        return split_sentences(rest)


def words(text: str) -> Iterator[str]:
    """Repetition units: Latin words lower-cased and single Han characters."""
    for match in re.finditer(f"{HAN_CHAR.pattern}|[^\\W_]+", text.lower()):
        yield match.group()
