"""rag.core.alignment against a plain reference of its local alignment: the integer-id, row-skipping table is the
same table, so every alignment (coverage, place, swaps) is the same; `reach` bounds what alignment can find."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np

from rag.core import alignment
from rag.core.alignment import CROSSING, MATCH, Units, align, reach, units

LABELLED = Path(__file__).resolve().parent.parent / "data" / "eval" / "support" / "labelled.jsonl"


def _reference_local(words: tuple[str, ...], excerpt: Units, window: range, gap: int,
                     last_word: bool = True) -> alignment._Part:
    """The recurrence written plainly: strings compared pair by pair, every row computed."""
    part = [excerpt.words[j] for j in window]
    n, m = len(words), len(part)
    if not n or not m:
        return alignment._Part()
    matches = np.array([[word == other for other in part] for word in words], dtype=bool)
    ends = np.array([excerpt.sentences[j] for j in window], dtype=np.int64)
    ends = np.concatenate(([ends[0]], ends)) - ends[0]
    table = np.zeros((n + 1, m + 1), dtype=np.int64)
    ramp = gap * np.arange(m + 1, dtype=np.int64) + CROSSING * ends
    step = MATCH - CROSSING * np.diff(ends)
    for i in range(1, n + 1):
        above = table[i - 1]
        candidate = np.maximum(above[1:], np.where(matches[i - 1], above[:-1] + step, 0))
        row = np.concatenate(([0], candidate))
        table[i] = np.maximum(np.maximum.accumulate(row + ramp) - ramp, 0)
    end_i, end_j = np.unravel_index(int(np.argmax(table)), table.shape)
    found = alignment._traceback(table, matches, step, int(end_i), int(end_j), window.start)
    if not found.matched:
        return found
    crossed = excerpt.sentences[found.hi] - excerpt.sentences[found.lo]
    swapped = found.swapped + (alignment._swapped_ends(found, n, excerpt, window) if last_word else 0)
    return replace(found, crossed=crossed, swapped=swapped)


def _reference_align(sentence: Units, excerpt: Units) -> alignment.Alignment:
    """`align` with two segments over the reference local alignment."""
    if not sentence.words or not excerpt.words:
        return alignment.Alignment(0.0, 0, 0)
    everything = range(len(excerpt.words))
    readings = [[_reference_local(sentence.words, excerpt, everything, alignment.GAP)]]
    core = _reference_local(sentence.words, excerpt, everything, alignment.CORE_GAP)
    places = [i for i in range(len(sentence.words)) if i not in core.matched]
    if core.matched and places:
        window = range(min(i for i, n in enumerate(excerpt.sentences) if n == excerpt.sentences[core.lo]),
                       max(i for i, n in enumerate(excerpt.sentences) if n == excerpt.sentences[core.hi]) + 1)
        rest = _reference_local(tuple(sentence.words[i] for i in places), excerpt, window, alignment.GAP, False)
        rest = replace(rest, matched=frozenset(places[k] for k in rest.matched))
        readings.append([core, replace(rest, swapped=rest.swapped + alignment._swapped_between(core, rest))])
    score, parts = max((sum(part.score for part in parts), parts) for parts in readings)
    found = [part for part in parts if part.matched]
    if score <= 0 or not found:
        return alignment.Alignment(0.0, 0, 0)
    lo, hi = min(part.lo for part in found), max(part.hi for part in found)
    return alignment.Alignment(round(score / (MATCH * len(sentence.words)), 3), excerpt.spans[lo][0],
                               excerpt.spans[hi][1], sum(part.swapped for part in found))


def _pairs() -> list[tuple[str, str]]:
    """Sentences against excerpts: each labelled sentence, sentences of its own excerpt and of another row's."""
    rows = [json.loads(line) for line in LABELLED.read_text(encoding="utf-8").splitlines() if line.strip()]
    pairs = []
    for k, row in enumerate(rows[::3]):
        other = rows[(3 * k + 7) % len(rows)]["excerpts"][0]
        own = [s for s in re.split(r"(?<=[.!?。！？])\s*", row["excerpts"][0]) if len(s) > 20][:2]
        for sentence in [row["sentence"], *own, *[s for s in re.split(r"(?<=[.!?])\s*", other) if len(s) > 20][:1]]:
            pairs += [(sentence, excerpt) for excerpt in row["excerpts"]]
    return pairs


def test_alignment_equals_the_plain_recurrence_on_labelled_sentences_and_strangers() -> None:
    pairs = _pairs()
    assert len(pairs) > 300
    differing = [(s, e) for s, e in pairs if align(units(s), units(e)) != _reference_align(units(s), units(e))]
    assert not differing


def test_reach_bounds_every_alignment_and_is_exact_for_a_copied_sentence() -> None:
    for sentence, excerpt in _pairs():
        said, held = units(sentence), units(excerpt)
        assert align(said, held).coverage <= reach(said, held)
    text = "The storage requirements are fixed and unchanging."
    assert reach(units(text), units(f"One is performance. {text}")) == 1.0
    assert reach(units("Bananas grow on trees."), units(text)) == 0.0
    assert reach(units(""), units(text)) == 0.0


def test_a_word_the_excerpt_lacks_leaves_the_alignment_as_without_it() -> None:
    excerpt = units("Run apt install followed by the package name. Root rights are needed.")
    plain = units("Run apt install with the package name.")
    padded = units("Run apt zebra install with the package name.")
    assert (align(padded, excerpt).start, align(padded, excerpt).end) == (align(plain, excerpt).start,
                                                                          align(plain, excerpt).end)
    assert align(padded, excerpt) == _reference_align(padded, excerpt)
