"""Where in an excerpt a sentence says the same thing: ordered, contiguous alignment of their words.

A bag of shared words cannot tell "Linux is compatible in most cases" from "full compatibility is required": the
support check instead aligns the sentence's content words, in order, to one compact place of one excerpt (a local
alignment: every excerpt word skipped inside the place costs a little), and then compares what that place says
about negation and quantity (not, never, most, only, all; 不, 没有, 大多数, 只, 必须) with what the sentence says.

Units: English words stemmed (stopwords dropped, but negations and quantifiers kept), Latin words inside Chinese,
and single Han characters (segmenting both sides with jieba would cut the same words differently in different
contexts; characters align the same way everywhere), without the commonest function characters.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from rag.core.text import HAN_RANGE, STOPWORDS, stem

MATCH = 10  # scores are integers: a matched unit is worth MATCH, a skipped excerpt unit costs GAP
GAP = 2
CORE_GAP = 6  # the tight core of a two-part reading
SWAP_WIDTH = 3  # at most this many words on each side make a substitution between the two parts of a reading
CROSSING = 20  # an alignment that runs over the end of an excerpt sentence pays this for each end it crosses
_UNIT = re.compile(f"[{HAN_RANGE}]|[^\\W_{HAN_RANGE}]+")
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|[。！？；]")
_HAN_FUNCTION = frozenset("的了着过是在和与及或也都就之而并且把被对于为以其这那个您你我它他她们吗呢吧啊")
# What a sentence says about polarity and quantity, by kind: a sentence and the place that backs it must agree.
POLARITY = {
    "not": re.compile(r"\b(?:not|no|never|none|nothing|nobody|neither|nor|without|unable|cannot|independent(?:ly)?|"
                      r"regardless)\b|n't\b|"
                      r"不(?!同|仅|但|过|久|断|少|错|久|管|论)|没有|没|未|无(?!论)|非(?!常)|别", re.IGNORECASE),
    "all": re.compile(r"\b(?:all|every|everything|always|entire(?:ly)?|fully|completely)\b|所有|全部|每|总是|完全|一切",
                      re.IGNORECASE),
    "most": re.compile(r"\b(?:most|mostly|usually|generally|often|many)\b|大多数|大部分|大多|多数|通常|一般|往往",
                       re.IGNORECASE),
    "only": re.compile(r"\b(?:only|solely|just|exclusively)\b|只|仅", re.IGNORECASE),
    "some": re.compile(r"\b(?:some|few|several|sometimes)\b|一些|某些|有些|部分|有时", re.IGNORECASE),
    "must": re.compile(r"\b(?:must|required|requires?|need|needs|necessary|mandatory)\b|必须|必需|需要|要求",
                       re.IGNORECASE),
    "may": re.compile(r"\b(?:optional|optionally|may|might)\b|可选|或许|也许", re.IGNORECASE),
    # A reason given ("Because …", "因为 …") must be one the excerpt gives: a fact is not its own cause.
    "cause": re.compile(r"\b(?:because|since|therefore|thus|hence|reason|due to|so that)\b|"
                        r"因为|由于|所以|因此|原因|为了", re.IGNORECASE),
    # A comparison's other side ("… runs more slowly than VACUUM FULL") must be one the excerpt compares with: with
    # "VACUUM FULL … runs much more slowly", the two-part reading let the subject become what it is compared to.
    # English only: 比 starts 比如 and 比较 as often as it compares.
    "than": re.compile(r"\bthan\b", re.IGNORECASE),
}
_KEPT = frozenset({"not"})  # a stopword that is a claim


@dataclass(frozen=True, slots=True)
class Units:
    """A text's alignment units and where each one starts and ends in the text."""

    words: tuple[str, ...]
    spans: tuple[tuple[int, int], ...]
    sentences: tuple[int, ...]  # the number of the text's sentence each unit is in
    # Each distinct word's number, and the words as those numbers (`units` makes both): a sentence's words are
    # looked up once and compared with the whole text in one array comparison.
    vocabulary: Mapping[str, int] = field(compare=False)
    ids: np.ndarray = field(compare=False)

    def ids_of(self, words: Sequence[str]) -> np.ndarray:
        """The numbers of these words in this text's vocabulary (-1 for a word it lacks)."""
        return np.fromiter((self.vocabulary.get(word, -1) for word in words), dtype=np.int64, count=len(words))

    def same_sentences(self, lo: int, hi: int) -> range:
        """The units of the sentences that units lo..hi lie in."""
        # Sentence numbers never fall along the text: the sentences' first and last units by bisection.
        start = bisect.bisect_left(self.sentences, self.sentences[lo])
        return range(start, bisect.bisect_right(self.sentences, self.sentences[hi]))


