"""Secure defaults of the served app: trusted Host names, CORS from a setting, no cross-site state changes, no
network bind without keys and sign-in, secrets kept out of reprs and logs, the vLLM key by environment, and the
Chroma token sent to a server that requires it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
import uvicorn
from click.testing import CliRunner
from fastapi.testclient import TestClient
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.testclient import WebSocketDenialResponse

from ingest import service
from rag.config import Settings, load_settings
from rag.core.errors import ConfigError, StoreUnavailable
from rag.tools.llm_server import vllm_command, vllm_environment
from rag.wiring import App, build_store
from tests.conftest import ChromaServer, CountingEmbedder, free_port, serving
from tests.fake_llm import FakeLLMServer
from ui.api.app import create_app
from ui.cli import main
from ui.serving.principals import parse_api_keys
from ui.serving.services import build_services

ADMIN_KEY = "admin-key-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
EVIL = "http://evil.example"
MakeClient = Callable[..., TestClient]


@pytest.fixture
def make_client(settings: Settings, embedder: CountingEmbedder) -> Iterator[MakeClient]:
    clients: list[TestClient] = []

    def make(base_url: str = "http://testserver", **changes: object) -> TestClient:
        local = settings.model_copy(update={"refusal_threshold": 0.2, **changes})
        local.documents_dir.mkdir(parents=True, exist_ok=True)
        (local.documents_dir / "leave.md").write_text("# Leave\nStaff get 25 days of annual leave per year.\n")
        service.sync([local.documents_dir], local, embedder=embedder)
        llm = FakeLLMServer(lambda _: "Staff get 25 days of annual leave [1].").llm()
        services = build_services(App(local, embedder=embedder, llm=llm))
        client = TestClient(create_app(local, services), base_url=base_url)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def _upload(client: TestClient, name: str, **headers: str) -> httpx2.Response:
    return client.post("/v1/documents", files={"file": (name, b"# Leave\nStaff get 25 days.\n", "text/markdown")},
                       headers={**ADMIN, **headers})


def test_a_cross_site_upload_is_refused_even_with_an_admin_key(make_client: MakeClient, settings: Settings) -> None:
    client = make_client(api_keys=f"{ADMIN_KEY}:*:admin")
    for headers in ({"Origin": EVIL}, {"Sec-Fetch-Site": "cross-site"}, {"Origin": "null"},
                    {"Origin": "http://testserver.evil.example"}):
        refused = _upload(client, "evil.md", **headers)
        assert refused.status_code == 403, headers
        assert refused.json()["error"]["type"] == "cross_site_request"
    assert not (settings.documents_dir / "evil.md").exists()
    # The page served by this very host, and clients that are not browsers, still work.
    assert _upload(client, "same.md", Origin="http://testserver", **{"Sec-Fetch-Site": "same-origin"}).status_code \
        == 201
    assert _upload(client, "tool.md").status_code == 201
    assert client.get("/v1/documents", headers={**ADMIN, "Origin": EVIL}).status_code == 200  # reads are not guarded


def test_keyless_loopback_refuses_cross_site_posts_but_serves_local_tools(make_client: MakeClient) -> None:
    client = make_client(base_url="http://127.0.0.1:8000")
    ask = {"question": "How many days of annual leave?"}
    for path, body in (("/v1/ask", ask), ("/v1/sync", None), ("/v1/chat/completions", {"messages": []})):
        refused = client.post(path, json=body, headers={"Origin": EVIL})
        assert (refused.status_code, refused.json()["error"]["type"]) == (403, "cross_site_request"), path
    assert client.post("/v1/ask", json=ask, headers={"Origin": "http://127.0.0.1:8000"}).status_code == 200
    assert client.post("/v1/ask", json=ask).status_code == 200


def test_unknown_host_names_are_refused_for_http_and_websockets(make_client: MakeClient) -> None:
    client = make_client(trusted_hosts="kb.example.com,*.corp.example")
    for host in ("kb.example.com", "KB.example.com:8443", "eu.corp.example", "127.0.0.1:8000", "[::1]:8000",
                 "localhost", "127.0.0.1"):
        assert client.get("/healthz", headers={"Host": host}).status_code == 200, host
    for host in ("evil.example", "kb.example.com.evil.example", "corp.example", "kb.example.com:x", "[::1"):
        refused = client.get("/healthz", headers={"Host": host})
        assert (refused.status_code, refused.json()["error"]["type"]) == (400, "untrusted_host"), host
    with pytest.raises(WebSocketDenialResponse) as denied, \
            client.websocket_connect("/chat/ws/socket.io/", headers={"Host": "evil.example"}):
        pass
    assert denied.value.status_code == 400


def test_cors_serves_listed_origins_without_credentials(make_client: MakeClient) -> None:
    app_origin = "https://app.example"
    client = make_client(cors_origins=f"{app_origin}/", api_keys=f"{ADMIN_KEY}:*:admin")
    preflight = {"Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization,content-type"}
    allowed = client.options("/v1/ask", headers={"Origin": app_origin, **preflight})
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == app_origin
    assert "access-control-allow-credentials" not in allowed.headers
    refused = client.options("/v1/ask", headers={"Origin": EVIL, **preflight})
    assert "access-control-allow-origin" not in refused.headers
    asked = client.post("/v1/ask", json={"question": "Leave?"}, headers={**ADMIN, "Origin": app_origin})
    assert asked.status_code == 200 and asked.headers["access-control-allow-origin"] == app_origin
    # Without RAG_CORS_ORIGINS no origin is allowed.
    closed = make_client().options("/v1/ask", headers={"Origin": app_origin, **preflight})
    assert "access-control-allow-origin" not in closed.headers


@pytest.mark.parametrize(("name", "value", "says"), [
    ("RAG_CORS_ORIGINS", "*", "every web site"),
    ("RAG_CORS_ORIGINS", "https://app.example/path", "not an origin"),
    ("RAG_CORS_ORIGINS", "app.example", "not an origin"),
    ("RAG_TRUSTED_HOSTS", "kb.example.com:8000", "not a host name"),
    ("RAG_TRUSTED_HOSTS", "https://kb.example.com", "not a host name"),
])
def test_bad_origins_and_host_names_are_config_errors(monkeypatch: pytest.MonkeyPatch, name: str, value: str,
                                                       says: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=f"{name}.*{says}"):
        load_settings()


SECRETS = {"llm_api_key": "llm-secret-4242", "chat_db_url": "postgresql+asyncpg://rag:chat-secret-4242@db/rag",
           "feedback_db_url": "postgresql+psycopg://rag:feedback-secret-4242@db/rag",
           "chroma_token": "chroma-secret-4242", "ui_auth_secret": "ui-secret-4242" * 4,
           "ui_users": "alice:users-secret-4242", "api_keys": "apikey-secret-4242-abcdef:*:admin"}


def test_secrets_stay_out_of_reprs_and_error_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(_env_file=None, **SECRETS)  # type: ignore[arg-type, call-arg]
    for shown in (repr(settings), str(settings), repr(parse_api_keys(settings.api_keys))):
        assert "4242" not in shown, shown
    monkeypatch.setenv("RAG_CHROMA_TOKEN", "chroma secret 4242")  # a space: refused, without repeating the token
    with pytest.raises(ConfigError, match="RAG_CHROMA_TOKEN") as error:
        load_settings()
    assert "4242" not in str(error.value)


def _serve(args: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str | None
           ) -> tuple[int, str, list[dict[str, Any]]]:
    """`rag serve ARGS` in-process with uvicorn.run recorded instead of run: exit code, stderr, the runs."""
    runs: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: runs.append({"app": app, **kwargs}))
    result = CliRunner().invoke(main, ["serve", *args], env={"RAG_DATA_DIR": str(tmp_path / "data"), **env})
    return result.exit_code, result.stderr, runs


def test_serve_refuses_a_network_bind_without_keys_or_sign_in(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    code, stderr, runs = _serve(["--host", "0.0.0.0", "--no-chat"], monkeypatch, tmp_path,
                                RAG_TRUSTED_HOSTS="kb.example.com")
    assert (code, runs) == (2, []) and "RAG_API_KEYS" in stderr and "--insecure-open-to-network" in stderr
    code, stderr, runs = _serve(["--host", "10.1.2.3"], monkeypatch, tmp_path, RAG_API_KEYS=ADMIN_KEY,
                                RAG_UI_AUTH="false")
    assert (code, runs) == (2, []) and "no sign-in" in stderr and "RAG_API_KEYS is empty" not in stderr
    code, stderr, runs = _serve(["--host", "::", "--no-chat"], monkeypatch, tmp_path, RAG_API_KEYS=ADMIN_KEY,
                                RAG_TRUSTED_HOSTS=None)
    assert (code, runs) == (2, []) and "RAG_TRUSTED_HOSTS" in stderr and "DNS rebinding" in stderr


def test_serve_opens_to_the_network_only_when_told_loudly(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    code, stderr, runs = _serve(["--host", "0.0.0.0", "--no-chat", "--insecure-open-to-network"], monkeypatch,
                                tmp_path, RAG_TRUSTED_HOSTS="kb.example.com")
    assert code == 0 and runs[0]["host"] == "0.0.0.0"
    assert "WARNING" in stderr and "anyone who reaches 0.0.0.0" in stderr
    assert "listening on 0.0.0.0:8000: every interface" in stderr and "127.0.0.1" in stderr
    assert "http://kb.example.com:8000/docs" in stderr


def test_serve_on_an_address_answers_to_that_address(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    code, stderr, runs = _serve(["--host", "10.1.2.3", "--port", "8123", "--no-chat"], monkeypatch, tmp_path,
                                RAG_API_KEYS=ADMIN_KEY, RAG_TRUSTED_HOSTS=None)
    assert code == 0 and "WARNING" not in stderr
    assert "listening on 10.1.2.3:8123 (this address)" in stderr and "http://10.1.2.3:8123/docs" in stderr
    client = TestClient(runs[0]["app"])
    assert client.get("/healthz", headers={"Host": "10.1.2.3:8123"}).status_code == 200
    assert client.get("/healthz", headers={"Host": "evil.example"}).status_code == 400
    code, stderr, _ = _serve(["--no-chat"], monkeypatch, tmp_path)
    assert code == 0 and "listening on 127.0.0.1:8000 (this machine only)" in stderr


def _hash(password: str) -> str:
    from ui.serving.users import hash_password

    return hash_password(password)


@pytest.fixture
def network_server(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`rag serve --host 0.0.0.0` with chat, keys, sign-in and trusted hosts, every secret set; base URL."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAG_")} | {
        "RAG_DATA_DIR": str(tmp_path / "data"), "RAG_TRUSTED_HOSTS": "kb.example.com",
        "RAG_LLM_BASE_URL": "http://127.0.0.1:9/v1", **{f"RAG_{k.upper()}": v for k, v in SECRETS.items()},
        "RAG_UI_USERS": f"alice:{_hash('users-secret-4242')}", "RAG_CHAT_DB_URL": "", "RAG_FEEDBACK_DB_URL": "",
        "RAG_CHROMA_TOKEN": ""}
    process = subprocess.Popen([str(Path(sys.executable).parent / "rag"), "serve", "--host", "0.0.0.0", "--port",
                                str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and process.poll() is None:
        try:
            httpx.get(f"{base}/healthz", timeout=1)
            break
        except httpx.TransportError:
            time.sleep(0.3)
    if process.poll() is not None:
        pytest.fail(f"rag serve exited: {process.communicate()[0][-3000:]}")
    yield base, process
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)


def test_a_guarded_network_server_checks_hosts_and_origins_and_logs_no_secret(
        network_server: tuple[str, subprocess.Popen[str]]) -> None:
    base, process = network_server
    with httpx.Client(base_url=base, timeout=10) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/chat/", headers={"Host": "kb.example.com"}).status_code == 200
        assert client.get("/chat/", headers={"Host": "evil.example"}).json()["error"]["type"] == "untrusted_host"
        # Chainlit's own CORS no longer echoes any origin with credentials.
        preflight = client.options("/chat/project/settings", headers={
            "Origin": EVIL, "Access-Control-Request-Method": "GET"})
        assert "access-control-allow-origin" not in preflight.headers
        for path in ("/chat/login", "/v1/sync"):
            refused = client.post(path, headers={"Origin": EVIL, "Authorization": f"Bearer {SECRETS['api_keys']}"},
                                  data={"username": "alice", "password": "users-secret-4242"})
            assert refused.json()["error"]["type"] == "cross_site_request", path
        # The chat's own page signs in (same origin), and so does a tool without Origin.
        for headers in ({"Origin": base}, {}):
            signed_in = client.post("/chat/login", headers=headers,
                                    data={"username": "alice", "password": "users-secret-4242"})
            assert signed_in.status_code == 200, signed_in.text
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=30)
    assert "every interface" in output and "http://kb.example.com:" in output
    assert "4242" not in output, output


class TokenProxy:
    """A reverse proxy in front of a Chroma server that forwards only requests bearing its token (the set-up
    docs/deploy.md describes, since `chroma run` 1.x enforces no auth); it records the Authorization it saw."""

    def __init__(self, upstream: str, token: str) -> None:
        self.upstream, self.token, self.seen = upstream, token, list[str]()
        self.app = Starlette(routes=[Route("/{path:path}", self.forward, methods=["GET", "POST", "PUT", "DELETE"])])

    async def forward(self, request: Request) -> Response:
        self.seen.append(request.headers.get("authorization", ""))
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return JSONResponse({"error": "Unauthorized", "message": "missing or wrong token"}, status_code=401)
        async with httpx.AsyncClient(base_url=self.upstream) as client:
            answer = await client.request(request.method, request.url.path, params=request.query_params,
                                          content=await request.body(),
                                          headers={"content-type": request.headers.get("content-type", "")})
        return Response(answer.content, answer.status_code, media_type=answer.headers.get("content-type"))


def test_the_chroma_token_reaches_a_server_that_requires_it(chroma_server: ChromaServer, settings: Settings) -> None:
    proxy = TokenProxy(chroma_server.url, "chroma-token-0123456789")
    with serving(proxy.app) as url:
        local = settings.model_copy(update={"chroma_url": url, "chroma_token": proxy.token, "collection": "tokened"})
        assert build_store(local).count() == 0
        assert proxy.seen and set(proxy.seen) == {f"Bearer {proxy.token}"}
        for token in ("", "wrong-token-0123456789"):
            with pytest.raises(StoreUnavailable):
                build_store(local.model_copy(update={"chroma_token": token}))
    with pytest.raises(ConfigError, match="RAG_CHROMA_TOKEN"):
        build_store(settings.model_copy(update={"chroma_token": proxy.token}))


def test_rag_llm_gives_vllm_its_key_by_environment(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> None:
    monkeypatch.setenv("RAG_API_KEYS", ADMIN_KEY)
    monkeypatch.setenv("VLLM_API_KEY", "stale-key")
    keyed = settings.model_copy(update={"llm_base_url": "http://127.0.0.1:8011/v1", "llm_api_key": "vllm-key-4242"})
    assert not [arg for arg in vllm_command(keyed) if "4242" in arg or arg == "--api-key"]
    env = vllm_environment(keyed)
    assert env["VLLM_API_KEY"] == "vllm-key-4242" and not [name for name in env if name.startswith("RAG_")]
    assert "VLLM_API_KEY" not in vllm_environment(keyed.model_copy(update={"llm_api_key": "EMPTY"}))
    exposed = keyed.model_copy(update={"llm_base_url": "http://0.0.0.0:8011/v1", "llm_api_key": "EMPTY"})
    with pytest.raises(ConfigError, match="RAG_LLM_API_KEY"):
        vllm_command(exposed)
