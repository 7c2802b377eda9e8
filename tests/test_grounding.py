"""The answer checks as pure functions: sentence splitting, language, the support check, loops, extraction."""

from __future__ import annotations

import pytest

from rag.core.extract import extract, separate_headings
from rag.core.grounding import RepetitionGuard, SupportChecker, names, numbers
from rag.core.sentences import SentenceBuffer, language_of, question_language, split_sentences
from rag.core.types import Hit

HISTORY = ("The Debian Project was officially founded by Ian Murdock on August 16th, 1993. The name comes from the "
           "names of the creator of Debian, Ian Murdock, and his wife, Debra.")
VENV = ("12.2. Creating Virtual Environments\nTo create a virtual environment, decide upon a directory where you "
        "want to place it, and run the venv module as a script with the directory path:\n\npython3 -m venv "
        "tutorial-env\n\nThis will create the tutorial-env directory if it doesn't exist.")
VIRTUAL = "虚拟软件包是一个通用的名称，适合称呼一组软件包中的任意一个，所有软件包都提供相似的基本功能。"
MIXED = ("Founded by Ian Murdock on August 16th, 1993 [1]. The name joins Ian and Debra, e.g. his wife.[2] Run "
         "python3 -m venv env.\n- step one\n- step two\n虚拟软件包是通用名称。可以使用 cron-apt；它默认只更新。 "
         "J. Smith said so! then\nwrapped line.")


def test_sentences_split_on_english_and_chinese_punctuation_lists_and_keep_markers() -> None:
    assert split_sentences(MIXED) == [
        "Founded by Ian Murdock on August 16th, 1993 [1].", "The name joins Ian and Debra, e.g. his wife.[2]",
        "Run python3 -m venv env.", "- step one", "- step two", "虚拟软件包是通用名称。",
        "可以使用 cron-apt；它默认只更新。", "J. Smith said so! then wrapped line."]


WRAPPED_ITEM = ("2. 61184…65519 → UIDs for dynamic users are allocated from this range (see the\n"
                "   `DynamicUser=` documentation in\n   [`systemd.exec(5)`](https://example.org/exec)). This\n"
                "   range is below 65535.\n- next item\n   Indented Title\nText follows.")


def test_a_wrapped_list_item_is_one_sentence_and_its_short_lines_are_no_headings() -> None:
    assert split_sentences(separate_headings(WRAPPED_ITEM)) == [
        "2.", "61184…65519 → UIDs for dynamic users are allocated from this range (see the `DynamicUser=` "
        "documentation in [`systemd.exec(5)`](https://example.org/exec)).", "This range is below 65535.",
        "- next item", "Indented Title Text follows."]
    assert split_sentences(separate_headings("   Indented Title\nText follows.")) == [
        "Indented Title", "Text follows."]


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_streamed_sentences_equal_the_finished_split(size: int) -> None:
    buffer, out = SentenceBuffer(), []
    for start in range(0, len(MIXED), size):
        out += buffer.feed(MIXED[start:start + size])
    assert out + buffer.flush() == split_sentences(MIXED)


def test_a_sentence_is_handed_out_only_once_what_follows_it_is_seen() -> None:
    buffer = SentenceBuffer()
    assert buffer.feed("It was founded in 1993.") == []  # a marker may still follow
    assert buffer.feed(" [1") == []
    assert buffer.feed("] Then") == ["It was founded in 1993. [1]"]


def test_language_of_texts_and_questions() -> None:
    assert (language_of("使用 cron-apt 工具"), language_of("Use the cron-apt tool daily"),
            language_of("build-essential"), language_of("`python3 -m venv env` [1]")) == ("zh", "en", None, None)
    assert (question_language("什么是虚拟软件包？"), question_language("What is a virtual package?"),
            question_language("I18N 和 L10N 分别是什么意思？")) == ("zh", "en", "zh")


def test_facts_are_numbers_and_names() -> None:
    assert numbers("Founded on August 16th, 1993; needs 1,160 MB and version 3.11.") == {"16", "1993", "1160", "3.11"}
    assert names("Run `python3 -m venv env` with --upgrade-pip in /etc/apt, as Ian Murdock said.") == {
        "python3 -m venv env", "--upgrade-pip", "/etc/apt", "ian murdock"}


