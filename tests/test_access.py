"""Who may see what, through every exit: a canary fact in an `hr` document must reach no one outside `hr` — by
`rag search --as`, `/v1/ask` (JSON and SSE), `/v1/chat/completions` (plain and stream) and `/v1/documents` — and
must reach `hr`. Real MiniLM and real Chroma (embedded and server); the LLM here is a fake that always states the
canary, so only the excerpts decide what is shown. The same suite against real vLLM is in test_access_live.py."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ingest import service
from rag.config import Settings
from rag.core.access import ANONYMOUS, LOCAL_OPERATOR, DocAccess, Principal
from rag.core.retrieve import overfetch_for
from rag.wiring import App, build_retriever, build_store
from tests.conftest import STORE_MODES, CountingEmbedder, run_in_process, start_chroma
from tests.fake_llm import FakeLLMServer
from ui.api.app import create_app
from ui.serving.services import build_services

CANARY = "7,340,000"
HR_TEXT = ("# Retention bonus 2027\nThe retention bonus pool for 2027 is 7,340,000 kroner, paid out in two "
           "instalments in March and September.\n")
HR_TEXT_ZH = "# 2027年留任奖金\n2027年的留任奖金总额为7,340,000克朗，分三月和九月两次发放。\n"
QUESTIONS = ("What is the retention bonus pool for 2027?", "How much money is set aside for keeping staff next year?",
             "2027年的留任奖金总额是多少？")
LEAKS = (CANARY, "7340000", "retention", "bonus", "留任")
KEYS = {"eng": "eng-key-0123456789abcdef", "hr": "hr-key-0123456789abcdef", "admin": "admin-key-0123456789abcdef"}
ENG, HR = Principal("eng", frozenset({"eng"})), Principal("hr", frozenset({"hr"}))
Write = Callable[[str, str | bytes], Path]


def write_corpus(folder: Path) -> None:
    """Three public documents, one of `eng`, and the canary in English and Chinese for `hr` (sidecars)."""

    def write(name: str, text: str) -> None:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")

    write("public/hours.md", "# Office hours\nThe office opens at 8:00 and closes at 18:00 on weekdays.\n")
    write("public/kitchen.md", "# Kitchen\nPlease empty the dishwasher when it has finished its cycle.\n")
    write("public/parking.md", "# Parking\nStaff park on level two of the garage; visitors on level one.\n")
    write("eng/deploys.md", "---\ngroups: [eng]\n---\n# Deploys\nProduction deploys happen on Tuesdays after the "
                            "change review.\n")
    write("hr/bonus.md", HR_TEXT)
    write("hr/bonus.md.meta.yaml", "groups: [hr]\n")
    write("hr/bonus-zh.md", HR_TEXT_ZH)
    write("hr/bonus-zh.md.meta.yaml", "groups: hr\n")


def leaks(text: str) -> list[str]:
    """The canary's words found in a response."""
    return [word for word in LEAKS if word in text.lower()]


@pytest.fixture
def client(docs: Path, write: Write, settings: Settings, embedder: CountingEmbedder) -> Iterator[TestClient]:
    write_corpus(docs)
    local = settings.model_copy(update={"api_keys": f"{KEYS['eng']}:eng,{KEYS['hr']}:hr,{KEYS['admin']}:eng:admin",
                                        "refusal_threshold": 0.0})
    service.sync([docs], local, embedder=embedder)
    llm = FakeLLMServer(lambda _: "The retention bonus pool for 2027 is 7,340,000 kroner [1].").llm()
    with TestClient(create_app(local, build_services(App(local, embedder=embedder, llm=llm)))) as test_client:
        yield test_client


