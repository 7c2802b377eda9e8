"""Retrieval: dense (Chroma) and keyword (BM25) candidates, fused by how far each side can be trusted → top-k hits.

The fused score of a chunk is `w·cosine + (1−w)·coverage`, where coverage is its BM25 score over the best score a
chunk could get for the question (0–1). Both parts are absolute, so the refusal threshold can work on the fused
score. The dense weight `w` depends on the question's language (the offline English embedder, MiniLM, is close to
random on Chinese, so Chinese questions lean on keywords) and on how clearly the keywords single out a chunk.

Access is enforced inside both searches (a Chroma `where` filter, a BM25 mask), never by dropping hits afterwards,
so the top k are full whenever enough visible chunks exist; every hit is checked once more before it leaves.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol

from rag.core.access import AccessPolicy, Principal, Visible
from rag.core.errors import EmptyIndex
from rag.core.ports import (
    Admits,
    CalibratedEmbedder,
    DenseIndex,
    Embedder,
    KeywordHit,
    KeywordSearch,
    SearchIndex,
    Vectors,
)
from rag.core.sentences import Language, chunk_language, question_language
from rag.core.text import HAN_CHAR, cjk_share
from rag.core.types import Hit

log = logging.getLogger("rag.core.retrieve")

Mode = Literal["hybrid", "dense", "keyword"]
CANDIDATES = 20  # per side, before fusion
# The dense side first reads the nearest ids unfiltered (ids and distances only: ~10 µs each), enough to expect n
# visible ones twice over and never fewer than MIN_LOOK_AHEAD (fewer made dense-only queries fall back often);
# Chroma's filtered query costs ~18 µs per chunk it admits, so beyond MAX_LOOK_AHEAD it is the cheaper one
# (measured at 100k chunks: benchmarks/access_latency.py).
LOOK_AHEAD_MARGIN = 2.0
MIN_LOOK_AHEAD = 200
MAX_LOOK_AHEAD = 4000
MARGIN_RANK = 5  # the keyword margin compares the best coverage with the fifth best
FULL_BODY = 120  # a chunk with this much prose (a Han character counting twice) or more has full substance
PROSE_WIDTH = 30
WARM_QUESTION = "How do I get started?"
SUBSTANCE_MEMORY = 4096  # chunks whose substance is remembered (their texts are kept: ~6 MiB)
_PAGE_NUMBER_END = re.compile(r"(?:\s|\.)\d{1,4}$")  # a table of contents line: "1.1 In the Beginning . . . 1"
_SENTENCE_END = re.compile(r"[.!?。！？]$")
# Questions are translated when at least this share of the chunks the asker may see is in the other language.
OTHER_LANGUAGE_SHARE = 0.05
RRF_K = 60  # reciprocal-rank fusion of the two searches (the usual constant; scores of two questions don't compare)
TRANSLATED_WEIGHT = 1.0  # the translated question's list against the question's own (tune halves, docs)


class Reranker(Protocol):
    """Reorders the fused candidates (a cross-encoder, by setting)."""

    def rerank(self, question: str, hits: Sequence[Hit]) -> list[Hit]:
        """The same hits, best first, with the reranker's score in `extra["rerank"]`."""
        ...


class Translator(Protocol):
    """Puts a question into the other language for a second search (rag.core.translate.LLMTranslator)."""

    def translate(self, question: str, into: Language) -> str | None:
        """The question in language `into`, or None when there is no translation."""
        ...


@dataclass(frozen=True, slots=True)
class Fusion:
    """How much the dense side counts: by language, then less when the keywords single out a few chunks.

    `dense_weight` applies to questions without Chinese, `dense_weight_cjk` to all-Chinese ones (linear in
    between); the keyword margin (best coverage minus the fifth best) lowers it by `margin_pull` times itself.
    Measured on the dev sets (docs): this beats dense-only and keyword-only in both languages, where plain
    fixed weights or reciprocal-rank fusion lost to the better side."""

    dense_weight: float = 0.8
    dense_weight_cjk: float = 0.1
    margin_pull: float = 0.5

    def dense_share(self, question: str, keyword: Sequence[KeywordHit]) -> float:
        """The dense side's share of the fused score for this question and these keyword finds."""
        zh = cjk_share(question)
        base = self.dense_weight * (1 - zh) + self.dense_weight_cjk * zh
        coverages = sorted((hit.coverage for hit in keyword), reverse=True) + [0.0] * MARGIN_RANK
        margin = coverages[0] - coverages[MARGIN_RANK - 1]
        return min(1.0, max(0.0, base - self.margin_pull * margin))


