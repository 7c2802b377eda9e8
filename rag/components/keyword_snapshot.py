"""Immutable BM25 snapshots for the keyword index: postings in segments, tombstones, idf and length norms at query time.

A snapshot holds everything a search needs and never changes once built, so a reader that took one reference scores,
maps slots to chunk ids and checks labels against one state, whatever writers do meanwhile. A write builds the next
snapshot from the last one in time proportional to the write (plus a copy of three small per-slot arrays), never to
the corpus:

- Chunks live in *slots*. A segment holds the postings (term → slots and term frequencies) of a contiguous range of
  slots: a full load builds one base segment, each write appends a small one for the chunks it adds.
- Deleting or replacing a chunk clears its slot in `alive` (a tombstone); its postings stay until compaction.
- idf and the length norm are computed per query from the live postings of the query's terms, the live chunk count
  and their total length — all over the chunks the caller may see, so that no score betrays a hidden chunk (a word
  that exists only in another group's document changes nothing) — and a write never touches other chunks' scores
  (bm25s bakes idf into its matrix, which is why it cannot be updated in place). Scores equal bm25s's Lucene variant
  over the visible live chunks.
- Compaction is numpy only (postings are merged, never tokenized again): trailing segments merge while the older one
  is at most twice the newer (a binary counter: O(log n) segments, each posting merged O(log n) times), and the whole
  index is rebuilt without dead slots when tombstones reach a quarter of the slots or the tail outgrows the base.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

K1, B = 1.5, 0.75
DEAD_SHARE = 0.25  # rebuild without tombstones once this share of the slots is dead
MERGE_RATIO = 2  # merge the last two segments while the older one holds at most this many times the newer's slots

Ints = npt.NDArray[np.int32]
Floats = npt.NDArray[np.float32]
Bools = npt.NDArray[np.bool_]
Array = TypeVar("Array", bound=npt.NDArray[Any])
Upsert = tuple[str, Sequence[str], str]  # chunk id, tokens, access label


def _frozen(array: Array) -> Array:
    array.flags.writeable = False  # a snapshot's arrays are shared by readers: any write is a bug, so make it raise
    return array


@dataclass(frozen=True, slots=True, eq=False)
class Segment:
    """Postings of the chunks in slots [start, start + len(ids)): the slots `docs[offsets[t]:offsets[t + 1]]` hold
    term t, `tfs` as often."""

    start: int
    ids: tuple[str, ...]
    terms: Mapping[str, int]
    offsets: npt.NDArray[np.int64]
    docs: Ints
    tfs: npt.NDArray[np.float32]

    def postings(self, term: str) -> tuple[Ints, npt.NDArray[np.float32]] | None:
        """The slots holding the term and how often each holds it (dead slots included)."""
        t = self.terms.get(term)
        if t is None:
            return None
        lo, hi = int(self.offsets[t]), int(self.offsets[t + 1])
        return self.docs[lo:hi], self.tfs[lo:hi]


def build_segment(start: int, ids: Sequence[str], tokens: Sequence[Sequence[str]]) -> tuple[Segment, Ints]:
    """A segment for chunks given as token lists, and their lengths (an empty chunk counts 1, as in bm25s)."""
    vocab: dict[str, int] = {}
    flat = [vocab.setdefault(term, len(vocab)) for chunk in tokens for term in chunk]
    lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    span = max(len(tokens), 1)
    # One key per (term, chunk): np.unique sorts them by term, then chunk, and counts repeats (the tf).
    keys = np.asarray(flat, dtype=np.int64) * span + np.repeat(np.arange(len(tokens), dtype=np.int64), lengths)
    pairs, counts = np.unique(keys, return_counts=True)
    offsets = np.zeros(len(vocab) + 1, dtype=np.int64)
    np.cumsum(np.bincount(pairs // span, minlength=len(vocab)), out=offsets[1:])
    docs = (pairs % span + start).astype(np.int32)
    segment = Segment(start, tuple(ids), vocab, offsets, docs, counts.astype(np.float32))
    return segment, np.maximum(lengths, 1).astype(np.int32)


def merge(segments: Sequence[Segment], alive: Bools, remap: Ints | None, start: int, ids: tuple[str, ...]) -> Segment:
    """One segment with the live postings of several (slots renumbered through `remap` when given)."""
    vocab: dict[str, int] = {}
    parts: list[tuple[npt.NDArray[np.int64], Ints, npt.NDArray[np.float32]]] = []
    for segment in segments:
        to_merged = np.fromiter((vocab.setdefault(term, len(vocab)) for term in segment.terms), dtype=np.int64,
                                count=len(segment.terms))
        terms = np.repeat(to_merged, np.diff(segment.offsets))
        keep = alive[segment.docs]
        parts.append((terms[keep], segment.docs[keep], segment.tfs[keep]))
    terms = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    order = np.argsort(terms, kind="stable")
    docs = np.concatenate([p[1] for p in parts])[order] if parts else np.zeros(0, dtype=np.int32)
    tfs = np.concatenate([p[2] for p in parts])[order] if parts else np.zeros(0, dtype=np.float32)
    per_term = np.bincount(terms, minlength=len(vocab))
    present = per_term > 0  # terms whose every chunk died are dropped
    kept = [term for term, here in zip(vocab, present.tolist(), strict=True) if here]
    offsets = np.zeros(len(kept) + 1, dtype=np.int64)
    np.cumsum(per_term[present], out=offsets[1:])
    if remap is not None:
        docs = remap[docs]
    return Segment(start, ids, {term: i for i, term in enumerate(kept)}, offsets, docs.astype(np.int32), tfs)


@dataclass(frozen=True, slots=True)
class View:
    """The slots one caller may see (live and admitted) and what BM25's statistics need of them."""

    mask: Bools
    live: int
    total_length: int


