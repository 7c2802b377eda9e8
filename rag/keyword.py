"""Keyword search beside Chroma: BM25 (bm25s) over jieba tokens for Chinese and word tokens otherwise.

The tokens of every chunk live in a SQLite file next to the sync manifest, updated by each ingest (add, change,
delete), so the index survives restarts; the BM25 matrix is rebuilt in memory when that file's revision changes.
Each chunk's access label is stored beside its tokens: a search masks out what the caller may not see before any
chunk is ranked, so the top k are all visible ones.
"""

from __future__ import annotations

import math
import re
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from rag.access import DocAccess
from rag.types import Chunk

Admits = Callable[[str], bool]  # whether the caller may see chunks with this access label

K1, B = 1.5, 0.75
HAN_RANGE = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs: extension A, unified, compatibility
HAN_CHAR = re.compile(f"[{HAN_RANGE}]")
_CJK = HAN_CHAR
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
# Runs of Han characters, and runs of anything else that is a word character.
_RUNS = re.compile(f"[{HAN_RANGE}]+|[^\\W_{HAN_RANGE}]+")
# Words so common that they only add noise to a short question.
_STOPWORDS_EN = """a an and are as at be by can do does for from how i in is it of on or that the this to was what
when where which who why will with you your my me we our if not no there their they been has have had into about"""
_STOPWORDS_ZH = """的 了 是 在 和 与 或 我 你 他 她 它 们 这 那 吗 呢 吧 啊 就 都 也 还 要 会 能
可以 什么 怎么 如何 为什么 哪 哪些 一个 有 没有 把 被 对 中 上 下 以 及 之 其 为 于"""
STOPWORDS = frozenset(_STOPWORDS_EN.split()) | frozenset(_STOPWORDS_ZH.split())
SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (chunk_id TEXT PRIMARY KEY, doc_id TEXT NOT NULL, tokens TEXT NOT NULL,
                                   access TEXT);
