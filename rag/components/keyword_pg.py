"""Keyword search in PostgreSQL (RAG_KEYWORD_DB_URL): one BM25 index that every app replica, on any host, shares.

The embedded index (rag.components.keyword) keeps tokens in a SQLite file beside the data dir, which replicas on other
hosts
cannot share safely. Here the index lives in tables that several collections share, one namespace per collection:
- `rag_keyword_namespaces`: per collection its id, a revision bumped by every write, its live chunks and their
  total length (BM25's average length), all updated in the write's transaction;
- `rag_keyword_chunks`: one row per chunk (id, document, token count, access label, the revision that wrote it);
- `rag_keyword_postings`: term → chunk, term frequency, and the chunk's length and label (copied from its row, so
  that a search reads nothing but the primary key's index: the entries of one term lie together, where rows
  written chunk by chunk lie scattered, ~7x slower at 100k chunks);
- `rag_keyword_labels`: live chunks per access label, to decide the caller's visible labels and share cheaply.

A search is one SQL statement: idf from the query terms' document frequencies at query time (chunk count, total
length and document frequencies over the labels the caller may see: a hidden chunk moves no score), BM25 summed
per chunk with the same k1, b and formula as rag.components.keyword_snapshot (Lucene's variant, an empty chunk
counting 1),
access checked on the chunk row before ranking, `ORDER BY score LIMIT k`. The labels a caller may see are decided by
the same `admits` rule as the embedded index, applied to the namespace's distinct labels (unknown ones read as
locked), and passed into the query as a list: nothing outside it is ever scored, ranked or returned.

Each process also keeps a copy of the labels by chunk id, caught up from the rows written since its last look: the
dense side's first look at its nearest chunks (`visibility`); the stored labels decide, never this copy.

Writers of one collection take its namespace row's lock, so concurrent replicas apply their writes one at a time
(the embedded index serialises them too); searches never wait for them (MVCC).
"""

from __future__ import annotations

import math
import queue
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from rag.components.keyword_snapshot import K1, B
from rag.core.access import DocAccess
from rag.core.errors import ConfigError, StoreUnavailable
from rag.core.ports import Admits, KeywordHit
from rag.core.text import HAN_RANGE, tokenize
from rag.core.types import Chunk

if TYPE_CHECKING:
    import psycopg
    from psycopg.rows import TupleRow

    Cursor = psycopg.Cursor[TupleRow]

