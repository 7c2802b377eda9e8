"""The keyword index in PostgreSQL (RAG_KEYWORD_DB_URL) against the embedded one: the same BM25 scores, the same
access rules applied inside the query, writes shared by replicas, the same hybrid retrieval; the benchmark's quick
mode. Runs against the real PostgreSQL server the session starts."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks import keyword_pg as bench
from rag.components.keyword import KeywordIndex
from rag.components.keyword_pg import PgKeywordIndex, connection_url, redacted
from rag.config import Settings
from rag.core.access import LOCAL_OPERATOR, AccessPolicy, DocAccess, Principal
from rag.core.errors import ConfigError, StoreUnavailable
from rag.core.ports import Admits, Embedder, KeywordSearch
from rag.core.retrieve import Retriever
from rag.core.types import Chunk
from rag.tools.evaluate import load_cases
from rag.wiring import build_keyword_index, build_store, copy_shared_keyword_index, drop_keyword_index
from tests.conftest import REPO, SAMPLES, CountingEmbedder, PostgresServer, free_port

EVAL = REPO / "data" / "eval"
HR, ENG = DocAccess(("hr",)), DocAccess(("eng",))
ENG_READER = Principal("eng reader", frozenset({"eng"}))


@pytest.fixture
def db_url(postgres_server: PostgresServer) -> str:
    """A fresh empty database on the session's server."""
    return postgres_server.database()[0]


@pytest.fixture
def pg(db_url: str) -> Iterator[PgKeywordIndex]:
    index = PgKeywordIndex(db_url, "docs")
    yield index
    index.close()


def corpus() -> list[Chunk]:
    """Real text: every Python FAQ answer as one chunk, the Markdown samples (English and Chinese) by paragraph."""
    chunks = [Chunk(path.stem, path.read_text(encoding="utf-8"), path.name, path.stem, "", 0)
              for path in sorted((EVAL / "python-faq" / "docs").glob("*.txt"))]
    for path in sorted(SAMPLES.glob("*/*.md")):
        paragraphs = [p for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip()]
        chunks += [Chunk(f"{path.stem}-{i}", p, path.name, path.stem, "", i) for i, p in enumerate(paragraphs)]
    return chunks


def questions() -> list[str]:
    """The dev sets' questions, and a few odd ones: repeated words, words no chunk holds, only stopwords."""
    asked = [case.question for name in ("python-faq", "zh") for case in load_cases(EVAL / name / "questions.jsonl")]
    return [*asked, "python python python list", "zyzzyva quux", "the of and", "软件包 软件包 apt"]


def scores(index: KeywordSearch, query: str, admits: Admits | None = None) -> dict[str, tuple[float, float]]:
    """Every matching chunk's (score, coverage)."""
    return {hit.chunk_id: (hit.score, hit.coverage) for hit in index.search(query, 10_000, admits=admits)}


def assert_same(expected: dict[str, tuple[float, float]], got: dict[str, tuple[float, float]]) -> None:
    assert got.keys() == expected.keys()
    for chunk_id, (score, coverage) in expected.items():
        assert got[chunk_id] == pytest.approx((score, coverage), abs=1e-4), chunk_id


def test_scores_equal_the_embedded_index_on_real_text(tmp_path: Path, pg: PgKeywordIndex) -> None:
    chunks = corpus()
    embedded = KeywordIndex(tmp_path / "kw.sqlite3")
    embedded.add(chunks)
    pg.add(chunks)
    assert pg.ids() == embedded.ids() and len(chunks) > 250
    compared = 0
    for query in questions():
        expected = scores(embedded, query)
        assert_same(expected, scores(pg, query))
        top = [hit.score for hit in pg.search(query, 3)]
        assert top == pytest.approx(sorted((s for s, _ in expected.values()), reverse=True)[:3], abs=1e-4)
        compared += len(expected)
    assert compared > 10_000  # most questions match many chunks: a real comparison, not a few empty lists
    assert pg.query_ceiling(["python", "zyzzyva"]) == pytest.approx(embedded.query_ceiling(["python", "zyzzyva"]))


