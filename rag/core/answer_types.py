"""What the query path hands out: sources, checked sentences, the finished answer, and the events of a stream."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rag.core.ports import Usage
from rag.core.sanitize import STRICT, LinkPolicy, Removed
from rag.core.types import Hit

Outcome = Literal["generated", "extracted", "refused"]


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
class Sentence:
    """A sentence of the answer or of the model's draft: whether the excerpts support it, and which ones."""

    text: str
    supported: bool
    sources: tuple[int, ...]
    shown: bool
    # Why it was withheld: "coverage", "number", "name", "language", "repeat", "intro" (it introduced what was
    # withheld), "empty" (nothing left once sanitised), or "" if shown.
    reason: str = ""

    def as_json(self) -> dict[str, object]:
        """A shown sentence on the wire (withheld ones never leave the server as text)."""
        return {"text": self.text, "supported": self.supported, "sources": list(self.sources)}


@dataclass(frozen=True, slots=True)
class Timings:
    """Milliseconds from the start of the request: first_token_ms is the first text shown, draft_first_token_ms
    the model's first token (the difference is what checking sentence by sentence costs)."""

    retrieve_ms: float
    first_token_ms: float | None
    total_ms: float
    draft_first_token_ms: float | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    """A finished answer with its sources.

    `mode` says what the user got: the model's checked sentences ("generated"), sentences quoted from the
    excerpts ("extracted"), or no answer ("refused"); `fallback` says why it is not "generated". `grounded` is the
    share of the model's sentences that the excerpts support (1.0 when no model was asked). `sentences` holds the
    shown sentences and the withheld ones of the draft. `removed` lists what sanitising took out of the shown text
    (images, links to hosts off RAG_LINK_ALLOWLIST, raw HTML); `links` is the policy that shows its sources."""

    text: str
    answerable: bool
    cited: bool
    sources: list[Source]
    timings: Timings
    usage: Usage = field(default_factory=Usage)
    standalone_question: str = ""
    confidence: float = 0.0
    mode: Outcome = "generated"
    grounded: float = 1.0
    sentences: list[Sentence] = field(default_factory=list)
    fallback: str = ""
    loop: bool = False
    removed: list[Removed] = field(default_factory=list)
    links: LinkPolicy = STRICT

    @property
    def shown_sentences(self) -> list[Sentence]:
        """The sentences the user sees."""
        return [sentence for sentence in self.sentences if sentence.shown]

    @property
    def withheld(self) -> list[Sentence]:
        """The model's sentences that were not shown."""
        return [sentence for sentence in self.sentences if not sentence.shown]

    def as_json(self) -> dict[str, object]:
        """The `rag ask --json` contract."""
        timings = self.timings
        return {
            "answer": self.text, "answerable": self.answerable, "cited": self.cited, "mode": self.mode,
            "fallback": self.fallback or None, "grounded": self.grounded, "loop": self.loop,
            "sentences": [sentence.as_json() for sentence in self.shown_sentences],
            "withheld": [{"reason": sentence.reason} for sentence in self.withheld],
            "sources": [source.as_json() for source in self.sources],
            "removed": [removed.as_json() for removed in self.removed],
            "timings": {"retrieve_ms": round(timings.retrieve_ms, 1),
                        "first_token_ms": _round(timings.first_token_ms),
                        "draft_first_token_ms": _round(timings.draft_first_token_ms),
                        "total_ms": round(timings.total_ms, 1)},
            "usage": {"prompt_tokens": self.usage.prompt_tokens, "completion_tokens": self.usage.completion_tokens},
        }


def _round(ms: float | None) -> float | None:
    return None if ms is None else round(ms, 1)


@dataclass(frozen=True, slots=True)
class Token:
    """Streamed text of the answer (only text that has been checked)."""

    text: str


@dataclass(frozen=True, slots=True)
class Retrieved:
    """The excerpts the answer will be drawn from (sent before the first token), the query that found them (as it
    may be shown), and the policy that shows their text."""

    hits: list[Hit]
    query: str = ""
    links: LinkPolicy = STRICT


@dataclass(frozen=True, slots=True)
class Done:
    """The end of a stream, with the finished answer."""

    answer: Answer


Event = Token | Retrieved | Done
