"""A live uvicorn server over the real wiring and the real vLLM server: the official openai SDK (stream and not),
LangChain's ChatOpenAI, an upload → ask round trip, and a vLLM outage with recovery."""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from openai import OpenAI

from rag.config import Settings
from rag.wiring import App
from tests.conftest import SAMPLES, free_port, serving
from tests.docs_factory import pdf_bytes
from tests.tcp_proxy import TcpProxy
from ui.api.app import create_app
from ui.serving.services import build_services

pytestmark = pytest.mark.integration
KEY = "test-key-0123456789abcdef"


@pytest.fixture(scope="module")
def llm_proxy(llm_settings: Settings) -> Iterator[TcpProxy]:
    """The session's vLLM behind a TCP proxy that the outage test closes and opens again."""
    target = urlsplit(llm_settings.llm_base_url)
    proxy = TcpProxy(free_port(), (target.hostname or "127.0.0.1", target.port or 80))
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, llm_settings: Settings, real_embedder: object,
        llm_proxy: TcpProxy) -> Iterator[str]:
    data = tmp_path_factory.mktemp("api-data")
    settings = llm_settings.model_copy(update={"data_dir": data, "docs_dir": SAMPLES, "api_keys": f"{KEY}:*:admin",
                                               "llm_base_url": f"http://127.0.0.1:{llm_proxy.port}/v1"})
    from ingest import service

    service.sync([SAMPLES], settings, embedder=real_embedder)  # type: ignore[arg-type]
    uploads = settings.model_copy(update={"docs_dir": data / "uploads"})
    app = create_app(uploads, build_services(App(uploads, embedder=real_embedder)))  # type: ignore[arg-type]
    with serving(app) as url:
        yield url


def _client(api: str) -> OpenAI:
    return OpenAI(base_url=f"{api}/v1", api_key=KEY, max_retries=0)


def test_openai_sdk_non_streaming(api: str) -> None:
    reply = _client(api).chat.completions.create(
        model="rag", messages=[{"role": "user", "content": "What is the difference between VACUUM and VACUUM FULL?"}])
    assert reply.choices[0].message.content
    extra = reply.model_extra or {}
    assert extra["sources"][0]["source"] == "en/postgresql-routine-vacuuming.html"
    assert reply.usage is not None and reply.usage.prompt_tokens > 0


def test_openai_sdk_streaming(api: str) -> None:
    stream = _client(api).chat.completions.create(
        model="rag", stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "How do I create a Python virtual environment?"}])
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip()
    sources = next((c.model_extra or {}).get("sources") for c in chunks if (c.model_extra or {}).get("sources"))
    assert sources[0]["source"] == "en/python-tutorial-venv.html"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_langchain_chat_openai(api: str) -> None:
    from langchain_openai import ChatOpenAI

    chat = ChatOpenAI(base_url=f"{api}/v1", api_key=KEY, model="rag", max_retries=0)  # type: ignore[arg-type]
    assert chat.invoke("Which UID range does systemd use for dynamic users?").content
    assert "".join(str(chunk.content) for chunk in chat.stream("What is zstd?")).strip()


def test_upload_then_ask(api: str) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    pdf = pdf_bytes(["Office guide.", "The espresso machine on floor 3 is descaled every Friday by facilities."])
    created = httpx.post(f"{api}/v1/documents", headers=headers, timeout=120,
                         files={"file": ("office.pdf", pdf, "application/pdf")})
    assert created.status_code == 201, created.text
    answer = httpx.post(f"{api}/v1/ask", headers=headers, timeout=120,
                        json={"question": "When is the espresso machine descaled?"}).json()
    assert (answer["sources"][0]["source"], answer["sources"][0]["page"]) == ("office.pdf", 2)
    assert answer["answer"]


def test_vllm_outage_gives_503_then_recovers(api: str, llm_proxy: TcpProxy) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    question = {"question": "How do I create a Python virtual environment?"}
    assert httpx.post(f"{api}/v1/ask", headers=headers, json=question, timeout=120).status_code == 200
    llm_proxy.stop()  # as vLLM's process ending: the port closes and open connections break
    try:
        started = time.monotonic()
        down = httpx.post(f"{api}/v1/ask", headers=headers, json=question, timeout=30)
        assert down.status_code == 503 and time.monotonic() - started < 5
        assert down.json()["error"]["type"] == "llm_unavailable"
        assert httpx.get(f"{api}/readyz", timeout=30).json()["checks"]["llm"]["ok"] is False
    finally:
        llm_proxy.start()
    back = httpx.post(f"{api}/v1/ask", headers=headers, json=question, timeout=120)
    assert back.status_code == 200 and back.json()["answer"]
    assert httpx.get(f"{api}/readyz", timeout=30).status_code == 200
