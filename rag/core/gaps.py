"""Knowledge gaps: the questions the documents failed to answer (refused, escalated, rated down), grouped by meaning
into topics with counts and examples — what to write next.

Questions are embedded with the embedder's query side and clustered with scikit-learn's agglomerative clustering
(average linkage, cosine distance, a distance threshold), so the number of topics follows the questions instead of
being fixed in advance. Everything is deterministic: the same rows give the same report.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

import numpy as np
import numpy.typing as npt

from rag.core.ports import Embedder
from rag.core.text import tokenize

Reason = Literal["refused", "escalated", "thumbs_down"]
REASONS: tuple[Reason, ...] = ("refused", "escalated", "thumbs_down")
# Cosine distance under which two groups of questions are one topic (average linkage), measured with MiniLM by
# benchmarks/gaps_threshold.py: 0.55 joins 71 % of same-subject pairs at 0.89 precision (ARI 0.77); 0.65 joins
# more (ARI 0.90) but lets one topic take 40 of the 171 FAQ questions (24 at 0.55): in one company's documents
# every question shares the domain's words, and a topic that swallows a quarter of them hides the gaps.
DISTANCE_THRESHOLD = 0.55
EXAMPLES = 3
KEYWORDS = 3
# Distinct questions clustered per report (the newest): clustering holds all pairwise distances. 2,000 took 13 s to
# embed (6.7 ms a question) and 2.4 s and ~50 MB to cluster on 2 CPU cores; 5,000 needed ~200 MB more.
MAX_QUESTIONS = 2000
SAME_ASKING = timedelta(hours=1)  # a rating this soon after a recorded refusal of the same question is that one
_SINCE = re.compile(r"(\d+)\s*([hdw])")
_UNITS = {"h": "hours", "d": "days", "w": "weeks"}
_WORDS = re.compile(r"[^\W_]+")

Vectors = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class Asked:
    """One question the documents did not answer well, and why: refused, escalated, or rated down."""

    question: str
    reason: Reason
    user: str = ""
    channel: str = ""
    source: str = ""  # the best-matching document, if any
    doc_id: str = ""
    created_at: str = field(default_factory=lambda: now_iso())
    groups: str | None = None  # the asker's groups (`|hr|`, `*`, `` for none); None: not recorded (older rows)


@dataclass(frozen=True, slots=True)
class Topic:
    """Questions of one meaning: how many, why, a label, the most central examples, when first and last asked."""

    label: str
    count: int
    share: float
    reasons: dict[str, int]
    examples: tuple[str, ...]
    keywords: tuple[str, ...]
    sources: tuple[str, ...]
    first_seen: str
    last_seen: str

    def as_json(self) -> dict[str, object]:
        """The topic as `rag gaps --json` and GET /v1/gaps list it."""
        return {"label": self.label, "count": self.count, "share": round(self.share, 4), "reasons": self.reasons,
                "examples": list(self.examples), "keywords": list(self.keywords), "sources": list(self.sources),
                "first_seen": self.first_seen, "last_seen": self.last_seen}


@dataclass(frozen=True, slots=True)
class GapReport:
    """Topics by count (largest first), out of `total` questions asked since `since`."""

    since: str | None
    total: int
    reasons: dict[str, int]
    topics: list[Topic]
    hidden: int = 0  # topics under min_count, left out

    def as_json(self) -> dict[str, object]:
        """The report as `rag gaps --json` and GET /v1/gaps give it."""
        return {"since": self.since, "total": self.total, "reasons": self.reasons, "hidden_topics": self.hidden,
                "topics": [topic.as_json() for topic in self.topics]}


def now_iso() -> str:
    """Now, in UTC, as the stores write timestamps (ISO 8601, seconds)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def parse_since(text: str, now: datetime | None = None) -> datetime | None:
    """`7d`, `12h`, `2w` (ago), a date/time (`2026-11-01`, ISO 8601; UTC unless it says otherwise), or `all`
    (None: everything)."""
    now = now or datetime.now(UTC)
    if text.strip().lower() == "all":
        return None
    if match := _SINCE.fullmatch(text.strip().lower()):
        return now - timedelta(**{_UNITS[match[2]]: int(match[1])})
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not an age like 7d, 12h or 2w, a date like 2026-11-01, or all") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def since_iso(moment: datetime | None) -> str | None:
    """A moment as the stores' timestamps compare (UTC ISO 8601, seconds), or None for everything."""
    return moment.astimezone(UTC).isoformat(timespec="seconds") if moment else None


def without_repeats(recorded: Sequence[Asked], rated_down: Sequence[Asked]) -> list[Asked]:
    """Recorded refusals and escalations plus ratings, leaving out a rating of an answer already recorded (the same
    user, the same question, within SAME_ASKING after it): one asking counts once."""
    seen: dict[tuple[str, str], list[datetime]] = {}
    for asked in recorded:
        seen.setdefault((asked.user, question_key(asked.question)), []).append(_moment(asked.created_at))
    kept = [rating for rating in rated_down if not any(
        timedelta(0) <= _moment(rating.created_at) - when <= SAME_ASKING
        for when in seen.get((rating.user, question_key(rating.question)), []))]
    return [*recorded, *kept]