def _every_exit(client: TestClient, key: str, question: str) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {key}"}
    chat = {"messages": [{"role": "user", "content": question}]}
    out = {"ask": client.post("/v1/ask", json={"question": question}, headers=headers).text,
           "completions": client.post("/v1/chat/completions", json=chat, headers=headers).text,
           "documents": client.get("/v1/documents", headers=headers).text}
    with client.stream("POST", "/v1/ask", json={"question": question, "stream": True}, headers=headers) as sse:
        out["ask_sse"] = "".join(sse.iter_text())
    with client.stream("POST", "/v1/chat/completions", json=chat | {"stream": True}, headers=headers) as stream:
        out["completions_stream"] = "".join(stream.iter_text())
    return out


@STORE_MODES
@pytest.mark.parametrize("question", QUESTIONS)
def test_the_canary_reaches_no_one_outside_hr(client: TestClient, question: str) -> None:
    for role in ("eng", "admin"):
        for route, body in _every_exit(client, KEYS[role], question).items():
            assert not leaks(body), f"{role} got {leaks(body)} from {route}: {body[:400]}"


@STORE_MODES
def test_the_canary_reaches_hr(client: TestClient) -> None:
    seen = _every_exit(client, KEYS["hr"], QUESTIONS[0])
    assert CANARY in json.loads(seen["ask"])["answer"]
    assert CANARY in seen["ask_sse"] and CANARY in seen["completions_stream"]
    assert {doc["source"] for doc in json.loads(seen["documents"])} >= {"hr/bonus.md", "hr/bonus-zh.md"}


def test_cli_search_as_groups(docs: Path, write: Write, settings: Settings, cli_env: dict[str, str],
                              embedder: CountingEmbedder) -> None:
    write_corpus(docs)
    service.sync([docs], settings, embedder=embedder)

    def search(*extra: str) -> str:
        done = run_in_process("rag", ["search", QUESTIONS[0], "--json", *extra], cli_env)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert not leaks(search("--as", "eng"))
    assert CANARY in search("--as", "hr|finance")  # without --as the local operator sees all (test_store_contract)


@STORE_MODES
def test_filters_work_inside_retrieval_so_top_k_stays_full(docs: Path, write: Write, settings: Settings,
                                                            embedder: CountingEmbedder) -> None:
    write_corpus(docs)
    service.sync([docs], settings, embedder=embedder)
    for mode in ("hybrid", "dense", "keyword"):
        retriever = build_retriever(settings.model_copy(update={"retrieval_mode": mode}), embedder)
        hits = retriever.search(QUESTIONS[0], 3, ENG)
        assert not leaks(" ".join(hit.text + hit.source for hit in hits)), mode
        assert len(hits) == 3 or mode == "keyword", mode  # BM25 alone returns only chunks sharing a word
        assert len(retriever.search("staff office deploys pool 2027 bonus", 3, ENG)) == 3, mode
        assert retriever.search(QUESTIONS[0], 1, HR)[0].source == "hr/bonus.md", mode
    private = build_retriever(settings.model_copy(update={"ungrouped": "private"}), embedder)
    assert {hit.source for hit in private.search("office hours deploys", 5, ENG)} == {"eng/deploys.md"}
    assert private.search("office hours", 3, ANONYMOUS) == []


@STORE_MODES
def test_sidecar_changes_relabel_without_embedding(docs: Path, write: Write, settings: Settings,
                                                   embedder: CountingEmbedder) -> None:
    write_corpus(docs)
    service.sync([docs], settings, embedder=embedder)
    embedded = embedder.embedded
    write("hr/bonus.md.meta.yaml", "groups: [eng]\n")
    report = service.sync([docs], settings, embedder=embedder)[1]
    assert (report.regrouped, report.updated, embedder.embedded) == (1, 0, embedded)
    for mode in ("dense", "keyword"):
        retriever = build_retriever(settings.model_copy(update={"retrieval_mode": mode}), embedder)
        assert CANARY in " ".join(hit.text for hit in retriever.search(QUESTIONS[0], 3, ENG)), mode
        assert all(hit.source != "hr/bonus.md" for hit in retriever.search(QUESTIONS[0], 3, HR)), mode