@dataclass(frozen=True, slots=True, eq=False)
class Snapshot:
    """Everything one search needs, never changed after it is built (its arrays are read-only)."""

    revision: int
    segments: tuple[Segment, ...]
    alive: Bools  # per slot: False once the chunk was deleted or replaced
    lengths: Ints  # per slot: tokens in the chunk
    codes: Ints  # per slot: index into labels
    labels: tuple[str, ...]
    base: Mapping[str, int]  # chunk id → slot as of the last full build (shared, never changed)
    recent: Mapping[str, int]  # chunk id → slot for chunks written since; wins over base
    live: int
    total_length: int  # of the live chunks
    counts: tuple[int, ...]  # live chunks per label
    starts: tuple[int, ...]  # each segment's first slot
    # Visible slots and their statistics per set of admitted labels: a reader's next query reuses them (the only
    # state that changes after build; a lost race computes the same value twice).
    views: dict[bytes, View] = field(default_factory=dict)

    @classmethod
    def empty(cls, revision: int) -> Snapshot:
        """A snapshot without chunks."""
        return load(revision, [])

    def slot(self, chunk_id: str) -> int | None:
        """The live slot of a chunk, or None."""
        slot = self.recent.get(chunk_id)
        if slot is None:
            slot = self.base.get(chunk_id)
        return slot if slot is not None and self.alive[slot] else None

    def chunk_id(self, slot: int) -> str:
        """The chunk in a slot."""
        segment = self.segments[bisect.bisect_right(self.starts, slot) - 1]
        return segment.ids[slot - segment.start]

    def visible(self, admits: Callable[[str], bool] | None) -> View | None:
        """The live slots `admits` lets through, with their count and length; None when that is every live chunk
        (no filter needed)."""
        if admits is None:
            return None
        verdicts = self.verdicts(admits)
        if verdicts.all():
            return None
        key = verdicts.tobytes()
        view = self.views.get(key)
        if view is None:
            mask = _frozen(self.alive & verdicts[self.codes])
            view = View(mask, int(np.count_nonzero(mask)), int(self.lengths[mask].sum(dtype=np.int64)))
            self.views[key] = view
        return view

    def _postings(self, term: str, visible: View | None) -> list[tuple[Ints, npt.NDArray[np.float32]]]:
        found = [p for p in (segment.postings(term) for segment in self.segments) if p is not None]
        keep_only = self.alive if visible is None else visible.mask
        if visible is None and self.live == len(self.alive):  # no tombstones: nothing to filter
            return found
        return [(docs[keep], tfs[keep]) for docs, tfs in found for keep in (keep_only[docs],)]

    def _stats(self, visible: View | None) -> tuple[int, int]:
        """The chunk count and total length that idf and the length norm see: over what the caller may see, so
        that a score says nothing about chunks hidden from them."""
        return (self.live, self.total_length) if visible is None else (visible.live, visible.total_length)

    def scores(self, terms: Sequence[str], visible: View | None = None) -> tuple[Floats, float]:
        """BM25 (Lucene) of every slot for the query terms (a repeated term counts again, as in bm25s), and the
        query's ceiling (see `ceiling`), with statistics over the `visible` slots (all live ones when None);
        slots outside it score 0."""
        # Each term's share is computed in float64 and summed in float32, as bm25s does: half the memory to rank.
        scores, ceiling = np.zeros(len(self.alive), dtype=np.float32), 0.0
        live, total_length = self._stats(visible)
        if not live:
            return scores, self.ceiling(terms, visible)
        flat, per_length = K1 * (1 - B), K1 * B * live / max(total_length, 1)
        for term in terms:
            postings = self._postings(term, visible)
            idf = _idf(live, sum(len(docs) for docs, _ in postings))
            ceiling += idf
            for docs, tfs in postings:  # a slot appears once per segment and term, so += cannot drop a repeat
                scores[docs] += idf * tfs / (tfs + (flat + per_length * self.lengths[docs]))
        return scores, ceiling or 1.0

    def ceiling(self, terms: Sequence[str], visible: View | None = None) -> float:
        """The sum of the terms' idf over the visible slots: the most any chunk could score (terms no visible chunk
        holds at the highest idf)."""
        live, _ = self._stats(visible)
        return sum(_idf(live, sum(len(docs) for docs, _ in self._postings(term, visible))) for term in terms) or 1.0

    def verdicts(self, admits: Callable[[str], bool]) -> Bools:
        """Per label: whether `admits` lets it through."""
        return np.fromiter((admits(label) for label in self.labels), dtype=np.bool_, count=len(self.labels))


