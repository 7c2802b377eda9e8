"""The chat's rendering is pure: exact strings for answers, sources, refusals, metrics and the welcome."""

from __future__ import annotations

import pytest

from rag.core.answer import Answer, Sentence, Source, Timings
from rag.core.ports import Usage
from rag.core.types import Hit
from ui.chat.render import answer_markdown, metrics_line, snippet, source_name, source_panels, welcome_markdown
from ui.chat.texts import Language, pick_language

PDF_HIT = Hit("c1", "Install\nRun the installer from the USB stick and follow the prompts.", "guides/setup.pdf", 0.8,
              page=3, headings="Install", doc_id="d1")
MD_HIT = Hit("c2", "VPN > Linux\nImport the WireGuard profile.", "it/vpn.md", 0.6, headings="VPN > Linux",
             doc_id="d2")


def _answer(text: str = "Run the installer [1].", answerable: bool = True, cited: bool = True,
            first_token_ms: float | None = 250.0) -> Answer:
    sources = [Source(1, PDF_HIT, True), Source(2, MD_HIT, False)]
    return Answer(text, answerable, cited, sources, Timings(12.0, first_token_ms, 2250.0), Usage(410, 40),
                  mode="generated" if answerable else "refused")


def test_answer_lists_sources_with_file_page_heading_and_snippet() -> None:
    assert answer_markdown(_answer(), "en") == (
        "Run the installer [1].\n\n"
        "**Sources**\n"
        "- [1] setup.pdf, p. 3 — Install: “Run the installer from the USB stick and follow the prompts.”\n"
        "- [2] vpn.md — VPN › Linux: “Import the WireGuard profile.”\n\n"
        "*410 tokens in · 40 out · first token 0.25 s · 2.25 s total · 20.0 tok/s*"
    )


def test_uncited_answer_is_flagged() -> None:
    assert "⚠️ This answer cites no source; check it against the sources below." in answer_markdown(
        _answer(cited=False), "en")


def test_refusal_is_a_distinct_block_without_sources() -> None:
    text = answer_markdown(_answer("Not in the documents.", answerable=False, first_token_ms=None), "en")
    assert text == ("> 🔍 **Not in the documents**\n>\n> I couldn't find this in the indexed documents, so I "
                    "won't guess. Try rephrasing with the words your documents use, or contact the helpdesk.")


def test_quoted_answer_is_shown_as_quotes_and_a_withheld_draft_never() -> None:
    quoted = Answer("From the documents (quoted):\n“Run the installer from the USB stick.” [1]", True, True,
                    [Source(1, PDF_HIT, True)], Timings(12.0, 300.0, 900.0), mode="extracted", grounded=0.0,
                    sentences=[Sentence("The installer needs 4 GB.", False, (1,), False, "number"),
                               Sentence("Run the installer from the USB stick.", True, (1,), True)],
                    fallback="ungrounded")
    text = answer_markdown(quoted, "en")
    assert text.startswith("📄 *From the documents (quoted):*\n\n> Run the installer from the USB stick. [1]\n\n"
                           "**Sources**\n- [1] setup.pdf, p. 3")
    assert "4 GB" not in text
    withheld = Answer("I could not write an answer that the documents support; please read the sources below.",
                      False, False, [Source(1, PDF_HIT, False)], Timings(12.0, 300.0, 900.0), mode="refused",
                      fallback="withheld")
    assert answer_markdown(withheld, "en").startswith("> ⚠️ I could not write an answer that the documents support")


def test_chinese_texts() -> None:
    text = answer_markdown(_answer(), "zh")
    assert "**来源**" in text and "- [1] setup.pdf, 第 3 页 — Install" in text


def _timed(mode: str, timings: Timings, usage: Usage, withheld: bool = False) -> Answer:
    sentences = [Sentence("The installer needs 4 GB.", False, (1,), False, "number")] if withheld else []
    return Answer("x", mode != "refused", True, [], timings, usage, mode=mode,  # type: ignore[arg-type]
                  sentences=sentences)


