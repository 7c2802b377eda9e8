"""The one query path (CLI, API and UI alike): question (+ history) → retrieve → checked answer, streamed.

What reaches a person is decided here, not by the model: every sentence the model writes is checked against the
excerpts (rag.core.grounding) before it is streamed, cited by the excerpts that support it, and withheld otherwise, one
sentence at a time (its supported neighbours are still shown). When nothing the model wrote can be shown (its draft
withheld, in the wrong language, looping, or the model saying the excerpts do not answer), `auto` mode quotes the
excerpts (rag.core.extract) only when the extractive ranking is confident that a sentence answers the question, and
otherwise says the answer is not in the documents.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from rag.core.access import Principal
from rag.core.alignment import polarity
from rag.core.answer_types import Answer, Done, Event, Outcome, Retrieved, Sentence, Source, Timings, Token
from rag.core.extract import Encoder, extract
from rag.core.grounding import MIN_COVERAGE, RepetitionGuard, SupportChecker, Verdict, mentions_any, proper_names
from rag.core.ports import ChatModel, Delta, Searcher, Stop, Usage
from rag.core.prompt import Message, answer_messages, condense_messages, is_refusal, new_nonce, reply
from rag.core.retrieve import Floors
from rag.core.sanitize import STRICT, LinkPolicy, Removed
from rag.core.sentences import Language, SentenceBuffer, excerpt_language, language_of, question_language
from rag.core.text import tokenize
from rag.core.types import Hit

__all__ = ["Answer", "AnswerMode", "Done", "Event", "QueryEngine", "Retrieved", "Sentence", "Source", "Timings",
           "Token", "confidence", "relevant", "unmentioned"]

AnswerMode = Literal["auto", "generate", "extract"]
CONDENSE_MAX_TOKENS = 96
CONFIDENCE_SCALE = 0.05  # a best score 0.05 above the refusal threshold gives confidence 0.73, 0.1 above 0.88
EXTRACTED_CONFIDENCE = 0.8  # a quoted answer is right from the documents but may not answer the question itself
# Calibrated on the dev sets and hand-labelled answers (docs, "Answers you can trust"):
RELEVANCE_MARGIN = 0.2  # excerpts more than this below the best one are neither sent to the model nor listed
GIVE_UP_AFTER = 3  # unsupported sentences in a row, none shown yet: the draft is abandoned (quotes or refusal)
MAX_SHOWN = 5  # the prompt asks for at most five sentences; a model that copies a whole excerpt is cut there
ON_TOPIC = 0.3  # share of the question's words the first shown sentence (or its excerpt sentence) must hold
_WHY = re.compile(r"\bwhy\b|为什么|为何", re.IGNORECASE)
# A follow-up that leans on the conversation: it opens like a continuation or points back at something said.
_REFERS_BACK = re.compile(r"^\W*(and|also|but|so|then|what about|how about)\b|\b(it|its|this|that|these|those|they|"
                          r"them|their|same|other|one|ones|former|latter)\b|^\W*(那么|那|还有|另外|而且)|"
                          r"它|这个|那个|这些|那些|这种|那种|上述|前者|后者", re.IGNORECASE)
FEW_WORDS = 2  # a follow-up of this many search words or fewer ("How many days?") leans on the conversation too


def confidence(best_score: float | None, threshold: float) -> float:
    """0–1 from the best retrieval score: 0.5 at the refusal threshold, rising with the margin above it."""
    if best_score is None:
        return 0.0
    return round(1.0 / (1.0 + math.exp(-(best_score - threshold) / CONFIDENCE_SCALE)), 3)


def relevant(hits: Sequence[Hit], threshold: float, margin: float = RELEVANCE_MARGIN) -> list[Hit]:
    """The hits at or above the refusal threshold and within `margin` of the best one."""
    if not hits:
        return []
    floor = max(threshold, hits[0].score - margin)
    return [hit for hit in hits if hit.score >= floor]


@dataclass
class _Run:
    """One question on its way through the engine."""

    question: str
    history: Sequence[Message]
    language: Language
    started: float
    retrieve_ms: float = 0.0
    standalone: str = ""
    threshold: float = 0.0
    sure: float = 0.0
    hits: list[Hit] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    draft_first_ms: float | None = None
    shown_first_ms: float | None = None
    shown_query: str = ""  # the standalone question as shown (it may be the model's words)
    removed: list[Removed] = field(default_factory=list)  # what sanitising took out of shown text
    stop: Stop | None = None  # set by another thread: the LLM stream ends with Stopped


@dataclass
class _Draft:
    """The model's answer as it is checked: every judged sentence, what was shown, why generation stopped."""

    sentences: list[Sentence] = field(default_factory=list)
    text: str = ""
    stop: str = ""  # "loop", "ungrounded", "language", "refusal", "long"
    unsupported_run: int = 0  # unsupported sentences since the last shown one
    asked: frozenset[str] = frozenset()  # the question's search tokens
    why: bool = False  # the question asks for a reason
    refused: bool = False
    held: list[int] = field(default_factory=list)  # shown introductions ("…:") not yet streamed

    def release(self) -> list[str]:
        """The held sentences, with their markers, to stream now; a held "Yes." is shown on the strength of the
        supported sentence after it (and cited by it)."""
        backing = self.sentences[self.held[-1]].sources if self.held else ()
        verdicts = {i for i in self.held if self.sentences[i].reason == "verdict"}
        for i in verdicts:
            self.sentences[i] = replace(self.sentences[i], supported=True, sources=backing, shown=True, reason="")
        released = [_with_markers(self.sentences[i].text, () if i in verdicts else self.sentences[i].sources)
                    for i in self.held]
        self.held.clear()
        return released

    def withhold_held(self) -> None:
        """An introduction or a bare "Yes." whose supported continuation never came: withheld after all."""
        for i in self.held:
            reason = "verdict" if self.sentences[i].reason == "verdict" else "intro"
            self.sentences[i] = replace(self.sentences[i], supported=False, shown=False, reason=reason)
        self.held.clear()

    @property
    def shown(self) -> int:
        return sum(sentence.shown for sentence in self.sentences)

    @property
    def grounded(self) -> float:
        judged = [s for s in self.sentences if s.reason != "verdict"]
        return round(sum(s.supported for s in judged) / len(judged), 3) if judged else 0.0


