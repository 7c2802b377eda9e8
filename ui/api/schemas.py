"""Request and response bodies of the HTTP API (with examples for the OpenAPI docs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rag.core.prompt import Message
from ui.serving import limits


class Turn(BaseModel):
    """One earlier message of the conversation."""

    role: Literal["user", "assistant"]
    content: str = Field(max_length=limits.TURN_CHARS)


class AskRequest(BaseModel):
    """A question to the knowledge base."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"question": "How do I create a Python virtual environment?", "stream": False},
        {"question": "And how do I activate it?", "history": [
            {"role": "user", "content": "How do I create a Python virtual environment?"},
            {"role": "assistant", "content": "Run python3 -m venv tutorial-env [1]."}]},
    ]})

    question: str = Field(min_length=1, max_length=limits.QUESTION_CHARS)
    history: list[Turn] = Field(default_factory=list, max_length=limits.HISTORY_TURNS,
                                description=f"at most {limits.HISTORY_CHARS} characters in all")
    top_k: int | None = Field(default=None, ge=1, le=20)
    stream: bool = False

    @field_validator("history")
    @classmethod
    def _history_total(cls, turns: list[Turn]) -> list[Turn]:
        total = sum(len(turn.content) for turn in turns)
        if total > limits.HISTORY_CHARS:
            raise ValueError(f"history holds {total} characters; at most {limits.HISTORY_CHARS} in all")
        return turns


class SourceOut(BaseModel):
    """A numbered source: `[n]` in the answer refers to it."""

    n: int
    source: str
    page: int | None
    score: float
    chunk_id: str
    cited: bool
    headings: str = ""
    snippet: str = ""


class SentenceOut(BaseModel):
    """A sentence of the answer as shown, with the excerpts ([n]) that support it."""

    text: str
    supported: bool
    sources: list[int]


class WithheldOut(BaseModel):
    """A sentence of the model's draft that was not shown (its text never leaves the server)."""

    reason: str = Field(description="coverage (too few of its words in any excerpt), number or name (one it states "
                                    "is in no excerpt), language (not the question's), repeat, intro (it introduced "
                                    "sentences that were withheld), empty (nothing left once sanitised)")


class RemovedOut(BaseModel):
    """Something sanitising took out of what is shown: an image (shown as its alt text), a link or URL to a host
    off RAG_LINK_ALLOWLIST (shown as text naming the host), or raw HTML."""

    kind: Literal["image", "link", "html"]
    host: str = Field(description="Where it pointed (empty when unknown).")
    where: Literal["answer", "sources"] = Field(description="Taken out of the answer, or of the sources' snippets "
                                                            "and headings.")


class AskResponse(BaseModel):
    """The answer a helpdesk tool can act on."""

    model_config = ConfigDict(json_schema_extra={"examples": [{
        "answer": "Run `python3 -m venv tutorial-env` [1].", "answerable": True, "cited": True,
        "mode": "generated", "fallback": None, "grounded": 1.0, "loop": False,
        "sentences": [{"text": "Run `python3 -m venv tutorial-env`.", "supported": True, "sources": [1]}],
        "withheld": [], "confidence": 0.93, "escalate": False,
        "sources": [{"n": 1, "source": "en/python-tutorial-venv.html", "page": None, "score": 0.71,
                     "chunk_id": "3f2a…", "cited": True, "headings": "12.2. Creating Virtual Environments",
                     "snippet": "To create a virtual environment…"}],
        "timings": {"retrieve_ms": 12.5, "first_token_ms": 480.2, "draft_first_token_ms": 180.2, "total_ms": 950.0},
        "usage": {"prompt_tokens": 812, "completion_tokens": 40},
    }]})

    answer: str = Field(description="Only sentences the excerpts support, each cited as [n].")
    answerable: bool
    cited: bool
    mode: Literal["generated", "extracted", "refused"] = Field(
        description="generated: the model's checked sentences; extracted: sentences quoted from the excerpts; "
                    "refused: not in the documents.")
    fallback: str | None = Field(description="Why the answer is not generated: ungrounded, language, loop, refusal, "
                                             "model_language, other_language, setting, withheld.")
    grounded: float = Field(ge=0, le=1, description="Share of the model's sentences that the excerpts support.")
    loop: bool = Field(description="Generation was stopped because the model repeated itself.")
    sentences: list[SentenceOut]
    withheld: list[WithheldOut]
    confidence: float = Field(ge=0, le=1, description="Retrieval confidence (0.5 at the refusal threshold) times "
                                                      "grounding (0.8 for quoted answers); 0 for refusals.")
    escalate: bool = Field(description="Hand over to a human: not answered by the model from the documents, "
                                       "sentences withheld, uncited, or low confidence.")
    sources: list[SourceOut]
    removed: list[RemovedOut] = Field(default_factory=list, description="What sanitising took out of the answer "
                                      "and snippets: no image, outside link or raw HTML is ever returned.")
    timings: dict[str, float | None]
    usage: dict[str, int]


class ErrorBody(BaseModel):
    """`{"error": {"type": …, "message": …}}`"""

    error: dict[str, str]