@pytest.mark.parametrize(("sentence", "supported", "sources", "reason"), [
    ("The name Debian comes from Ian Murdock and his wife Debra [2].", True, (1,), ""),
    ("Debian was founded on August 16th, 1993 by Ian Murdock.", True, (1,), ""),
    ("To create a virtual environment, run python3 -m venv tutorial-env [1].", True, (2,), ""),
    # One place in one excerpt must back a claim: words from two excerpts do not add up.
    ("The name joins Ian and Debra, and you create environments with the venv module.", False, (2,), "name"),
    ("Ian Murdock was born in 1981.", False, (1,), "number"),
    ("He was a British engineer who helped create the GNU General Pentestistry.", False, (2,), "name"),
    ("Run `python3 -m venv myenv`.", False, (2,), "name"),
    ("Debian is a popular distribution used by many companies worldwide.", False, (1,), "polarity"),
    ("<b>Debian</b> was founded by <i>Ian Murdock</i>.", True, (1,), ""),
    ("Debian 由 Ian Murdock 创建。", False, (), "language"),
])
def test_support_check(sentence: str, supported: bool, sources: tuple[int, ...], reason: str) -> None:
    verdict = SupportChecker([HISTORY, VENV], "en").check(sentence)
    assert (verdict.supported, verdict.sources, verdict.reason) == (supported, sources, reason)
    assert "[" not in verdict.text and "<" not in verdict.text


def test_support_check_bad_input_filler_markers_and_repeats() -> None:
    checker = SupportChecker([HISTORY], "en")
    assert [checker.check(text).reason for text in ("", "   ", "[1][2]", "[7]", "Sure!", "<br/>")] == ["empty"] * 6
    assert checker.check("Debian was founded by Ian Murdock [7].").supported
    assert checker.check("Debian was founded by Ian Murdock.").reason == "repeat"


def test_support_check_in_chinese() -> None:
    checker = SupportChecker([VIRTUAL], "zh")
    assert checker.check("虚拟软件包是一组软件包的通用名称。").supported
    assert checker.check("虚拟软件包是 Debian 预安装程序。").reason == "name"
    assert checker.check("虚拟软件包是安装程序的预装组件。").reason == "coverage"
    assert checker.check("A virtual package is a generic name for a group.").reason == "language"


def test_repetition_guard_stops_loops_but_not_normal_text() -> None:
    guard = RepetitionGuard()
    assert next(n for n in range(40) if guard.feed("--upgrade-p" if n % 2 else "ip ")) < 40
    calm = RepetitionGuard()
    assert not any(calm.feed(word + " ") for word in (HISTORY + " " + VENV).split())
    chinese = RepetitionGuard()
    assert any(chinese.feed("这是系统给助手的说明。") for _ in range(4))


def test_extract_quotes_the_answering_sentence_and_the_command_it_introduces() -> None:
    hits = [Hit("a", VENV, "venv.html", 0.7, headings="12.2. Creating Virtual Environments"),
            Hit("b", HISTORY, "history.pdf", 0.3, page=7)]
    quotes = extract("How do I create a Python virtual environment?", hits, "en")
    assert [quote.n for quote in quotes] == [1, 1]
    assert quotes[0].text.startswith("To create a virtual environment")
    assert quotes[1].text == "python3 -m venv tutorial-env"
    zh = extract("什么是虚拟软件包？", [Hit("c", "其他内容。" + VIRTUAL, "faq.html", 0.5)], "zh")
    assert [quote.text for quote in zh] == [VIRTUAL]
    assert extract("anything", [Hit("d", "Hi.", "x.md", 0.5)], "en") == []


