"""Pure rendering of answers for the chat: the message text, its source list, metrics line and source panels.

Document text (file names, headings, snippets, passages) is sanitised with the answer's link policy before it is
rendered as Markdown: no image, no link off the allowlist, no raw HTML (rag.core.sanitize). The answer's own text was
sanitised by the engine."""

from __future__ import annotations

import html
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from rag.core.answer import Answer, Source
from rag.core.extract import passage_body
from rag.core.sanitize import STRICT, LinkPolicy
from ui.chat.texts import Language, text

SNIPPET_CHARS = 140
MIN_DECODE_MS = 50.0  # a shorter span from the model's first token to the end gives no meaningful decode rate
# What a source's name keeps of its file name: characters Markdown shows as themselves, and `_` inside words
# (Chainlit finds the link of a name only when the link's text renders as the name itself).
_NOT_IN_NAME = re.compile(r"[^\w .,:;()+=%'-]|_(?![^\W_])|(?<![^\W_])_")
KIND_NAMES = {".pdf": "PDF", ".md": "Markdown", ".markdown": "Markdown", ".txt": "text", ".rst": "reST",
              ".html": "HTML", ".htm": "HTML", ".docx": "Word"}


@dataclass(frozen=True, slots=True)
class SourcePanel:
    """What clicking a source's name opens: the PDF at its page when it can be read, else the passage as text."""

    name: str
    kind: str  # "pdf" or "text"
    content: str
    url: str | None = None  # the PDF's route: the browser reads it from there, with the user's own session
    page: int | None = None


def marker(n: int) -> str:
    """How an answer refers to its source n."""
    return f"[{n}]"


def source_name(source: Source, language: Language, links: LinkPolicy = STRICT) -> str:
    """`[n] file, p. 3`: the name of the source's panel (its title) and the text in the message that Chainlit
    makes its link; unique in its message by its number."""
    hit = source.hit
    file = html.unescape(links.clean(" ".join(PurePosixPath(hit.source).name.split())).text)
    page = ", " + text(language, "page", page=hit.page) if hit.page is not None else ""
    return f"{marker(source.n)} {_NOT_IN_NAME.sub('-', file)}{page}"


def source_line(source: Source, language: Language, links: LinkPolicy = STRICT) -> str:
    """`[n] file, p. 3 — Heading › Sub: “snippet…”` for the list under an answer; its name opens its panel."""
    hit = source.hit
    heading = f" — {hit.headings.replace(' > ', ' › ')}" if hit.headings else ""
    # The passage is sanitised whole before it is cut, so no image or link is cut in half (and shown as text).
    passage = snippet(links.clean(passage_body(hit)).text)
    shown = " ".join(links.clean(f"{heading}: “{passage}”").text.split())
    return f"- {source_name(source, language, links)}{' ' if heading else ''}{shown}"


def snippet(passage: str, limit: int = SNIPPET_CHARS) -> str:
    """The passage on one line, cut at a word boundary near `limit` characters."""
    flat = " ".join(passage.split())
    if len(flat) <= limit:
        return flat
    cut = flat[:limit].rsplit(" ", 1)[0] if " " in flat[:limit] else flat[:limit]
    return cut + "…"


def metrics_line(answer: Answer, language: Language) -> str:
    """What one answer took, true to its mode: tokens, first shown text, total and decode rate for model text;
    "quoted" or "no answer" otherwise, naming a model draft that was written but not shown."""
    total = text(language, "metrics_total", total=_seconds(answer.timings.total_ms))
    if answer.mode == "generated":
        first = text(language, "metrics_first", first=_seconds(answer.timings.first_token_ms))
        parts = [_tokens(answer, language), first, total]
        rate = decode_rate(answer)
        if rate is not None:
            parts.append(text(language, "metrics_rate", rate=f"{rate:.1f}"))
    else:
        parts = [text(language, "metrics_quoted" if answer.mode == "extracted" else "metrics_refused")]
        if drafted(answer):
            parts.append(text(language, "metrics_withheld", tokens=_tokens(answer, language)))
        parts.append(total)
    return "*" + " · ".join(parts) + "*"


def decode_rate(answer: Answer) -> float | None:
    """Completion tokens per second from the model's first token to the end; None without tokens or over a span
    shorter than MIN_DECODE_MS (never a rate over a zero span)."""
    timings, tokens = answer.timings, answer.usage.completion_tokens
    start = timings.draft_first_token_ms if timings.draft_first_token_ms is not None else timings.first_token_ms
    if start is None or tokens <= 0 or timings.total_ms - start < MIN_DECODE_MS:
        return None
    return tokens / ((timings.total_ms - start) / 1000)


def drafted(answer: Answer) -> bool:
    """Whether the model wrote text for this answer."""
    return answer.usage.completion_tokens > 0 or answer.timings.draft_first_token_ms is not None or bool(
        answer.withheld)


def _tokens(answer: Answer, language: Language) -> str:
    usage = answer.usage
    return text(language, "metrics_tokens", prompt=usage.prompt_tokens, completion=usage.completion_tokens)


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
    quotes = "\n>\n".join(f"> {sentence.text} {''.join(marker(n) for n in sentence.sources)}"
                           for sentence in answer.shown_sentences)
    return f"📄 *{label}*\n\n{quotes}"


def source_panels(answer: Answer, pdfs: Mapping[str, str], language: Language) -> list[SourcePanel]:
    """One panel per source, named by it; `pdfs` maps the doc_id of each PDF the user may read to its URL (it
    opens there, at the page)."""
    panels, clean = [], answer.links.clean
    for source in answer.sources if answer.answerable else []:
        hit, name = source.hit, source_name(source, language, answer.links)
        url = pdfs.get(hit.doc_id)
        if url is not None:
            panels.append(SourcePanel(name, "pdf", clean(passage_body(hit)).text, url, hit.page))
            continue
        page = " · " + text(language, "page", page=hit.page) if hit.page is not None else ""
        heading = f"\n\n*{clean(hit.headings.replace(' > ', ' › ')).text}*" if hit.headings else ""
        body = clean(passage_body(hit)).text
        panels.append(SourcePanel(name, "text", f"**{clean(hit.source).text}**{page}{heading}\n\n{body}"))
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