def overfetch_for(n: int, share: float) -> int:
    """How many nearest chunks to read unfiltered to expect n visible ones among them (0: filter in Chroma)."""
    wanted = math.ceil(n * LOOK_AHEAD_MARGIN / share) if share > 0 else MAX_LOOK_AHEAD + 1
    return max(wanted, MIN_LOOK_AHEAD) if wanted <= MAX_LOOK_AHEAD else 0


def substance(hit: Hit) -> float:
    """0–1: how much a chunk says beyond headings, tables of contents and title pages (see `_substance`)."""
    return _substance(hit.text, hit.headings)


# A server weighs the same popular chunks again and again (~40 per search); the rule reads only their text.
@functools.lru_cache(maxsize=SUBSTANCE_MEMORY)
def _substance(text: str, headings: str) -> float:
    """0–1: how much a chunk says beyond headings, tables of contents and title pages. Only prose lines count (at
    least PROSE_WIDTH wide, a Han character counting twice, not ending in a page number); a chunk with FULL_BODY of
    them or more scores 1, as does any chunk holding a whole sentence (a prose line ending in `.`, `。`, `?` …). A title
    page, a contents page or a list of names then never outranks the passage that answers (data/QUESTIONS.md #1: the
    title and contents pages ranked first, the answer sixth), while a one-sentence notice keeps its full score (with
    the pair's flat cosines a short Chinese answer fell from first to out of the top five; all eight dev sets'
    tune and test halves gained or held with the sentence rule)."""
    body = text[len(headings) + 1:] if headings and text.startswith(headings) else text
    lines = [line.strip() for line in body.splitlines()]
    # Prose lines: wide enough and not a contents line, each line's width taken once.
    prose_lines = [(line, width) for line in lines if (width := _width(line)) >= PROSE_WIDTH
                   and not _PAGE_NUMBER_END.search(line)]
    if any(_SENTENCE_END.search(line) for line, _ in prose_lines):
        return 1.0
    prose = sum(width for _, width in prose_lines)
    said = max(prose, _width(" ".join(lines))) if len(lines) <= 2 else prose  # one line: a short passage is prose
    return float(min(1.0, said / FULL_BODY) ** 0.5)


def _width(text: str) -> int:
    return len(text) + len(HAN_CHAR.findall(text))


def with_substance(hits: Sequence[Hit]) -> list[Hit]:
    """The hits with thin chunks' scores lowered by their substance, best first."""
    weighed = [hit if (said := substance(hit)) >= 1 else replace(hit, score=round(hit.score * said, 6))
               for hit in hits]
    return sorted(weighed, key=lambda hit: hit.score, reverse=True)


def fuse(dense: Sequence[Hit], keyword: Sequence[KeywordHit], extra: Sequence[Hit], weight: float) -> list[Hit]:
    """Candidates of both sides scored `weight·cosine + (1−weight)·coverage`, best first.

    `extra` holds the dense view (text, metadata, cosine) of keyword finds that the dense side did not return."""
    coverage = {hit.chunk_id: hit.coverage for hit in keyword}
    by_id = {hit.chunk_id: hit for hit in (*extra, *dense)}
    fused = []
    for chunk_id, hit in by_id.items():
        covered = coverage.get(chunk_id, 0.0)
        score = weight * hit.score + (1 - weight) * covered
        fused.append(replace(hit, score=round(score, 6),
                             extra={**hit.extra, "dense": hit.score, "keyword": round(covered, 6)}))
    return sorted(fused, key=lambda hit: hit.score, reverse=True)


@dataclass(frozen=True)
class Floors:
    """The refusal thresholds of questions without Chinese and of all-Chinese ones (Chinese questions score higher:
    keyword-led); a hit at or above its question's threshold counts as found."""

    plain: float = 0.0
    cjk: float = 0.0

    def of(self, question: str) -> float:
        """The threshold for this question, by its share of Han characters."""
        zh = cjk_share(question)
        return self.plain * (1 - zh) + self.cjk * zh