def test_a_quote_holds_the_terms_the_question_names() -> None:
    # data/QUESTIONS.md #10: two rare plain words (意思, 分别) outweighed the terms asked about.
    i18n = "一个应用软件的多语言化 (M17N)或本地语言支持，通过 2 个步骤完成。\n" \
           "国际化 (I18N): 使一个软件能够处理多个语言环境。\n本地化 (L10N)：使一个软件处理一个特定的语言环境。"
    wants = "这些“想要”标志表示用户想要对软件包做什么。 他们的意思分别是： " \
            "未知（unknown）：用户从未表示是否需要该软件包。 安装（install）：用户希望该软件包被安装或升级。"
    hits = [Hit("a", i18n, "i18n.html", 0.6), Hit("b", wants, "faq.html", 0.55)]
    assert [quote.text for quote in extract("I18N 和 L10N 分别是什么意思？", hits, "zh")] == [
        "国际化 (I18N): 使一个软件能够处理多个语言环境。", "本地化 (L10N)：使一个软件处理一个特定的语言环境。"]


@pytest.mark.parametrize(("sentence", "reason"), [
    # Words of the excerpt recombined into a claim it does not make: no one place of it says so.
    ("The name Debian comes from August 16th, 1993.", "coverage"),
    ("Ian Murdock's wife Debra founded the Debian Project.", "name"),
    # Negation and quantity must be what the excerpt's place says.
    ("The Debian Project was not officially founded by Ian Murdock on August 16th, 1993.", "polarity"),
    ("The Debian Project was only founded by Ian Murdock on August 16th, 1993.", "polarity"),
    # A heading repeated is no answer.
    ("12.2. Creating Virtual Environments", "heading"),
])
def test_support_needs_one_place_that_says_the_same(sentence: str, reason: str) -> None:
    verdict = SupportChecker([HISTORY, VENV], "en").check(sentence)
    assert (verdict.supported, verdict.reason) == (False, reason)


CRON = "可以。您可以使用 cron-apt；这一工具使用 cron 任务定期升级系统。" \
       "它默认只更新软件包列表并下载新的软件包，但不安装它们。"
COMPAT = "在大多数情况下，Linux 与其他 Unix 系统的源代码是兼容的。" \
         "软件开发需要完全的兼容性。"


@pytest.mark.parametrize(("sentence", "supported", "reason"), [
    ("它默认只更新软件包列表并下载新的软件包，但不安装它们。", True, ""),
    ("它默认更新软件包列表并安装新的软件包。", False, "polarity"),  # the negation dropped
    ("它默认安装所有新的软件包。", False, "polarity"),
    ("Linux 与其他 Unix 系统的源代码在大多数情况下是兼容的。", True, ""),  # the clauses in the other order
    ("Linux 与其他 Unix 系统的源代码是完全兼容的。", False, "polarity"),  # "in most cases" became "fully"
    ("可以。", False, "verdict"),
])
def test_support_in_chinese_keeps_negation_and_quantity(sentence: str, supported: bool, reason: str) -> None:
    verdict = SupportChecker([CRON, COMPAT], "zh").check(sentence)
    assert (verdict.supported, verdict.reason) == (supported, reason)


VACUUMING = "There are two variants of VACUUM: standard VACUUM and VACUUM FULL. VACUUM FULL can reclaim more disk " \
            "space but runs much more slowly. Also, the standard form of VACUUM can run in parallel with production " \
            "database operations."


@pytest.mark.parametrize(("sentence", "supported", "reason"), [
    ("VACUUM FULL can reclaim more disk space but runs much more slowly.", True, ""),
    ("Standard VACUUM can run in parallel with production database operations.", True, ""),
    # A term said of another term: the name VACUUM is there, but only as part of VACUUM FULL where this is said.
    ("Standard VACUUM can reclaim more disk space but runs much more slowly.", False, "name"),
    ("VACUUM FULL can run in parallel with production database operations.", False, "name"),
    # The subject turned into what it is compared with (Qwen's bullet under "standard VACUUM" in the demo).
    ("Can reclaim more disk space but runs much more slowly than VACUUM FULL.", False, "polarity"),
])
def test_a_term_and_a_comparison_are_what_the_excerpt_says_them_of(sentence: str, supported: bool,
                                                                  reason: str) -> None:
    checker = SupportChecker([VACUUMING], "en", "What is the difference between VACUUM and VACUUM FULL?")
    verdict = checker.check(sentence)
    assert (verdict.supported, verdict.reason) == (supported, reason)


