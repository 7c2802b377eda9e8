"""The support check: is a sentence of an answer backed by the excerpts, and by which of them; and a loop guard.

A sentence is supported when one excerpt (or, failing that, two together) holds enough of its content words
(English stems, jieba words for Chinese) and every number and every name or identifier it states, exactly. The
coverage floors are calibrated on hand-labelled answers of the offline model (README: precision and recall).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from rag.keyword import HAN_RANGE, STOPWORDS, tokenize
from rag.sentences import Language, language_of, split_sentences, strip_markers, strip_tags, words

MIN_COVERAGE = {"en": 0.75, "zh": 0.75}
LOOP_NGRAM, LOOP_REPEATS = 8, 3
WINDOW = 3  # sentences of an excerpt that may back one claim together
# Stems of words that carry no claim ("Sure, here is the answer to your question:").
_FILLER = "here sure certain follow answer question excerpt document let help hope glad s"
FILLER = frozenset(_FILLER.split())

_NUMBER = re.compile(r"\d+(?:[.:/…]\d+)*")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_RANGE = re.compile(r"(\d)\s*(?:\.{2,3}|…|–|—|\bto\b|至|到)\s*(?=\d)")
_CODE = re.compile(r"`([^`]+)`")
# Identifiers: options (--upgrade), paths, file names, dotted or dashed names, words with digits (python3).
_IDENTIFIER = re.compile(r"(?<![\w-])(?:--?[A-Za-z][\w-]*|[\w./~-]*[A-Za-z][\w~-]*(?:[./_-]|\d)[\w./~-]*\w)")
_NAME = re.compile(r"(?<=[a-z,;)]\s)[A-Z][A-Za-z]+(?:\s+[A-Z][A-Za-z]+)*")
# A Latin word written into Chinese text is a name or a term (Debian, cron-apt).
_LATIN_IN_HAN = re.compile(f"(?:(?<=[{HAN_RANGE}])|(?<=[{HAN_RANGE}] ))[A-Za-z][\\w.+-]*")


@dataclass(frozen=True, slots=True)
class Verdict:
    """The check of one sentence: `text` is what may be shown (markers and tags removed)."""

    text: str
    supported: bool
    sources: tuple[int, ...] = ()
    coverage: float = 0.0
    reason: str = ""  # why not supported: "empty", "coverage", "number", "name", "language", "repeat"


def _squash(text: str) -> str:
    text = _RANGE.sub(r"\1…", _THOUSANDS.sub("", text))
    return " ".join(text.lower().split())


def numbers(text: str) -> set[str]:
    """Every number, version, time or date part stated in the text; a range (61184…65519) counts as one."""
    flat = _RANGE.sub(r"\1…", _THOUSANDS.sub("", text))
    return set(_NUMBER.findall(flat))


def names(text: str) -> set[str]:
    """Code spans, identifiers and capitalised names not at the start of a sentence, lower-cased."""
    found = {span.strip() for span in _CODE.findall(text)}
    plain = _CODE.sub(" ", text)
    found |= {match.rstrip(".") for match in _IDENTIFIER.findall(plain) if not _NUMBER.fullmatch(match)}
    found |= {_without_article(name) for name in _NAME.findall(plain)}
    found |= {word.rstrip(".") for word in _LATIN_IN_HAN.findall(plain)}
    return {" ".join(name.lower().split()) for name in found if name}


def mentions_any(texts: Sequence[str], wanted: set[str]) -> bool:
    """Whether any of the (lower-cased) names occurs in any of the texts."""
    return any(name in _squash(text) for text in texts for name in wanted)


def proper_names(text: str) -> set[str]:
    """Capitalised names (not sentence-initial) and Latin words in Chinese text, lower-cased; no code."""
    plain = _CODE.sub(" ", text)
    found = {_without_article(name) for name in _NAME.findall(plain)}
    found |= {word.rstrip(".") for word in _LATIN_IN_HAN.findall(plain) if word.isalpha()}
    return {" ".join(name.lower().split()) for name in found if name}


def _without_article(name: str) -> str:
    """"The Debian Project" → "Debian Project": a capitalised function word is not part of the name."""
    first, _, rest = name.partition(" ")
    return rest if rest and first.lower() in STOPWORDS else name


@dataclass(frozen=True, slots=True)
class _Passage:
    """A few consecutive sentences of one excerpt: a claim must be backed by one such place, not by words
    scattered over the whole excerpt."""

    n: int
    tokens: frozenset[str]
    text: str  # squashed, lower-cased

    def holds_number(self, number: str) -> bool:
        return re.search(rf"(?<![\d.]){re.escape(number)}(?!\d|\.\d)", self.text) is not None

    def holds(self, facts: tuple[set[str], set[str]]) -> str:
        """"" when every number and name is here, else the kind of fact missing."""
        if not all(self.holds_number(number) for number in facts[0]):
            return "number"
        return "" if all(name in self.text for name in facts[1]) else "name"


def passages(excerpts: Sequence[str], width: int = WINDOW) -> list[_Passage]:
    """Windows of `width` consecutive sentences of each excerpt (numbered from 1)."""
    found = []
    for n, excerpt in enumerate(excerpts, start=1):
        sentences = split_sentences(excerpt) or [excerpt]
        for start in range(max(1, len(sentences) - width + 1)):
            text = " ".join(sentences[start:start + width])
            found.append(_Passage(n, frozenset(tokenize(text)), _squash(text)))
    return found


@dataclass
class SupportChecker:
    """Checks sentences of one answer against its numbered excerpts (1-based, in the order given).

    `question` makes sentences that only restate it (or say nothing) filler: neither shown nor counted."""

    excerpts: Sequence[str]
    language: Language
    question: str = ""
    min_coverage: dict[str, float] = field(default_factory=lambda: dict(MIN_COVERAGE))
    _passages: list[_Passage] = field(init=False)
    _asked: set[str] = field(init=False)
    _seen: set[tuple[str, ...]] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        self._passages = passages(self.excerpts)
        self._asked = set(tokenize(self.question))

    def check(self, sentence: str) -> Verdict:
        """Whether the excerpts support the sentence, and which excerpt (the first that does)."""
        shown = " ".join(strip_tags(strip_markers(sentence)).split())
        tokens = set(tokenize(shown))
        informative = {token for token in tokens if not token.isdigit()} - FILLER
        facts = numbers(shown), names(shown)
        if not informative or (not any(facts) and (len(informative) < 2 or informative <= self._asked)):
            return Verdict(shown, False, reason="empty")  # "Sure!", bare markers, "Here is how to X:"
        key = tuple(sorted(tokens))
        if key in self._seen:
            return Verdict(shown, False, reason="repeat")
        self._seen.add(key)
        if (found := language_of(shown)) is not None and found != self.language:
            return Verdict(shown, False, reason="language")
        return self._support(shown, tokens, facts)

    def _support(self, shown: str, tokens: set[str], facts: tuple[set[str], set[str]]) -> Verdict:
        floor = self.min_coverage["zh" if self.language == "zh" else "en"]
        best = Verdict(shown, False, reason="coverage")
        for passage in self._passages:
            coverage = round(len(tokens & passage.tokens) / len(tokens), 3)
            missing = passage.holds(facts)
            if not missing and coverage >= floor:
                return Verdict(shown, True, (passage.n,), coverage)
            if coverage > best.coverage:
                best = Verdict(shown, False, (passage.n,), coverage, missing or "coverage")
        return best


@dataclass
class RepetitionGuard:
    """Watches streamed text and says when it starts repeating itself (an n-gram of words seen too often)."""

    n: int = LOOP_NGRAM
    repeats: int = LOOP_REPEATS
    _units: list[str] = field(default_factory=list)
    _counts: Counter[tuple[str, ...]] = field(default_factory=Counter)
    _tail: str = ""

    def feed(self, text: str) -> bool:
        """Add streamed text; True once some n-gram has occurred `repeats` times."""
        # Hold back a partial last word, so "upgr" + "ade" counts as one word.
        joined = self._tail + text
        cut = len(joined) - len(re.split(r"[\W_]", joined)[-1]) if joined and joined[-1].isalnum() else len(joined)
        self._tail = joined[cut:]
        looping = False
        for unit in words(joined[:cut]):
            self._units.append(unit)
            if len(self._units) >= self.n:
                gram = tuple(self._units[-self.n:])
                self._counts[gram] += 1
                looping = looping or self._counts[gram] >= self.repeats
        return looping
