"""The extractive answer: the few sentences of the excerpts that best answer the question, in their own words.

Sentences are ranked by `w·cosine + (1−w)·keyword coverage` (coverage weighted by how rare each question word is
among the candidate sentences, a term the question names — upper case or with digits — three times), with the dense
share set by the question's language as in retrieval (the offline embedder reads English only). A sentence that ends
in a colon brings the line it introduces (a command, a list).
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from rag.core.ports import Vectors
from rag.core.sentences import Language, is_list_item, split_sentences, strip_tags
from rag.core.text import HAN_CHAR, tokenize
from rag.core.types import Hit

MAX_QUOTES, MAX_CHARS, KEEP_RATIO = 3, 600, 0.85
SENTENCES_MEMORY = 512  # passages whose quotable sentences are remembered (~40 KiB for ~1,500 characters: ~20 MiB)
DENSE_SHARE = {"en": 0.5, "zh": 0.1}
DENSE_CANDIDATES = 10
MIN_CHARS, LONG_CHARS, HEADING_WIDTH = 12, 400, 60
# Below this best score no sentence addresses the question, and "not found" beats an unrelated quote. Set under
# the lowest best score of answerable dev-set questions (English 0.34, Chinese 0.23; keyword-only scoring, as for
# Chinese, uses the "zh" floor); off-topic questions are mostly refused by retrieval before this.
MIN_SCORE = {"en": 0.3, "zh": 0.2}
# When the model said the excerpts do not answer, or nothing it wrote held, a quote must be this sure to be shown
# instead of "not in the documents" (calibrated on the tune halves of the dev sets and near-miss questions: docs).
CONFIDENT_SCORE = {"en": 0.55, "zh": 0.4}
HOW_BONUS = 0.15
# A term the question names (I18N, L10N, VACUUM, python3: upper case or with digits) weighs this many times a plain
# word of the same rarity: "I18N 和 L10N 分别是什么意思？" quoted "他们的意思分别是：…" (two rare plain words) over
# "国际化 (I18N): …" and "本地化 (L10N)：…".
TERM_WEIGHT = 3.0
_TERM = re.compile(r"(?<![\w-])(?:[A-Za-z][\w-]*\d[\w-]*|[A-Z]{2,}[A-Z0-9]*)(?![\w-])")
HEADING_PULL = 0.5  # sentences under a heading that asks the question rank up to 1.5 times higher

# "How do I …" questions want the step itself: sentences that instruct get HOW_BONUS.
_HOW = re.compile(r"^\s*how\b|\bhow (?:do|can|to|should)\b|如何|怎么|怎样|步骤", re.IGNORECASE)
_ENDS_SENTENCE = re.compile(r"[.!?。！？；:：,，]$")
# Never an answer: table-of-contents lines ("Keeping your Debian system up-to-date Chapter 11.", "1.1 Origins ...
# 3"), navigation ("Next", "上一页") and running titles of PDF pages ("A Brief History of Debian 6 / 21").
_BOILERPLATE = re.compile(
    r"(?:\b(?:chapter|section|part|appendix)\s+\d+[.:]?|第\s*\d+\s*[章节][。.]?|(?:\.\s*){3,}\d+|\d+\s+/\s+\d+)\s*$|"
    r"^(?:next|previous|prev|up|home|top|back to top|contents|table of contents|index|上一页|下一页|上一节|下一节|"
    r"目录|返回|首页)\b", re.IGNORECASE)


class Encoder(Protocol):
    """What the ranking needs of the embedder."""

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        """Normalized vectors, one row per text."""
        ...

    def embed_query(self, text: str) -> Vectors:
        """A normalized vector for a question (models like e5 embed questions and passages differently)."""
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
    prior: float  # the excerpt's score over the best one's, raised when its headings match the question
    heading: bool  # a short line without end punctuation: quoted only after the sentence that introduces it


def passage_body(hit: Hit) -> str:
    """The chunk's text without the heading line that ingest puts first."""
    return text_body(hit.text, hit.headings)


def text_body(text: str, headings: str) -> str:
    """A chunk's text without its first line when that is the chunk's headings (ingest puts them there)."""
    prefix = f"{headings}\n"
    return text[len(prefix):] if headings and text.startswith(prefix) else text


def separate_headings(text: str) -> str:
    """The text with short lines that end without punctuation (headings, PDF running titles) set apart as
    blocks of their own, so they do not run into the sentence that follows them."""
    lines = text.split("\n")
    out, in_item = [], False
    for line, following in zip(lines, [*lines[1:], ""], strict=True):
        out.append(line)
        stripped, after = line.strip(), following.lstrip()
        wrapped = in_item and line[:1] in (" ", "\t")  # an indented line of a list item's text, never a heading
        in_item = is_list_item(line) or wrapped
        if stripped and not wrapped and _width(stripped) < HEADING_WIDTH and not _ENDS_SENTENCE.search(stripped) \
                and after and not after[0].islower():
            out.append("")
    return "\n".join(out)


def _width(text: str) -> int:
    """Display width: a Han character counts twice (a Chinese line holds half as many characters)."""
    return len(text) + len(HAN_CHAR.findall(text))