def test_writes_relabels_and_a_second_replica_stay_equal_to_the_embedded_index(tmp_path: Path, db_url: str) -> None:
    chunks = corpus()[:120]
    changed = [Chunk(c.chunk_id, c.text + " lambda closures", c.source, c.doc_id, "", 0) for c in chunks[:10]]
    embedded, one, two = KeywordIndex(tmp_path / "kw.sqlite3"), PgKeywordIndex(db_url, "docs"), \
        PgKeywordIndex(db_url, "docs")
    steps: list[Callable[[KeywordIndex | PgKeywordIndex], None]] = [
        lambda index: index.add(chunks[:80]), lambda index: index.add(chunks[60:]),  # 20 replaced by the second
        lambda index: index.add(changed), lambda index: index.delete([c.chunk_id for c in chunks[30:50]] + ["x"]),
        lambda index: index.set_access([c.chunk_id for c in chunks[:40]], HR)]
    admits = functools.partial(AccessPolicy().label_allows, ENG_READER)
    for n, step in enumerate(steps):
        step(embedded)
        step((one, two)[n % 2])  # the replicas take turns: each must see the other's writes
        for query in ("How do I use lambda closures in a loop?", "Python list sort", "软件包 升级"):
            for replica in (one, two):
                assert_same(scores(embedded, query), scores(replica, query))
                assert_same(scores(embedded, query, admits=admits), scores(replica, query, admits=admits))
    assert one.ids() == two.ids() == embedded.ids()
    assert one.revision() == two.revision() == len(steps)
    share, likely = two.visibility(admits)
    assert share == pytest.approx(embedded.visibility(admits)[0])
    assert [likely(c.chunk_id) for c in chunks] == [embedded.visibility(admits)[1](c.chunk_id) for c in chunks]
    one.close()
    two.close()


def test_access_is_filtered_inside_the_query(pg: PgKeywordIndex, db_url: str) -> None:
    text = "Salary bands and payroll dates for payroll staff"
    pg.add([Chunk("hr", f"{text} payroll payroll", "hr.md", "hr", "", 0, access=HR),
            Chunk("eng", text, "eng.md", "eng", "", 0, access=ENG),
            Chunk("open", "Payroll questions go to the helpdesk", "o.md", "o", "", 0),
            Chunk("locked", f"{text} payroll", "l.md", "l", "", 0, access=DocAccess(locked=True))])
    other = PgKeywordIndex(db_url, "other collection")  # same database, another namespace
    other.add([Chunk("x", f"{text} payroll payroll payroll", "x.md", "x", "", 0)])
    policy = AccessPolicy()
    eng = functools.partial(policy.label_allows, ENG_READER)
    # The best-scoring chunks are hidden: the single hit eng may have is its own, not an empty list after a cut.
    assert [hit.chunk_id for hit in pg.search("payroll", 1, admits=eng)] == ["eng"]
    assert [hit.chunk_id for hit in pg.search("payroll", 10, include=["hr", "locked", "x"], admits=eng)] == \
        ["eng", "open"]
    assert [hit.chunk_id for hit in pg.search("payroll", 10)] == ["hr", "locked", "eng", "open"]
    assert pg.visibility(eng)[0] == pytest.approx(0.5)
    private = functools.partial(AccessPolicy(ungrouped_public=False).label_allows, ENG_READER)
    assert [hit.chunk_id for hit in pg.search("payroll", 10, admits=private)] == ["eng"]
    assert pg.search("payroll", 10, admits=lambda label: False) == []
    pg.set_access(["hr"], ENG)  # relabelled: now eng's, nothing else changed
    assert [hit.chunk_id for hit in pg.search("payroll", 1, admits=eng)] == ["hr"]
    assert [hit.chunk_id for hit in other.search("payroll", 10)] == ["x"]
    other.close()


