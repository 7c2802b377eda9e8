"""The extractive answer: the few sentences of the excerpts that best answer the question, in their own words.

Sentences are ranked by `w·cosine + (1−w)·keyword coverage` (coverage weighted by how rare each question word is
among the candidate sentences), with the dense share set by the question's language as in retrieval (the offline
embedder reads English only). A sentence that ends in a colon brings the line it introduces (a command, a list).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from rag.embedder import Vectors
from rag.keyword import tokenize
from rag.sentences import Language, split_sentences, strip_tags
from rag.types import Hit

MAX_QUOTES, MAX_CHARS, KEEP_RATIO = 3, 600, 0.85
DENSE_SHARE = {"en": 0.5, "zh": 0.1}
MIN_CHARS, LONG_CHARS = 12, 400


class Encoder(Protocol):
    """What the ranking needs of the embedder."""

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        """Normalized vectors, one row per text."""
        ...


@dataclass(frozen=True, slots=True)
class Quote:
    """A sentence quoted from excerpt `n`, with its rank score."""

    text: str
    n: int
    score: float


@dataclass(frozen=True, slots=True)
class _Candidate:
    text: str
    n: int
    position: int
    tokens: frozenset[str]


def passage_body(hit: Hit) -> str:
    """The chunk's text without the heading line that ingest puts first."""
    prefix = f"{hit.headings}\n"
    return hit.text[len(prefix):] if hit.headings and hit.text.startswith(prefix) else hit.text


def _candidates(hits: Sequence[Hit]) -> list[_Candidate]:
    found = []
    for n, hit in enumerate(hits, start=1):
        for position, sentence in enumerate(split_sentences(strip_tags(passage_body(hit)))):
            found.append(_Candidate(sentence, n, position, frozenset(tokenize(sentence))))
    return found


def _keyword_scores(question: str, candidates: Sequence[_Candidate]) -> list[float]:
    asked = set(tokenize(question))
    df = Counter(token for c in candidates for token in c.tokens & asked)
    weight = {token: math.log(1 + len(candidates) / (1 + df[token])) for token in asked}
    total = sum(weight.values()) or 1.0
    return [sum(weight[token] for token in c.tokens & asked) / total for c in candidates]


def _dense_scores(question: str, candidates: Sequence[_Candidate], encoder: Encoder | None) -> list[float]:
    if encoder is None:
        return [0.0] * len(candidates)
    vectors = encoder.embed_documents([question, *(c.text for c in candidates)])
    return [float(v) for v in vectors[1:] @ vectors[0]]


def extract(question: str, hits: Sequence[Hit], language: Language, encoder: Encoder | None = None) -> list[Quote]:
    """Up to MAX_QUOTES sentences (MAX_CHARS in all) that best answer the question, in excerpt order."""
    candidates = [c for c in _candidates(hits) if len(c.text) >= MIN_CHARS and c.tokens]
    if not candidates:
        return []
    share = DENSE_SHARE[language] if encoder is not None else 0.0
    keyword, dense = _keyword_scores(question, candidates), _dense_scores(question, candidates, encoder)
    scores = [share * d + (1 - share) * k for d, k in zip(dense, keyword, strict=True)]
    order = sorted(range(len(candidates)), key=lambda i: scores[i], reverse=True)
    chosen: list[int] = []
    for i in order:
        if scores[i] < KEEP_RATIO * scores[order[0]] or len(chosen) >= MAX_QUOTES:
            break
        picked = [i, *_introduced(candidates, i)]
        if sum(len(candidates[j].text) for j in {*chosen, *picked}) > MAX_CHARS and chosen:
            break
        chosen += [j for j in picked if j not in chosen]
    chosen.sort(key=lambda i: (candidates[i].n, candidates[i].position))
    return [Quote(_bounded(candidates[i].text), candidates[i].n, round(scores[i], 4)) for i in chosen]


def _introduced(candidates: Sequence[_Candidate], i: int) -> list[int]:
    """The sentence after i when i ends in a colon (it introduces a command or a list), from the same excerpt."""
    after = i + 1
    if candidates[i].text.rstrip().endswith((":", "：")) and after < len(candidates) \
            and candidates[after].n == candidates[i].n:
        return [after]
    return []


def _bounded(text: str) -> str:
    if len(text) <= LONG_CHARS:
        return text
    cut = text[:LONG_CHARS].rsplit(" ", 1)[0] if " " in text[:LONG_CHARS] else text[:LONG_CHARS]
    return cut + " …"
