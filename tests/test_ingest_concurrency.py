"""Ingest under concurrency, through a live server (uvicorn, real MiniLM, embedded Chroma): a busy ingest lock is
refused with what holds it instead of waiting forever, waiting changes never take the threads that answer
questions, concurrent uploads of one name leave one whole version, and the embedded store is used by one process
at a time."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest

from ingest import files, service
from rag.config import Settings
from rag.wiring import App, build_store
from tests.conftest import CountingEmbedder, serving
from tests.docs_factory import pdf_bytes
from tests.fake_llm import FakeLLMServer
from ui.api.app import create_app
from ui.serving.services import INGEST_NICE, build_services

BIN = Path(sys.executable).parent
ADMIN_KEY = "admin-key-0123456789"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
HOLD = """
import sys, time
from pathlib import Path
from rag.components import filelock
with filelock.exclusive(Path(sys.argv[1]), sys.argv[2], deadline=time.monotonic()):
    print("held", flush=True)
    sys.stdin.read()
"""


Hold = Callable[[Path, str], "subprocess.Popen[str]"]


@pytest.fixture
def holder() -> Iterator[Hold]:
    """Start a process that holds a lock file (as another rag-ingest or server would) until the test ends."""
    processes: list[subprocess.Popen[str]] = []

    def hold(path: Path, what: str) -> subprocess.Popen[str]:
        process = subprocess.Popen([sys.executable, "-c", HOLD, str(path), what], text=True,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert process.stdout is not None and process.stdout.readline() == "held\n"
        processes.append(process)
        return process

    yield hold
    for process in processes:
        if process.poll() is None:
            process.communicate(timeout=10)


@pytest.fixture
def local(settings: Settings, embedder: CountingEmbedder) -> Settings:
    """An ingested documents folder and an admin key."""
    local = settings.model_copy(update={"api_keys": f"{ADMIN_KEY}:*:admin", "refusal_threshold": 0.2,
                                        "ingest_wait_s": 1.0, "ingest_workers": 2})
    local.documents_dir.mkdir(parents=True)
    (local.documents_dir / "leave.md").write_text("# Leave\nStaff get 25 days of annual leave per year.\n")
    service.sync([local.documents_dir], local, embedder=embedder)
    return local


def _server(local: Settings, embedder: CountingEmbedder) -> AbstractContextManager[str]:
    llm = FakeLLMServer(lambda _: "Staff get 25 days of annual leave [1].").llm()
    return serving(create_app(local, build_services(App(local, embedder=embedder, llm=llm))))


def test_a_busy_ingest_is_refused_with_what_runs_and_answers_keep_coming(
        local: Settings, embedder: CountingEmbedder, holder: Hold) -> None:
    other = holder(local.index_dir / "ingest.lock", "rag-ingest /srv/docs")
    leave = local.documents_dir / "leave.md"
    before = leave.read_bytes()
    with _server(local, embedder) as url:
        async def scenario() -> tuple[list[httpx.Response], float]:
            async with httpx.AsyncClient(base_url=url, headers=ADMIN, timeout=60) as client:
                # Far more waiting changes than the app has threads: none may hold up a question.
                changes = [asyncio.create_task(client.post("/v1/sync")) for _ in range(60)]
                await asyncio.sleep(0.3)
                started = time.monotonic()
                answer = await client.post("/v1/ask", json={"question": "How many days of annual leave?"})
                waited = time.monotonic() - started
                assert answer.status_code == 200 and "25 days" in answer.json()["answer"]
                upload = await client.post("/v1/documents", params={"replace": "true"},
                                           files={"file": ("leave.md", b"# Leave\nNone.\n")})
                listed = (await client.get("/v1/documents")).json()
                delete = await client.delete(f"/v1/documents/{listed[0]['id']}")
                return [*await asyncio.gather(*changes), upload, delete], waited

        responses, waited = asyncio.run(scenario())
    assert waited < 5, f"a question waited {waited:.1f} s behind waiting ingests"
    for response in responses:
        assert response.status_code == 409, response.text
        error = response.json()["error"]
        assert error["type"] == "ingest_busy" and response.headers["retry-after"] == "5"
        assert error["running"]["what"] == "rag-ingest /srv/docs" and error["running"]["pid"] == other.pid
        assert f"rag-ingest /srv/docs (pid {other.pid}) since" in error["message"]
    assert leave.read_bytes() == before and [p.name for p in local.documents_dir.iterdir()] == ["leave.md"]
    assert [entry.source for entry in service.library(App(local)).documents()] == ["leave.md"]


def test_ten_concurrent_uploads_of_one_name_leave_one_whole_version(local: Settings,
                                                                   embedder: CountingEmbedder) -> None:
    local = local.model_copy(update={"ingest_wait_s": 120.0})
    versions = [pdf_bytes([f"Version {i}: the office opens at {i} o'clock. " * (5 + i)]) for i in range(10)]
    versions[3] = versions[7] = b"%PDF-1.7 truncated"  # refused: what was there before stays
    (local.documents_dir / "same.pdf").write_bytes(pdf_bytes(["The original opening hours."]))
    service.sync([local.documents_dir], local, embedder=embedder)
    with _server(local, embedder) as url:
        async def upload_all() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=url, headers=ADMIN, timeout=180) as client:
                return await asyncio.gather(*(client.post("/v1/documents", params={"replace": "true"},
                                                          files={"file": ("same.pdf", body)})
                                              for body in versions))

        responses = asyncio.run(upload_all())
    statuses = [r.status_code for r in responses]
    assert statuses == [201, 201, 201, 422, 201, 201, 201, 422, 201, 201], [r.text for r in responses]
    final = (local.documents_dir / "same.pdf").read_bytes()
    assert final in versions and final != versions[3]  # one of the accepted ones, whole
    assert sorted(p.name for p in local.documents_dir.iterdir()) == ["leave.md", "same.pdf"]  # no leftovers
    entry = next(e for e in service.library(App(local)).documents() if e.source == "same.pdf")
    assert entry.content_hash == hashlib.sha256(final).hexdigest()
    store = build_store(local)
    assert store.ids_of_document(entry.doc_id) == set(entry.chunk_ids)
    assert store.keyword is not None and store.all_ids() == store.keyword.ids()


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)


def test_cli_refuses_a_busy_ingest_and_a_store_a_server_holds(local: Settings, cli_env: dict[str, str],
                                                              holder: Hold) -> None:
    env = {**cli_env, "RAG_INGEST_WAIT_S": "0.2", "RAG_DOCS_DIR": str(local.documents_dir)}
    if local.chroma_url:
        pytest.skip("a Chroma server is shared by design; only the ingest lock applies (tested through the API)")
    server = holder(local.index_dir / "store.lock", "rag serve on 127.0.0.1:8000")
    refused = _run([str(BIN / "rag-ingest"), str(local.documents_dir)], env)
    assert refused.returncode == 2
    assert f"in use by rag serve on 127.0.0.1:8000 (pid {server.pid})" in refused.stderr
    assert "POST /v1/sync" in refused.stderr and "RAG_CHROMA_URL" in refused.stderr
    server.communicate(timeout=10)

    ingest = holder(local.index_dir / "ingest.lock", "upload of a.md (API)")
    busy = _run([str(BIN / "rag-ingest"), str(local.documents_dir)], env)
    assert busy.returncode == 2
    assert f"another ingest is running: upload of a.md (API) (pid {ingest.pid}) since" in busy.stderr
    ingest.communicate(timeout=10)

    held = holder(local.index_dir / "store.lock", "rag-ingest /srv/docs")
    serve = _run([str(BIN / "rag"), "serve", "--port", "9"], env)  # refused before it binds anything
    assert serve.returncode == 2 and f"in use by rag-ingest /srv/docs (pid {held.pid})" in serve.stderr
    assert os.path.exists(local.index_dir / "store.lock")


def test_ingest_threads_run_at_a_lower_cpu_priority(local: Settings, embedder: CountingEmbedder) -> None:
    services = build_services(App(local, embedder=embedder, llm=FakeLLMServer(lambda _: "").llm()))

    def priority() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    assert asyncio.run(services.run_ingest(lambda _: priority())) == min(19, priority() + INGEST_NICE)
    services.ingest_pool.shutdown()


def test_a_clean_up_never_takes_an_upload_being_created_for_a_leftover(tmp_path: Path) -> None:
    """A staged upload is locked before it carries the name a clean-up settles; a staging file is removed only
    once it is old enough to be a crash's (the race ten concurrent uploads of one name once lost)."""
    handle, staged = files.staged_file(tmp_path)
    fresh, old = tmp_path / f"{files.STAGING}fresh", tmp_path / f"{files.STAGING}old"
    fresh.write_bytes(b"")
    old.write_bytes(b"")
    long_ago = time.time() - files.STAGING_LEFTOVER_S - 1
    os.utime(old, (long_ago, long_ago))
    try:
        assert staged.name.startswith(files.UPLOAD)
        assert files.clean_leftovers(tmp_path, {}) == [old.name]
        assert staged.exists() and fresh.exists()
    finally:
        os.close(handle)
    assert files.clean_leftovers(tmp_path, {}) == [staged.name]  # its writer gone: a leftover
