"""benchmarks.app_drafts and the app_cost stub's replay: a recorded draft is streamed word by word as written, a
question without one gets the stub's supported sentence, and a refused retrieval records nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from benchmarks.app_cost import best_sentence, stub_words
from benchmarks.app_drafts import draft, record
from rag.config import Settings
from rag.core.ports import Delta
from rag.core.types import Hit

DRAFTS = Path(__file__).resolve().parent.parent / "benchmarks" / "drafts" / "qwen2.5-coder-0.5b-faq120.json"
PROMPT = ("Excerpts:\n\n⟪excerpt [1] abc⟫ faq.txt\nPython is a language. It is used for scripting and more.\n"
          "⟪end of excerpt [1] abc⟫\n\nQuestion: What is Python  used for?")


def test_a_recorded_draft_is_replayed_with_its_spacing_and_others_get_the_supported_sentence() -> None:
    text = "Python is used for scripting [1].\n\n- one\n- two"
    words = stub_words(PROMPT, {"What is Python used for?": text})
    assert "".join(words) == text and words[0] == "Python" and words[-2:] == ["\n-", " two"]
    assert "".join(stub_words(PROMPT, {})) == best_sentence(PROMPT) == "Python is a language."


def test_the_kept_drafts_are_the_benchmark_questions_answers() -> None:
    drafts = json.loads(DRAFTS.read_text(encoding="utf-8"))
    assert len(drafts) >= 100 and all(isinstance(text, str) for text in drafts.values())
    assert sum("could not find this in the documents" in text for text in drafts.values()) >= 5  # refusals too


class _Retriever:
    def __init__(self, hits: list[Hit]) -> None:
        self.hits = hits

    def search(self, question: str, k: int, principal: Any) -> list[Hit]:
        return self.hits[:k]


class _LLM:
    def __init__(self) -> None:
        self.asked: list[Sequence[Any]] = []

    def stream(self, messages: Sequence[Any], max_tokens: int | None = None) -> Iterator[Delta]:
        self.asked.append(messages)
        yield from (Delta("Python is "), Delta("used for scripting [1]."))


class _Engine:
    top_k, max_answer_tokens = 3, 64

    def __init__(self, hits: list[Hit]) -> None:
        self.retriever, self.llm = _Retriever(hits), _LLM()

    def threshold_for(self, question: str) -> float:
        return 0.5


def test_a_draft_is_what_the_model_streams_for_the_query_paths_messages() -> None:
    engine = _Engine([Hit("a", "Python is used for scripting.", "faq.txt", 0.8), Hit("b", "Far off.", "x", 0.1)])
    assert draft(engine, "What is Python used for?") == "Python is used for scripting [1]."  # type: ignore[arg-type]
    user = engine.llm.asked[0][-1]["content"]
    assert "Python is used for scripting." in user and "Far off." not in user  # below the threshold: not sent
    assert user.endswith("Question: What is Python used for?")
    nothing = _Engine([Hit("c", "Unrelated.", "x", 0.2)])
    assert draft(nothing, "What is Python used for?") is None and not nothing.llm.asked  # type: ignore[arg-type]


@pytest.mark.integration
def test_drafts_are_recorded_from_the_real_llm_and_replay_as_written(llm_settings: Settings, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAG_LLM_BASE_URL", llm_settings.llm_base_url)
    monkeypatch.setenv("RAG_LLM_MODEL", llm_settings.llm_model)
    out = tmp_path / "drafts.json"
    kept = record(out, docs=3, concurrent=2)
    assert kept and json.loads(out.read_text(encoding="utf-8")) == kept
    question, text = next((q, t) for q, t in kept.items() if t.strip())
    prompt = f"Excerpts:\n\nanything\n\nQuestion: {question}"
    assert "".join(stub_words(prompt, kept)) == text.rstrip()