GENERATED = _timed("generated", Timings(12.0, 250.0, 2250.0), Usage(410, 40))
# The model's first token at 0.25 s, its first sentence shown (checked) at 0.90 s: the rate counts from 0.25 s.
CHECKED = _timed("generated", Timings(12.0, 900.0, 2250.0, 250.0), Usage(410, 40))
INSTANT = _timed("generated", Timings(12.0, 2230.0, 2250.0, 2230.0), Usage(410, 40))  # a 20 ms span
BACKWARDS = _timed("generated", Timings(12.0, 300.0, 200.0), Usage(410, 40))  # a negative span
NO_TOKENS = _timed("generated", Timings(5.0, None, 80.0), Usage())
QUOTED = _timed("extracted", Timings(12.0, 300.0, 300.4), Usage())  # RAG_ANSWER_MODE=extract: no model asked
# The reported bug: a draft withheld, the quotes shown at the end (no span at all since the first shown text).
QUOTED_DRAFT = _timed("extracted", Timings(40.0, 15810.0, 15810.5, 2000.0), Usage(1210, 25), withheld=True)
REFUSED = _timed("refused", Timings(40.0, 50.0, 50.0), Usage())
REFUSED_DRAFT = _timed("refused", Timings(12.0, 900.0, 900.0, 300.0), Usage(410, 12), withheld=True)
METRICS: list[tuple[Answer, Language, str]] = [
    (GENERATED, "en", "*410 tokens in · 40 out · first token 0.25 s · 2.25 s total · 20.0 tok/s*"),
    (GENERATED, "zh", "*输入 410 词元 · 输出 40 · 首词元 0.25 s · 总计 2.25 s · 20.0 词元/秒*"),
    (CHECKED, "en", "*410 tokens in · 40 out · first token 0.90 s · 2.25 s total · 20.0 tok/s*"),
    (INSTANT, "en", "*410 tokens in · 40 out · first token 2.23 s · 2.25 s total*"),
    (BACKWARDS, "en", "*410 tokens in · 40 out · first token 0.30 s · 0.20 s total*"),
    (NO_TOKENS, "en", "*0 tokens in · 0 out · first token – · 0.08 s total*"),
    (QUOTED, "en", "*quoted · 0.30 s total*"),
    (QUOTED, "zh", "*引用原文 · 总计 0.30 s*"),
    (QUOTED_DRAFT, "en", "*quoted · model draft withheld (1210 tokens in · 25 out) · 15.81 s total*"),
    (QUOTED_DRAFT, "zh", "*引用原文 · 模型草稿未显示（输入 1210 词元 · 输出 25） · 总计 15.81 s*"),
    (REFUSED, "en", "*no answer · 0.05 s total*"),
    (REFUSED, "zh", "*未作答 · 总计 0.05 s*"),
    (REFUSED_DRAFT, "en", "*no answer · model draft withheld (410 tokens in · 12 out) · 0.90 s total*"),
    (REFUSED_DRAFT, "zh", "*未作答 · 模型草稿未显示（输入 410 词元 · 输出 12） · 总计 0.90 s*"),
]


@pytest.mark.parametrize(("answer", "language", "expected"), METRICS)
def test_metrics_line_is_true_to_the_answers_mode(answer: Answer, language: Language, expected: str) -> None:
    """A decode rate only for model text over a measurable span; quotes and refusals say what they are."""
    assert metrics_line(answer, language) == expected


def test_a_quoted_answer_ends_with_its_metrics_and_no_rate() -> None:
    quoted = Answer("From the documents (quoted):\n“Run the installer.” [1]", True, True, [Source(1, PDF_HIT, True)],
                    QUOTED_DRAFT.timings, QUOTED_DRAFT.usage, mode="extracted",
                    sentences=[Sentence("Run the installer.", True, (1,), True)])
    text = answer_markdown(quoted, "en")
    assert text.endswith("\n\n*quoted · model draft withheld (1210 tokens in · 25 out) · 15.81 s total*")
    assert "tok/s" not in text