def test_code_fences_and_their_language_tag_are_not_words_of_the_claim() -> None:
    verdict = SupportChecker([VENV], "en").check("```bash\npython3 -m venv tutorial-env\n```")
    assert verdict.supported and verdict.text == "python3 -m venv tutorial-env"


def test_english_words_said_differently_inside_the_place_are_not_support() -> None:
    checker = SupportChecker(["Default values are created exactly once, when the function is defined."], "en")
    assert checker.check("Default values are created exactly once, when the function is defined.").supported
    verdict = checker.check("Default values are created exactly once, when the function is called.")
    assert (verdict.supported, verdict.reason) == (False, "swapped")


def test_a_copied_heading_path_is_no_answer_and_number_words_count() -> None:
    path = "第 8 章 国际化和本地化 > 8.1. 语言环境 > 8.1.2. 系统默认"
    checker = SupportChecker([f"{path}\n系统默认的语言环境写在 /etc/default/locale。"], "zh")
    assert checker.check("第 8 章 国际化和本地化 > 8.1. 语言环境 > 8.1.2.").reason == "heading"
    english = SupportChecker(["Sets are two orders of magnitude faster here."], "en")
    assert english.check("Sets are three orders of magnitude faster here.").reason == "number"


def test_the_check_on_the_held_out_half_of_the_labelled_sentences() -> None:
    """data/eval/support: floors under the test half's figures of 2026-12-02 (docs), so a change to the check
    that admits more false sentences, or loses true ones, fails here."""
    from benchmarks.support_calibration import LABELLED, load, score

    figures = score(load(LABELLED, "test"))
    assert figures["en/model"]["precision"] >= 0.97 and figures["en/model"]["recall"] >= 0.85, figures
    assert figures["zh/model"]["precision"] >= 0.95 and figures["zh/model"]["recall"] >= 0.95, figures
    assert figures["all"]["false_accepts"] <= 7, figures


def test_an_excerpts_units_are_weighed_once_and_shared_by_answers() -> None:
    from rag.core.alignment import units
    from rag.core.grounding import excerpt_units

    excerpt = "VACUUM reclaims storage occupied by dead tuples. It can't run inside a transaction block."
    first = SupportChecker([excerpt], "en")._units[0]
    assert first == units(excerpt)
    assert SupportChecker(["Other text.", excerpt], "en")._units[1] is first
    assert excerpt_units.cache_info().hits >= 1


def test_an_excerpts_language_is_remembered_and_is_language_of() -> None:
    from rag.core.sentences import excerpt_language

    for text in (HISTORY, VIRTUAL, "apt-get source foo"):
        assert excerpt_language(text) == language_of(text)
    hits = excerpt_language.cache_info().hits
    excerpt_language(VIRTUAL)
    assert excerpt_language.cache_info().hits == hits + 1


def test_a_passages_quotable_sentences_are_remembered_and_filtered_per_question() -> None:
    from rag.core.extract import passage_sentences

    hits = [Hit("a", VENV, "venv.html", 0.7), Hit("b", VENV, "copy.html", 0.6)]
    first = extract("How do I create a Python virtual environment?", hits, "en")
    hits_before = passage_sentences.cache_info().hits
    assert extract("How do I create a Python virtual environment?", hits, "en") == first
    assert passage_sentences.cache_info().hits >= hits_before + 2  # both passages, without splitting them again
    assert {quote.n for quote in first} == {1}  # the same sentence in the second excerpt is not quoted twice
    remembered = passage_sentences(VENV)
    assert all(len(sentence.text) >= 12 for sentence in remembered)
    # What a question restates is dropped per question, not in the memory: the same passage serves another.
    other = extract("What does python3 -m venv tutorial-env do?", hits, "en")
    assert all(quote.text != "python3 -m venv tutorial-env" for quote in other)
    assert any(sentence.text == "python3 -m venv tutorial-env" for sentence in remembered)
