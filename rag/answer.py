"""The one query path (CLI, API and UI alike): question (+ history) → retrieve → prompt → streamed, cited answer."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from rag.keyword import cjk_share
from rag.llm import LLM, Usage
from rag.prompt import REFUSAL, Message, answer_messages, cited_numbers, condense_messages, is_refusal
from rag.retrieve import Retriever
from rag.types import Hit

CONDENSE_MAX_TOKENS = 96
CONFIDENCE_SCALE = 0.05  # a best score 0.05 above the refusal threshold gives confidence 0.73, 0.1 above 0.88


def confidence(best_score: float | None, threshold: float) -> float:
    """0–1 from the best retrieval score: 0.5 at the refusal threshold, rising with the margin above it."""
    if best_score is None:
        return 0.0
    return round(1.0 / (1.0 + math.exp(-(best_score - threshold) / CONFIDENCE_SCALE)), 3)


@dataclass(frozen=True, slots=True)
class Source:
    """An excerpt given to the LLM; `n` is the number its [n] markers refer to."""

    n: int
    hit: Hit
    cited: bool

    def as_json(self) -> dict[str, object]:
        """The source as `rag ask --json` lists it."""
        hit = self.hit
        return {"n": self.n, "source": hit.source, "page": hit.page, "score": hit.score, "chunk_id": hit.chunk_id,
                "cited": self.cited}


@dataclass(frozen=True, slots=True)
class Timings:
    """Milliseconds from the start of the request."""

    retrieve_ms: float
    first_token_ms: float | None
    total_ms: float


@dataclass(frozen=True, slots=True)
class Answer:
    """A finished answer with its sources; `answerable` is false for refusals, `cited` false if no [n] was used."""

    text: str
    answerable: bool
    cited: bool
    sources: list[Source]
    timings: Timings
    usage: Usage = field(default_factory=Usage)
    standalone_question: str = ""
    confidence: float = 0.0

    def as_json(self) -> dict[str, object]:
        """The `rag ask --json` contract."""
        return {
            "answer": self.text, "answerable": self.answerable, "cited": self.cited,
            "sources": [source.as_json() for source in self.sources],
            "timings": {"retrieve_ms": round(self.timings.retrieve_ms, 1),
                        "first_token_ms": None if self.timings.first_token_ms is None
                        else round(self.timings.first_token_ms, 1),
                        "total_ms": round(self.timings.total_ms, 1)},
            "usage": {"prompt_tokens": self.usage.prompt_tokens, "completion_tokens": self.usage.completion_tokens},
        }


@dataclass(frozen=True, slots=True)
class Token:
    """Streamed text of the answer."""

    text: str


@dataclass(frozen=True, slots=True)
class Retrieved:
    """The excerpts the answer will be drawn from (sent before the first token), and the query that found them."""

    hits: list[Hit]
    query: str = ""


@dataclass(frozen=True, slots=True)
class Done:
    """The end of a stream, with the finished answer."""

    answer: Answer


Event = Token | Retrieved | Done


class QueryEngine:
    """Answers questions from the documents, refusing when retrieval finds nothing close enough."""

    def __init__(self, retriever: Retriever, llm: LLM, top_k: int = 3, refusal_threshold: float = 0.0,
                 refusal_threshold_cjk: float | None = None) -> None:
        self.retriever = retriever
        self._llm = llm
        self.top_k = top_k
        self.refusal_threshold = refusal_threshold
        self.refusal_threshold_cjk = refusal_threshold if refusal_threshold_cjk is None else refusal_threshold_cjk

    def threshold_for(self, question: str) -> float:
        """The refusal threshold for this question: Chinese questions score on another scale (keyword-led)."""
        zh = cjk_share(question)
        return self.refusal_threshold * (1 - zh) + self.refusal_threshold_cjk * zh

    def stream(self, question: str, history: Sequence[Message] = (), top_k: int | None = None) -> Iterator[Event]:
        """Retrieved excerpts, then answer tokens, then Done with the finished Answer."""
        started = time.perf_counter()
        standalone = self.condense(question, history) if history else question
        hits = self.retriever.search(standalone, top_k or self.top_k)
        retrieve_ms = _ms(started)
        threshold = self.threshold_for(standalone)
        sure = confidence(hits[0].score if hits else None, threshold)
        if not hits or hits[0].score < threshold:
            yield Token(REFUSAL)
            timings = Timings(retrieve_ms, None, _ms(started))
            yield Done(Answer(REFUSAL, False, False, [], timings, standalone_question=standalone, confidence=sure))
            return
        yield Retrieved(hits, standalone)
        yield from self._generate(question, hits, history, started, retrieve_ms, standalone, sure)

    def _generate(self, question: str, hits: list[Hit], history: Sequence[Message], started: float,
                  retrieve_ms: float, standalone: str, sure: float) -> Iterator[Event]:
        parts: list[str] = []
        first_token_ms: float | None = None
        usage = Usage()
        for delta in self._llm.stream(answer_messages(question, hits, history)):
            if delta.text:
                first_token_ms = first_token_ms if first_token_ms is not None else _ms(started)
                parts.append(delta.text)
                yield Token(delta.text)
            usage = delta.usage or usage
        text = "".join(parts).strip()
        cited = cited_numbers(text, len(hits))
        sources = [Source(n, hit, n in cited) for n, hit in enumerate(hits, start=1)]
        timings = Timings(retrieve_ms, first_token_ms, _ms(started))
        answerable = bool(text) and not is_refusal(text)
        yield Done(Answer(text, answerable, bool(cited), sources, timings, usage, standalone, sure))

    def ask(self, question: str, history: Sequence[Message] = (), top_k: int | None = None) -> Answer:
        """The finished answer, without streaming."""
        for event in self.stream(question, history, top_k):
            if isinstance(event, Done):
                return event.answer
        raise AssertionError("a stream always ends with Done")

    def condense(self, question: str, history: Sequence[Message]) -> str:
        """A standalone version of a follow-up question, for retrieval."""
        rewritten = " ".join(self._llm.complete(condense_messages(question, history), CONDENSE_MAX_TOKENS).split())
        return rewritten.strip('"“”') or question


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000