def merged(asked: Sequence[Hit], translated: Sequence[Hit], weight: float = TRANSLATED_WEIGHT) -> list[Hit]:
    """The hits for the question as asked and those for its translation in one list, by reciprocal rank.

    The scores of two questions do not compare, so the ranks decide; the list then carries the two searches' scores
    in descending order, none above the asked question's best: the refusal threshold sees what it saw before."""
    fused: dict[str, float] = {}
    by_id: dict[str, Hit] = {}
    for hits, share in ((asked, 1.0), (translated, weight)):
        for rank, hit in enumerate(hits, start=1):
            fused[hit.chunk_id] = fused.get(hit.chunk_id, 0.0) + share / (RRF_K + rank)
            by_id.setdefault(hit.chunk_id, hit)
    order = sorted(by_id, key=lambda chunk_id: fused[chunk_id], reverse=True)
    ceiling = asked[0].score if asked else max((hit.score for hit in translated), default=0.0)
    scores = sorted((min(hit.score, ceiling) for hit in (*asked, *translated)), reverse=True)
    return [replace(by_id[chunk_id], score=score) for chunk_id, score in zip(order, scores, strict=False)]


class Retriever:
    """Finds the chunks that best answer a question, among those the asking principal may see."""

    def __init__(self, embedder: Embedder, index: SearchIndex, mode: Mode = "hybrid", fusion: Fusion = Fusion(),
                 reranker: Reranker | None = None, policy: AccessPolicy = AccessPolicy(),
                 translator: Translator | None = None, floors: Floors = Floors()) -> None:
        self._embedder = embedder
        self._calibrate = embedder.calibrated if isinstance(embedder, CalibratedEmbedder) else None
        self._dense: DenseIndex = index.dense
        self._keyword: KeywordSearch | None = index.keyword
        self.mode: Mode = mode if index.keyword is not None else "dense"
        self.fusion = fusion
        self._reranker = reranker
        self.policy = policy
        self._translator = translator
        self._floors = floors

    def warm(self) -> None:
        """Build the keyword side's in-memory index ahead of the first question (seconds at 100k chunks), and
        embed a question once, so that the embedder's first-question work (its trace) is done before anyone asks."""
        if self.mode != "dense" and self._keyword is not None:
            self._keyword.warm()
        self._embedder.embed_query(WARM_QUESTION)

    def search(self, question: str, k: int, principal: Principal) -> list[Hit]:
        """The k best chunks the principal may see, best first; EmptyIndex when nothing was ingested."""
        n = max(k, CANDIDATES) if self.mode != "dense" else k
        hits = [] if self.policy.sees_nothing(principal) else self._candidates(question, n, principal)
        # Counting only when nothing came back keeps the store round trip off every normal query.
        if not hits and self._dense.count() == 0:
            raise EmptyIndex.of(self._dense.name)
        hits = with_substance(hits)  # before a reranker, which then orders what it is given
        if not self.policy.sees_nothing(principal):
            hits = self._with_translation(question, hits, n, principal)
        if self._reranker is not None:
            hits = self._reranker.rerank(question, hits)
        return self._visible(hits, principal)[:k]

    def _with_translation(self, question: str, hits: list[Hit], n: int, principal: Principal) -> list[Hit]:
        """The hits merged with those in the other language found by the question's translation, where nothing in
        the question's own language reaches the refusal threshold, the asker may see enough chunks in the other
        language and the translator gives one."""
        if self._translator is None or self._found_in_own_language(question, hits):
            return hits  # the translator checked first: no language test on the hits of an untranslating deployment
        into = self._other_language(question, principal)
        translation = self._translator.translate(question, into) if into else None
        if into is None or translation is None:
            return hits
        found = with_substance(self._candidates(translation, n, principal))
        return merged(hits, [hit for hit in found if chunk_language(hit.text) == into])

    def _found_in_own_language(self, question: str, hits: Sequence[Hit]) -> bool:
        # A passage in the asker's language that clears the threshold is what the asker reads best; the other
        # copy of a translated document (or a near one) must not push it out of the top three (docs).
        own, floor = question_language(question), self._floors.of(question)
        return any(hit.score >= floor and chunk_language(hit.text) == own for hit in hits)

    def _other_language(self, question: str, principal: Principal) -> Language | None:
        """The language to translate the question into, when enough of what the principal may see is in it."""
        if self._translator is None or self._keyword is None:
            return None
        into: Language = "en" if question_language(question) == "zh" else "zh"
        total = chinese = 0
        for label, (chunks, han) in self._keyword.languages().items():
            if principal.all_groups or self.policy.label_allows(principal, label):
                total, chinese = total + chunks, chinese + han
        other = chinese if into == "zh" else total - chinese
        return into if total and other >= OTHER_LANGUAGE_SHARE * total else None

    def _look_ahead(self, n: int, admits: Admits | None) -> tuple[int, Callable[[str], bool] | None]:
        """(How many nearest chunks the dense side reads unfiltered first, the label copy it checks them by)."""
        if admits is None or self._keyword is None:
            return 0, None
        share, likely = self._keyword.visibility(admits)
        return overfetch_for(n, share), likely

    def _visible(self, hits: list[Hit], principal: Principal) -> list[Hit]:
        # The filters above already did this; a hit failing here means a store and its labels disagree.
        visible = [hit for hit in hits if self.policy.label_allows(principal, hit.access)]
        if len(visible) < len(hits):
            log.error("dropped %d hits outside %s's groups: the index labels disagree", len(hits) - len(visible),
                      principal.name)
        return visible

    def _candidates(self, question: str, n: int, principal: Principal) -> list[Hit]:
        query = self._embedder.embed_query(question)
        visible = self.policy.visible_to(principal)
        admits = visible.admits if visible is not None else None
        look_ahead = self._look_ahead(n, admits)
        if self.mode == "dense" or self._keyword is None:
            return self._calibrated(question, self._dense.search(query, n, visible, *look_ahead))
        both = self._hybrid_ahead(question, query, n, visible, *look_ahead)
        if both is not None:
            (dense, extra), keyword = both
        else:  # the look-ahead fell short or does not apply: the filtered query, not a second look-ahead
            dense = self._dense.search(query, n, visible) if self.mode == "hybrid" else []
            keyword = self._keyword.search(question, n, include=[hit.chunk_id for hit in dense], admits=admits)
            seen = {hit.chunk_id for hit in dense}
            extra = self._dense.fetch([hit.chunk_id for hit in keyword if hit.chunk_id not in seen], query, admits)
        dense, extra = self._calibrated(question, dense), self._calibrated(question, extra)
        weight = self.fusion.dense_share(question, keyword) if self.mode == "hybrid" else 0.0
        return fuse(dense, keyword, extra, weight)

    def _hybrid_ahead(self, question: str, query: Vectors, n: int, visible: Visible | None, overfetch: int,
                      likely: Callable[[str], bool] | None
                      ) -> tuple[tuple[list[Hit], list[Hit]], list[KeywordHit]] | None:
        """((dense, keyword-only) hits, keyword hits) of a hybrid search on the look-ahead path, the keyword search
        run between the dense side's look-ahead and its read so that one read returns both sides' rows; None when
        the look-ahead does not apply or falls short."""
        if self.mode != "hybrid" or self._keyword is None or visible is None or likely is None or overfetch <= n:
            return None
        ahead = self._dense.nearest(query, n, overfetch, likely)
        if len(ahead.picked) < n:
            return None
        keyword = self._keyword.search(question, n, include=ahead.picked, admits=visible.admits)
        picked = set(ahead.picked)
        dense, extra = self._dense.read(ahead, [hit.chunk_id for hit in keyword if hit.chunk_id not in picked],
                                        query, visible, visible.admits)
        return ((dense, extra), keyword) if len(dense) >= n else None

    def _calibrated(self, question: str, hits: list[Hit]) -> list[Hit]:
        """The hits' cosines on the embedder's common scale, best first (unchanged for a single model)."""
        if self._calibrate is None:
            return hits
        calibrate = self._calibrate
        rescored = [replace(hit, score=round(calibrate(question, hit.text, hit.score), 6)) for hit in hits]
        return sorted(rescored, key=lambda hit: hit.score, reverse=True)