def find_gaps(asked: Sequence[Asked], embedder: Embedder, since: str | None = None, min_count: int = 1,
              threshold: float = DISTANCE_THRESHOLD) -> GapReport:
    """Group the questions by meaning into topics, largest first; topics under `min_count` are left out."""
    groups = _by_question(asked)
    keys = sorted(groups, key=lambda key: max(a.created_at for a in groups[key]), reverse=True)[:MAX_QUESTIONS]
    keys.sort()  # clustering sees the questions in one fixed order: the same rows give the same topics
    total = sum(len(groups[key]) for key in keys)
    topics = []
    if keys:
        vectors = np.stack([embedder.embed_query(_shown(groups[key])) for key in keys])
        topics = [_topic([keys[i] for i in members], groups, vectors[members], total)
                  for members in _members(cluster(vectors, threshold))]
    topics.sort(key=lambda topic: (-topic.count, topic.label))
    shown = [topic for topic in topics if topic.count >= min_count]
    reasons = Counter(a.reason for key in keys for a in groups[key])
    return GapReport(since, total, {reason: reasons[reason] for reason in REASONS}, shown, len(topics) - len(shown))


def cluster(vectors: Vectors, threshold: float = DISTANCE_THRESHOLD) -> npt.NDArray[np.int64]:
    """A topic number for each (normalized) vector: average-linkage clusters no wider than `threshold` in cosine
    distance."""
    if len(vectors) < 2:
        return np.zeros(len(vectors), dtype=np.int64)
    from sklearn.cluster import AgglomerativeClustering  # loaded only when a report is made

    model = AgglomerativeClustering(n_clusters=None, metric="cosine", linkage="average", distance_threshold=threshold)
    return np.asarray(model.fit_predict(vectors), dtype=np.int64)


def question_key(question: str) -> str:
    """A question as duplicates compare: case and spacing ignored."""
    return " ".join(question.casefold().split())


def _by_question(asked: Sequence[Asked]) -> dict[str, list[Asked]]:
    groups: dict[str, list[Asked]] = {}
    for item in asked:
        if key := question_key(item.question):
            groups.setdefault(key, []).append(item)
    return groups


def _members(labels: npt.NDArray[np.int64]) -> list[list[int]]:
    return [[int(i) for i in np.flatnonzero(labels == label)] for label in sorted(set(labels.tolist()))]


def _topic(keys: list[str], groups: dict[str, list[Asked]], vectors: Vectors, total: int) -> Topic:
    counts = np.array([len(groups[key]) for key in keys], dtype=np.float32)
    centroid = (vectors * counts[:, None]).sum(axis=0)  # weighted: a question asked often pulls the centre
    closeness = vectors @ centroid
    central = sorted(range(len(keys)), key=lambda i: (-round(float(closeness[i]), 6), keys[i]))
    items = [a for key in keys for a in groups[key]]
    examples = tuple(_shown(groups[keys[i]]) for i in central[:EXAMPLES])
    reasons = Counter(a.reason for a in items)
    sources = Counter(a.source for a in items if a.source)
    return Topic(label=examples[0], count=len(items), share=len(items) / total if total else 0.0,
                 reasons={reason: reasons[reason] for reason in REASONS if reasons[reason]}, examples=examples,
                 keywords=keywords([a.question for a in items]),
                 sources=tuple(source for source, _ in sorted(sources.items(), key=lambda s: (-s[1], s[0]))[:3]),
                 first_seen=min(a.created_at for a in items), last_seen=max(a.created_at for a in items))


def _shown(same: list[Asked]) -> str:
    """The wording shown for a repeated question: its most common one (then the first in order)."""
    return sorted(Counter(a.question.strip() for a in same).items(), key=lambda w: (-w[1], w[0]))[0][0]


def keywords(questions: Sequence[str], limit: int = KEYWORDS) -> tuple[str, ...]:
    """The words most questions share, as the keyword index tokenises them (stemmed English, jieba for Chinese),
    each shown in its most common written form; none for one question (its label says it all)."""
    if len({question_key(question) for question in questions}) < 2:
        return ()
    asked_in: Counter[str] = Counter()
    written: dict[str, Counter[str]] = {}
    for question in questions:
        terms = _terms(question)
        asked_in.update(set(terms))
        for stem, word in terms.items():
            written.setdefault(stem, Counter())[word] += 1
    # A word of one question alone says little about a topic.
    ranked = sorted((stem for stem, n in asked_in.items() if n >= 2), key=lambda s: (-asked_in[s], s))
    return tuple(min(written[stem].items(), key=lambda w: (-w[1], w[0]))[0] for stem in ranked[:limit])


def _terms(question: str) -> dict[str, str]:
    """Search token → the word it was written as."""
    terms: dict[str, str] = {}
    for word in _WORDS.findall(question.lower()):
        tokens = tokenize(word)
        if len(tokens) == 1:  # an English word (stemmed): keep its written form
            terms.setdefault(tokens[0], word)
        else:  # a run of Chinese: jieba's words are already written forms
            terms.update({token: token for token in tokens})
    return terms


def _moment(stamp: str) -> datetime:
    moment = datetime.fromisoformat(stamp)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