def units(text: str) -> Units:
    """The text's alignment units, in order, with their character spans."""
    lowered = text.lower()
    kept = [(_negation(m.group(), lowered, m.start()), m.start(), m.end()) for m in _UNIT.finditer(lowered)]
    kept = [(w, a, b) for w, a, b in kept if _content(w)]
    stems = iter(stem([w for w, _, _ in kept if not _is_han(w)]))
    words = tuple(w if _is_han(w) else next(stems) for w, _, _ in kept)
    ends = [m.end() for m in _SENTENCE_END.finditer(text)]
    vocabulary = {word: n for n, word in enumerate(dict.fromkeys(words))}
    return Units(words, tuple((a, b) for _, a, b in kept), tuple(bisect.bisect_right(ends, a) for _, a, _ in kept),
                 vocabulary, np.fromiter((vocabulary[word] for word in words), dtype=np.int64, count=len(words)))


def _negation(word: str, text: str, start: int) -> str:
    """"not" for every way of writing it (no, cannot, the t of can't), so "can't" aligns with "can not"."""
    if word in ("no", "cannot") or (word == "t" and text[max(0, start - 2):start] in ("n'", "n\u2019")):
        return "not"
    return word


def _is_han(word: str) -> bool:
    return len(word) == 1 and "\u3400" <= word <= "\ufaff"


def _content(word: str) -> bool:
    if _is_han(word):
        return word not in _HAN_FUNCTION
    return word in _KEPT or word not in STOPWORDS


@dataclass(frozen=True, slots=True)
class Alignment:
    """The best place of one excerpt for a sentence: the share of the sentence's units it backs (after the costs
    of skipped excerpt units) and the character span of that place in the excerpt."""

    coverage: float
    start: int
    end: int
    swapped: int = 0  # places where the sentence says another word than the excerpt, between aligned words


def align(sentence: Units, excerpt: Units, segments: int = 2) -> Alignment:
    """Align the sentence, in order, to the excerpt's best compact place. With segments=2 the sentence may also be
    backed by two such alignments in the same sentence of the excerpt (a clause said in the other order): a tight
    core (skips cost CORE_GAP) and the sentence's unmatched rest; the better of the two readings counts."""
    if not sentence.words or not excerpt.words:
        return Alignment(0.0, 0, 0)
    everything = range(len(excerpt.words))
    said = excerpt.ids_of(sentence.words)
    readings = [[_local(said, excerpt, everything, GAP)]]
    if segments > 1:
        core = _local(said, excerpt, everything, CORE_GAP)
        places = [i for i in range(len(sentence.words)) if i not in core.matched]
        if core.matched and places:
            window = excerpt.same_sentences(core.lo, core.hi)
            rest_part = _local(said[places], excerpt, window, GAP, last_word=False)
            rest_part = replace(rest_part, matched=frozenset(places[k] for k in rest_part.matched))
            readings.append([core, replace(rest_part, swapped=rest_part.swapped + _swapped_between(core, rest_part))])
    score, parts = max((sum(part.score for part in parts), parts) for parts in readings)
    found = [part for part in parts if part.matched]
    if score <= 0 or not found:
        return Alignment(0.0, 0, 0)
    lo, hi = min(part.lo for part in found), max(part.hi for part in found)
    return Alignment(round(score / (MATCH * len(sentence.words)), 3), excerpt.spans[lo][0], excerpt.spans[hi][1],
                     sum(part.swapped for part in found))


def reach(sentence: Units, excerpt: Units) -> float:
    """The highest coverage `align` could find (rounded as it rounds): the share of the sentence's units that the
    excerpt holds anywhere. An excerpt whose reach is under the floor cannot back the sentence, and aligning it (a
    table of sentence by excerpt units) is the check's costliest step."""
    if not sentence.words or not excerpt.words:
        return 0.0
    return round(sum(word in excerpt.vocabulary for word in sentence.words) / len(sentence.words), 3)


@dataclass(frozen=True, slots=True)
class _Part:
    """One local alignment: the sentence indices it matched, the first and last excerpt index, and its score
    counted at GAP per skipped excerpt unit (whatever gap it was found with)."""

    matched: frozenset[int] = frozenset()
    lo: int = 0
    hi: int = 0

    crossed: int = 0  # excerpt sentence ends between lo and hi
    swapped: int = 0  # gaps where both sides skip units between two matched pairs ("defined" said as "called")

    @property
    def score(self) -> int:
        if not self.matched:
            return 0
        return MATCH * len(self.matched) - GAP * (self.hi - self.lo + 1 - len(self.matched)) - CROSSING * self.crossed

    def __lt__(self, other: _Part) -> bool:  # max() over readings compares parts only on equal scores
        return self.score < other.score