class QueryEngine:
    """Answers questions from the documents, refusing when retrieval finds nothing close enough."""

    def __init__(self, retriever: Searcher, llm: ChatModel, *, top_k: int = 3, refusal_threshold: float = 0.0,
                 refusal_threshold_cjk: float | None = None, mode: AnswerMode = "auto",
                 encoder: Encoder | None = None, max_answer_tokens: int | None = None,
                 model_languages: frozenset[str] = frozenset({"en", "zh"}), links: LinkPolicy = STRICT) -> None:
        self.retriever = retriever
        self._llm = llm
        self.top_k = top_k
        self.refusal_threshold = refusal_threshold
        self.refusal_threshold_cjk = refusal_threshold if refusal_threshold_cjk is None else refusal_threshold_cjk
        self.mode: AnswerMode = mode
        self._encoder = encoder
        self.max_answer_tokens = max_answer_tokens
        self.min_coverage = dict(MIN_COVERAGE)
        self.model_languages = model_languages
        self.links = links

    @property
    def llm(self) -> ChatModel:
        """The chat model the answers are written with."""
        return self._llm

    def threshold_for(self, question: str) -> float:
        """The refusal threshold for this question: Chinese questions score on another scale (keyword-led)."""
        return Floors(self.refusal_threshold, self.refusal_threshold_cjk).of(question)

    def stream(self, question: str, history: Sequence[Message] = (), top_k: int | None = None, *,
               principal: Principal, stop: Stop | None = None) -> Generator[Event, None, None]:
        """Retrieved excerpts the principal may see, then checked answer text, then Done with the finished Answer.
        Setting `stop` (from another thread) ends the generation at its next token with rag.core.ports.Stopped."""
        run = _Run(question, history, question_language(question), time.perf_counter(), stop=stop)
        hits = self._search(run, top_k or self.top_k, principal)
        run.retrieve_ms, run.threshold = _ms(run.started), self.threshold_for(run.standalone)
        run.sure = confidence(hits[0].score if hits else None, run.threshold)
        run.hits = relevant(hits, run.threshold)
        if not run.hits or unmentioned(run.standalone, run.hits):
            yield from self._refused(run, "refusal", listed=False)
            return
        yield Retrieved(run.hits, run.shown_query, self.links)
        if _other_language(run.hits, run.language):
            yield from self._extracted(run, "other_language")
        elif self.mode == "extract":
            yield from self._extracted(run, "setting")
        elif run.language not in self.model_languages:
            yield from self._extracted(run, "model_language")  # the model cannot write the question's language
        else:
            yield from self._generated(run)

    def ask(self, question: str, history: Sequence[Message] = (), top_k: int | None = None, *,
            principal: Principal) -> Answer:
        """The finished answer, without streaming."""
        for event in self.stream(question, history, top_k, principal=principal):
            if isinstance(event, Done):
                return event.answer
        raise AssertionError("a stream always ends with Done")

    def _search(self, run: _Run, k: int, principal: Principal) -> list[Hit]:
        """The hits for the question, or for its standalone form when it leans on the conversation (sets
        run.standalone and run.shown_query)."""
        run.standalone = run.shown_query = run.question
        # A question that does not lean on the conversation is searched as asked first, without the LLM: rewritten
        # or joined to the last question (condense), a new topic was answered from the last one's passages.
        if not run.history or not refers_back(run.question):
            hits = self.retriever.search(run.question, k, principal)
            found = relevant(hits, self.threshold_for(run.question))
            if not run.history or (found and not unmentioned(run.question, found)):
                return hits  # found as asked; else an elliptical follow-up ("How many days?")
        run.standalone = self.condense(run.question, run.history)
        run.shown_query = self._safe(run, run.standalone)  # the model's words, shown sanitised
        return self.retriever.search(run.standalone, k, principal)

    def condense(self, question: str, history: Sequence[Message]) -> str:
        """A standalone version of a follow-up question, for retrieval."""
        rewritten = " ".join(self._llm.complete(condense_messages(question, history), CONDENSE_MAX_TOKENS).split())
        rewritten = rewritten.strip('"“”') or question
        if set(tokenize(rewritten)) <= set(tokenize(question)):
            # Nothing of the conversation made it in ("What does the FULL variant do differently?"): the earlier
            # question says what "it" is, so retrieval reads both.
            asked = [m["content"] for m in history if m["role"] == "user"]
            return f"{asked[-1]} {rewritten}" if asked else rewritten
        return rewritten

    def _generated(self, run: _Run) -> Iterator[Event]:
        checker = SupportChecker([hit.text for hit in run.hits], run.language, run.standalone, self.min_coverage)
        draft = _Draft(asked=frozenset(tokenize(run.standalone)), why=_WHY.search(run.standalone) is not None)
        messages = answer_messages(run.question, run.hits, run.history, nonce=new_nonce())
        deltas = self._llm.stream(messages, self.max_answer_tokens, stop=run.stop)
        try:
            for text in self._sentences(deltas, run, draft):
                if self._judge(checker.check(text), draft, run):
                    draft.held.append(len(draft.sentences) - 1)
                    if not _waits(draft.sentences[-1]):  # an introduction or "Yes." waits for what follows it
                        yield from (self._shown(run, draft, shown) for shown in draft.release())
                    draft.stop = draft.stop or ("long" if draft.shown >= MAX_SHOWN else "")
                if draft.stop:
                    break
        finally:
            deltas.close()  # stops generation on the server when we stop early
        draft.withhold_held()
        yield from self._after_generation(run, draft)

    def _sentences(self, deltas: Iterable[Delta], run: _Run, draft: _Draft) -> Iterator[str]:
        """Complete sentences of the model's stream; stops (draft.stop = "loop") when the stream repeats itself."""
        buffer, guard = SentenceBuffer(), RepetitionGuard()
        for delta in deltas:
            run.usage = delta.usage or run.usage
            if not delta.text:
                continue
            run.draft_first_ms = run.draft_first_ms or _ms(run.started)
            if guard.feed(delta.text):
                draft.stop = "loop"
                return
            yield from buffer.feed(delta.text)
        yield from buffer.flush()

    def _judge(self, verdict: Verdict, draft: _Draft, run: _Run) -> str:
        """Record a checked sentence; returns the text to show ("" to withhold) and sets draft.stop when to stop.
        The check reads the sentence as the model wrote it; what is shown is sanitised."""
        if verdict.reason == "empty":
            return ""
        if is_refusal(verdict.text):
            if not draft.shown:  # a refusal after shown sentences is dropped; before them, it ends the draft
                draft.refused, draft.stop = True, "refusal"
            return ""
        draft.sentences.append(Sentence(verdict.text, verdict.supported, verdict.sources, False, verdict.reason))
        if verdict.reason == "repeat":
            draft.stop = "loop"
            return ""
        if verdict.reason == "verdict":
            return verdict.text if not draft.held else ""  # shown only with the supported sentence after it
        if verdict.supported and not draft.shown and not _on_topic(verdict, draft.asked, draft.why):
            verdict = replace(verdict, supported=False, reason="off_topic")
            draft.sentences[-1] = Sentence(verdict.text, False, verdict.sources, False, verdict.reason)
        if not verdict.supported:
            draft.withhold_held()  # what they introduced is not shown
            draft.unsupported_run += 1
            if self.mode == "auto" and not draft.shown and verdict.reason == "language":
                draft.stop = "language"  # the model writes another language: quote instead, at once
            elif self.mode == "auto" and not draft.shown and draft.unsupported_run >= GIVE_UP_AFTER:
                draft.stop = "ungrounded"
            return ""
        draft.unsupported_run = 0
        shown = self._safe(run, verdict.text)
        if not shown.strip():  # nothing left to show (an image alone, say)
            draft.sentences[-1] = Sentence(shown, True, verdict.sources, False, "empty")
            return ""
        draft.sentences[-1] = Sentence(shown, True, verdict.sources, True)
        return _with_markers(shown, verdict.sources)

    def _shown(self, run: _Run, draft: _Draft, text: str) -> Token:
        separator = "" if not draft.text else "\n" if text[:2] in ("- ", "* ") else \
            "" if run.language == "zh" else " "
        draft.text += separator + text
        run.shown_first_ms = run.shown_first_ms or _ms(run.started)
        return Token(separator + text)

    def _after_generation(self, run: _Run, draft: _Draft) -> Iterator[Event]:
        if draft.shown:
            yield Done(self._answer(run, "generated", draft.text, draft.sentences, draft.grounded, draft.stop))
        elif self.mode == "generate":
            yield from self._refused(run, "refusal" if draft.refused else "withheld", draft=draft)
        else:  # the model said the excerpts do not answer, or nothing it wrote holds: quote only when sure
            # (a draft that only named a section, "2.5 Memory and Disk Space Requirements", pointed at the answer)
            pointed = any(sentence.reason == "heading" for sentence in draft.sentences)
            yield from self._extracted(run, "refusal" if draft.refused else draft.stop or "ungrounded", draft,
                                       confident=not pointed)

    def _extracted(self, run: _Run, why: str, draft: _Draft | None = None, confident: bool = False) -> Iterator[Event]:
        quotes = extract(run.standalone, run.hits, run.language, self._encoder, confident=confident)
        # No sentence addresses the question, or the question names things (Windows, Microsoft Office) that the
        # quotes never name: an excerpt mentioning one of them elsewhere let retrieval through, not an answer.
        if not quotes or names_none(run.standalone, [quote.text for quote in quotes]):
            yield from self._refused(run, "refusal", draft=draft)
            return
        label = reply("other_language" if why == "other_language" else "quoted", run.language)
        run.shown_first_ms = run.shown_first_ms or _ms(run.started)
        shown = [(self._safe(run, quote.text), quote.n) for quote in quotes]
        lines = [label, *(f"“{text}” [{n}]" for text, n in shown)]
        for n, line in enumerate(lines):
            yield Token(("\n" if n else "") + line)
        sentences = [Sentence(text, True, (n,), True) for text, n in shown]
        drafted = (draft.sentences if draft else []) + sentences
        grounded = draft.grounded if draft and draft.sentences else 1.0
        yield Done(self._answer(run, "extracted", "\n".join(lines), drafted, grounded, why))

    def _refused(self, run: _Run, kind: str, listed: bool = True, draft: _Draft | None = None) -> Iterator[Event]:
        text = reply(kind, run.language)
        run.shown_first_ms = run.shown_first_ms or _ms(run.started)
        yield Token(text)
        grounded = draft.grounded if draft else 0.0
        answer = self._answer(run, "refused", text, draft.sentences if draft else [], grounded, kind)
        yield Done(answer if listed else _without_sources(answer))

    def _answer(self, run: _Run, outcome: Outcome, text: str, sentences: list[Sentence], grounded: float,
                why: str) -> Answer:
        cited = {n for sentence in sentences if sentence.shown for n in sentence.sources}
        sources = [Source(n, hit, n in cited) for n, hit in enumerate(run.hits, start=1)]
        timings = Timings(run.retrieve_ms, run.shown_first_ms, _ms(run.started), run.draft_first_ms)
        sure = {"generated": run.sure * grounded, "extracted": run.sure * EXTRACTED_CONFIDENCE}.get(outcome, 0.0)
        return Answer(text, outcome != "refused", bool(cited), sources, timings, run.usage, run.shown_query,
                      round(sure, 3), outcome, grounded, sentences, "" if outcome == "generated" else why,
                      loop=why == "loop", removed=list(dict.fromkeys(run.removed)), links=self.links)

    def _safe(self, run: _Run, text: str) -> str:
        """Text as it may be shown (rag.core.sanitize); what was taken out is recorded for the answer."""
        safe = self.links.clean(text)
        run.removed += safe.removed
        return safe.text