def test_unreadable_groups_lock_the_document(docs: Path, write: Write, settings: Settings,
                                             embedder: CountingEmbedder) -> None:
    write_corpus(docs)
    write("hr/bonus.md.meta.yaml", "groups: [hr\n")  # broken YAML: the document must not fall open
    report = service.sync([docs], settings, embedder=embedder)[1]
    assert report.locked == ["hr/bonus.md"] and not report.failed
    retriever = build_retriever(settings, embedder)
    assert all(hit.source != "hr/bonus.md" for hit in retriever.search(QUESTIONS[0], 3, HR))
    assert retriever.search(QUESTIONS[0], 1, LOCAL_OPERATOR)[0].source == "hr/bonus.md"
    write("hr/bonus.md.meta.yaml", "groups: [hr]\n")
    assert service.sync([docs], settings, embedder=embedder)[1].regrouped == 1
    assert retriever.search(QUESTIONS[0], 1, HR)[0].source == "hr/bonus.md"


def test_an_index_from_before_access_labels_is_locked_until_synced(docs: Path, write: Write, settings: Settings,
                                                                   embedder: CountingEmbedder) -> None:
    write_corpus(docs)
    service.sync([docs], settings, embedder=embedder)
    store = build_store(settings)
    ids = sorted(store.all_ids())
    store.dense._collection.update(ids=ids, metadatas=[{"access": "", "groups": ""}] * len(ids))  # the old shape
    with sqlite3.connect(settings.index_dir / "keyword" / f"{settings.collection}.sqlite3") as db:
        db.execute("UPDATE tokens SET access = NULL")
        db.execute("UPDATE revision SET value = value + 1")
    with sqlite3.connect(settings.index_dir / "manifest.sqlite3") as db:
        db.execute("UPDATE documents SET access = NULL")
    retriever = build_retriever(settings, embedder)
    assert retriever.search("office hours", 3, ENG) == []  # fail closed: unlabelled chunks are seen by no reader
    embedded = embedder.embedded
    report = service.sync([docs], settings, embedder=embedder)[1]
    assert (report.regrouped, embedder.embedded) == (6, embedded)
    assert retriever.search("office hours", 1, ENG)[0].source == "public/hours.md"
    assert not leaks(" ".join(hit.text for hit in retriever.search(QUESTIONS[0], 3, ENG)))


def test_chroma_failures_are_503_store_unavailable(tmp_path: Path, settings: Settings,
                                                   embedder: CountingEmbedder) -> None:
    chroma = start_chroma(tmp_path / "chroma")
    local = settings.model_copy(update={"chroma_url": chroma.url, "api_keys": f"{KEYS['admin']}:*:admin"})
    docs = local.documents_dir
    docs.mkdir(parents=True)
    (docs / "hours.md").write_text("# Office hours\nThe office opens at 8:00.\n")
    service.sync([docs], local, embedder=embedder)
    services = build_services(App(local, embedder=embedder, llm=FakeLLMServer(lambda _: "x").llm()))
    chroma.process.kill()
    chroma.process.wait(timeout=30)
    headers = {"Authorization": f"Bearer {KEYS['admin']}"}
    with TestClient(create_app(local, services), headers=headers) as test_client:
        for response in (test_client.post("/v1/ask", json={"question": "When does the office open?"}),
                         test_client.post("/v1/sync")):
            assert response.status_code == 503, response.text
            assert response.json()["error"]["type"] == "store_unavailable"
        assert test_client.get("/readyz").status_code == 503


def test_document_access_values() -> None:
    assert DocAccess.from_label(DocAccess(("finance", "hr")).label) == DocAccess(("finance", "hr"))
    assert DocAccess.from_label(None).locked and DocAccess.from_label("|bad name|").locked
    assert DocAccess(("hr",)).metadata(previous=("eng", "hr")) == {"access": "grouped", "groups": "|hr|",
                                                                  "group:eng": False, "group:hr": True}