@pytest.mark.parametrize("backend", ["embedded", "postgres"])
def test_a_reader_s_scores_say_nothing_about_chunks_hidden_from_them(backend: str, tmp_path: Path,
                                                                   db_url: str) -> None:
    """The oracle: a public chunk's score for "canteen zyzzyva" must not change with whether "zyzzyva" (or any
    text at all) exists in documents the reader may not see. A reader's scores equal those of an index holding
    only what they may see; through relabels and deletes too."""
    public = [Chunk("menu", "The canteen serves lunch from noon; the canteen closes at three.", "m.md", "m", "", 0),
              Chunk("hours", "The office opens at eight and closes at six.", "h.md", "h", "", 0)]
    hidden = [Chunk("hr-1", "Zyzzyva is the code name of the 2027 restructuring plan.", "hr.md", "hr", "", 0,
                    access=HR),
              Chunk("hr-2", " ".join(["salary band payroll"] * 40), "hr2.md", "hr2", "", 0, access=HR)]

    def index(name: str) -> KeywordIndex | PgKeywordIndex:
        return KeywordIndex(tmp_path / f"{name}.sqlite3") if backend == "embedded" else PgKeywordIndex(db_url, name)

    eng = functools.partial(AccessPolicy().label_allows, ENG_READER)
    with_hidden, alone = index("with-hidden"), index("alone")
    with_hidden.add(public + hidden)
    alone.add(public)
    for query in ("canteen zyzzyva", "canteen", "zyzzyva", "office canteen payroll"):
        assert scores(with_hidden, query, eng) == scores(alone, query, eng) == scores(alone, query), query
    assert with_hidden.query_ceiling(["canteen", "zyzzyva"], eng) == alone.query_ceiling(["canteen", "zyzzyva"])
    with_hidden.set_access(["hr-1"], DocAccess())  # now public: it counts
    alone.add([replace(hidden[0], access=DocAccess())])
    assert scores(with_hidden, "canteen zyzzyva", eng) == scores(alone, "canteen zyzzyva", eng)
    with_hidden.delete(["hr-1"])
    alone.delete(["hr-1"])
    assert scores(with_hidden, "canteen zyzzyva", eng) == scores(alone, "canteen zyzzyva", eng)
    assert scores(with_hidden, "canteen payroll") != scores(with_hidden, "canteen payroll", eng)  # hr sees more


def test_a_label_the_index_does_not_know_reads_as_locked(pg: PgKeywordIndex) -> None:
    pg.add([Chunk("odd", "payroll", "o.md", "o", "", 0, access=DocAccess(("hr",)))])
    with pg._write() as (cur, _):  # a row written by something else, with a label no DocAccess makes
        for table in ("rag_keyword_chunks", "rag_keyword_postings"):
            cur.execute(f"UPDATE {table} SET access = '|bad name|'")
        cur.execute("UPDATE rag_keyword_labels SET access = '|bad name|'")
    seen: list[str] = []

    def admits(label: str) -> bool:
        seen.append(label)
        return label != "locked"

    assert pg.search("payroll", 5, admits=admits) == []
    assert seen == ["locked"]
    assert [hit.chunk_id for hit in pg.search("payroll", 5, admits=lambda label: True)] == ["odd"]


def test_replicas_starting_at_once_create_the_tables_once(db_url: str) -> None:
    with ThreadPoolExecutor(4) as pool:  # CREATE TABLE IF NOT EXISTS alone fails when two run at the same moment
        indexes = list(pool.map(lambda n: PgKeywordIndex(db_url, f"c{n % 2}"), range(4)))
    indexes[0].add([Chunk("a", "payroll", "a.md", "a", "", 0)])
    assert [index.ids() for index in indexes] == [{"a"}, set(), {"a"}, set()]
    for index in indexes:
        index.close()


def test_bad_or_unreachable_databases_name_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="RAG_KEYWORD_DB_URL must look like postgresql://"):
        PgKeywordIndex("mysql://u:secret@h/db", "docs")
    assert "secret" not in redacted("postgresql://u:secret@h/db")
    assert connection_url("postgresql+psycopg://u@h:5/db") == "postgresql://u@h:5/db"
    with pytest.raises(StoreUnavailable, match=r"RAG_KEYWORD_DB_URL=postgresql://rag:\*\*\*@127.0.0.1") as caught:
        PgKeywordIndex(f"postgresql://rag:secret@127.0.0.1:{free_port()}/rag", "docs", timeout_s=2)
    assert "secret" not in str(caught.value)
    settings = Settings(data_dir=tmp_path, keyword_db_url="sqlite:///x.db", _env_file=None)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="RAG_KEYWORD_DB_URL"):
        build_store(settings)


