"""The support check: is a sentence of an answer backed by the excerpts, and by which of them; and a loop guard.

A sentence is supported when its content words align, in order, to one compact place of one excerpt
(rag.core.alignment) closely enough, that place says the same about negation and quantity (not, most, only, than; 不,
大多数, 只), and the sentence around it holds every number and every name or identifier the sentence states,
exactly, and each upper-case term as the whole term (VACUUM is not VACUUM FULL). Words
the sentence shares with the question count only where the excerpt's place holds them too. The floors are
calibrated on labelled sentences of the offline model (data/eval/support; docs: precision and recall).
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from rag.core.alignment import Units, align, polarity, reach, units
from rag.core.sentences import Language, language_of, strip_markers, strip_tags, words
from rag.core.text import HAN_RANGE, STOPWORDS, tokenize

# Excerpts whose alignment units are remembered: a chunk is checked in every answer it is an excerpt of, and its
# units (stemmed words, spans, sentences) were a tenth of a generated answer's in-process CPU (benchmarks.app_cost).
# Units are frozen, so answers share them; ~15 KiB a chunk of ~1,500 characters, so ~15 MiB in all.
UNITS_MEMORY = 1024


@functools.lru_cache(maxsize=UNITS_MEMORY)
def excerpt_units(excerpt: str) -> Units:
    """An excerpt's alignment units (`units`), remembered across answers."""
    return units(excerpt)


MIN_COVERAGE = {"en": 0.75, "zh": 0.75}
# Words said differently inside the aligned place, or a last word said differently ("defined" said as "called"):
# none in English. Chinese is aligned
# by characters, where a paraphrase swaps characters all the time: not counted (the labelled tune half: recall
# 0.90 → 0.81 for no precision gained).
MAX_SWAPPED = {"en": 0, "zh": 10**6}
LOOP_NGRAM, LOOP_REPEATS = 8, 3
# Stems of words that carry no claim ("Sure, here is the answer to your question:").
_FILLER = "here sure certain follow answer question excerpt document let help hope glad s"
FILLER = frozenset(_FILLER.split())

_NUMBER = re.compile(r"\d+(?:[.:/…]\d+)*")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_RANGE = re.compile(r"(\d)\s*(?:\.{2,3}|…|–|—|\bto\b|至|到)\s*(?=\d)")
_CODE = re.compile(r"`([^`]+)`")
# "one" is left out: it is a pronoun as often as a number.
_SPELLED = "zero _ two three four five six seven eight nine ten eleven twelve"
_NUMBER_WORDS = {word: str(n) for n, word in enumerate(_SPELLED.split()) if word != "_"}
_NUMBER_WORD = re.compile(rf"\b(?:{'|'.join(_NUMBER_WORDS)})\b", re.IGNORECASE)
_VARIABLE = re.compile(r"\$\{?\w+\}?")  # $LANG, ${HOME}: a different variable is a different claim
# Identifiers: options (--upgrade), paths, file names, dotted or dashed names, words with digits (python3).
_IDENTIFIER = re.compile(r"(?<![\w-])(?:--?[A-Za-z][\w-]*|[\w./~-]*[A-Za-z][\w~-]*(?:[./_-]|\d)[\w./~-]*\w)")
_CAPS_TERM = re.compile(r"(?<![\w-])[A-Z][A-Z0-9_]+(?:[ \t]+[A-Z][A-Z0-9_]+)*(?![\w-])")
_NAME = re.compile(r"(?<=[a-z,;)]\s)[A-Z][A-Za-z]+(?:\s+[A-Z][A-Za-z]+)*")
# A Latin word written into Chinese text is a name or a term (Debian, cron-apt).
_LATIN_IN_HAN = re.compile(f"(?:(?<=[{HAN_RANGE}])|(?<=[{HAN_RANGE}] ))[A-Za-z][\\w.+-]*")
# A fence of a code block, with its language tag (```bash): not part of the command it holds.
_FENCE = re.compile(r"```[\w+#.-]*")
# A bare verdict: kept only when the sentence after it is supported (rag.core.answer).
VERDICT = re.compile(r"(?:yes|no|yes, you can|no, you cannot|是的?|对|可以|不可以|不能|不|没有)[.!,。！，]?",
                     re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?。！？\n]")
