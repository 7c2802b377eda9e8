"""The query path's answer logic: the real QueryEngine and Retriever over pages in memory and a scripted chat
model (tests/fakes.py), and once per store mode end to end (MiniLM, Chroma, the openai SDK against a fake server)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

import rag.core.extract as extract_module
from ingest import service
from rag.config import Settings
from rag.core.access import LOCAL_OPERATOR as ALL
from rag.core.answer import Done, QueryEngine, Retrieved, Token
from rag.core.errors import EmptyIndex, LLMUnavailable
from rag.core.prompt import CONDENSE_PROMPT, REFUSAL, SYSTEM_PROMPT, Message
from rag.core.retrieve import Retriever
from rag.tools.evaluate import recheck
from rag.wiring import build_llm, build_store
from tests.conftest import STORE_MODES, CountingEmbedder
from tests.fake_llm import FakeLLMServer
from tests.fakes import HashingEncoder, Page, ScriptedChatModel, memory_retriever

Write = Callable[[str, str | bytes], Path]
LEAVE = "How many days of annual leave do staff get?"


@pytest.fixture
def retriever() -> Retriever:
    return memory_retriever(Page("hr/leave.md", "Leave", "Staff get 25 days of annual leave per year."),
                            Page("it/vpn.md", "VPN", "Install WireGuard and import the company profile to reach "
                                                     "the intranet."))


@pytest.fixture
def wired_retriever(docs: Path, write: Write, settings: Settings, embedder: CountingEmbedder) -> Retriever:
    write("hr/leave.md", "# Leave\nStaff get 25 days of annual leave per year.")
    write("it/vpn.md", "# VPN\nInstall WireGuard and import the company profile to reach the intranet.")
    service.sync([docs], settings, embedder=embedder)
    return Retriever(embedder, build_store(settings))


@STORE_MODES
def test_answer_streams_checked_sentences_with_repaired_citations(wired_retriever: Retriever) -> None:
    # The model cites [2] (the VPN page) for a leave fact and invents [7]: both are replaced by the real source.
    server = FakeLLMServer(lambda messages: "Staff get 25 days of annual leave per year [2][7].")
    engine = QueryEngine(wired_retriever, server.llm(), top_k=2, refusal_threshold=0.1)
    events = list(engine.stream("How many days of annual leave do staff get?", principal=ALL))
    assert isinstance(events[0], Retrieved)
    assert [e.text for e in events if isinstance(e, Token)] == ["Staff get 25 days of annual leave per year [1]."]
    answer = events[-1].answer if isinstance(events[-1], Done) else None
    assert answer is not None and answer.answerable and answer.cited
    assert (answer.mode, answer.grounded, answer.fallback) == ("generated", 1.0, "")
    assert [(s.n, s.hit.source, s.cited) for s in answer.sources] == [(1, "hr/leave.md", True)]  # VPN: not relevant
    assert answer.usage.prompt_tokens == 100
    sent = server.requests[0]
    assert sent["model"] == "fake-model" and sent["stream"] is True
    assert sent["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}  # type: ignore[index]
    assert re.search(r"⟪excerpt \[1\] \w+⟫ hr/leave.md, section: Leave\n", sent["messages"][1]["content"])  # type: ignore[index]
    assert "it/vpn.md" not in sent["messages"][1]["content"]  # type: ignore[index]
    json_out = answer.as_json()
    assert json_out["sources"][0] == {"n": 1, "source": "hr/leave.md", "page": None,  # type: ignore[index]
                                      "score": answer.sources[0].hit.score, "chunk_id": answer.sources[0].hit.chunk_id,
                                      "cited": True}
    assert json_out["sentences"] == [{"text": "Staff get 25 days of annual leave per year.", "supported": True,
                                      "sources": [1]}]
    assert set(json_out["timings"]) == {"retrieve_ms", "first_token_ms", "draft_first_token_ms",  # type: ignore[arg-type]
                                        "total_ms"}




def test_unsupported_sentences_are_withheld_in_generate_mode(retriever: Retriever) -> None:
    reply = "Staff get 25 days of annual leave per year. Unused days expire in March 2031."
    engine = QueryEngine(retriever, ScriptedChatModel(reply),
                         top_k=2, refusal_threshold=0.1, mode="generate")
    events = list(engine.stream(LEAVE, principal=ALL))
    assert "".join(e.text for e in events if isinstance(e, Token)) == "Staff get 25 days of annual leave per year [1]."
    answer = engine.ask(LEAVE, principal=ALL)
    assert (answer.mode, answer.grounded) == ("generated", 0.5)
    assert [(s.text, s.reason) for s in answer.withheld] == [("Unused days expire in March 2031.", "number")]
    assert "2031" not in str(answer.as_json())  # a withheld draft never leaves the server as text


@pytest.mark.parametrize(("reply", "fallback"), [
    ("Leave is decided by your manager each year.", "ungrounded"),
    ("员工每年有二十五天年假。", "language"),
    ("", "ungrounded"),
    ("[1][7]", "ungrounded"),
    ("Please ask the manager about it " * 30, "loop"),
])
def test_auto_mode_quotes_the_documents_when_the_draft_fails(retriever: Retriever, reply: str, fallback: str) -> None:
    answer = QueryEngine(retriever, ScriptedChatModel(reply),
                         top_k=2, refusal_threshold=0.1).ask(LEAVE, principal=ALL)
    assert (answer.mode, answer.fallback, answer.answerable) == ("extracted", fallback, True)
    assert answer.text == "From the documents (quoted):\n“Staff get 25 days of annual leave per year.” [1]"
    assert answer.cited and answer.shown_sentences[0].sources == (1,)
    assert answer.loop is (fallback == "loop")


def test_auto_mode_withholds_unsupported_sentences_one_by_one(retriever: Retriever) -> None:
    reply = "Leave is decided by your manager. Staff get 25 days of annual leave per year. Unused days expire in 2031."
    answer = QueryEngine(retriever, ScriptedChatModel(reply),
                         top_k=2, refusal_threshold=0.1).ask(LEAVE, principal=ALL)
    assert (answer.mode, answer.text) == ("generated", "Staff get 25 days of annual leave per year [1].")
    assert [s.reason for s in answer.withheld] == ["swapped", "number"]


@pytest.mark.parametrize(("reply", "shown"), [
    ("Yes. Staff get 25 days of annual leave per year.", "Yes. Staff get 25 days of annual leave per year [1]."),
    ("Yes. Leave is decided by your manager. Staff get 25 days of annual leave per year.",
     "Staff get 25 days of annual leave per year [1]."),  # the verdict's own backing was withheld
])
def test_a_yes_keeps_its_verdict_only_with_a_supported_sentence_after_it(retriever: Retriever, reply: str,
                                                                         shown: str) -> None:
    answer = QueryEngine(retriever, ScriptedChatModel(reply),
                         top_k=2, refusal_threshold=0.1).ask(LEAVE, principal=ALL)
    assert (answer.mode, answer.text) == ("generated", shown)
    assert recheck(answer) == len(answer.shown_sentences)


def test_an_introduction_is_shown_only_with_what_it_introduces(retriever: Retriever) -> None:
    """"Staff get annual leave as follows:" is supported, but what follows is not: nothing of it is streamed."""
    reply = "Staff get annual leave per year as follows:\n\n1. Staff get 31 days of annual leave per year."
    engine = QueryEngine(retriever, ScriptedChatModel(reply), top_k=2, refusal_threshold=0.1)
    events = list(engine.stream(LEAVE, principal=ALL))
    tokens = "".join(e.text for e in events if isinstance(e, Token))
    assert tokens == "From the documents (quoted):\n“Staff get 25 days of annual leave per year.” [1]"
    answer = engine.ask(LEAVE, principal=ALL)
    assert [(s.reason, s.shown) for s in answer.withheld] == [("intro", False), ("number", False)]
    both = "Staff get annual leave per year as follows:\n\n- Staff get 25 days of annual leave per year."
    shown = QueryEngine(retriever, ScriptedChatModel(both),
                        top_k=2, refusal_threshold=0.1).ask(LEAVE, principal=ALL)
    assert shown.text == ("Staff get annual leave per year as follows: [1]\n"
                          "- Staff get 25 days of annual leave per year [1].")


def test_generate_mode_never_quotes_and_says_when_nothing_was_supported(retriever: Retriever) -> None:
    engine = QueryEngine(retriever, ScriptedChatModel("Ask your manager."),
                         top_k=2, refusal_threshold=0.1, mode="generate")
    answer = engine.ask(LEAVE, principal=ALL)
    assert (answer.mode, answer.answerable, answer.fallback) == ("refused", False, "withheld")
    assert answer.text.startswith("I could not write an answer that the documents support")
    assert [s.hit.source for s in answer.sources] == ["hr/leave.md"]


def test_extract_mode_does_not_call_the_llm(retriever: Retriever) -> None:
    server = ScriptedChatModel("unused")
    answer = QueryEngine(retriever, server,
                         top_k=2, refusal_threshold=0.1, mode="extract").ask(LEAVE, principal=ALL)
    assert (answer.mode, answer.fallback, server.requests) == ("extracted", "setting", [])
    assert "“Staff get 25 days of annual leave per year.” [1]" in answer.text


def test_loops_stop_generation_but_keep_the_checked_sentences(retriever: Retriever) -> None:
    reply = "Staff get 25 days of annual leave per year. " + "Leave leave leave leave " * 40
    engine = QueryEngine(retriever, ScriptedChatModel(reply),
                         top_k=2, refusal_threshold=0.1, mode="generate")
    answer = engine.ask(LEAVE, principal=ALL)
    assert (answer.mode, answer.loop, answer.text) == ("generated", True,
                                                       "Staff get 25 days of annual leave per year [1].")


def test_markup_in_the_draft_is_removed_and_its_words_checked(retriever: Retriever) -> None:
    reply = "<b>Staff</b> get 25 days of annual leave per year.<script>alert(1)</script>"
    answer = QueryEngine(retriever, ScriptedChatModel(reply),
                         top_k=2, refusal_threshold=0.1).ask(LEAVE, principal=ALL)
    assert (answer.mode, answer.text) == ("generated", "Staff get 25 days of annual leave per year [1].")


def test_model_refusal_is_overruled_only_when_a_quote_surely_answers(retriever: Retriever,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    sure = QueryEngine(retriever, ScriptedChatModel(REFUSAL),
                       top_k=2, refusal_threshold=0.1).ask(LEAVE, principal=ALL)
    assert (sure.mode, sure.fallback) == ("extracted", "refusal")
    assert "25 days" in sure.text
    # The same excerpts, when the extractive ranking is not that sure: "not in the documents", not quotes.
    monkeypatch.setattr(extract_module, "CONFIDENT_SCORE", {"en": 10.0, "zh": 10.0})
    unsure = QueryEngine(retriever, ScriptedChatModel(REFUSAL),
                         top_k=2, refusal_threshold=0.1).ask(LEAVE, principal=ALL)
    assert (unsure.mode, unsure.text, unsure.answerable) == ("refused", REFUSAL, False)
    # A draft withheld as unsupported follows the same rule.
    made_up = "Leave is decided by your manager each year."
    withheld = QueryEngine(retriever, ScriptedChatModel(made_up),
                           top_k=2, refusal_threshold=0.1).ask(LEAVE, principal=ALL)
    assert (withheld.mode, withheld.answerable) == ("refused", False)


def test_question_about_things_no_excerpt_names_is_refused(retriever: Retriever) -> None:
    server = ScriptedChatModel("should not be called")
    engine = QueryEngine(retriever, server, top_k=2, refusal_threshold=-1.0)
    answer = engine.ask("How many leave days do Windows users get at Microsoft Office?", principal=ALL)
    assert (answer.mode, answer.answerable, server.requests) == ("refused", False, [])
    assert QueryEngine(retriever, server,
                       top_k=2, refusal_threshold=-1.0, mode="extract").ask(LEAVE, principal=ALL).mode == "extracted"


def test_quotes_that_name_none_of_the_things_asked_about_are_refused() -> None:
    """An excerpt that names Windows once lets retrieval through, but a quote about installing something else is
    no answer to a question about Microsoft Office on Windows."""
    install = Page("it/install.md", "Installing software", "Laptops run Windows or Debian.\n\n"
                   "To install a program, open the Software Center and press Install.")
    engine = QueryEngine(memory_retriever(install), ScriptedChatModel(""), top_k=1, refusal_threshold=-1.0,
                         mode="extract", encoder=HashingEncoder())
    office = engine.ask("How do I install Microsoft Office on Windows?", principal=ALL)
    assert (office.mode, office.answerable) == ("refused", False), office.text
    named = engine.ask("How do I install programs from the Software Center on Debian laptops?", principal=ALL)
    assert named.mode == "extracted" and "Software Center" in named.text, named.text


def test_low_retrieval_score_refuses_without_calling_the_llm(retriever: Retriever) -> None:
    server = ScriptedChatModel("should not be called")
    engine = QueryEngine(retriever, server, top_k=2, refusal_threshold=0.99)
    answer = engine.ask("What is the boiling point of mercury?", principal=ALL)
    assert (answer.text, answer.answerable, answer.sources, answer.mode) == (REFUSAL, False, [], "refused")
    assert engine.ask("水银的沸点是多少？", principal=ALL).text == "文档中没有找到相关内容。"
    assert server.requests == []


def test_follow_up_is_condensed_for_retrieval_and_answered_with_history(retriever: Retriever) -> None:
    def reply(messages: Sequence[Message]) -> str:
        if messages[0]["content"] == CONDENSE_PROMPT:
            return '"How do I connect to the VPN?"'
        return "Install WireGuard and import the company profile [1]."

    server = ScriptedChatModel(reply)
    history: list[Message] = [{"role": "user", "content": "Tell me about the VPN."},
                              {"role": "assistant", "content": "It gives access to the intranet [1]."}]
    answer = QueryEngine(retriever, server,
                         top_k=1, refusal_threshold=0.0).ask("How do I connect to it?", history, principal=ALL)
    assert answer.standalone_question == "How do I connect to the VPN?"
    assert answer.sources[0].hit.source == "it/vpn.md"
    final = server.requests[1]
    assert [m["role"] for m in final] == ["system", "user", "assistant", "user"]
    assert final[-1]["content"].endswith("Question: How do I connect to it?")


def test_unreachable_llm_names_the_base_url(retriever: Retriever) -> None:
    dead = Settings(_env_file=None, llm_base_url="http://127.0.0.1:9/v1",  # type: ignore[call-arg]
                    llm_connect_timeout_s=1.0)
    engine = QueryEngine(retriever, build_llm(dead), top_k=2, refusal_threshold=0.0)
    with pytest.raises(LLMUnavailable, match=r"http://127.0.0.1:9/v1.*RAG_LLM_BASE_URL"):
        engine.ask("How many leave days?", principal=ALL)


def test_empty_index_says_to_ingest() -> None:
    engine = QueryEngine(memory_retriever(), ScriptedChatModel(""))
    with pytest.raises(EmptyIndex, match="rag-ingest"):
        engine.ask("anything", principal=ALL)


def test_a_sentence_shown_with_its_link_taken_out_passes_the_recheck() -> None:
    """The check reads the sentence with its link; what is shown has a note instead, and the evaluation's fresh
    check reads the excerpts with their links taken out the same way."""
    books = Page("books.md", "Books", "See the python.org wiki at https://wiki.python.org/moin/PythonBooks for a list.")
    reply = "See the python.org wiki at https://wiki.python.org/moin/PythonBooks for a list [1]."
    engine = QueryEngine(memory_retriever(books), ScriptedChatModel(reply),
                         top_k=1, refusal_threshold=0.0)
    answer = engine.ask("Where is a list of Python books?", principal=ALL)
    assert answer.text == "See the python.org wiki at (link removed: wiki.python.org) for a list [1]."
    assert recheck(answer) == 1


def test_a_new_topic_in_a_conversation_is_searched_alone(retriever: Retriever) -> None:
    """Only a follow-up that leans on the conversation is rewritten: a chat's next question on another topic was
    searched together with the last one and answered from its passages (data/QUESTIONS.md asked in one chat)."""
    server = ScriptedChatModel("Install WireGuard and import the company profile [1].")
    history: list[Message] = [{"role": "user", "content": "How many leave days do I get?"},
                              {"role": "assistant", "content": "25 days a year [1]."}]
    answer = QueryEngine(retriever, server,
                         top_k=1, refusal_threshold=0.0).ask("How do I connect to the office VPN?", history,
                                                              principal=ALL)
    assert answer.standalone_question == "How do I connect to the office VPN?"
    assert answer.sources[0].hit.source == "it/vpn.md"
    assert len(server.requests) == 1  # the answer only: no rewrite asked for


def test_a_follow_up_that_finds_nothing_as_asked_is_condensed(retriever: Retriever) -> None:
    """A question without a word pointing back ("Which client software is needed first?") that finds nothing on its
    own is rewritten with the conversation and searched again."""
    def reply(messages: Sequence[Message]) -> str:
        if messages[0]["content"] == CONDENSE_PROMPT:
            return "Which VPN client software is needed to reach the intranet?"
        return "Install WireGuard and import the company profile [1]."

    server = ScriptedChatModel(reply)
    history: list[Message] = [{"role": "user", "content": "Tell me about the VPN."},
                              {"role": "assistant", "content": "It reaches the intranet [1]."}]
    # The question alone shares no word with the VPN page (score 0), the rewrite scores 0.51: a threshold between.
    engine = QueryEngine(retriever, server, top_k=1, refusal_threshold=0.4)
    answer = engine.ask("Which client software is needed first?", history, principal=ALL)
    assert answer.standalone_question == "Which VPN client software is needed to reach the intranet?"
    assert answer.sources[0].hit.source == "it/vpn.md"
    assert server.requests[0][0]["content"] == CONDENSE_PROMPT