def test_a_failed_write_keeps_what_was_stored(pg: PgKeywordIndex) -> None:
    pg.add([Chunk("a", "payroll dates", "a.md", "a", "", 0)])
    with pytest.raises(StoreUnavailable, match=r"RAG_KEYWORD_DB_URL failed: .*(NUL|0x00)"):  # text refuses NUL:
        # the write fails half-way, after the old row was deleted
        pg.add([Chunk("a", "replaced", "a.md", "a", "", 0), Chunk("b\x00", "payroll", "b.md", "b", "", 0)])
    assert [hit.chunk_id for hit in pg.search("payroll", 5)] == ["a"]
    assert pg.revision() == 1


def test_a_re_embed_copies_the_index_to_the_new_generation_and_drops_old_ones(tmp_path: Path, db_url: str) -> None:
    settings = Settings(data_dir=tmp_path, keyword_db_url=db_url, _env_file=None)  # type: ignore[call-arg]
    source = build_keyword_index(settings, "docs")
    source.add(corpus()[:50])
    source.set_access([c.chunk_id for c in corpus()[:10]], HR)
    copy_shared_keyword_index(settings, "docs", "docs--e5")
    copy = build_keyword_index(settings, "docs--e5")
    admits = functools.partial(AccessPolicy().label_allows, ENG_READER)
    for query in ("How do I sort a list?", "软件包"):
        assert_same(scores(source, query), scores(copy, query))
        assert_same(scores(source, query, admits=admits), scores(copy, query, admits=admits))
    drop_keyword_index(settings, "docs")
    assert build_keyword_index(settings, "docs").ids() == set() and len(copy.ids()) == 50


def test_hybrid_retrieval_over_postgres_gives_the_embedded_top_3(tmp_path: Path, db_url: str,
                                                                 embedder: CountingEmbedder) -> None:
    settings = Settings(data_dir=tmp_path / "data", _env_file=None)  # type: ignore[call-arg]
    chunks = [replace(c, text=c.text[:600], access=HR if i % 3 == 0 else c.access)  # a third hidden from eng
              for i, c in enumerate(corpus()[::4])]
    embedded = build_store(settings)
    embedded.upsert(chunks, embedder.embed_documents([c.text for c in chunks]))
    shared = build_store(settings.model_copy(update={"keyword_db_url": db_url}))
    assert shared.sync_keyword() == (len(chunks), 0)  # filled from Chroma, as the next ingest would
    cases = [load_cases(EVAL / name / "questions.jsonl")[:8] for name in ("python-faq", "zh")]
    for principal in (LOCAL_OPERATOR, ENG_READER):
        for question in [case.question for part in cases for case in part]:
            want = Retriever(embedder, embedded).search(question, 3, principal)
            got = Retriever(embedder, shared).search(question, 3, principal)
            assert [h.chunk_id for h in got] == [h.chunk_id for h in want], question
            assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-4)


def test_quick_benchmark_runs_and_prints_its_figures(capsys: pytest.CaptureFixture[str],
                                                    real_embedder: Embedder) -> None:
    bench.main(["--quick", "--json"], embedder=real_embedder)
    out = capsys.readouterr().out
    stopped = re.search(r"stopped PostgreSQL and removed (\S+)", out)
    assert stopped and not Path(stopped.group(1)).exists()  # the server it started is gone
    figures = json.loads(out.strip().splitlines()[-1])
    assert figures["chunks"] == bench.QUICK_CHUNKS
    for side in ("embedded", "postgres"):
        assert figures[side]["p50"] > 0 and figures[side]["p99"] >= figures[side]["p50"]
    assert re.search(r"postgres / embedded: p50 [\d.]+, p99 [\d.]+", out)