SETTING = "RAG_KEYWORD_DB_URL"
SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")
IDLE_CONNECTIONS = 8  # kept open between uses; more may be open at once under load, closed when handed back
WORK_MEM = "64MB"  # a search sums scores per chunk in a hash table: ~8 MB at 100k chunks, spilled to disk at 4 MB
SCHEMA_LOCK = 0x7261676B  # advisory lock taken while creating the tables ("ragk"): two replicas may start at once
SCHEMA = """
CREATE TABLE IF NOT EXISTS rag_keyword_namespaces (
    id serial PRIMARY KEY, name text NOT NULL UNIQUE, revision bigint NOT NULL DEFAULT 0,
    live bigint NOT NULL DEFAULT 0, total_length bigint NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS rag_keyword_chunks (
    id bigserial PRIMARY KEY, ns integer NOT NULL REFERENCES rag_keyword_namespaces ON DELETE CASCADE,
    chunk_id text NOT NULL, doc_id text NOT NULL, length integer NOT NULL, access text NOT NULL,
    written bigint NOT NULL, UNIQUE (ns, chunk_id));
CREATE INDEX IF NOT EXISTS rag_keyword_chunks_written ON rag_keyword_chunks (ns, written);
CREATE TABLE IF NOT EXISTS rag_keyword_postings (
    ns integer NOT NULL, term text NOT NULL, chunk bigint NOT NULL REFERENCES rag_keyword_chunks ON DELETE CASCADE,
    tf integer NOT NULL, length integer NOT NULL, access text NOT NULL,
    PRIMARY KEY (ns, term, chunk) INCLUDE (tf, length, access));
CREATE INDEX IF NOT EXISTS rag_keyword_postings_chunk ON rag_keyword_postings (chunk);
CREATE TABLE IF NOT EXISTS rag_keyword_labels (
    ns integer NOT NULL REFERENCES rag_keyword_namespaces ON DELETE CASCADE, access text NOT NULL,
    chunks bigint NOT NULL, length bigint, PRIMARY KEY (ns, access));
ALTER TABLE rag_keyword_labels ADD COLUMN IF NOT EXISTS length bigint;
UPDATE rag_keyword_labels l SET length = (SELECT coalesce(sum(c.length), 0) FROM rag_keyword_chunks c
                                          WHERE c.ns = l.ns AND c.access = l.access) WHERE l.length IS NULL;
"""
# What idf and the length norm see: the chunks, their total length and each term's document frequency among the
# labels the caller may see, so that no score depends on a chunk hidden from them.
VISIBLE = "(%(everyone)s OR {0}access = ANY(%(visible)s::text[]))"
STATS = f"""
st AS (SELECT sum(chunks) AS live, %(k1b)s * sum(chunks) / greatest(sum(length), 1)::float8 AS per_length
       FROM rag_keyword_labels WHERE ns = %(ns)s AND {VISIBLE.format("")}),
q AS (SELECT term, count(*) AS n FROM unnest(%(terms)s::text[]) AS term GROUP BY term),
w AS (SELECT q.term, q.n * ln(1 + (coalesce(st.live, 0) - d.df + 0.5)::float8 / (d.df + 0.5)) AS idf
      FROM q CROSS JOIN st CROSS JOIN LATERAL
           (SELECT count(*) AS df FROM rag_keyword_postings p WHERE p.ns = %(ns)s AND p.term = q.term
            AND {VISIBLE.format("p.")}) AS d)"""
# The search: BM25 of every chunk holding a query term among the visible labels, the best k, then the chunks named
# in `include` (scored 0 when they hold no term), each row with the query's ceiling (its idf summed).
SEARCH = f"""
WITH {STATS},
scored AS (SELECT p.chunk AS id, sum(w.idf * p.tf / (p.tf + %(flat)s + st.per_length * p.length)) AS score
           FROM w JOIN rag_keyword_postings p ON p.ns = %(ns)s AND p.term = w.term CROSS JOIN st
           WHERE {VISIBLE.format("p.")}
           GROUP BY p.chunk),
top AS (SELECT id, score FROM scored ORDER BY score DESC, id LIMIT %(k)s),
named AS (SELECT c.id, coalesce(s.score, 0) AS score, i.pos
          FROM unnest(%(include)s::text[]) WITH ORDINALITY AS i(chunk_id, pos)
          JOIN rag_keyword_chunks c ON c.ns = %(ns)s AND c.chunk_id = i.chunk_id
          LEFT JOIN scored s ON s.id = c.id
          WHERE {VISIBLE.format("c.")} AND c.id NOT IN (SELECT id FROM top)),
found AS (SELECT id, score, 0 AS part, 0::bigint AS pos FROM top UNION ALL SELECT id, score, 1, pos FROM named)
SELECT c.chunk_id, f.score, (SELECT sum(idf) FROM w) AS ceiling
FROM found f JOIN rag_keyword_chunks c ON c.id = f.id
ORDER BY f.part, f.score DESC, f.pos, f.id
"""
CEILING = f"WITH {STATS} SELECT coalesce(sum(idf), 0) FROM w"
# Chunks per label, and those of them holding a Chinese term.
LANGUAGES = """
SELECT l.access, l.chunks, (SELECT count(*) FROM rag_keyword_chunks c WHERE c.ns = l.ns AND c.access = l.access
                            AND EXISTS (SELECT 1 FROM rag_keyword_postings p WHERE p.chunk = c.id AND p.term ~ %(han)s))
FROM rag_keyword_labels l WHERE l.ns = %(ns)s AND l.chunks > 0
"""


