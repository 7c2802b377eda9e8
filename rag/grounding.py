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
from itertools import combinations

from rag.keyword import tokenize
from rag.sentences import Language, language_of, strip_markers, strip_tags, words

MIN_COVERAGE = {"en": 0.75, "zh": 0.75}
LOOP_NGRAM, LOOP_REPEATS = 8, 3

_NUMBER = re.compile(r"\d+(?:[.:/]\d+)*")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_CODE = re.compile(r"`([^`]+)`")
# Identifiers: options (--upgrade), paths, file names, dotted or dashed names, words with digits (python3).
_IDENTIFIER = re.compile(r"(?<![\w-])(?:--?[A-Za-z][\w-]*|[\w./~-]*[A-Za-z][\w~-]*(?:[./_-]|\d)[\w./~-]*\w)")
_NAME = re.compile(r"(?<=[a-z,;:)]\s)[A-Z][A-Za-z]+(?:\s+[A-Z][A-Za-z]+)*")
# A Latin word written into Chinese text is a name or a term (Debian, cron-apt).
_LATIN_IN_HAN = re.compile("(?:(?<=[\u3400-\u9fff])|(?<=[\u3400-\u9fff] ))[A-Za-z][\\w.+-]*")


@dataclass(frozen=True, slots=True)
class Verdict:
    """The check of one sentence: `text` is what may be shown (markers and tags removed)."""

    text: str
    supported: bool
    sources: tuple[int, ...] = ()
    coverage: float = 0.0
    reason: str = ""  # why not supported: "empty", "coverage", "number", "name", "language", "repeat"


def _squash(text: str) -> str:
    return " ".join(_THOUSANDS.sub("", text).lower().split())


def numbers(text: str) -> set[str]:
    """Every number, version, time or date part stated in the text (thousands separators removed)."""
    return set(_NUMBER.findall(_THOUSANDS.sub("", text)))


def names(text: str) -> set[str]:
    """Code spans, identifiers and capitalised names not at the start of a sentence, lower-cased."""
    found = {span.strip() for span in _CODE.findall(text)}
    plain = _CODE.sub(" ", text)
    found |= {match.rstrip(".") for match in _IDENTIFIER.findall(plain) if not _NUMBER.fullmatch(match)}
    found |= set(_NAME.findall(plain)) | {word.rstrip(".") for word in _LATIN_IN_HAN.findall(plain)}
    return {" ".join(name.lower().split()) for name in found if name}


@dataclass(frozen=True, slots=True)
class _Excerpt:
    tokens: frozenset[str]
    text: str  # squashed, lower-cased

    def holds_number(self, number: str) -> bool:
        return re.search(rf"(?<![\d.]){re.escape(number)}(?![\d]|\.\d)", self.text) is not None


@dataclass
class SupportChecker:
    """Checks sentences of one answer against its numbered excerpts (1-based, in the order given)."""

    excerpts: Sequence[str]
    language: Language
    min_coverage: dict[str, float] = field(default_factory=lambda: dict(MIN_COVERAGE))
    _parsed: list[_Excerpt] = field(init=False)
    _seen: set[tuple[str, ...]] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        self._parsed = [_Excerpt(frozenset(tokenize(text)), _squash(text)) for text in self.excerpts]

    def check(self, sentence: str) -> Verdict:
        """Whether the excerpts support the sentence, and which ones (best first)."""
        shown = " ".join(strip_tags(strip_markers(sentence)).split())
        tokens = set(tokenize(shown))
        facts = numbers(shown), names(shown)
        if len(tokens) <= 1 and not facts[0] and not facts[1]:
            return Verdict(shown, False, reason="empty")  # filler such as "Sure!" or bare markers: not a claim
        key = tuple(sorted(tokens))
        if key in self._seen:
            return Verdict(shown, False, reason="repeat")
        self._seen.add(key)
        if (found := language_of(shown)) is not None and found != self.language:
            return Verdict(shown, False, reason="language")
        return self._support(shown, tokens, facts)

    def _support(self, shown: str, tokens: set[str], facts: tuple[set[str], set[str]]) -> Verdict:
        floor = self.min_coverage["zh" if self.language == "zh" else "en"]
        best: Verdict | None = None
        for group in self._groups():
            verdict = self._judge(shown, tokens, facts, group, floor)
            if verdict.supported:
                return verdict
            if best is None or verdict.coverage > best.coverage:
                best = verdict
        return best or Verdict(shown, False, reason="coverage")

    def _groups(self) -> list[tuple[int, ...]]:
        singles = [(n,) for n in range(len(self._parsed))]
        return singles + list(combinations(range(len(self._parsed)), 2))

    def _judge(self, shown: str, tokens: set[str], facts: tuple[set[str], set[str]], group: tuple[int, ...],
               floor: float) -> Verdict:
        parts = [self._parsed[n] for n in group]
        held = set().union(*(part.tokens for part in parts))
        coverage = len(tokens & held) / len(tokens) if tokens else 1.0
        sources = tuple(n + 1 for n in group)
        if not all(any(part.holds_number(number) for part in parts) for number in facts[0]):
            return Verdict(shown, False, sources, coverage, "number")
        if not all(any(name in part.text for part in parts) for name in facts[1]):
            return Verdict(shown, False, sources, coverage, "name")
        if coverage < floor:
            return Verdict(shown, False, sources, coverage, "coverage")
        return Verdict(shown, True, sources, round(coverage, 3))


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
