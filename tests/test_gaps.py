"""The knowledge-gap report: questions grouped by meaning with the real MiniLM and a real SQLite database; refused
and escalated answers recorded once through the real serving path (API, streaming, OpenAI route, the chat's
channel); GET /v1/gaps for admins only; `rag gaps` through click."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from fastapi.testclient import TestClient

from ingest import service
from rag.components.feedback import Feedback, FeedbackStore
from rag.components.unanswered import UnansweredStore, load_asked
from rag.config import Settings
from rag.core.access import Principal
from rag.core.gaps import Asked, find_gaps, keywords, parse_since, since_iso, without_repeats
from rag.core.ports import Embedder
from rag.wiring import App
from tests.conftest import CountingEmbedder
from tests.fake_llm import FakeLLMServer
from ui.api.app import create_app
from ui.api.schemas import GapReportOut
from ui.cli_gaps import gaps
from ui.serving.answering import answer_once
from ui.serving.services import Services, build_services

ADMIN_KEY, READER_KEY = "admin-key-0123456789", "reader-key-0123456789"
ADMIN, READER = {"Authorization": f"Bearer {ADMIN_KEY}"}, {"Authorization": f"Bearer {READER_KEY}"}
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
VPN = ["How do I connect to the VPN from home?", "VPN connection keeps dropping", "how to set up the vpn on my laptop",
       "Can't reach the intranet over the VPN", "How do I connect to the VPN from home?",
       "how do i connect to the  VPN from home?"]
PARKING = ["Where can employees park their cars?", "Is there a staff car park?", "How do I get a parking permit?",
           "parking spaces for visitors"]
EXPENSES = ["How do I claim travel expenses?", "Where is the expense reimbursement form?",
            "When are travel expenses paid back?", "expense claim for a hotel stay"]
SINGLETONS = ["Who won the football match last night?", "What is the recipe for banana bread?"]
MakeClient = Callable[..., TestClient]


def stamp(days_ago: float) -> str:
    """A timestamp as the stores write them."""
    return since_iso(NOW - timedelta(days=days_ago)) or ""


def seeded(engine: sa.Engine) -> tuple[UnansweredStore, FeedbackStore]:
    """Three clear topics and two singletons: refusals, escalations and 👎 ratings over the last five days."""
    unanswered, feedback = UnansweredStore(engine), FeedbackStore(engine)
    for n, question in enumerate(VPN + PARKING + SINGLETONS):
        unanswered.record(Asked(question, "refused" if n % 2 else "escalated", user=f"u{n % 3}", channel="api",
                                created_at=stamp(n / 4)))
    for n, question in enumerate(EXPENSES):
        feedback.record(Feedback(f"a{n}", -1, question, "answer", [{"source": "travel.md"}], user="u9",
                                 channel="chat", created_at=stamp(n)))
    feedback.record(Feedback("liked", 1, "How many days of leave?", "25 [1]", created_at=stamp(1)))
    return unanswered, feedback


@pytest.fixture
def engine(tmp_path: Path) -> sa.Engine:
    return sa.create_engine(f"sqlite:///{tmp_path / 'feedback.db'}")


def test_questions_group_into_topics_by_meaning(engine: sa.Engine, real_embedder: Embedder) -> None:
    asked = load_asked(*seeded(engine), None)
    report = find_gaps(asked, real_embedder)
    assert report.total == 16 and report.reasons == {"refused": 6, "escalated": 6, "thumbs_down": 4}
    groups = [(topic.count, {q.casefold() for q in topic.examples}) for topic in report.topics]
    assert [count for count, _ in groups] == [6, 4, 4, 1, 1]  # largest first; the 👍 rating is no gap
    assert {q.casefold() for q in VPN} >= groups[0][1] and len(groups[0][1]) == 3  # a repeat shown once
    assert report.topics[0].label == "How do I connect to the VPN from home?"  # asked three times: the centre
    parking, expenses_ = ({q.casefold() for q in PARKING}, {q.casefold() for q in EXPENSES})
    assert sorted(examples <= parking for _, examples in groups[1:3]) == [False, True]
    assert sorted(examples <= expenses_ for _, examples in groups[1:3]) == [False, True]
    expenses = next(topic for topic in report.topics if topic.reasons == {"thumbs_down": 4})
    assert expenses.sources == ("travel.md",) and expenses.keywords == ("expense", "claim", "travel")
    assert (expenses.first_seen, expenses.last_seen) == (stamp(3), stamp(0))
    assert sorted(report.topics[3].examples + report.topics[4].examples) == sorted(SINGLETONS)
    assert find_gaps(asked, real_embedder) == report  # deterministic
    shown = find_gaps(asked, real_embedder, min_count=2)
    assert [topic.count for topic in shown.topics] == [6, 4, 4] and shown.hidden == 2


def test_since_keeps_only_newer_questions(engine: sa.Engine, real_embedder: Embedder) -> None:
    unanswered, feedback = seeded(engine)
    recent = load_asked(unanswered, feedback, stamp(1))
    assert {a.created_at >= stamp(1) for a in recent} == {True} and 0 < len(recent) < 16
    assert find_gaps(recent, real_embedder, stamp(1)).total == len(recent)
    assert load_asked(None, feedback, None) == [a for a in load_asked(unanswered, feedback, None)
                                                if a.reason == "thumbs_down"]
    assert parse_since("7d", NOW) == NOW - timedelta(days=7) and parse_since("12h", NOW) == NOW - timedelta(hours=12)
    assert parse_since("2026-11-01") == datetime(2026, 11, 1, tzinfo=UTC) and parse_since("all") is None
    for bad in ("yesterday", "7x", "-3d", ""):
        with pytest.raises(ValueError, match="not an age like 7d"):
            parse_since(bad)


def test_a_rating_of_a_recorded_refusal_counts_once() -> None:
    refused = Asked("Where is the VPN guide?", "refused", user="ann", created_at=stamp(1))
    rated = Asked("where is the vpn guide?", "thumbs_down", user="ann", created_at=stamp(1 - 1 / 48))
    other = Asked("Where is the VPN guide?", "thumbs_down", user="bob", created_at=stamp(1 - 1 / 48))
    later = Asked("Where is the VPN guide?", "thumbs_down", user="ann", created_at=stamp(0))
    assert without_repeats([refused], [rated, other, later]) == [refused, other, later]


def test_keywords_use_the_search_tokeniser() -> None:
    # "expenses" and "expense" are one search token, shown as most often written; a word of one question is no
    # keyword of several.
    assert keywords(["How do I claim travel expenses?", "travel expense form", "Expenses paid back"]) == (
        "expenses", "travel")
    assert "报销" in keywords(["差旅费怎么报销？", "报销需要什么材料？"])


def test_report_json_matches_the_api_schema(engine: sa.Engine, real_embedder: Embedder) -> None:
    body = find_gaps(load_asked(*seeded(engine), stamp(2)), real_embedder, stamp(2)).as_json()
    assert set(body) == {"since", "total", "reasons", "hidden_topics", "topics"} and body["since"] == stamp(2)
    topic = body["topics"][0]  # type: ignore[index]
    assert set(topic) == {"label", "count", "share", "reasons", "examples", "keywords", "sources", "first_seen",
                          "last_seen"}
    assert GapReportOut.model_validate(body).model_dump() == body
    json.dumps(body)


@pytest.fixture
def make_client(settings: Settings, embedder: CountingEmbedder) -> Iterator[MakeClient]:
    clients: list[TestClient] = []

    def make(reply: str = "Staff get 25 days of annual leave [1].", **changes: object) -> TestClient:
        """The API over the real wiring with a fake LLM; refusal_threshold 0.2 as in test_api."""
        local = settings.model_copy(update={"refusal_threshold": 0.2, "api_keys": f"{ADMIN_KEY}:*:admin,{READER_KEY}",
                                            **changes})
        local.documents_dir.mkdir(parents=True, exist_ok=True)
        (local.documents_dir / "leave.md").write_text("# Leave\nStaff get 25 days of annual leave per year.\n")
        service.sync([local.documents_dir], local, embedder=embedder)
        services = build_services(App(local, embedder=embedder, llm=FakeLLMServer(lambda _: reply).llm()))
        client = TestClient(create_app(local, services), headers=ADMIN)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def stored(client: TestClient) -> list[Asked]:
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    return UnansweredStore(sa.create_engine(services.settings.feedback_database_url)).since()


def test_each_refused_or_escalated_answer_is_recorded_once(make_client: MakeClient) -> None:
    client = make_client()
    assert client.post("/v1/ask", json={"question": "How many days of annual leave?"}).json()["escalate"] is False
    assert stored(client) == []  # answered: nothing kept
    off_topic = {"question": "What is the capital of Peru?"}
    refused = client.post("/v1/ask", json=off_topic, headers=READER).json()
    assert (refused["answerable"], refused["escalate"]) == (False, True)
    rows = stored(client)
    assert [(a.question, a.reason, a.channel, a.user) for a in rows] == [
        ("What is the capital of Peru?", "refused", "api", "key 2")]
    with client.stream("POST", "/v1/ask", json=off_topic | {"stream": True}) as response:
        assert "event: done" in response.read().decode()
    chat = {"messages": [{"role": "user", "content": "What is the capital of Peru?"}]}
    assert client.post("/v1/chat/completions", json=chat).json()["answerable"] is False
    with client.stream("POST", "/v1/chat/completions", json=chat | {"stream": True}) as response:
        assert list(response.iter_lines())[-2] == "data: [DONE]"
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    answer = asyncio.run(answer_once(services, Principal("ann"), "What is the capital of Peru?", [], None, "chat"))
    assert not answer.answerable
    assert [(a.reason, a.channel, a.user) for a in stored(client)] == [("refused", "api", "key 2")] + [
        ("refused", "api", "key 1")] * 3 + [("refused", "chat", "ann")]


def test_an_escalated_answer_names_its_best_document(make_client: MakeClient) -> None:
    client = make_client(reply="Twenty-five days, plus five in March.")  # withheld, quoted instead: escalated
    assert client.post("/v1/ask", json={"question": "Annual leave days?"}).json()["escalate"] is True
    assert [(a.reason, a.source) for a in stored(client)] == [("escalated", "leave.md")]


def test_recording_off_keeps_nothing(make_client: MakeClient) -> None:
    client = make_client(record_unanswered=False)
    assert client.post("/v1/ask", json={"question": "What is the capital of Peru?"}).json()["answerable"] is False
    assert stored(client) == []


def test_gaps_route_is_for_admins(make_client: MakeClient) -> None:
    client = make_client()
    for question in ("What is the capital of Peru?", "Which city is the capital of Peru?", "Peru's capital?"):
        client.post("/v1/ask", json={"question": question})
    denied = client.get("/v1/gaps", headers=READER)
    assert denied.status_code == 403 and denied.json()["error"]["type"] == "forbidden"
    report = client.get("/v1/gaps", params={"since": "1d"})
    assert report.status_code == 200, report.text
    body = report.json()
    assert body["total"] == 3 and [topic["count"] for topic in body["topics"]] == [3]
    assert body["topics"][0]["reasons"] == {"refused": 3} and len(body["topics"][0]["examples"]) == 3
    bad = client.get("/v1/gaps", params={"since": "last week"})
    assert bad.status_code == 422 and "not an age like 7d" in bad.json()["error"]["message"]
    assert client.get("/v1/gaps", params={"since": "2099-01-01"}).json()["topics"] == []


def test_rag_gaps_prints_topics_and_json(settings: Settings, cli_env: dict[str, str]) -> None:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    unanswered, feedback = seeded(sa.create_engine(settings.feedback_database_url))
    runner = CliRunner()
    table = runner.invoke(gaps, ["--since", "all", "--min-count", "2"], env=cli_env | {"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "What the documents fail to answer" in table.output and "connect to the VPN from home" in table.output
    assert "16 questions since the start: 6 refused, 6 escalated, 4 thumbs-down; 2 smaller topics" in table.output
    as_json = runner.invoke(gaps, ["--since", "all", "--json"], env=cli_env)
    assert [topic["count"] for topic in json.loads(as_json.output)["topics"]] == [6, 4, 4, 1, 1]
    recent = json.loads(runner.invoke(gaps, ["--since", stamp(1), "--json"], env=cli_env).output)
    assert recent["since"] == stamp(1) and recent["total"] == len(load_asked(unanswered, feedback, stamp(1)))
    assert json.loads(runner.invoke(gaps, ["--since", "2099-01-01", "--json"], env=cli_env).output)["total"] == 0
    bad = runner.invoke(gaps, ["--since", "yesterday"], env=cli_env)
    assert bad.exit_code == 2 and "Invalid value for '--since'" in bad.output and "7d" in bad.output


def test_an_admin_of_some_groups_sees_only_questions_near_their_documents(make_client: MakeClient) -> None:
    hr_admin = "hr-admin-key-0123456789"
    client = make_client(api_keys=f"{ADMIN_KEY}:*:admin,{READER_KEY},{hr_admin}:hr:admin")
    leave = next(d for d in client.get("/v1/documents").json() if d["source"] == "leave.md")
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    assert services.unanswered is not None
    for question, source, doc_id, groups in (("How long is parental leave?", "leave.md", leave["id"], "|hr|"),
                                             ("What are the board's salaries?", "board/pay.md", "elsewhere", ""),
                                             ("Where is the canteen?", "", "", ""),
                                             ("Is leave cut for the finance layoffs?", "leave.md", leave["id"],
                                              "|finance|"),  # asked by finance: not for hr's eyes
                                             ("Leave for the merger team?", "leave.md", leave["id"], None)):
        services.unanswered.record(Asked(question, "escalated", source=source, doc_id=doc_id, groups=groups))
    seen = client.get("/v1/gaps", params={"since": "all"}, headers={"Authorization": f"Bearer {hr_admin}"}).json()
    # A question that matched no document tells of none: it stays. One whose asker's groups were not recorded (a row
    # from before they were) is for `*` admins only.
    assert {e for topic in seen["topics"] for e in topic["examples"]} == {"How long is parental leave?",
                                                                          "Where is the canteen?"}
    assert client.get("/v1/gaps", params={"since": "all"}).json()["total"] == 5  # the operator's key sees all


def test_the_asker_s_groups_are_recorded_and_old_questions_expire(make_client: MakeClient) -> None:
    client = make_client()
    client.post("/v1/ask", json={"question": "What is the capital of Peru?"}, headers=READER)
    client.post("/v1/ask", json={"question": "What is the capital of Peru?"})
    assert [(a.user, a.groups) for a in stored(client)] == [("key 2", ""), ("key 1", "*")]
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    assert services.unanswered is not None
    services.unanswered.record(Asked("Ancient?", "refused", created_at="2000-01-01T00:00:00+00:00"))
    services.unanswered.record(Asked("Recent?", "refused", groups=""))
    assert "Ancient?" not in [a.question for a in stored(client)] and len(stored(client)) == 3


def test_a_table_from_before_the_asker_s_groups_gets_the_column(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'old.db'}")
    with engine.begin() as connection:
        connection.execute(sa.text('CREATE TABLE rag_unanswered (id INTEGER PRIMARY KEY, question TEXT NOT NULL, '
                                   'reason VARCHAR(20) NOT NULL, "user" VARCHAR(200) NOT NULL, channel VARCHAR(20) '
                                   'NOT NULL, source TEXT NOT NULL, doc_id VARCHAR(200) NOT NULL, '
                                   'created_at VARCHAR(40) NOT NULL)'))
        connection.execute(sa.text("INSERT INTO rag_unanswered VALUES (1, 'Old?', 'refused', '', 'api', '', '', "
                                   f"'{(datetime.now(UTC) - timedelta(minutes=1)).isoformat(timespec='seconds')}')"))
    store = UnansweredStore(engine)
    store.record(Asked("New?", "refused", groups="|hr|"))
    assert [(a.question, a.groups) for a in store.since()] == [("Old?", None), ("New?", "|hr|")]