def unmentioned(question: str, hits: Sequence[Hit]) -> bool:
    """Whether the question names several things (Windows, Microsoft Office) of which no excerpt names any: the
    excerpts are about something else, however close their words."""
    return names_none(question, [hit.text for hit in hits])


def names_none(question: str, texts: Sequence[str]) -> bool:
    """Whether the question names several things and none of the texts names any of them."""
    asked = proper_names(question)
    return len(asked) >= 2 and not mentions_any(texts, asked)


def _with_markers(text: str, sources: Sequence[int]) -> str:
    """The sentence with its [n] markers before its final punctuation."""
    markers = "".join(f"[{n}]" for n in sources)
    if not markers:
        return text
    body, end = (text[:-1], text[-1]) if text[-1:] and text[-1] in ".!?。！？" else (text, "")
    space = "" if end in ("。", "！", "？") or language_of(body) == "zh" else " "
    return f"{body.rstrip()}{space}{markers}{end}"


def _on_topic(verdict: Verdict, asked: frozenset[str], why: bool) -> bool:
    """Whether a first sentence is about the question: it, or the excerpt text around its place, holds ON_TOPIC of
    the question's words (at least two, or all of a shorter question), and answers a "why" with a reason the excerpt
    gives. A true sentence about something else ("处理 Bug 对你也是很好的锻炼" for a question on downloading updates
    once; "GNU/Linux 是以 Unix 为原型创造的" for why it is called GNU/Linux) is no answer."""
    said = set(tokenize(verdict.text)) | set(tokenize(verdict.place))
    wanted = min(len(asked), max(2, math.ceil(ON_TOPIC * len(asked))))
    return len(asked & said) >= wanted and (not why or "cause" in polarity(verdict.place))


def _waits(sentence: Sentence) -> bool:
    """Whether a sentence says something only with what follows it: an introduction (ends in a colon), or a bare
    verdict ("Yes.", "可以。")."""
    return sentence.reason == "verdict" or sentence.text.rstrip().endswith((":", "："))


def _other_language(hits: Sequence[Hit], language: Language) -> bool:
    found = {excerpt_language(hit.text) for hit in hits} - {None}
    return bool(found) and language not in found


def _without_sources(answer: Answer) -> Answer:
    return replace(answer, sources=[])


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000


def refers_back(question: str) -> bool:
    """Whether a question seems to lean on the conversation: a continuation, a word pointing back, or next to
    no search words of its own."""
    return _REFERS_BACK.search(question) is not None or len(set(tokenize(question))) <= FEW_WORDS