HEADING_CHARS = 80
_BREADCRUMB = re.compile(r"\S \> \S")
LOOK_BACK = 6  # characters before an aligned place whose negation counts
CONTEXT = 160  # characters each side of a place that tell what it is about (a command's introducing sentence)
_SECTION_NUMBER = re.compile(r"\s*(?:第\s*\d+\s*[章节]|\d+(?:\.\d+)*\.?\s)")


@dataclass(frozen=True, slots=True)
class Verdict:
    """The check of one sentence: `text` is what may be shown (markers and tags removed)."""

    text: str
    supported: bool
    sources: tuple[int, ...] = ()
    coverage: float = 0.0
    reason: str = ""  # why not supported: "empty", "coverage", "number", "name", "language", "repeat", …
    place: str = ""  # the excerpt text around the place that backs a supported sentence (CONTEXT each side)


def _squash(text: str) -> str:
    text = _RANGE.sub(r"\1…", _THOUSANDS.sub("", _digits(text)))
    return " ".join(text.lower().split())


def _digits(text: str) -> str:
    """Number words written as digits ("two orders of magnitude" → "2 orders …"), so a changed count is seen."""
    return _NUMBER_WORD.sub(lambda match: _NUMBER_WORDS[match.group().lower()], text)


def numbers(text: str) -> set[str]:
    """Every number, version, time or date part stated in the text, in digits or words ("two"); a range
    (61184…65519) counts as one."""
    flat = _RANGE.sub(r"\1…", _THOUSANDS.sub("", _digits(text)))
    return set(_NUMBER.findall(flat))


def names(text: str) -> set[str]:
    """Code spans, identifiers and capitalised names not at the start of a sentence, lower-cased."""
    # A code span as written, without the call parentheses or quotes the model adds (`f()`, `'__main__'`).
    found = {span.strip().strip("'\"").removesuffix("()") for span in _CODE.findall(text)}
    plain = _CODE.sub(" ", text)
    found |= set(_VARIABLE.findall(plain))
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


def holds_facts(text: str, facts: tuple[set[str], set[str]]) -> str:
    """"" when every number and name is in the (squashed) text, else the kind of fact missing."""
    if not all(re.search(rf"(?<![\d.]){re.escape(number)}(?!\d|\.\d)", text) for number in facts[0]):
        return "number"
    return "" if all(name in text for name in facts[1]) else "name"


def caps_terms(text: str) -> set[str]:
    """Upper-case terms, each as long as it runs (VACUUM FULL, CREATE INDEX, GPL), single-spaced."""
    return {" ".join(term.split()) for term in _CAPS_TERM.findall(text)}


def other_term(sentence: str, place: str) -> bool:
    """Whether the sentence names an upper-case term that the place holds only as a longer or shorter one: with
    "VACUUM FULL can reclaim more disk space", "Standard VACUUM can reclaim more disk space" holds the name VACUUM
    as text, but not as the term the excerpt says it of."""
    held = caps_terms(place)
    return any(term not in held and any(set(term.split()) & set(other.split()) for other in held)
               for term in caps_terms(sentence))


def _around(text: str, start: int, end: int) -> str:
    """The sentence(s) of the text that hold [start, end)."""
    before = max((m.end() for m in _SENTENCE_END.finditer(text, 0, start)), default=0)
    after = _SENTENCE_END.search(text, end)
    return text[before:after.end() if after else len(text)]


def _before(text: str, start: int) -> int:
    """Where the place's negation may start: a few characters earlier in the same sentence (不 before 建议, "not"
    before "install")."""
    floor = max((m.end() for m in _SENTENCE_END.finditer(text, max(0, start - LOOK_BACK), start)),
                default=max(0, start - LOOK_BACK))
    return floor


