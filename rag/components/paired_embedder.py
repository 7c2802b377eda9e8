"""Two embedders as one: each chunk stored as both models' vectors side by side, each question weighed by language.

A chunk is stored as `[α·a, b, p] / √2`: a and b are the first and second model's normalized vectors, `α = 1 − c`
with c how Chinese the chunk is (CHINESE_AT and above: 1), and the pad p makes the row's length 1. A question is
`[λ·a, (1−λ)·b, 0]` normalized, λ the first model's share for its language. The cosine Chroma computes is then
`(λ·α·cos_a + (1−λ)·cos_b) / (√2·n)`, n the query's length before normalizing: with MiniLM first and multilingual
e5 second, an English question over English chunks mixes both models (MiniLM beats e5 on English), while any
question over Chinese chunks, and any Chinese question, is scored by e5 alone (MiniLM is close to random on
Chinese). `calibrated` turns that raw cosine back into the weighted mean `(λ·α·cos_a + (1−λ)·cos_b) / (λ·α + 1−λ)`,
so that scores keep one scale whatever the languages, as the refusal threshold needs. One collection, one query,
no second index to keep in sync; λ is a query-time knob and never changes what is stored.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import cast

import numpy as np

from rag.core.ports import Embedder, Vectors
from rag.core.text import cjk_share

PAIR_SEPARATOR = "+"
# A chunk whose letters and digits are this share Han characters or more counts as all Chinese: a Han character is
# about a word and an English word about five letters, so it is mostly Chinese words even where it quotes commands
# and paths (the median Chinese Debian Reference chunk is 0.47; at 0.5, such chunks leaned on MiniLM and English
# questions over them lost a third of their recall@3 on the tune half).
CHINESE_AT = 0.2


def pair_parts(name: str) -> list[str]:
    """The model names a RAG_EMBED_MODEL of the form `first+second` joins; one name for a single model."""
    return [part.strip() for part in name.split(PAIR_SEPARATOR)]


class PairedEmbedder:
    """Concatenates two embedders' vectors; the first model's share of a question is `first_share` for questions
    without Chinese and `first_share_cjk` for all-Chinese ones (linear in between). `first_from_second`
    (offset, slope) maps the second model's cosine onto the first's scale for English questions over Chinese
    chunks (see `calibrated`); None leaves the weighted mean alone."""

    def __init__(self, first: Embedder, second: Embedder, name: str, first_share: float = 0.5,
                 first_share_cjk: float = 0.0, first_from_second: tuple[float, float] | None = None) -> None:
        if not (0.0 <= first_share < 1.0 and 0.0 <= first_share_cjk < 1.0):
            # At 1 the second model would not run, and Chinese chunks, which only it scores, would score 0/0.
            raise ValueError("the first model's share of a question is at least 0 and below 1")
        self._first, self._second = first, second
        self.name = name
        self.batch_size = min(first.batch_size, second.batch_size)
        self.first_share, self.first_share_cjk = first_share, first_share_cjk
        self.first_from_second = first_from_second

    @property
    def first(self) -> Embedder:
        """The first model (MiniLM by default): the one that ranks an answer's sentences."""
        return self._first

    @property
    def max_tokens(self) -> int:
        """Tokens a chunk may hold: what the shorter-reading model reads."""
        return min(self._first.max_tokens, self._second.max_tokens)

    @property
    def dimension(self) -> int:
        """Both models' dimensions added, and the pad."""
        return self._first.dimension + self._second.dimension + 1

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        """Both models' passage vectors side by side, the first weighed by how little Chinese the text holds,
        padded to length 1."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        alpha = np.asarray([first_weight(text) for text in texts], dtype=np.float32)[:, None]
        pad = np.sqrt(np.maximum(0.0, 1.0 - alpha**2))
        joined = np.hstack([alpha * self._first.embed_documents(texts), self._second.embed_documents(texts), pad])
        return (joined / math.sqrt(2)).astype(np.float32)

    def share(self, question: str) -> float:
        """The first model's share λ of this question's dense score. A question is as Chinese as a chunk would be
        (`first_weight`): by its raw share of letters, "PostgreSQL 中 VACUUM 和 VACUUM FULL 有什么区别？" was a fifth
        Chinese and gave MiniLM, blind to its Chinese words, half the say; English chunks then fell from the top
        five to rank 200 behind Chinese ones (Chinese questions over English samples, tune half: recall@3 0.45 →
        0.59)."""
        zh = 1 - first_weight(question)
        return self.first_share * (1 - zh) + self.first_share_cjk * zh

    def embed_query(self, text: str) -> Vectors:
        """The question's vector: the two models' query vectors weighed by `share`, normalized. The first model is
        not run where its share is 0 (all-Chinese questions by default)."""
        weight = self.share(text)
        first = self._first.embed_query(text) if weight > 0 else np.zeros(self._first.dimension, np.float32)
        joined = np.concatenate([weight * first, (1 - weight) * self._second.embed_query(text), [0.0]])
        return cast(Vectors, (joined / np.linalg.norm(joined)).astype(np.float32))

    def calibrated(self, question: str, text: str, cosine: float) -> float:
        """The raw cosine of a stored chunk as the weighted mean of the two models' cosines (see the module)."""
        weight, alpha = self.share(question), _remembered_weight(text)
        length = math.hypot(weight, 1 - weight)
        mean = cosine * math.sqrt(2) * length / (weight * alpha + 1 - weight)
        if self.first_from_second is None or alpha == 1 or weight == 0 or cjk_share(question) > 0:
            return mean
        # An English question over a Chinese chunk: e5's cosines are squeezed near 0.8 (spread 0.024 where MiniLM's
        # is 0.16), so e5 alone would outrank every English chunk's MiniLM mix. The first model's missing part is
        # stood in for by e5's cosine on the first model's scale. Only for questions without Chinese: a Chinese
        # question's first-model share is small and its MiniLM vector weak.
        offset, slope = self.first_from_second
        stand_in = max(0.0, min(1.0, offset + slope * mean))
        return (weight * alpha + 1 - weight) * mean + weight * (1 - alpha) * stand_in


# Chunks whose α is remembered: each search calibrates ~30 candidates, the same popular chunks again and again, and
# measuring a chunk's Chinese share was half of calibrating it (the texts are kept: ~6 MiB).
WEIGHT_MEMORY = 4096


@functools.lru_cache(maxsize=WEIGHT_MEMORY)
def _remembered_weight(text: str) -> float:
    return first_weight(text)


def first_weight(text: str) -> float:
    """α: the first model's weight in a stored chunk, 1 for English text, 0 for Chinese (CHINESE_AT or more)."""
    return 1.0 - min(1.0, cjk_share(text) / CHINESE_AT)