CREATE INDEX IF NOT EXISTS tokens_doc ON tokens (doc_id);
CREATE TABLE IF NOT EXISTS revision (id INTEGER PRIMARY KEY CHECK (id = 1), value INTEGER NOT NULL);
INSERT OR IGNORE INTO revision VALUES (1, 0);
"""


def has_cjk(text: str) -> bool:
    """Whether the text contains Chinese (Han) characters."""
    return _CJK.search(text) is not None


def cjk_share(text: str) -> float:
    """The share of Han characters among the letters and digits of a text (0 for pure English)."""
    letters = [ch for ch in text if ch.isalnum()]
    return sum(1 for ch in letters if _CJK.match(ch)) / len(letters) if letters else 0.0


def tokenize(text: str) -> list[str]:
    """Search tokens: English words lower-cased and stemmed (Snowball), Chinese words cut by jieba (search mode:
    long words and the shorter words inside them); no stopwords."""
    tokens: list[str] = []
    for run in _RUNS.findall(text.lower()):
        if _CJK.match(run):
            tokens += [w for w in _jieba_words(run) if w not in STOPWORDS]
        else:
            tokens += _stem([w for w in _WORD.findall(run) if w not in STOPWORDS])
    return tokens


def _jieba_words(run: str) -> list[str]:
    import jieba

    return list(jieba.cut_for_search(run))


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    import Stemmer

    return Stemmer.Stemmer("english")


def _stem(words: list[str]) -> list[str]:
    return list(_stemmer().stemWords(words)) if words else []


@dataclass(frozen=True, slots=True)
class KeywordHit:
    """A chunk found by keyword; `coverage` is its BM25 score over the most the query could score (0–1)."""

    chunk_id: str
    score: float
    coverage: float


class KeywordIndex:
    """BM25 over the chunks of one collection, persisted as tokens in SQLite."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._path = path
        self._lock = threading.Lock()
        self._loaded_revision = -1
        self._bm25: Any = None
        self._ids: list[str] = []
        self._position: dict[str, int] = {}
        self._idf: dict[str, float] = {}
        self._labels: list[str] = []
        self._by_label: dict[str, Any] = {}  # access label → positions holding it
        with self._connect() as db:
            db.executescript(SCHEMA)
            columns = {row[1] for row in db.execute("PRAGMA table_info(tokens)")}
            if "access" not in columns:  # an index from before access labels: NULL reads as locked until repaired
                db.execute("ALTER TABLE tokens ADD COLUMN access TEXT")

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A connection for one unit of work: committed (or rolled back) and closed at the end."""
        db = sqlite3.connect(self._path, timeout=30)
        try:
            db.execute("PRAGMA journal_mode=WAL")  # readers (the app) never wait for the ingest writer
            with db:
                yield db
        finally:
            db.close()

    def add(self, chunks: Sequence[Chunk]) -> None:
        """Index (or re-index) chunks."""
        rows = [(c.chunk_id, c.doc_id, " ".join(tokenize(c.text)), c.access.label) for c in chunks]
        with self._connect() as db:
            db.executemany("INSERT OR REPLACE INTO tokens VALUES (?, ?, ?, ?)", rows)
            db.execute("UPDATE revision SET value = value + 1")

    def set_access(self, chunk_ids: Sequence[str], access: DocAccess) -> None:
        """Relabel chunks (a document's groups changed) without tokenizing them again."""
        with self._connect() as db:
            db.executemany("UPDATE tokens SET access = ? WHERE chunk_id = ?", [(access.label, i) for i in chunk_ids])
            db.execute("UPDATE revision SET value = value + 1")

    def unlabelled(self) -> list[str]:
        """Chunks indexed before access labels existed (to be labelled from the vector store)."""
        with self._connect() as db:
            return [row[0] for row in db.execute("SELECT chunk_id FROM tokens WHERE access IS NULL")]

    def delete(self, chunk_ids: Sequence[str]) -> None:
        """Forget chunks (unknown ids are ignored)."""
        if not chunk_ids:
            return
        with self._connect() as db:
            db.executemany("DELETE FROM tokens WHERE chunk_id = ?", [(i,) for i in chunk_ids])
            db.execute("UPDATE revision SET value = value + 1")

    def ids(self) -> set[str]:
        """Every indexed chunk id."""
        with self._connect() as db:
            return {row[0] for row in db.execute("SELECT chunk_id FROM tokens")}

    def revision(self) -> int:
        """A number that changes with every write."""
        with self._connect() as db:
            return int(db.execute("SELECT value FROM revision").fetchone()[0])

    def warm(self) -> None:
        """Load the BM25 matrix and jieba's dictionary now, so the first question does not wait for them."""
        self._refresh()
        tokenize("预热")

    def search(self, query: str, k: int, include: Sequence[str] = (), admits: Admits | None = None) -> list[KeywordHit]:
        """The k chunks with the best BM25 scores for the query among those `admits` lets through (all when None),
        best first, then the chunks named in `include` (scored too, so that fusion knows their coverage)."""
        self._refresh()
        terms = tokenize(query)
        if self._bm25 is None or not terms:
            return []
        import numpy as np

        scores = self._bm25.get_scores(terms, weight_mask=self._mask(admits))
        best = min(k, int(np.count_nonzero(scores)))
        part = np.argpartition(-scores, best - 1)[:best] if best else np.array([], dtype=int)
        top: list[int] = [int(i) for i in part[np.argsort(-scores[part])]]
        chosen = set(top)
        top += [i for i in (self._position.get(chunk_id) for chunk_id in include) if i is not None and i not in chosen]
        ceiling = self.query_ceiling(terms)
        if admits is not None:  # ids the caller named are checked too: nothing invisible leaves this method
            top = [i for i in top if admits(self._labels[i])]
        return [KeywordHit(self._ids[i], float(scores[i]), float(scores[i]) / ceiling) for i in top]

    def query_ceiling(self, terms: Sequence[str]) -> float:
        """The most any chunk could score for these terms: coverage's denominator, so coverage stays within 0–1.

        bm25s's Lucene variant scores a term `idf · tf / (tf + k1·(1 − b + b·len/avglen))`, which approaches `idf`
        as the term repeats (one occurrence at average length gives `idf / (1 + k1)`). Terms the index has never
        seen count at the highest idf, so questions about absent things cover little."""
        unseen = math.log(1 + (len(self._ids) + 0.5) / 0.5)
        return sum(self._idf.get(term, unseen) for term in terms) or 1.0

    def visibility(self, admits: Admits) -> tuple[float, Callable[[str], bool]]:
        """The share of indexed chunks that `admits` lets through (0–1), and the same rule by chunk id from this
        index's copy of the labels (unknown ids: no): a fast first look for the dense side, which checks the
        stored label again."""
        self._refresh()
        position, labels = self._position, self._labels
        verdicts = {label: admits(label) for label in self._by_label}
        visible = sum(len(positions) for label, positions in self._by_label.items() if verdicts[label])
        share = visible / len(self._ids) if self._ids else 0.0
        return share, lambda chunk_id: (p := position.get(chunk_id)) is not None and verdicts[labels[p]]

    def _mask(self, admits: Admits | None) -> Any:
        """1.0 where the caller may see the chunk, else 0.0 (None: everything is visible)."""
        if admits is None:
            return None
        import numpy as np

        mask = np.zeros(len(self._ids), dtype=np.float32)
        for label, positions in self._by_label.items():
            if admits(label):
                mask[positions] = 1.0
        return mask

    def _refresh(self) -> None:
        revision = self.revision()
        if revision == self._loaded_revision:
            return
        with self._lock:
            if revision != self._loaded_revision:
                self._load()
                self._loaded_revision = revision

    def _load(self) -> None:
        import bm25s

        with self._connect() as db:
            rows = db.execute("SELECT chunk_id, tokens, access FROM tokens ORDER BY chunk_id").fetchall()
        ids = [row[0] for row in rows]
        labels = [DocAccess.from_label(row[2]).label for row in rows]  # NULL or unknown: locked
        by_label: dict[str, list[int]] = {}
        for position, label in enumerate(labels):
            by_label.setdefault(label, []).append(position)
        corpus = [row[1].split() or [""] for row in rows]
        df = Counter(term for tokens in corpus for term in set(tokens))
        self._idf = {term: math.log(1 + (len(ids) - n + 0.5) / (n + 0.5)) for term, n in df.items()}
        bm25 = None
        if ids:
            bm25 = bm25s.BM25(k1=K1, b=B, method="lucene")
            bm25.index(corpus, show_progress=False)
        import numpy as np

        self._bm25, self._ids, self._position = bm25, ids, {chunk_id: i for i, chunk_id in enumerate(ids)}
        self._labels, self._by_label = labels, {label: np.asarray(p) for label, p in by_label.items()}