def _idf(live: int, df: int) -> float:
    """Lucene's idf among `live` chunks (df 0: a term no chunk holds, the highest idf)."""
    return math.log(1 + (live - df + 0.5) / (df + 0.5))


def load(revision: int, rows: Sequence[Upsert]) -> Snapshot:
    """A snapshot built from scratch (one base segment)."""
    segment, lengths = build_segment(0, [r[0] for r in rows], [r[1] for r in rows])
    labels = tuple(dict.fromkeys(r[2] for r in rows))
    code = {label: i for i, label in enumerate(labels)}
    codes = np.fromiter((code[r[2]] for r in rows), dtype=np.int32, count=len(rows))
    alive = np.ones(len(rows), dtype=np.bool_)
    return _snapshot(revision, (segment,), alive, lengths, codes, labels, _positions(segment.ids), {})


def _positions(ids: tuple[str, ...], start: int = 0) -> dict[str, int]:
    return {chunk_id: start + i for i, chunk_id in enumerate(ids)}


def _snapshot(revision: int, segments: tuple[Segment, ...], alive: Bools, lengths: Ints, codes: Ints,
              labels: tuple[str, ...], base: Mapping[str, int], recent: Mapping[str, int]) -> Snapshot:
    counts = np.bincount(codes[alive], minlength=len(labels))
    return Snapshot(revision, segments, _frozen(alive), _frozen(lengths), _frozen(codes), labels, base, recent,
                    int(alive.sum()), int(lengths[alive].sum(dtype=np.int64)), tuple(counts.tolist()),
                    tuple(segment.start for segment in segments))