@dataclass(frozen=True, slots=True)
class _Sentence:
    """A sentence of a passage that may be quoted, whatever the question: long enough, and no boilerplate."""

    text: str
    position: int  # among all the passage's sentences
    tokens: frozenset[str]
    key: str  # the text lower-cased and single-spaced: the same sentence in two excerpts is quoted once
    heading: bool


@functools.lru_cache(maxsize=SENTENCES_MEMORY)
def passage_sentences(body: str) -> tuple[_Sentence, ...]:
    """A passage's quotable sentences, remembered: a popular chunk is quoted from again and again, and splitting
    and stemming its sentences (jieba for Chinese) was most of the ranking's own CPU."""
    found = []
    for position, sentence in enumerate(split_sentences(separate_headings(strip_tags(body)))):
        if len(sentence) < MIN_CHARS or _BOILERPLATE.search(sentence.strip()):
            continue
        heading = _width(sentence) < HEADING_WIDTH and not _ENDS_SENTENCE.search(sentence)
        found.append(_Sentence(sentence, position, frozenset(tokenize(sentence)), " ".join(sentence.lower().split()),
                               heading))
    return tuple(found)


def _candidates(hits: Sequence[Hit], asked: set[str], question: str) -> list[_Candidate]:
    found, seen = [], set()
    best = max(hits[0].score, 1e-6) if hits else 1.0
    for n, hit in enumerate(hits, start=1):
        prior = max(hit.score, 0) / best * (1 + HEADING_PULL * _heading_match(hit, asked))
        for sentence in passage_sentences(passage_body(hit)):
            if sentence.key in seen or _restates(sentence.text, sentence.tokens, asked, question):
                continue
            seen.add(sentence.key)
            found.append(_Candidate(sentence.text, n, sentence.position, sentence.tokens, prior, sentence.heading))
    return found


def _heading_match(hit: Hit, asked: set[str]) -> float:
    """The share of the question's words in the excerpt's section headings (an FAQ entry titled by the question)."""
    return len(asked & set(tokenize(hit.headings))) / len(asked) if asked and hit.headings else 0.0


def _restates(sentence: str, tokens: frozenset[str], asked: set[str], question: str) -> bool:
    """Whether a sentence adds nothing to the question, or quotes it (a heading or cross-reference)."""
    return len(tokens - asked) < 2 or (len(question) >= MIN_CHARS // 2 and question in _letters(sentence))


def _letters(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def _instructs(candidate: _Candidate) -> bool:
    """A sentence that gives a step: introduces a command (ends in a colon), holds code, or says "To X, do Y"."""
    text = candidate.text
    return text.rstrip().endswith((":", "：")) or "`" in text or text.startswith(("To ", "Run ", "Use "))


def _keyword_scores(question: str, candidates: Sequence[_Candidate], asked: set[str]) -> list[float]:
    df = Counter(token for c in candidates for token in c.tokens & asked)
    terms = set(tokenize(" ".join(_TERM.findall(question))))
    weight = {token: math.log(1 + len(candidates) / (1 + df[token])) * (TERM_WEIGHT if token in terms else 1.0)
              for token in asked}
    total = sum(weight.values()) or 1.0
    return [sum(weight[token] for token in c.tokens & asked) / total for c in candidates]


def _dense_scores(question: str, candidates: Sequence[_Candidate], encoder: Encoder | None,
                  keyword: Sequence[float]) -> list[float]:
    """Cosine to the question for the DENSE_CANDIDATES best sentences by keywords (embedding every sentence of
    three excerpts costs half a second on a CPU; these few, a tenth of that); 0 for the others."""
    scores = [0.0] * len(candidates)
    if encoder is None:
        return scores
    best = sorted(range(len(candidates)), key=lambda i: candidates[i].prior * keyword[i], reverse=True)
    best = best[:DENSE_CANDIDATES]
    asked = encoder.embed_query(question)
    for i, vector in zip(best, encoder.embed_documents([candidates[i].text for i in best]), strict=True):
        scores[i] = float(vector @ asked)
    return scores


def extract(question: str, hits: Sequence[Hit], language: Language, encoder: Encoder | None = None,
            confident: bool = False) -> list[Quote]:
    """Up to MAX_QUOTES sentences (MAX_CHARS in all) that best answer the question, in excerpt order; none when the
    best scores under MIN_SCORE (CONFIDENT_SCORE when `confident` is asked for)."""
    asked = set(tokenize(question))
    candidates = _candidates(hits, asked, _letters(question))
    if not candidates:
        return []
    share = DENSE_SHARE[language] if encoder is not None else 0.0
    keyword = _keyword_scores(question, candidates, asked)
    dense = _dense_scores(question, candidates, encoder, keyword)
    how = _HOW.search(question) is not None
    scores = [0.0 if c.heading else c.prior * (share * d + (1 - share) * k) + HOW_BONUS * (how and _instructs(c))
              for c, d, k in zip(candidates, dense, keyword, strict=True)]
    order = sorted(range(len(candidates)), key=lambda i: scores[i], reverse=True)
    floors = CONFIDENT_SCORE if confident else MIN_SCORE
    if scores[order[0]] < floors[language if encoder is not None else "zh"]:
        return []  # nothing here addresses the question: better "not found" than an unrelated quote
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
