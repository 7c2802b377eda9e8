"""Prompt builders with exact strings; the system prefix is byte-identical across questions."""

from __future__ import annotations

import re

from rag.prompt import (
    CONDENSE_PROMPT,
    REFUSAL,
    SYSTEM_PROMPT,
    Message,
    answer_messages,
    cited_numbers,
    condense_messages,
    is_refusal,
)
from rag.types import Hit
from tests.fake_llm import FakeLLMServer

HITS = [
    Hit(chunk_id="c1", text="Staff get 25 days of annual leave.\n", source="hr/leave.md", score=0.8,
        headings="Leave > Annual leave"),
    Hit(chunk_id="c2", text="Reset the router by holding the button.", source="it/router.pdf", score=0.5, page=4),
]


def test_answer_messages_exact() -> None:
    messages = answer_messages("  How many leave days?  ", HITS)
    assert messages == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": (
            "Excerpts:\n\n"
            "[1] hr/leave.md, section: Leave > Annual leave\nStaff get 25 days of annual leave.\n\n"
            "[2] it/router.pdf, page 4\nReset the router by holding the button.\n\n"
            "Question: How many leave days?"
        )},
    ]


def test_system_prompt_is_stable_and_free_of_variable_data() -> None:
    first = answer_messages("Question one?", HITS)[0]["content"]
    second = answer_messages("另一个问题？", HITS[::-1])[0]["content"]
    assert first == second == SYSTEM_PROMPT
    assert REFUSAL in SYSTEM_PROMPT and "[1]" in SYSTEM_PROMPT
    assert not re.search(r"\d{2,}", SYSTEM_PROMPT), "no dates, ids or other variable numbers"
    assert len(SYSTEM_PROMPT) > 1200  # long enough to fill several 128-token KV blocks


def test_history_goes_between_system_prompt_and_question() -> None:
    history: list[Message] = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    messages = answer_messages("And sick leave?", HITS[:1], history)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[-1]["content"].endswith("Question: And sick leave?")


def test_condense_messages_exact() -> None:
    history: list[Message] = [
        {"role": "user", "content": "How do I reset the router?"},
        {"role": "assistant", "content": "Hold the button for 10 seconds [1]."},
    ]
    assert condense_messages("And where is it?", history) == [
        {"role": "system", "content": CONDENSE_PROMPT},
        {"role": "user", "content": (
            "Conversation:\nUser: How do I reset the router?\nAssistant: Hold the button for 10 seconds [1].\n\n"
            "Follow-up question: And where is it?\n\nStandalone question:"
        )},
    ]


def test_cited_numbers_in_order_within_range() -> None:
    assert cited_numbers("A [2]. B [1][2]. C [7]. D [0].", 3) == [2, 1]
    assert cited_numbers("No citations here.", 3) == []


def test_refusal_detection() -> None:
    assert is_refusal(REFUSAL)
    assert is_refusal("i could not find this in the documents")
    assert not is_refusal("Staff get 25 days [1].")


def test_repetition_penalty_is_sent_only_when_set() -> None:
    server = FakeLLMServer(lambda messages: "ok")
    server.llm(repetition_penalty=1.1).complete([{"role": "user", "content": "hi"}])
    server.llm().complete([{"role": "user", "content": "hi"}])
    assert server.requests[0]["repetition_penalty"] == 1.1
    assert "repetition_penalty" not in server.requests[1]  # plain OpenAI-compatible servers reject unknown fields