def apply(snapshot: Snapshot, revision: int, upserts: Sequence[Upsert] = (), relabels: Sequence[tuple[str, str]] = (),
          deletes: Sequence[str] = ()) -> Snapshot:
    """The next snapshot: chunks added or replaced, relabelled, deleted (unknown ids are ignored)."""
    added = {row[0]: row for row in upserts}  # the last of repeated ids wins, as INSERT OR REPLACE does
    alive, codes = snapshot.alive.copy(), snapshot.codes.copy()
    for chunk_id in chain(deletes, added):
        if (slot := snapshot.slot(chunk_id)) is not None:
            alive[slot] = False
    labels = list(snapshot.labels)
    code = {label: i for i, label in enumerate(labels)}

    def code_of(label: str) -> int:
        if label not in code:
            code[label] = len(labels)
            labels.append(label)
        return code[label]

    for chunk_id, label in relabels:
        if (slot := snapshot.slot(chunk_id)) is not None and alive[slot]:
            codes[slot] = code_of(label)
    segments, lengths, recent = snapshot.segments, snapshot.lengths, dict(snapshot.recent)
    if added:
        start = len(alive)
        segment, new_lengths = build_segment(start, list(added), [row[1] for row in added.values()])
        segments += (segment,)
        alive = np.concatenate([alive, np.ones(len(added), dtype=np.bool_)])
        lengths = np.concatenate([lengths, new_lengths])
        codes = np.concatenate([codes, np.fromiter((code_of(row[2]) for row in added.values()), dtype=np.int32)])
        recent.update(_positions(tuple(added), start))
    return _snapshot(revision, segments, alive, lengths, codes, tuple(labels), snapshot.base, recent)


def needs_compaction(snapshot: Snapshot) -> bool:
    """Whether compact() would change anything."""
    return _needs_rebuild(snapshot) or _tail_merges(snapshot.segments) > 0


def _needs_rebuild(snapshot: Snapshot) -> bool:
    slots, base = len(snapshot.alive), len(snapshot.segments[0].ids)
    return slots - snapshot.live > DEAD_SHARE * slots or slots - base > base


def _tail_merges(segments: Sequence[Segment]) -> int:
    """How many trailing segments (after the base) to merge into one: 0 or at least 2."""
    sizes = [len(s.ids) for s in segments[1:]]
    n = 1
    while n < len(sizes) and sizes[-n - 1] <= MERGE_RATIO * sum(sizes[-n:]):
        n += 1
    return n if n > 1 else 0


def compact(snapshot: Snapshot) -> Snapshot:
    """The same index with fewer segments, or rebuilt without dead slots; searches score it exactly the same."""
    s = snapshot
    if _needs_rebuild(s):
        live = np.flatnonzero(s.alive)
        every = list(chain.from_iterable(segment.ids for segment in s.segments))
        ids = tuple(every[i] for i in live.tolist())
        remap = (np.cumsum(s.alive, dtype=np.int64) - 1).astype(np.int32)
        segment = merge(s.segments, s.alive, remap, 0, ids)
        alive = np.ones(len(ids), dtype=np.bool_)
        return _snapshot(s.revision, (segment,), alive, s.lengths[live], s.codes[live], s.labels,
                         _positions(ids), {})
    n = _tail_merges(s.segments)
    if not n:
        return s
    tail = s.segments[-n:]
    merged = merge(tail, s.alive, None, tail[0].start, tuple(chain.from_iterable(t.ids for t in tail)))
    return _snapshot(s.revision, (*s.segments[:-n], merged), s.alive, s.lengths, s.codes, s.labels, s.base, s.recent)