def _local(said: np.ndarray, excerpt: Units, window: range, gap: int, last_word: bool = True) -> _Part:
    """Local alignment (Smith-Waterman: skipped sentence units free, skipped excerpt units `gap` each, each excerpt
    sentence end crossed CROSSING) of the sentence's units (`said`: their numbers in the excerpt's vocabulary)
    against the excerpt's units in `window`; `last_word`: whether a swapped last word counts (not for the rest of a
    sentence aligned after its core, whose last word is the core's)."""
    n, m = len(said), len(window)
    if not n or not m:
        return _Part()
    matches = said[:, None] == excerpt.ids[None, window.start:window.stop]  # n × m (a lacking word, -1, matches none)
    found_any = np.asarray(matches.any(axis=1))
    if not found_any.any():
        return _Part()
    ends = np.array(excerpt.sentences[window.start:window.stop], dtype=np.int64)
    ends = np.concatenate(([ends[0]], ends)) - ends[0]  # sentence ends before each column
    table = np.zeros((n + 1, m + 1), dtype=np.int64)
    ramp = gap * np.arange(m + 1, dtype=np.int64) + CROSSING * ends
    step = MATCH - CROSSING * np.diff(ends)
    diagonal = np.empty(m, dtype=np.int64)
    for i in range(1, n + 1):
        above, row = table[i - 1], table[i]
        if not found_any[i - 1]:
            # A word the window lacks: the row below equals the row above (it already holds its best skips, and
            # the ramp never falls), so copying it gives the very table the recurrence would.
            row[:] = above
            continue
        # The recurrence in place (row[0] stays 0; no small arrays allocated): a cell is the best of the cell
        # above, the diagonal plus a match's step, and any cell to its left less the gaps between (the running
        # maximum of cell + ramp, less ramp), floored at 0.
        np.add(above[:-1], step, out=diagonal)
        diagonal *= matches[i - 1]  # 0 where not matched (as np.where(matched, ·, 0))
        np.maximum(above[1:], diagonal, out=row[1:])
        row += ramp
        np.maximum.accumulate(row, out=row)
        row -= ramp
        np.maximum(row, 0, out=row)
    end_i, end_j = np.unravel_index(int(np.argmax(table)), table.shape)
    found = _traceback(table, matches, step, int(end_i), int(end_j), window.start)
    if not found.matched:
        return found
    crossed = excerpt.sentences[found.hi] - excerpt.sentences[found.lo]
    swapped = found.swapped + (_swapped_ends(found, n, excerpt, window) if last_word else 0)
    return replace(found, crossed=crossed, swapped=swapped)


def _swapped_between(core: _Part, rest: _Part) -> int:
    """1 when the two parts of a reading follow each other in the same order in sentence and excerpt, and both
    say something else between them ("VACUUM is a standard VACUUM command that can reclaim…" against "VACUUM FULL
    can reclaim…": "standard … command" where the excerpt says "FULL")."""
    if not core.matched or not rest.matched:
        return 0
    first, second = (rest, core) if rest.lo < core.lo else (core, rest)
    if max(first.matched) >= min(second.matched):
        return 0  # said in the other order: that is what a second part is for
    said, written = min(second.matched) - max(first.matched) - 1, second.lo - first.hi - 1
    return int(0 < said <= SWAP_WIDTH and 0 < written <= SWAP_WIDTH)  # a few words for a few: a substitution


def _swapped_ends(found: _Part, n: int, excerpt: Units, window: range) -> int:
    """1 when the sentence's last word is not the aligned one and the excerpt's sentence goes on with another
    there ("…when the function is called" against "…when the function is defined")."""
    after = found.hi + 1
    tail = max(found.matched) < n - 1
    return int(tail and after < window.stop and excerpt.sentences[after] == excerpt.sentences[found.hi])


def _traceback(table: np.ndarray, matches: np.ndarray, step: np.ndarray, i: int, j: int,
               shift: int) -> _Part:
    matched: set[int] = set()
    positions: list[int] = []
    pairs: list[tuple[int, int]] = []
    while i > 0 and j > 0 and table[i, j] > 0:
        if matches[i - 1, j - 1] and table[i - 1, j - 1] + step[j - 1] == table[i, j]:
            matched.add(i - 1)
            positions.append(j - 1)
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif table[i - 1, j] == table[i, j]:
            i -= 1
        else:
            j -= 1
    if not positions:
        return _Part()
    swapped = sum(1 for (i2, j2), (i1, j1) in itertools.pairwise(pairs) if i2 - i1 > 1 and j2 - j1 > 1)
    return _Part(frozenset(matched), min(positions) + shift, max(positions) + shift, swapped=swapped)


def polarity(text: str) -> frozenset[str]:
    """The kinds of negation and quantity the text states (POLARITY)."""
    return frozenset(kind for kind, pattern in POLARITY.items() if pattern.search(text))