def _heading_only(sentence: str, excerpt: str, start: int, end: int) -> bool:
    """Whether an unpunctuated sentence only repeats a heading: the excerpt's first line (ingest's heading path)
    or a numbered section title ("2.5 Memory and Disk Space Requirements"), the place all on that one line."""
    bare = sentence.rstrip().rstrip("\"'”’»)」』")
    line_start = excerpt.rfind("\n", 0, start) + 1
    line_end = excerpt.find("\n", start)
    if len(bare) > HEADING_CHARS or "`" in sentence or 0 <= line_end < end:
        return False  # long, code, or the place runs on past the line: more than a heading
    line = excerpt[line_start:line_end if line_end >= 0 else len(excerpt)]
    if _BREADCRUMB.search(line) or (line_start == 0 and _SECTION_NUMBER.match(line)):
        return True  # ingest's heading path ("第 8 章 国际化和本地化 > 8.1. 语言环境"), punctuated or not
    return not _SENTENCE_END.search(bare[-1:] or ".") and (line_start == 0 or _SECTION_NUMBER.match(line) is not None)


@dataclass
class SupportChecker:
    """Checks sentences of one answer against its numbered excerpts (1-based, in the order given).

    `question` makes sentences that only restate it (or say nothing) filler: neither shown nor counted."""

    excerpts: Sequence[str]
    language: Language
    question: str = ""
    min_coverage: dict[str, float] = field(default_factory=lambda: dict(MIN_COVERAGE))
    segments: int = 2
    max_swapped: dict[str, int] = field(default_factory=lambda: dict(MAX_SWAPPED))
    _units: list[Units] = field(init=False)
    _asked: set[str] = field(init=False)
    _seen: set[tuple[str, ...]] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        self._units = [excerpt_units(excerpt) for excerpt in self.excerpts]
        self._asked = set(tokenize(self.question))

    def check(self, sentence: str) -> Verdict:
        """Whether the excerpts support the sentence, and which excerpt (the first that does)."""
        shown = " ".join(_FENCE.sub(" ", strip_tags(strip_markers(sentence))).split())
        if VERDICT.fullmatch(shown):
            return Verdict(shown, False, reason="verdict")  # "Yes." says something only with what follows it
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
        said, stated = units(shown), polarity(shown)
        best = Verdict(shown, False, reason="coverage")
        for n, (excerpt, excerpt_units) in enumerate(zip(self.excerpts, self._units, strict=True), start=1):
            if (most := reach(said, excerpt_units)) < floor and most <= best.coverage:
                continue  # this excerpt can neither back the sentence nor say better why it is not backed
            place = align(said, excerpt_units, self.segments)
            missing = self._missing(shown, excerpt, place.start, place.end, facts, stated)
            missing = missing or ("swapped" if place.swapped > self.max_swapped[self.language] else "")
            if not missing and place.coverage >= floor:
                context = excerpt[max(0, place.start - CONTEXT):place.end + CONTEXT]
                return Verdict(shown, True, (n,), place.coverage, place=context)
            if place.coverage > best.coverage:
                best = Verdict(shown, False, (n,), place.coverage, missing or "coverage")
        return best

    @staticmethod
    def _missing(shown: str, excerpt: str, start: int, end: int, facts: tuple[set[str], set[str]],
                 stated: frozenset[str]) -> str:
        """What the excerpt's place [start, end) lacks for the sentence: "polarity", "number", "name", "heading"."""
        if polarity(excerpt[_before(excerpt, start):end]) != stated:
            return "polarity"
        around = _around(excerpt, start, end)
        missing = holds_facts(_squash(around), facts) or ("name" if other_term(shown, around) else "")
        if not missing and _heading_only(shown, excerpt, start, end):
            return "heading"
        return missing


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
