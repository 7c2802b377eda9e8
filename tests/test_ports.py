"""The query path on the core's ports alone: a list of hits, a scripted chat model, a hashing encoder (no model,
index or server), so answer logic is tested in milliseconds."""

from __future__ import annotations

from rag.core.access import LOCAL_OPERATOR
from rag.core.answer import QueryEngine
from rag.core.types import Hit
from tests.fakes import HashingEncoder, ListSearcher, ScriptedChatModel

VENV = Hit("c1", "To create a virtual environment, run python3 -m venv followed by the name of a new folder. "
                 "Activate it with source folder/bin/activate.", "venv.md", 0.82, doc_id="d1")


def engine(searcher: ListSearcher, model: ScriptedChatModel) -> QueryEngine:
    return QueryEngine(searcher, model, top_k=3, refusal_threshold=0.3, encoder=HashingEncoder())


def test_a_supported_written_answer_is_shown_with_its_citation() -> None:
    model = ScriptedChatModel("Run python3 -m venv followed by the name of a new folder [1].")
    answer = engine(ListSearcher([VENV]), model).ask("How do I create a virtual environment?",
                                                     principal=LOCAL_OPERATOR)
    assert answer.answerable and answer.mode == "generated"
    assert "python3 -m venv" in answer.text
    assert [s.hit.source for s in answer.sources if s.cited] == ["venv.md"]
    assert len(model.requests) == 1 and "python3 -m venv" in model.requests[0][-1]["content"]


def test_a_sentence_the_excerpts_do_not_support_is_never_shown() -> None:
    model = ScriptedChatModel("Virtual environments were invented by NASA in 1987 [1].")
    answer = engine(ListSearcher([VENV]), model).ask("How do I create a virtual environment?",
                                                     principal=LOCAL_OPERATOR)
    assert "NASA" not in answer.text and "1987" not in answer.text
    assert answer.mode == "extracted" and "python3 -m venv followed by the name" in answer.text  # the quote instead
    assert [s.text for s in answer.withheld] == ["Virtual environments were invented by NASA in 1987."]


def test_a_question_nothing_close_answers_is_refused_without_asking_the_model() -> None:
    far = Hit("c2", "The cafeteria opens at eight.", "food.md", 0.05, doc_id="d2")
    model = ScriptedChatModel("should never be asked")
    answer = engine(ListSearcher([far]), model).ask("How do I create a virtual environment?",
                                                    principal=LOCAL_OPERATOR)
    assert not answer.answerable and model.requests == []