def test_snippet_cuts_at_a_word() -> None:
    assert snippet("alpha beta gamma", 11) == "alpha beta…"
    assert snippet("  short\n text ") == "short text"


def test_pdf_sources_open_from_their_url_at_the_page() -> None:
    url = "/v1/documents/d1/file"
    panels = source_panels(_answer(), {"d1": url}, "en")
    assert [(p.name, p.kind, p.url, p.page) for p in panels] == [
        ("[1] setup.pdf, p. 3", "pdf", url, 3), ("[2] vpn.md", "text", None, None)]
    assert panels[1].content == "**it/vpn.md**\n\n*VPN › Linux*\n\nImport the WireGuard profile."
    # A PDF the user cannot read (not on disk any more) falls back to its passage.
    fallback = source_panels(_answer(), {}, "zh")[0]
    assert (fallback.name, fallback.kind) == ("[1] setup.pdf, 第 3 页", "text")
    assert fallback.content.startswith("**guides/setup.pdf** · 第 3 页\n\n*Install*\n\nRun the installer")


def test_each_panel_is_named_by_its_source_and_the_message_links_every_name() -> None:
    """Chainlit links an element where the message contains its name and titles its panel by it: each name is
    its own source's, once per source line, and not part of another name."""
    answer = _answer()
    names = [panel.name for panel in source_panels(answer, {}, "en")]
    assert names == ["[1] setup.pdf, p. 3", "[2] vpn.md"]
    lines = answer_markdown(answer, "en").split("\n")
    assert [line for line in lines if any(name in line for name in names)] == [
        f"- {name}{rest}" for name, rest in zip(names, (" — Install: “Run the installer from the USB stick and "
                                                       "follow the prompts.”", " — VPN › Linux: “Import the "
                                                       "WireGuard profile.”"), strict=True)]
    assert not any(a != b and a in b for a in names for b in names)


@pytest.mark.parametrize(("source", "name"), [
    ("docs/vpn_mac_notes.md", "[1] vpn_mac_notes.md"),  # `_` inside a word stays
    ("__init__.py", "[1] --init--.py"),  # emphasis markers would not render as the name
    ("a*b*c `x` ~~y~~ [z] <b>&amp;.md", "[1] a-b-c -x- --y-- -z- -b--.md"),
    ("me@corp.md", "[1] me-corp.md"),  # no e-mail autolink
    ("it/![x](http:sink.test).md", "[1] x.md"),  # sanitised as document text is
    ("报销\n单 模板.md", "[1] 报销 单 模板.md"),
])
def test_source_names_render_as_themselves(source: str, name: str) -> None:
    assert source_name(Source(1, Hit("c", "t", source, 0.5), True), "en") == name


def test_refusals_have_no_panels() -> None:
    assert source_panels(_answer(answerable=False), {}, "en") == []


def test_welcome_says_what_is_indexed() -> None:
    sources = ["a.pdf", "b.pdf", "c.md", "d.html"]
    assert welcome_markdown(sources, 120, "en") == (
        "Ask me about the company's documents. I answer from **4 documents** indexed (**120** passages: 2 PDF, "
        "1 Markdown, 1 HTML), and every answer lists its sources: click **[1]**, **[2]**… to read the passage "
        "(a PDF opens at its page).")
    assert welcome_markdown([], 0, "en").startswith("The knowledge base is empty")
    assert welcome_markdown(["a.md"], 3, "zh").startswith("可以向我询问公司文档中的内容。我根据已索引的 **1 份文档**")


def test_language_follows_the_browser() -> None:
    assert pick_language("zh-CN,zh;q=0.9,en;q=0.8") == "zh"
    assert pick_language("en-US,en;q=0.9,zh;q=0.5") == "en"
    assert pick_language("fr-FR") == "en"
    assert pick_language("") == "en"
