"""The HTTP API through FastAPI's TestClient over the real wiring (MiniLM, embedded Chroma), with a fake LLM
under the openai SDK; the live-server tests against real vLLM are in test_api_live.py."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import time
from collections.abc import Callable, Iterator

import pytest
from fastapi.testclient import TestClient

from ingest import service
from rag.config import Settings
from rag.core.errors import Busy, ConfigError
from rag.core.prompt import REFUSAL
from rag.wiring import App, build_llm
from tests.conftest import CountingEmbedder
from tests.docs_factory import pdf_bytes
from tests.fake_llm import FakeLLMServer
from ui.api.app import create_app
from ui.serving.principals import parse_api_keys
from ui.serving.services import Gate, build_services

MakeClient = Callable[..., TestClient]
ADMIN_KEY, READER_KEY = "admin-key-0123456789", "reader-key-0123456789"
ADMIN, READER = {"Authorization": f"Bearer {ADMIN_KEY}"}, {"Authorization": f"Bearer {READER_KEY}"}


@pytest.fixture
def make_client(settings: Settings, embedder: CountingEmbedder) -> Iterator[MakeClient]:
    clients: list[TestClient] = []

    def make(reply: str = "Staff get 25 days of annual leave [1].", llm_url: str | None = None, **changes: object
             ) -> TestClient:
        """A client over the real wiring (fakes go in through build_services); it sends the admin key."""
        keys = f"{ADMIN_KEY}:*:admin,{READER_KEY}"
        local = settings.model_copy(update={"refusal_threshold": 0.2, "api_keys": keys, **changes})
        local.documents_dir.mkdir(parents=True, exist_ok=True)
        (local.documents_dir / "leave.md").write_text("# Leave\nStaff get 25 days of annual leave per year.\n")
        (local.documents_dir / "vpn.md").write_text("# VPN\nInstall WireGuard to reach the intranet.\n")
        service.sync([local.documents_dir], local, embedder=embedder)
        llm = build_llm(local.model_copy(update={"llm_base_url": llm_url})) if llm_url else \
            FakeLLMServer(lambda _: reply).llm()
        client = TestClient(create_app(local, build_services(App(local, embedder=embedder, llm=llm))), headers=ADMIN)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def test_ask_returns_answer_sources_confidence_and_escalate(make_client: MakeClient) -> None:
    response = make_client().post("/v1/ask", json={"question": "How many days of annual leave do staff get?"})
    assert response.status_code == 200
    body = response.json()
    assert body["answer"] == "Staff get 25 days of annual leave [1]."
    assert (body["answerable"], body["cited"]) == (True, True)
    assert body["sources"][0]["source"] == "leave.md" and body["sources"][0]["cited"] is True
    assert "25 days" in body["sources"][0]["snippet"]
    assert 0.5 < body["confidence"] <= 1 and body["escalate"] is False
    assert (body["mode"], body["fallback"], body["grounded"], body["withheld"]) == ("generated", None, 1.0, [])
    assert body["sentences"] == [{"text": "Staff get 25 days of annual leave.", "supported": True, "sources": [1]}]
    assert set(body["timings"]) == {"retrieve_ms", "first_token_ms", "draft_first_token_ms", "total_ms"}


def test_refusal_and_uncited_answers_escalate(make_client: MakeClient) -> None:
    refused = make_client(refusal_threshold=0.99).post("/v1/ask", json={"question": "What is the capital of Peru?"})
    assert refused.json()["answer"] == REFUSAL
    assert (refused.json()["answerable"], refused.json()["escalate"]) == (False, True)
    # Not what the excerpt says: the draft is withheld and the excerpt quoted instead, which escalates too.
    # ("five" is a number word: the reason is "number".)
    unsupported = make_client(reply="Twenty-five days, plus five in March.").post(
        "/v1/ask", json={"question": "Annual leave days?"}).json()
    assert (unsupported["mode"], unsupported["fallback"], unsupported["escalate"]) == ("extracted", "ungrounded", True)
    assert unsupported["grounded"] == 0.0 and unsupported["withheld"] == [{"reason": "number"}]
    assert "March" not in json.dumps(unsupported)
    assert unsupported["answer"] == "From the documents (quoted):\n“Staff get 25 days of annual leave per year.” [1]"


def test_ask_streams_server_sent_events(make_client: MakeClient) -> None:
    with make_client().stream("POST", "/v1/ask", json={"question": "Annual leave?", "stream": True}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line.removeprefix("event: ") for line in response.iter_lines() if line.startswith("event: ")]
    assert events[0] == "sources" and events[-1] == "done"
    assert events.count("token") == 1  # one checked sentence, sent whole


def test_openai_compatible_chat_and_models(make_client: MakeClient) -> None:
    client = make_client()
    body = {"model": "anything", "messages": [
        {"role": "system", "content": "ignored: the assistant has its own"},
        {"role": "user", "content": "Tell me about leave."}, {"role": "assistant", "content": "Sure."},
        {"role": "user", "content": "How many days?"}]}
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    out = response.json()
    assert out["object"] == "chat.completion"
    assert out["choices"][0]["message"] == {"role": "assistant", "content": "Staff get 25 days of annual leave [1]."}
    assert out["sources"][0]["n"] == 1 and out["usage"]["total_tokens"] > 0
    with client.stream("POST", "/v1/chat/completions", json=body | {"stream": True}) as stream:
        lines = [line for line in stream.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]).startswith("Staff")
    assert chunks[-1]["sources"][0]["source"] == "leave.md"
    assert client.get("/v1/models").json()["data"][0]["id"] == "qwen2.5-coder-0.5b-instruct"
    bad = client.post("/v1/chat/completions", json={"messages": [{"role": "assistant", "content": "hi"}]})
    assert bad.status_code == 422 and bad.json()["error"]["type"] == "invalid_request"


def test_api_keys(make_client: MakeClient) -> None:
    one, two = "k-one-0123456789abc", "k-two-0123456789abc"
    client = make_client(api_keys=f"{one}, {two}:hr|finance")
    question = {"question": "Annual leave?"}
    missing = client.post("/v1/ask", json=question, headers={"Authorization": ""})
    assert missing.status_code == 401 and missing.json()["error"]["type"] == "unauthorized"
    wrong = client.post("/v1/ask", json=question, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 403 and wrong.json() == {"error": {"type": "forbidden", "message": "invalid API key"}}
    for key in (one, two):
        assert client.post("/v1/ask", json=question, headers={"Authorization": f"Bearer {key}"}).status_code == 200
    assert client.get("/v1/documents", headers={"Authorization": "Bearer nope"}).status_code == 403
    assert client.get("/healthz").status_code == 200
    keys = parse_api_keys(f"{one}, {two}:hr|finance, {'k' * 16}:*:admin")
    assert keys[1].groups == ("finance", "hr") and keys[1].principal.role == "reader"
    assert keys[2].principal.all_groups and keys[2].principal.is_admin


KEY16 = "k" * 16


@pytest.mark.parametrize(("spec", "problem"), [("short", "at least 16"), (f"{KEY16}:hr:boss", "reader or admin"),
                                              (f"{KEY16}:h r", "invalid group"), (f"{KEY16},{KEY16}", "twice")])
def test_bad_key_entries_are_config_errors(spec: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse_api_keys(spec)


def test_readers_may_not_change_the_index_or_read_feedback(make_client: MakeClient, settings: Settings) -> None:
    client = make_client()
    doc = {"file": ("new.md", b"# New\nA new policy.", "text/markdown")}
    leave_id = next(d["id"] for d in client.get("/v1/documents").json() if d["source"] == "leave.md")
    for method, path, extra in (("POST", "/v1/documents", {"files": doc}), ("DELETE", f"/v1/documents/{leave_id}", {}),
                                ("POST", "/v1/sync", {}), ("GET", "/v1/feedback", {})):
        denied = client.request(method, path, headers=READER, **extra)  # type: ignore[arg-type]
        assert denied.status_code == 403 and denied.json()["error"]["type"] == "forbidden", (path, denied.text)
    assert not (settings.documents_dir / "new.md").exists()
    assert client.post("/v1/documents", files=doc).status_code == 201
    assert client.post("/v1/sync").status_code == 200 and client.get("/v1/feedback").json() == []
    assert client.delete(f"/v1/documents/{leave_id}").status_code == 200


def test_without_keys_callers_read_public_documents_and_change_nothing(make_client: MakeClient) -> None:
    client = make_client(api_keys="")
    assert {d["source"] for d in client.get("/v1/documents").json()} == {"leave.md", "vpn.md"}
    upload = client.post("/v1/documents", files={"file": ("x.md", b"# X\nx", "text/markdown")})
    assert upload.status_code == 403 and "admin" in upload.json()["error"]["message"]


def test_upload_replaces_an_existing_document_only_when_asked(make_client: MakeClient, settings: Settings) -> None:
    client = make_client()
    newer = {"file": ("leave.md", b"# Leave\nStaff get 30 days of annual leave per year.\n", "text/markdown")}
    refused = client.post("/v1/documents", files=newer)
    assert refused.status_code == 409 and refused.json()["error"]["type"] == "document_exists"
    assert "25 days" in (settings.documents_dir / "leave.md").read_text()
    replaced = client.post("/v1/documents?replace=true", files=newer)
    assert replaced.status_code == 201 and replaced.json()["status"] == "updated"
    assert "30 days" in (settings.documents_dir / "leave.md").read_text()


def test_upload_list_ask_delete_round_trip(make_client: MakeClient, settings: Settings) -> None:
    client = make_client()
    pdf = pdf_bytes(["Printer manual.", "To replace the toner cartridge, open the front door."])
    created = client.post("/v1/documents", files={"file": ("printer.pdf", pdf, "application/pdf")})
    assert created.status_code == 201, created.text
    doc = created.json()
    assert (doc["source"], doc["chunks"], doc["status"]) == ("printer.pdf", 2, "added")
    assert {d["source"] for d in client.get("/v1/documents").json()} == {"leave.md", "vpn.md", "printer.pdf"}
    answer = client.post("/v1/ask", json={"question": "How do I replace the toner cartridge?"}).json()
    assert (answer["sources"][0]["source"], answer["sources"][0]["page"]) == ("printer.pdf", 2)
    assert client.delete(f"/v1/documents/{doc['id']}").json()["status"] == "deleted"
    assert not (settings.documents_dir / "printer.pdf").exists()
    assert client.delete(f"/v1/documents/{doc['id']}").status_code == 404


def test_delete_on_a_read_only_folder_changes_nothing(make_client: MakeClient, settings: Settings,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    client = make_client()
    leave = next(d for d in client.get("/v1/documents").json() if d["source"] == "leave.md")

    def read_only(source: object, target: object) -> None:  # what a read-only mount answers (tests run as root)
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(os, "replace", read_only)
    refused = client.delete(f"/v1/documents/{leave['id']}")
    assert refused.status_code == 409 and refused.json()["error"]["type"] == "folder_read_only"
    assert "leave.md" in refused.json()["error"]["message"] and "unchanged" in refused.json()["error"]["message"]
    assert (settings.documents_dir / "leave.md").exists()
    assert leave in client.get("/v1/documents").json()
    answer = client.post("/v1/ask", json={"question": "How many days of annual leave do staff get?"}).json()
    assert answer["sources"][0]["source"] == "leave.md"


def test_upload_limits_and_sanitized_names(make_client: MakeClient, settings: Settings) -> None:
    client = make_client(max_upload_mb=0.01)
    too_big = client.post("/v1/documents", files={"file": ("big.txt", b"x" * 20_000, "text/plain")})
    assert too_big.status_code == 413 and too_big.json()["error"]["type"] == "too_large"
    wrong_type = client.post("/v1/documents", files={"file": ("tool.exe", b"MZ", "application/octet-stream")})
    assert wrong_type.status_code == 415
    sneaky = client.post("/v1/documents", files={"file": ("../../outside.md", b"# Out\nNope.", "text/markdown")})
    assert sneaky.status_code == 201 and sneaky.json()["source"] == "outside.md"
    assert (settings.documents_dir / "outside.md").exists()
    assert not (settings.documents_dir.parent / "outside.md").exists()
    hidden = client.post("/v1/documents", files={"file": ("..", b"x", "text/plain")})
    assert hidden.status_code == 422
    assert not [p for p in settings.documents_dir.iterdir() if p.name.startswith(".upload-")]


def test_bad_upload_keeps_the_previous_version(make_client: MakeClient, settings: Settings) -> None:
    client = make_client()
    before = client.get("/v1/documents").json()
    broken = client.post("/v1/documents?replace=true", files={"file": ("leave.md", b"caf\xe9 latin-1", "text/md")})
    assert broken.status_code == 422 and broken.json()["error"]["type"] == "unreadable_document"
    assert (settings.documents_dir / "leave.md").read_text().startswith("# Leave")
    assert client.get("/v1/documents").json() == before


def test_sync_picks_up_folder_changes(make_client: MakeClient, settings: Settings) -> None:
    client = make_client()
    (settings.documents_dir / "vpn.md").unlink()
    (settings.documents_dir / "new.md").write_text("# New\nA new policy.")
    report = client.post("/v1/sync").json()
    assert (report["added"], report["deleted"], report["unchanged"]) == (1, 1, 1)


def test_llm_down_is_a_fast_503_and_readyz_names_it(make_client: MakeClient) -> None:
    client = make_client(llm_url="http://127.0.0.1:9/v1", llm_connect_timeout_s=1.0)
    started = time.monotonic()
    response = client.post("/v1/ask", json={"question": "How many days of annual leave?"})
    assert response.status_code == 503 and time.monotonic() - started < 3
    assert response.json()["error"]["type"] == "llm_unavailable"
    assert "RAG_LLM_BASE_URL" in response.json()["error"]["message"]
    streamed = client.post("/v1/ask", json={"question": "How many days of annual leave?", "stream": True})
    assert streamed.status_code == 503
    ready = client.get("/readyz")
    assert ready.status_code == 503 and ready.json()["checks"]["llm"]["ok"] is False
    assert ready.json()["checks"]["chroma"]["ok"] is True and ready.json()["checks"]["index"]["ok"] is True


def test_metrics_count_requests_and_stages(make_client: MakeClient) -> None:
    client = make_client()
    client.post("/v1/ask", json={"question": "Annual leave?"})
    text = client.get("/metrics").text
    assert 'rag_requests_total{method="POST",route="/v1/ask",status="200"} 1.0' in text
    assert 'rag_stage_seconds_count{stage="retrieve"} 1.0' in text
    assert 'rag_stage_seconds_count{stage="first_token"} 1.0' in text


def test_gate_turns_excess_load_into_429() -> None:
    async def scenario() -> int:
        gate = Gate(slots=1, timeout=0.05)
        await gate.acquire()
        try:
            await gate.acquire()
        except Busy:
            return 429
        return 200

    assert asyncio.run(scenario()) == 429


def test_openapi_docs_have_examples(make_client: MakeClient) -> None:
    client = make_client()
    schema = client.get("/openapi.json").json()
    assert "/v1/ask" in schema["paths"] and "/v1/chat/completions" in schema["paths"]
    assert schema["components"]["schemas"]["AskRequest"]["examples"]
    assert client.get("/docs").status_code == 200


def test_uploaded_file_path_is_relative_source(make_client: MakeClient) -> None:
    client = make_client()
    created = client.post("/v1/documents", files={"file": ("notes 2024 (final).txt", b"Notes.", "text/plain")})
    assert created.json()["source"] == "notes 2024 (final).txt"


def test_readiness_details_and_metrics_are_for_admins_when_keys_are_set(make_client: MakeClient) -> None:
    client = make_client(llm_url="http://127.0.0.1:9/v1", llm_connect_timeout_s=1.0)
    for headers in ({"Authorization": ""}, READER):  # a load balancer's probe, a reader's key
        probe = client.get("/readyz", headers=headers)
        assert probe.status_code == 503 and probe.json()["checks"]["llm"] == {"ok": False}
        assert "127.0.0.1:9" not in probe.text and "chunks" not in probe.text
    assert "127.0.0.1:9" in client.get("/readyz", headers=ADMIN).json()["checks"]["llm"]["detail"]
    assert client.get("/metrics", headers={"Authorization": ""}).status_code == 401
    assert client.get("/metrics", headers=READER).status_code == 403
    assert client.get("/metrics", headers=ADMIN).status_code == 200


def test_what_holds_the_ingest_lock_names_no_document(make_client: MakeClient,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Whoever waits for the lock is told what holds it (409 ingest_busy): never another admin's file name."""
    from ingest.service import Library

    held: list[str] = []
    real = Library.lock

    def recording(library: Library, what: str, deadline: float | None = None) -> object:
        held.append(what)
        return real(library, what, deadline)

    client = make_client()
    monkeypatch.setattr(Library, "lock", recording)
    uploaded = client.post("/v1/documents", files={"file": ("salaries-2027.md", b"# Salaries\nSecret.\n")})
    assert uploaded.status_code == 201, uploaded.text
    assert client.delete(f"/v1/documents/{uploaded.json()['id']}").status_code == 200
    assert held and not [what for what in held if "salaries" in what or uploaded.json()["id"] in what], held
