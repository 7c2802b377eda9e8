"""The chat's rendering is pure: exact strings for answers, sources, refusals, metrics and the welcome."""

from __future__ import annotations

from rag.answer import Answer, Sentence, Source, Timings
from rag.llm import Usage
from rag.types import Hit
from ui.chat.render import answer_markdown, metrics_line, snippet, source_panels, welcome_markdown
from ui.chat.texts import pick_language

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
        "- [1] `setup.pdf`, p. 3 — Install: “Run the installer from the USB stick and follow the prompts.”\n"
        "- [2] `vpn.md` — VPN › Linux: “Import the WireGuard profile.”\n\n"
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
                           "**Sources**\n- [1] `setup.pdf`, p. 3")
    assert "4 GB" not in text
    withheld = Answer("I could not write an answer that the documents support; please read the sources below.",
                      False, False, [Source(1, PDF_HIT, False)], Timings(12.0, 300.0, 900.0), mode="refused",
                      fallback="withheld")
    assert answer_markdown(withheld, "en").startswith("> ⚠️ I could not write an answer that the documents support")


def test_chinese_texts() -> None:
    text = answer_markdown(_answer(), "zh")
    assert "**来源**" in text and "`setup.pdf`, 第 3 页" in text
    assert metrics_line(_answer(), "zh") == "*输入 410 词元 · 输出 40 · 首词元 0.25 s · 总计 2.25 s · 20.0 词元/秒*"


def test_metrics_without_tokens_show_dashes() -> None:
    answer = Answer("x", True, True, [], Timings(5.0, None, 80.0), Usage())
    assert metrics_line(answer, "en") == "*0 tokens in · 0 out · first token – · 0.08 s total · – tok/s*"


def test_snippet_cuts_at_a_word() -> None:
    assert snippet("alpha beta gamma", 11) == "alpha beta…"
    assert snippet("  short\n text ") == "short text"


def test_pdf_sources_open_from_their_url_at_the_page() -> None:
    url = "/v1/documents/d1/file"
    panels = source_panels(_answer(), {"d1": url})
    assert [(p.name, p.kind, p.url, p.page) for p in panels] == [("[1]", "pdf", url, 3), ("[2]", "text", None, None)]
    assert panels[1].content == "**it/vpn.md**\n\n*VPN › Linux*\n\nImport the WireGuard profile."
    # A PDF the user cannot read (not on disk any more) falls back to its passage.
    assert source_panels(_answer(), {})[0].kind == "text"


def test_refusals_have_no_panels() -> None:
    assert source_panels(_answer(answerable=False), {}) == []


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