class DocumentOut(BaseModel):
    """An ingested file."""

    id: str
    source: str
    content_hash: str
    chunks: int
    ingested_at: str
    access: Literal["open", "grouped", "locked"] = Field(
        description="open: no groups (RAG_UNGROUPED decides); grouped: members of `groups`; locked: groups "
                    "unreadable, visible only with every group")
    groups: list[str] = Field(default_factory=list)
    status: str = "indexed"


class SyncOut(BaseModel):
    """The outcome of an ingest, as `rag-ingest --json` prints it."""

    added: int
    updated: int
    regrouped: int = Field(description="files whose access groups changed: chunks relabelled, not re-embedded")
    unchanged: int
    deleted: int
    skipped: int
    failed: list[dict[str, str]]
    locked: list[str] = Field(description="files whose groups cannot be read: stored, visible only with every group")
    chunks: int
    seconds: float


class ChatMessage(BaseModel):
    """An OpenAI chat message (text content, or a list of text parts)."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[dict[str, Any]] | None = Field(
        default=None, description=f"at most {limits.TURN_CHARS} characters, in at most {limits.MESSAGE_PARTS} parts")

    @field_validator("content")
    @classmethod
    def _bounded(cls, content: str | list[dict[str, Any]] | None) -> str | list[dict[str, Any]] | None:
        if isinstance(content, list) and len(content) > limits.MESSAGE_PARTS:
            raise ValueError(f"a message has at most {limits.MESSAGE_PARTS} parts, not {len(content)}")
        chars = len(_text(content))
        if chars > limits.TURN_CHARS:
            raise ValueError(f"a message holds at most {limits.TURN_CHARS} characters, not {chars}")
        return content

    def text(self) -> str:
        """The message's text, parts joined."""
        return _text(self.content)


def _text(content: str | list[dict[str, Any]] | None) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if part.get("type") == "text")
    return content or ""


class ChatRequest(BaseModel):
    """The subset of OpenAI's chat completion request that the assistant uses; other fields are accepted."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"examples": [
        {"model": "rag", "messages": [{"role": "user", "content": "How do I create a virtual environment?"}]},
    ]})

    model: str = Field(default="rag", max_length=limits.NAME_CHARS)
    messages: list[ChatMessage] = Field(min_length=1, max_length=limits.MESSAGES,
                                        description=f"at most {limits.MESSAGES_CHARS} characters in all")
    stream: bool = False
    stream_options: dict[str, Any] | None = None

    @field_validator("messages")
    @classmethod
    def _messages_total(cls, messages: list[ChatMessage]) -> list[ChatMessage]:
        total = sum(len(message.text()) for message in messages)
        if total > limits.MESSAGES_CHARS:
            raise ValueError(f"the messages hold {total} characters; at most {limits.MESSAGES_CHARS} in all")
        return messages


class FeedbackOut(BaseModel):
    """A rating of an answer, with the question, the answer and its sources."""

    answer_id: str
    rating: int = Field(description="1 (helpful) or -1 (not helpful)")
    comment: str
    question: str
    answer: str
    sources: list[dict[str, Any]]
    user: str
    channel: str
    created_at: str


class GapTopicOut(BaseModel):
    """Questions of one meaning that the documents did not answer."""

    label: str = Field(description="the most central question of the topic")
    count: int = Field(description="times asked (repeats counted)")
    share: float = Field(description="count over all questions in the report")
    reasons: dict[str, int] = Field(description="times refused, escalated, thumbs_down")
    examples: list[str] = Field(description="up to 3 distinct questions, the most central first")
    keywords: list[str]
    sources: list[str] = Field(description="the documents that came closest, most often first")
    first_seen: str
    last_seen: str


class GapReportOut(BaseModel):
    """The knowledge-gap report: refused, escalated and 👎-rated questions grouped into topics, largest first."""

    model_config = ConfigDict(json_schema_extra={"examples": [{
        "since": "2026-11-24T09:00:00+00:00", "total": 3, "hidden_topics": 0,
        "reasons": {"refused": 2, "escalated": 0, "thumbs_down": 1},
        "topics": [{"label": "How do I claim travel expenses?", "count": 3, "share": 1.0,
                    "reasons": {"refused": 2, "thumbs_down": 1},
                    "examples": ["How do I claim travel expenses?", "travel expense form"],
                    "keywords": ["travel", "expense"], "sources": ["leave.md"],
                    "first_seen": "2026-11-25T10:02:11+00:00", "last_seen": "2026-11-30T16:40:05+00:00"}]}]})

    since: str | None = Field(description="the start of the report (UTC), null for everything")
    total: int = Field(description="questions in the report")
    reasons: dict[str, int]
    hidden_topics: int = Field(description="topics under min_count, left out")
    topics: list[GapTopicOut]


def history_messages(turns: Sequence[tuple[str, str]]) -> list[Message]:
    """A request's earlier turns, (role, content) pairs, as chat messages."""
    return [{"role": "assistant" if role == "assistant" else "user", "content": content} for role, content in turns]
