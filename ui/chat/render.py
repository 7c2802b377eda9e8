"""Pure rendering of answers for the chat: the message text, its source list, metrics line and source panels.

Document text (file names, headings, snippets, passages) is sanitised with the answer's link policy before it is
rendered as Markdown: no image, no link off the allowlist, no raw HTML (rag.sanitize). The answer's own text was
sanitised by the engine."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from rag.answer import Answer, Source
from rag.extract import passage_body
from rag.sanitize import STRICT, LinkPolicy
from ui.chat.texts import Language, text

SNIPPET_CHARS = 140
KIND_NAMES = {".pdf": "PDF", ".md": "Markdown", ".markdown": "Markdown", ".txt": "text", ".rst": "reST",
              ".html": "HTML", ".htm": "HTML", ".docx": "Word"}


@dataclass(frozen=True, slots=True)
class SourcePanel:
    """What clicking [n] opens: the PDF at its page when it can be read, else the passage as text."""

    name: str
    kind: str  # "pdf" or "text"
    content: str
    url: str | None = None  # the PDF's route: the browser reads it from there, with the user's own session
    page: int | None = None


def source_name(n: int) -> str:
    """The element name; Chainlit links every occurrence of it in the message, so [n] markers become links."""
    return f"[{n}]"


def source_line(source: Source, language: Language, links: LinkPolicy = STRICT) -> str:
    """`[n] file, p. 3 — Heading › Sub: “snippet…”` for the list under an answer."""
    hit = source.hit
    where = f"`{PurePosixPath(hit.source).name}`"
    if hit.page is not None:
        where += ", " + text(language, "page", page=hit.page)
    heading = f" — {hit.headings.replace(' > ', ' › ')}" if hit.headings else ""
    # The passage is sanitised whole before it is cut, so no image or link is cut in half (and shown as text).
    passage = snippet(links.clean(passage_body(hit)).text)
    shown = links.clean(f"{where}{heading}: “{passage}”").text
    return f"- {source_name(source.n)} {' '.join(shown.split())}"


def snippet(passage: str, limit: int = SNIPPET_CHARS) -> str:
    """The passage on one line, cut at a word boundary near `limit` characters."""
    flat = " ".join(passage.split())
    if len(flat) <= limit:
        return flat
    cut = flat[:limit].rsplit(" ", 1)[0] if " " in flat[:limit] else flat[:limit]
    return cut + "…"


def metrics_line(answer: Answer, language: Language) -> str:
    """Tokens in/out, first-token latency, total time and decode speed of one answer."""
    timings, usage = answer.timings, answer.usage
    first_ms = timings.first_token_ms
    decode_s = (timings.total_ms - first_ms) / 1000 if first_ms is not None else 0.0
    rate = f"{usage.completion_tokens / decode_s:.1f}" if decode_s > 0 and usage.completion_tokens else "–"
    return "*" + text(language, "metrics", prompt=usage.prompt_tokens, completion=usage.completion_tokens,
                      first=_seconds(first_ms), total=_seconds(timings.total_ms), rate=rate) + "*"


def _seconds(ms: float | None) -> str:
    return "–" if ms is None else f"{ms / 1000:.2f} s"


def not_found_block(language: Language) -> str:
    """The distinct "not in the documents" reply, with what to do next."""
    return f"> 🔍 **{text(language, 'not_found_title')}**\n>\n> {text(language, 'not_found_body')}"


def answer_markdown(answer: Answer, language: Language) -> str:
    """The finished message: answer, a warning when nothing is cited, the sources, and the metrics line."""
    if answer.mode == "refused":
        parts = [f"> ⚠️ {answer.text}" if answer.fallback == "withheld" else not_found_block(language)]
    elif answer.mode == "extracted":
        parts = [quoted_markdown(answer)]
        lines = "\n".join(source_line(source, language, answer.links) for source in answer.sources)
        parts.append(f"**{text(language, 'sources')}**\n{lines}")
    else:
        parts = [answer.text]
        if not answer.cited:
            parts.append(text(language, "uncited"))
        lines = "\n".join(source_line(source, language, answer.links) for source in answer.sources)
        parts.append(f"**{text(language, 'sources')}**\n{lines}")
    if answer.timings.first_token_ms is not None:
        parts.append(metrics_line(answer, language))
    return "\n\n".join(parts)


def quoted_markdown(answer: Answer) -> str:
    """A quoted answer: its label, then each sentence as a block quote with its [n]."""
    label = answer.text.split("\n", 1)[0]
    quotes = "\n>\n".join(f"> {sentence.text} {''.join(source_name(n) for n in sentence.sources)}"
                           for sentence in answer.shown_sentences)
    return f"📄 *{label}*\n\n{quotes}"


def source_panels(answer: Answer, pdfs: Mapping[str, str]) -> list[SourcePanel]:
    """One panel per source; `pdfs` maps the doc_id of each PDF the user may read to its URL (it opens there, at
    the page)."""
    panels, clean = [], answer.links.clean
    for source in answer.sources if answer.answerable else []:
        hit = source.hit
        url = pdfs.get(hit.doc_id)
        if url is not None:
            panels.append(SourcePanel(source_name(source.n), "pdf", clean(passage_body(hit)).text, url, hit.page))
            continue
        title = f"**{clean(hit.source).text}**" + (f" · p. {hit.page}" if hit.page is not None else "")
        heading = f"\n\n*{clean(hit.headings.replace(' > ', ' › ')).text}*" if hit.headings else ""
        body = clean(passage_body(hit)).text
        panels.append(SourcePanel(source_name(source.n), "text", f"{title}{heading}\n\n{body}"))
    return panels


def welcome_markdown(sources: Iterable[str], chunks: int, language: Language) -> str:
    """What is indexed: document count, passage count and file kinds."""
    names = list(sources)
    if not names:
        return text(language, "welcome_empty")
    kinds = Counter(KIND_NAMES.get(PurePosixPath(name).suffix.lower(), "other") for name in names)
    listed = ", ".join(f"{count} {kind}" for kind, count in kinds.most_common())
    pdf_hint = text(language, "welcome_pdf_hint") if kinds.get("PDF") else ""
    return text(language, "welcome", documents=text(language, "documents", n=len(names)), chunks=chunks,
                kinds=f": {listed}" if language == "en" else f"：{listed}", pdf_hint=pdf_hint)