@STORE_MODES
def test_the_unfiltered_look_ahead_gives_the_filtered_query_s_answer(docs: Path, settings: Settings,
                                                                     embedder: CountingEmbedder) -> None:
    write_corpus(docs)
    service.sync([docs], settings, embedder=embedder)
    index, policy = build_store(settings), settings.access_policy
    assert index.keyword is not None
    query = embedder.embed_query("When do deploys happen and where do staff park?")
    visible = policy.visible_to(ENG)
    assert visible is not None
    _, likely = index.keyword.visibility(visible.admits)
    filtered = [hit.chunk_id for hit in index.dense.search(query, 3, visible)]
    assert [hit.chunk_id for hit in index.dense.search(query, 3, visible, 6, likely)] == filtered
    assert len(index.dense.search(query, 4, visible, 5, likely)) == 4  # too few: the filtered query
    assert not leaks(" ".join(h.text for h in index.dense.search(query, 4, visible, 6, lambda _: True)))
    assert (overfetch_for(20, 0.19), overfetch_for(20, 1.0), overfetch_for(20, 0.005)) == (211, 200, 0)


@STORE_MODES
def test_scores_a_reader_gets_do_not_tell_whether_a_word_exists_in_hidden_documents(
        docs: Path, write: Write, settings: Settings, embedder: CountingEmbedder) -> None:
    """The BM25 oracle through `/v1/ask`: eng asks about a word that only an hr document may hold; the public
    source's score must be the same whether that document holds the word or not."""
    write_corpus(docs)
    local = settings.model_copy(update={"api_keys": f"{KEYS['eng']}:eng", "refusal_threshold": 0.0})
    llm = FakeLLMServer(lambda _: "The office opens at 8:00 [1].").llm()
    question = {"question": "When does the office open for the zyzzyva project?"}

    def scores() -> dict[str, float]:
        service.sync([docs], local, embedder=embedder)
        with TestClient(create_app(local, build_services(App(local, embedder=embedder, llm=llm)))) as client:
            body = client.post("/v1/ask", json=question, headers={"Authorization": f"Bearer {KEYS['eng']}"}).json()
        return {source["source"]: source["score"] for source in body["sources"]}

    write("hr/plans.md", "# Plans\nThe restructuring plan is called zyzzyva; zyzzyva starts in May.\n")
    write("hr/plans.md.meta.yaml", "groups: [hr]\n")
    present = scores()
    write("hr/plans.md", "# Plans\nThe restructuring plan has no name yet; it starts in May.\n")
    absent = scores()
    assert "public/hours.md" in present and not any(source.startswith("hr/") for source in present)
    assert present == absent


def test_an_admin_of_some_groups_publishes_to_those_groups_only(client: TestClient) -> None:
    """The `eng` admin's plain-text upload (no labels of its own) is for eng, in eng's folder, and stays one
    document through a re-sync of the folder; a file labelled with a group it lacks is refused unstored."""
    admin, hr = ({"Authorization": f"Bearer {KEYS[name]}"} for name in ("admin", "hr"))
    text = b"The quokka build server restarts every night at 02:00.\n"
    done = client.post("/v1/documents", files={"file": ("build.txt", text)}, headers=admin)
    assert done.status_code == 201, done.text
    assert (done.json()["source"], done.json()["groups"]) == ("eng/build.txt", ["eng"])
    found = client.post("/v1/ask", json={"question": "When does the quokka build server restart?"}, headers=hr)
    assert "eng/build.txt" not in found.text
    planted = client.post("/v1/documents", files={"file": ("plant.md", b"---\ngroups: [hr]\n---\n# P\nPlanted.\n")},
                          headers=admin)
    assert planted.status_code == 403 and "groups you are not in (hr)" in planted.text
    assert client.post("/v1/sync", headers=admin).status_code == 200
    listed = [doc["source"] for doc in client.get("/v1/documents", headers=admin).json()]
    assert listed.count("eng/build.txt") == 1 and "eng/plant.md" not in listed