def connection_url(url: str) -> str:
    """The libpq URL of RAG_KEYWORD_DB_URL (SQLAlchemy's `postgresql+psycopg://` accepted too); ConfigError when it
    is not a PostgreSQL URL."""
    parts = urlsplit(url.strip())
    if parts.scheme not in SCHEMES or not (parts.hostname or parts.path.strip("/")):
        raise ConfigError(f"{SETTING} must look like postgresql://user@host:5432/dbname, got {redacted(url)!r}")
    return urlunsplit(parts._replace(scheme="postgresql"))


def redacted(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url.strip())
    if parts.password is None:
        return url.strip()
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))


class _Pool:
    """A few reusable connections for many threads (psycopg_pool is not a dependency): one per unit of work."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self.url = url
        self._timeout_s = timeout_s
        self._idle: queue.LifoQueue[psycopg.Connection[TupleRow]] = queue.LifoQueue()

    def _connect(self) -> psycopg.Connection[TupleRow]:
        import psycopg

        try:
            # autocommit: each unit of work is one explicit transaction() block, and an idle connection holds none open
            return psycopg.connect(self.url, autocommit=True, connect_timeout=max(1, math.ceil(self._timeout_s)))
        except psycopg.Error as exc:
            raise StoreUnavailable(f"cannot reach the keyword database at {SETTING}={redacted(self.url)}: "
                                   f"{str(exc).strip()}") from exc

    @contextmanager
    def transaction(self) -> Iterator[Cursor]:
        """A cursor in one transaction: committed at the end, rolled back (nothing half-written) on any error."""
        import psycopg

        try:
            db = self._idle.get_nowait()
        except queue.Empty:
            db = self._connect()
        try:
            with db.transaction(), db.cursor() as cursor:
                yield cursor
        except psycopg.Error as exc:  # rolled back; after an OperationalError (server gone) the connection is done
            if isinstance(exc, psycopg.OperationalError):
                db.close()
            else:
                self._give_back(db)
            raise StoreUnavailable(f"the keyword database at {SETTING} failed: {str(exc).strip()}") from exc
        except BaseException:
            self._give_back(db)
            raise
        self._give_back(db)

    def _give_back(self, db: psycopg.Connection[TupleRow]) -> None:
        if db.closed or db.broken or self._idle.qsize() >= IDLE_CONNECTIONS:
            db.close()
        else:
            self._idle.put(db)

    def close(self) -> None:
        """Close the idle connections."""
        while not self._idle.empty():
            self._idle.get_nowait().close()


class PgKeywordIndex:
    """BM25 over the chunks of one collection, kept and scored in PostgreSQL; the interface of KeywordIndex."""

    def __init__(self, url: str, namespace: str, timeout_s: float = 10.0) -> None:
        self._pool = _Pool(connection_url(url), timeout_s)
        self.namespace = namespace
        with self._pool.transaction() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            cur.execute(SCHEMA)
            cur.execute("INSERT INTO rag_keyword_namespaces (name) VALUES (%s) ON CONFLICT (name) DO NOTHING",
                        (namespace,))
            cur.execute("SELECT id FROM rag_keyword_namespaces WHERE name = %s", (namespace,))
            self._ns = int(_one(cur))
        self._labels = _LabelCopy()
        self._languages: tuple[int, dict[str, tuple[int, int]]] | None = None  # (revision, languages())

    def close(self) -> None:
        """Close the pooled connections."""
        self._pool.close()

    def add(self, chunks: Sequence[Chunk]) -> None:
        """Index (or re-index) chunks."""
        latest = {chunk.chunk_id: chunk for chunk in chunks}  # the last of repeated ids wins, as in the embedded one
        if not latest:
            return
        tokens = {chunk_id: tokenize(chunk.text) for chunk_id, chunk in latest.items()}
        with self._write() as (cur, revision):
            delta = self._remove(cur, list(latest))
            cur.execute("""INSERT INTO rag_keyword_chunks (ns, written, chunk_id, doc_id, length, access)
                           SELECT %s, %s, * FROM unnest(%s::text[], %s::text[], %s::int[], %s::text[])
                           RETURNING id, chunk_id""",
                        (self._ns, revision, list(latest), [c.doc_id for c in latest.values()],
                         [max(len(t), 1) for t in tokens.values()], [c.access.label for c in latest.values()]))
            ids = {str(chunk_id): int(row_id) for row_id, chunk_id in cur.fetchall()}
            with cur.copy("COPY rag_keyword_postings (ns, term, chunk, tf, length, access) FROM STDIN") as copy:
                for chunk_id, terms in tokens.items():
                    length, label = max(len(terms), 1), latest[chunk_id].access.label
                    for term, tf in Counter(terms).items():
                        copy.write_row((self._ns, term, ids[chunk_id], tf, length, label))
            for chunk_id, chunk in latest.items():
                delta.update(chunk.access.label, chunks=1, length=max(len(tokens[chunk_id]), 1))
            self._account(cur, delta)

    def set_access(self, chunk_ids: Sequence[str], access: DocAccess) -> None:
        """Relabel chunks (a document's groups changed) without tokenizing them again."""
        if not chunk_ids:
            return
        with self._write() as (cur, revision):
            cur.execute("""UPDATE rag_keyword_chunks c SET access = %s, written = %s FROM rag_keyword_chunks old
                           WHERE c.id = old.id AND c.ns = %s AND c.chunk_id = ANY(%s)
                           RETURNING old.access, old.length""",
                        (access.label, revision, self._ns, list(chunk_ids)))
            relabelled = cur.fetchall()
            cur.execute("""UPDATE rag_keyword_postings p SET access = %s FROM rag_keyword_chunks c
                           WHERE p.chunk = c.id AND c.ns = %s AND c.chunk_id = ANY(%s)""",
                        (access.label, self._ns, list(chunk_ids)))
            delta = _Delta()
            for old, length in relabelled:
                delta.update(str(old), chunks=-1, length=-int(length))
                delta.update(access.label, chunks=1, length=int(length))
            self._account(cur, delta)

    def delete(self, chunk_ids: Sequence[str]) -> None:
        """Forget chunks (unknown ids are ignored)."""
        if chunk_ids:
            with self._write() as (cur, _):
                self._account(cur, self._remove(cur, list(chunk_ids)))

    @contextmanager
    def _write(self) -> Iterator[tuple[Cursor, int]]:
        """A write transaction holding this collection's lock (its namespace row) until it commits, and the
        revision it will commit as."""
        with self._pool.transaction() as cur:
            cur.execute("SELECT revision FROM rag_keyword_namespaces WHERE id = %s FOR UPDATE", (self._ns,))
            row = cur.fetchone()
            if row is None:
                raise ConfigError(f"keyword index {self.namespace!r} was dropped from {SETTING} while open")
            yield cur, int(row[0]) + 1

    def _remove(self, cur: Cursor, chunk_ids: list[str]) -> _Delta:
        """Delete chunks (their postings go with them); what that takes from the counts."""
        cur.execute("DELETE FROM rag_keyword_chunks WHERE ns = %s AND chunk_id = ANY(%s) RETURNING access, length",
                    (self._ns, chunk_ids))
        delta = _Delta()
        for access, length in cur.fetchall():
            delta.update(str(access), chunks=-1, length=-int(length))
        return delta

    def _account(self, cur: Cursor, delta: _Delta) -> None:
        """Apply a write's change to the label counts and the collection's totals, and bump its revision."""
        labels = [(label, n, delta.lengths[label]) for label, n in delta.labels.items() if n or delta.lengths[label]]
        if labels:
            cur.execute("""INSERT INTO rag_keyword_labels AS l (ns, access, chunks, length)
                           SELECT %s, * FROM unnest(%s::text[], %s::bigint[], %s::bigint[])
                           ON CONFLICT (ns, access) DO UPDATE SET chunks = l.chunks + excluded.chunks,
                                                                  length = l.length + excluded.length""",
                        (self._ns, [label for label, _, _ in labels], [n for _, n, _ in labels],
                         [length for _, _, length in labels]))
            cur.execute("DELETE FROM rag_keyword_labels WHERE ns = %s AND chunks <= 0", (self._ns,))
        cur.execute("""UPDATE rag_keyword_namespaces SET revision = revision + 1, live = live + %s,
                       total_length = total_length + %s WHERE id = %s""",
                    (sum(delta.labels.values()), sum(delta.lengths.values()), self._ns))

    def unlabelled(self) -> list[str]:
        """Chunks without an access label: none here (every row is written with one)."""
        return []

    def ids(self) -> set[str]:
        """Every indexed chunk id."""
        with self._pool.transaction() as cur:
            cur.execute("SELECT chunk_id FROM rag_keyword_chunks WHERE ns = %s", (self._ns,))
            return {str(row[0]) for row in cur.fetchall()}

    def revision(self) -> int:
        """A number that changes with every write (by any replica)."""
        with self._pool.transaction() as cur:
            cur.execute("SELECT revision FROM rag_keyword_namespaces WHERE id = %s", (self._ns,))
            return int(_one(cur))

    def languages(self) -> dict[str, tuple[int, int]]:
        """Per access label: (chunks, chunks holding Chinese), as of the last write by any replica (counted again
        after one: a scan of the postings)."""
        with self._pool.transaction() as cur:
            cur.execute("SELECT revision FROM rag_keyword_namespaces WHERE id = %s", (self._ns,))
            revision = int(_one(cur))
            counted = self._languages
            if counted is not None and counted[0] == revision:
                return counted[1]
            cur.execute(LANGUAGES, {"ns": self._ns, "han": f"[{HAN_RANGE}]"})
            counts = {str(label): (int(total), int(han)) for label, total, han in cur.fetchall()}
        self._languages = (revision, counts)
        return counts

    def warm(self) -> None:
        """Open a connection, copy the labels and load jieba's dictionary now, so the first question does not wait."""
        with self._pool.transaction() as cur:
            self._labels.current(cur, self._ns)
        tokenize("预热")

    def search(self, query: str, k: int, include: Sequence[str] = (), admits: Admits | None = None) -> list[KeywordHit]:
        """The k chunks with the best BM25 scores for the query among those `admits` lets through (all when None),
        best first, then the chunks named in `include` (scored too, so that fusion knows their coverage)."""
        terms = tokenize(query)
        if not terms:
            return []
        with self._pool.transaction() as cur:
            cur.execute(f"SET LOCAL work_mem = '{WORK_MEM}'")
            cur.execute(SEARCH, self._query(cur, terms, admits) | {"k": k, "include": list(include),
                                                                    "flat": K1 * (1 - B)})
            rows = cur.fetchall()
        return [KeywordHit(str(chunk_id), float(score), float(score) / (float(ceiling) or 1.0))
                for chunk_id, score, ceiling in rows]

    def query_ceiling(self, terms: Sequence[str], admits: Admits | None = None) -> float:
        """The most any chunk `admits` lets through could score for these terms: their idf summed, terms no such
        chunk holds at the highest."""
        with self._pool.transaction() as cur:
            cur.execute(CEILING, self._query(cur, list(terms), admits))
            return float(_one(cur)) or 1.0

    def _query(self, cur: Cursor, terms: list[str], admits: Admits | None) -> dict[str, Any]:
        """The parameters that STATS reads: namespace, terms and the labels the caller may see."""
        visible = None if admits is None else self._visible(cur, admits)[0]
        return {"ns": self._ns, "terms": terms, "everyone": visible is None, "visible": visible or [],
                "k1b": K1 * B}

    def visibility(self, admits: Admits) -> tuple[float, Callable[[str], bool]]:
        """The share of indexed chunks that `admits` lets through (0–1) from the label counts, and the same rule by
        chunk id from this process's copy of the labels (unknown ids: no): a fast first look for the dense side,
        which checks the stored label again."""
        with self._pool.transaction() as cur:
            _, share = self._visible(cur, admits)
            labels = self._labels.current(cur, self._ns)
        verdicts = {label: admits(DocAccess.from_label(label).label) for label in set(labels.values())}
        return share, lambda chunk_id: verdicts.get(labels.get(chunk_id, ""), False)

    def _visible(self, cur: Cursor, admits: Admits) -> tuple[list[str], float]:
        """The stored labels `admits` lets through (unknown ones read as locked: fail closed) and their share."""
        cur.execute("SELECT access, chunks FROM rag_keyword_labels WHERE ns = %s", (self._ns,))
        counts = {str(label): int(n) for label, n in cur.fetchall()}
        visible = [label for label in counts if admits(DocAccess.from_label(label).label)]
        total = sum(counts.values())
        return visible, sum(counts[label] for label in visible) / total if total else 0.0

    def copy_to(self, namespace: str) -> PgKeywordIndex:
        """A copy of this collection's index under another namespace (a re-embed's new generation), replacing it."""
        target = PgKeywordIndex(self._pool.url, namespace)
        with target._write() as (cur, revision):
            cur.execute("DELETE FROM rag_keyword_chunks WHERE ns = %s", (target._ns,))
            cur.execute("DELETE FROM rag_keyword_labels WHERE ns = %s", (target._ns,))
            cur.execute("""INSERT INTO rag_keyword_chunks (ns, written, chunk_id, doc_id, length, access)
                           SELECT %s, %s, chunk_id, doc_id, length, access FROM rag_keyword_chunks WHERE ns = %s""",
                        (target._ns, revision, self._ns))
            cur.execute("""INSERT INTO rag_keyword_postings (ns, term, chunk, tf, length, access)
                           SELECT %s, p.term, n.id, p.tf, p.length, p.access FROM rag_keyword_postings p
                           JOIN rag_keyword_chunks o ON o.id = p.chunk
                           JOIN rag_keyword_chunks n ON n.ns = %s AND n.chunk_id = o.chunk_id
                           WHERE p.ns = %s""", (target._ns, target._ns, self._ns))
            cur.execute("""INSERT INTO rag_keyword_labels (ns, access, chunks)
                           SELECT %s, access, chunks FROM rag_keyword_labels WHERE ns = %s""", (target._ns, self._ns))
            cur.execute("""UPDATE rag_keyword_namespaces t SET revision = t.revision + 1, live = s.live,
                           total_length = s.total_length FROM rag_keyword_namespaces s WHERE t.id = %s AND s.id = %s""",
                        (target._ns, self._ns))
        return target

    def drop(self) -> None:
        """Delete this collection's index (its chunks, postings and counts) from the database."""
        with self._pool.transaction() as cur:
            cur.execute("DELETE FROM rag_keyword_namespaces WHERE id = %s", (self._ns,))


class _LabelCopy:
    """This process's copy of a collection's labels by chunk id, caught up from the rows written since it last
    looked (deleted chunks linger until a reload: harmless for a first look that the stored labels confirm)."""

    def __init__(self) -> None:
        self._labels: dict[str, str] = {}
        self._revision = -1
        self._lock = threading.Lock()

    def current(self, cur: Cursor, ns: int) -> dict[str, str]:
        """The labels as of now (as of a moment ago while another thread catches up)."""
        cur.execute("SELECT revision, live FROM rag_keyword_namespaces WHERE id = %s", (ns,))
        revision, live = cur.fetchone() or (0, 0)
        if revision == self._revision or not self._lock.acquire(blocking=False):
            return self._labels
        try:
            labels, since = (dict(self._labels), self._revision) if len(self._labels) <= 2 * live + 1000 else ({}, -1)
            cur.execute("SELECT chunk_id, access FROM rag_keyword_chunks WHERE ns = %s AND written > %s", (ns, since))
            labels.update(cur.fetchall())
            self._labels, self._revision = labels, int(revision)  # one assignment: readers see old or new
        finally:
            self._lock.release()
        return self._labels


class _Delta:
    """What a write changes: live chunks per label, and their total length per label."""

    def __init__(self) -> None:
        self.labels: Counter[str] = Counter()
        self.lengths: Counter[str] = Counter()

    def update(self, label: str, chunks: int, length: int = 0) -> None:
        """Count chunks (and their tokens) added (positive) or removed (negative) under a label."""
        self.labels[label] += chunks
        self.lengths[label] += length


def _one(cur: Cursor) -> Any:
    row = cur.fetchone()
    assert row is not None
    return row[0]
