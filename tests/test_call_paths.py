"""The upload and ask requests' paths run down through the layers, enter each file at most twice from another layer,
and never climb back into a file they left (tests/call_paths.py traces every call on every thread while one request
runs; a way in is a call site in another layer's file, not counting the framework's calls, a generator going on, or
reading a frozen value such as a Principal)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from ingest import service
from rag.config import Settings
from rag.wiring import App
from tests.call_paths import Trace, report, traced
from tests.fake_llm import FakeLLMServer
from tests.fakes import HashingEncoder
from ui.api.app import create_app
from ui.serving.services import build_services

KEY = "admin-key-0123456789"
# The one way back up, by design: the documents route hands the upload reader its name check (`accept`), which runs
# as soon as the part's headers arrive, before any of its bytes are written.
UPLOAD_CALLBACK = "ui/api/uploads.py:stage_upload -> ui/api/routes_documents.py:accept"
# Files a path enters more than twice, by design, and how often at most (a ratchet: more fails the test).
MANY_WAYS_IN: dict[str, int] = {}


def _client(settings: Settings) -> TestClient:
    local = settings.model_copy(update={"api_keys": f"{KEY}:*:admin", "refusal_threshold": 0.0})
    local.documents_dir.mkdir(parents=True, exist_ok=True)
    (local.documents_dir / "leave.md").write_text("# Leave\nStaff get 25 days of annual leave per year.\n")
    encoder = HashingEncoder()
    service.sync([local.documents_dir], local, embedder=encoder)  # type: ignore[arg-type]
    llm = FakeLLMServer(lambda _: "Staff get 25 days of annual leave [1].").llm()
    app = App(local, embedder=encoder, llm=llm)  # type: ignore[arg-type]
    return TestClient(create_app(local, build_services(app)), headers={"Authorization": f"Bearer {KEY}"})


def test_upload_and_ask_enter_each_file_at_most_twice_and_never_climb_back(settings: Settings) -> None:
    client = _client(settings)
    assert client.post("/v1/ask", json={"question": "How many days of leave?"}).status_code == 200  # warm
    printer = ("printer.md", b"# Printer\nTo replace the toner, open the front door.\n", "text/markdown")
    upload: Trace = traced(lambda: client.post("/v1/documents", files={"file": printer}))
    ask: Trace = traced(lambda: client.post("/v1/ask", json={"question": "How do I replace the toner?"}))
    assert "ingest/service.py" in upload.entries and "rag/core/answer.py" in ask.entries  # the tracer saw them
    assert upload.climbs == [UPLOAD_CALLBACK] * len(upload.climbs) and upload.climbs, report(upload)
    assert ask.climbs == [], report(ask)
    for trace in (upload, ask):
        ways = {name: len(sites) for name, sites in trace.ways_in.items()}
        assert {name: count for name, count in ways.items() if count > MANY_WAYS_IN.get(name, 2)} == {}, report(trace)
    for trace in (upload, ask):  # the core never calls out to an edge
        for name, callers in trace.entries.items():
            if name.startswith(("ui/", "ingest/")):
                assert not any(caller.startswith("rag/") for caller in callers), (name, callers)
