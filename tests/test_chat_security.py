"""The chat's sign-in and sessions, its socket's origin check and the app's security headers, against the served
app (API with the chat mounted) under a real uvicorn, with raw HTTP and engine.io/socket.io handshakes.

Chainlit keeps global state: the chat is mounted once for this module. "A restart with other RAG_UI_USERS" is the
chat context installed again with other users (what a restart builds); the secret stays, so old tokens still pass
their signature check and only the session check can end them.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial

import httpx
import jwt
import pytest
from fastapi import FastAPI
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect

from rag.config import Settings
from rag.core.errors import ConfigError
from rag.wiring import App
from tests.conftest import serving
from tests.fake_llm import FakeLLMServer
from ui.chat import state
from ui.chat.login import Throttle
from ui.chat.sessions import ENDED, current_user
from ui.chat.state import ChatContext
from ui.headers import rewrite_html
from ui.serving import users
from ui.serving.services import build_services
from ui.serving.users import UiUser, hash_password, parse_users

SECRET = secrets.token_hex(32)
PASSWORDS = {name: f"{name} pw" for name in ("alice", "bob", "carol", "dave", "erin", "frank", "gail")}
PORTAL = "https://portal.example.com"  # in RAG_CORS_ORIGINS
SESSION_HOURS = 2.0
MAX_FAILURES = 3


def _users_spec(passwords: dict[str, str]) -> str:
    return ",".join(f"{name}:{hash_password(password, iterations=1000)}" for name, password in passwords.items())


@dataclass
class Chat:
    url: str
    settings: Settings
    context: ChatContext
    app: FastAPI

    def install_users(self, passwords: dict[str, str]) -> None:
        """What a restart with these RAG_UI_USERS builds."""
        state.install(ChatContext(self.settings, self.context.services, parse_users(_users_spec(passwords))))


@pytest.fixture(scope="module")
def chat(tmp_path_factory: pytest.TempPathFactory, real_embedder: object) -> Iterator[Chat]:
    from ui.server import create_server

    settings = Settings(data_dir=tmp_path_factory.mktemp("chat") / "data", chroma_url="",  # type: ignore[call-arg]
                        ui_users=_users_spec(PASSWORDS), ui_auth_secret=SECRET, session_hours=SESSION_HOURS,
                        login_max_failures=MAX_FAILURES, login_window_s=60, cors_origins=PORTAL, trusted_hosts="",
                        _env_file=None)
    services = build_services(App(settings, embedder=real_embedder, llm=FakeLLMServer(lambda _: "x").llm()))  # type: ignore[arg-type]
    app = create_server(settings, services)
    context = state.current()
    with serving(app) as url:
        yield Chat(url, settings, context, app)


@pytest.fixture
def fresh(chat: Chat) -> Iterator[Chat]:
    """The chat with its original users again afterwards."""
    yield chat
    state.install(chat.context)


def _address() -> str:
    """A client address of its own (uvicorn trusts X-Forwarded-For from 127.0.0.1): throttle counts per test."""
    return f"10.{secrets.randbelow(250)}.{secrets.randbelow(250)}.{secrets.randbelow(250) + 1}"


def _login(chat: Chat, name: str, password: str | None = None, address: str | None = None) -> httpx.Response:
    return httpx.post(f"{chat.url}/chat/login", data={"username": name, "password": password or PASSWORDS[name]},
                      headers={"X-Forwarded-For": address or _address()}, timeout=30)


def _token(chat: Chat, name: str) -> str:
    response = _login(chat, name)
    assert response.status_code == 200, response.text
    return response.cookies["access_token"]


def _user(chat: Chat, token: str) -> httpx.Response:
    return httpx.get(f"{chat.url}/chat/user", cookies={"access_token": token}, timeout=10)


# --- the secret and the session's lifetime ---


def test_short_secret_is_refused_at_start() -> None:
    from ui.chat.mount import mount_chat

    settings = Settings(ui_auth_secret="s" * 31, ui_users=_users_spec({"alice": "pw"}), _env_file=None)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match=r"RAG_UI_AUTH_SECRET is 31 bytes.*openssl rand -hex 32"):
        mount_chat(FastAPI(), settings, lambda: None)  # type: ignore[arg-type,return-value]


def test_session_lasts_the_configured_hours(chat: Chat) -> None:
    response = _login(chat, "alice")
    assert response.status_code == 200, response.text
    assert re.search(r"Max-Age=7200\b", response.headers["set-cookie"], re.IGNORECASE)
    claims = jwt.decode(response.cookies["access_token"], SECRET, algorithms=["HS256"])
    assert claims["exp"] - claims["iat"] == 7200
    assert "pbkdf2" not in json.dumps(claims)  # a fingerprint of the hash, never the hash
    user = chat.context.users["alice"]
    token = response.cookies["access_token"]
    assert current_user(token, chat.context) == user
    # A token older than RAG_SESSION_HOURS is over, even one signed for longer (the setting was lowered).
    assert current_user(token, chat.context, now=time.time() + 7200 + 60) is None


# --- sessions end with the user's removal or new password ---


def test_sessions_end_when_the_user_is_removed_or_the_password_changes(fresh: Chat) -> None:
    tokens = {name: _token(fresh, name) for name in ("alice", "bob", "carol")}
    assert all(_user(fresh, token).status_code == 200 for token in tokens.values())
    # alice leaves RAG_UI_USERS, bob gets a new hash (even of the same password), carol stays as she was.
    carol_entry = next(e for e in fresh.settings.ui_users.split(",") if e.startswith("carol:"))
    spec = f"bob:{hash_password(PASSWORDS['bob'], iterations=1000)},{carol_entry}"
    state.install(ChatContext(fresh.settings, fresh.context.services, parse_users(spec)))

    for name in ("alice", "bob"):
        response = _user(fresh, tokens[name])
        assert response.status_code == 401, (name, response.text)
        assert re.search(r'access_token=""; .*Max-Age=0', response.headers["set-cookie"]), "cookie not deleted"
        # Nor can the old token be traded for a new one.
        renewed = httpx.post(f"{fresh.url}/chat/auth/jwt", headers={"Authorization": f"Bearer {tokens[name]}"})
        assert renewed.status_code == 401 and "access_token" not in renewed.cookies
    assert _user(fresh, tokens["carol"]).json()["identifier"] == "carol"
    # The page itself still loads, and one signs in again over the ended session's cookie.
    assert httpx.get(f"{fresh.url}/chat/", cookies={"access_token": tokens["alice"]}).status_code == 200
    with httpx.Client(base_url=fresh.url, cookies={"access_token": tokens["bob"]}) as browser:
        signed_in = browser.post("/chat/login", data={"username": "bob", "password": PASSWORDS["bob"]})
        assert signed_in.status_code == 200, signed_in.text
        # A browser applies Set-Cookie in order: the new session's cookie must not be deleted after it is set.
        cookies = [line for line in signed_in.headers.get_list("set-cookie") if line.startswith("access_token=")]
        assert len(cookies) == 1 and "Max-Age=0" not in cookies[0], cookies
        assert browser.get("/chat/user").json()["identifier"] == "bob"


def _socket(chat: Chat, token: str | None, origin: str | None = None) -> ClientConnection:
    """A websocket to Chainlit's socket.io (engine.io 4), its open packet read."""
    url = chat.url.replace("http://", "ws://") + "/chat/ws/socket.io/?EIO=4&transport=websocket"
    cookie = {"Cookie": f"access_token={token}"} if token else {}
    socket = ws_connect(url, origin=origin, additional_headers=cookie, open_timeout=10)  # type: ignore[arg-type]
    assert str(socket.recv(timeout=10)).startswith("0{")
    return socket


def _join(socket: ClientConnection) -> str:
    """Socket.io's connect with Chainlit's auth payload; returns the server's answer packet."""
    auth = {"sessionId": str(uuid.uuid4()), "clientType": "webapp", "userEnv": "{}", "chatProfile": None,
            "threadId": None}
    socket.send("40" + json.dumps(auth))
    return str(socket.recv(timeout=10))


def _refused_status(connect: Callable[[], object]) -> int:
    with pytest.raises(InvalidStatus) as refused:
        connect()
    return refused.value.response.status_code


def test_ended_sessions_cannot_open_the_socket(fresh: Chat) -> None:
    tokens = {name: _token(fresh, name) for name in ("alice", "bob", "carol")}
    with _socket(fresh, tokens["alice"]) as socket:
        assert _join(socket).startswith('40{"sid"')
    fresh.install_users({"bob": "a new password", "carol": PASSWORDS["carol"]})
    carol = _token(fresh, "carol")
    for name in ("alice", "bob"):
        assert _refused_status(partial(_socket, fresh, tokens[name])) in (401, 403), name
        polling = httpx.get(f"{fresh.url}/chat/ws/socket.io/?EIO=4&transport=polling",
                            cookies={"access_token": tokens[name]})
        assert polling.status_code == 401, (name, polling.text)
    with _socket(fresh, carol) as socket:
        assert _join(socket).startswith('40{"sid"')


def _frames_until_closed(socket: ClientConnection, seconds: float = 15) -> list[str]:
    frames: list[str] = []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            frame = str(socket.recv(timeout=deadline - time.monotonic()))
            frames.append(frame)
            if frame == "2":
                socket.send("3")  # engine.io ping → pong
            if frame.startswith("41"):
                break
    except (TimeoutError, ConnectionClosed):
        pass
    return frames


def test_open_socket_refuses_messages_once_the_session_ends(fresh: Chat) -> None:
    token = _token(fresh, "dave")
    with _socket(fresh, token) as socket:
        assert _join(socket).startswith('40{"sid"')
        fresh.install_users({name: pw for name, pw in PASSWORDS.items() if name != "dave"})
        step = {"id": str(uuid.uuid4()), "name": "dave", "type": "user_message", "output": "What is the VPN?",
                "createdAt": datetime.now(UTC).isoformat()}
        socket.send("42" + json.dumps(["client_message", {"message": step, "fileReferences": []}]))
        frames = _frames_until_closed(socket)
    said = "\n".join(frames)
    assert ENDED["en"] in said, said[-2000:]
    assert any(frame.startswith("41") for frame in frames), "the socket was not closed"


# --- the socket's origin ---


def test_foreign_origin_is_refused_on_the_socket(chat: Chat) -> None:
    token = _token(chat, "carol")
    for origin in ("http://evil.example", "null", chat.url.replace("127.0.0.1", "localhost")):
        assert _refused_status(partial(_socket, chat, token, origin=origin)) == 403, origin
        polling = httpx.get(f"{chat.url}/chat/ws/socket.io/?EIO=4&transport=polling",
                            headers={"Origin": origin}, cookies={"access_token": token})
        assert polling.status_code == 403, (origin, polling.text)
    for allowed in (chat.url, PORTAL, None):  # its own pages, RAG_CORS_ORIGINS, a client that is not a browser
        with _socket(chat, token, origin=allowed) as socket:
            assert _join(socket).startswith('40{"sid"'), allowed


# --- the sign-in throttle ---


@pytest.fixture
def counted_checks(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, float]]:
    """Password checks run by the chat's sign-in, counted, with the most run at once (each takes `delay` s)."""
    counts: dict[str, float] = {"calls": 0, "running": 0, "most": 0, "delay": 0.3}
    lock, real = threading.Lock(), users.verify_password

    def verify(password: str, password_hash: str) -> bool:
        with lock:
            counts["calls"] += 1
            counts["running"] += 1
            counts["most"] = max(counts["most"], counts["running"])
        time.sleep(counts["delay"])
        try:
            return real(password, password_hash)
        finally:
            with lock:
                counts["running"] -= 1

    monkeypatch.setattr(users, "verify_password", verify)
    yield counts


def test_login_is_throttled_per_address_and_per_name_before_any_hash(chat: Chat,
                                                                      counted_checks: dict[str, float]) -> None:
    address = _address()
    for _ in range(MAX_FAILURES):
        assert _login(chat, "erin", "guess", address).status_code == 401
    assert counted_checks["calls"] == MAX_FAILURES
    for name, where in (("erin", address), ("erin", _address()), ("frank", address)):  # the right passwords
        throttled = _login(chat, name, address=where)
        assert throttled.status_code == 429, (name, throttled.text)
        assert 1 <= int(throttled.headers["retry-after"]) <= 60
        assert "content-security-policy" in throttled.headers
    assert counted_checks["calls"] == MAX_FAILURES  # no password was checked
    # Unknown names cost a check like known ones, and count like them.
    other = _address()
    for n in range(MAX_FAILURES):
        assert _login(chat, f"nobody{n}", "guess", other).status_code == 401
    assert counted_checks["calls"] == 2 * MAX_FAILURES
    assert _login(chat, "carol", address=other).status_code == 429
    assert _login(chat, "carol").status_code == 200  # elsewhere, carol is fine


def test_password_checks_run_one_at_a_time(chat: Chat, counted_checks: dict[str, float]) -> None:
    statuses: list[int] = []

    def sign_in(name: str) -> None:
        statuses.append(_login(chat, name).status_code)

    threads = [threading.Thread(target=sign_in, args=(name,)) for name in ("alice", "bob", "carol")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [200, 200, 200] and counted_checks["most"] == 1
    limiter = chat.app.state.chat_login
    limiter.queue_s, counted_checks["delay"] = 0.2, 2.0  # too short a wait for the check running: turned away
    try:
        first = threading.Thread(target=sign_in, args=("alice",))
        first.start()
        deadline = time.monotonic() + 10
        while not counted_checks["running"] and time.monotonic() < deadline:
            time.sleep(0.01)
        sign_in("bob")
        first.join()
    finally:
        limiter.queue_s = 5.0
    assert sorted(statuses[3:]) == [200, 429] and counted_checks["most"] == 1


def test_throttle_window_slides() -> None:
    now = [0.0]
    throttle = Throttle(limit=2, window_s=10, clock=lambda: now[0])
    keys = ("address:a", "user:u")
    first = throttle.record(keys)
    now[0] = 4
    throttle.record(keys)
    assert throttle.retry_after(keys) == pytest.approx(6)
    throttle.forgive(keys, first)  # e.g. it was a successful sign-in
    assert throttle.retry_after(keys) is None
    throttle.record(keys)
    now[0] = 14.5
    assert throttle.retry_after(["user:u"]) is None  # the attempt at 4 fell out of the window


# --- security headers ---


def test_security_headers_on_api_and_chat_with_a_nonce_for_chainlits_scripts(chat: Chat) -> None:
    host = chat.url.removeprefix("http://")
    for path in ("/healthz", "/v1/documents", "/chat/", "/chat/auth/config"):
        headers = httpx.get(f"{chat.url}{path}").headers
        policy = headers["content-security-policy"]
        for directive in ("default-src 'self'", "img-src 'self' data: blob:", "frame-ancestors 'none'",
                          "object-src 'none'", "base-uri 'self'", "form-action 'self'", "worker-src 'self' blob:",
                          f"connect-src 'self' ws://{host} wss://{host}"):
            assert directive in policy, (path, directive, policy)
        assert (headers["x-content-type-options"], headers["x-frame-options"], headers["referrer-policy"]) == (
            "nosniff", "DENY", "no-referrer"), path
    page = httpx.get(f"{chat.url}/chat/", headers={"Accept-Encoding": "gzip"})  # Chainlit gzips its pages
    nonce = re.search(r"'nonce-([^']+)'", page.headers["content-security-policy"])
    assert nonce and page.text.count("<script") == page.text.count(f'<script nonce="{nonce[1]}"') >= 2
    assert not re.search(r"googleapis|gstatic|jsdelivr|https?://", page.text.split("<body")[0].split(
        "og:image")[0]), page.text[:2000]
    again = httpx.get(f"{chat.url}/chat/").headers["content-security-policy"]
    assert f"'nonce-{nonce[1]}'" not in again  # one per response
    assert "https://cdn.jsdelivr.net" in httpx.get(f"{chat.url}/docs").headers["content-security-policy"]


def test_rewrite_keeps_the_pages_own_links_and_existing_nonces() -> None:
    html = (b'<link rel="icon" href="/favicon" /><link\n  href="https://fonts.googleapis.com/css2" rel="stylesheet"'
            b'/><link rel="preconnect" href="//fonts.gstatic.com" crossorigin /><script>x()</script>'
            b'<script nonce="n0">y()</script><script type="module" src="/assets/a.js"></script>')
    rewritten = rewrite_html(html, "n1").decode()
    assert rewritten == ('<link rel="icon" href="/favicon" /><script nonce="n1">x()</script>'
                         '<script nonce="n0">y()</script><script nonce="n1" type="module" src="/assets/a.js"></script>')


def test_fingerprint_is_keyed_and_names_the_hash(chat: Chat) -> None:
    user: UiUser = chat.context.users["alice"]
    claims = {"identifier": "alice", "metadata": {"session": "forged"}, "iat": int(time.time()),
              "exp": int(time.time()) + 60}
    assert current_user(jwt.encode(claims, SECRET, algorithm="HS256"), chat.context) is None
    token = _token(chat, "alice")
    payload = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert payload["metadata"]["session"] not in user.password_hash
    assert current_user(jwt.encode(payload, "another secret of thirty-two bytes!", algorithm="HS256"),
                        chat.context) is None


# --- uploads before sign-in ---


def _upload_status(chat: Chat, cookie: str | None) -> int:
    """Announce a 40 MiB upload, send its first kilobyte, and read the answer: one that comes now was given
    before the body was read (a server reading it would wait for the rest)."""
    host, port = chat.url.removeprefix("http://").split(":")
    head = (f"POST /chat/project/file?session_id={uuid.uuid4()} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "Content-Type: multipart/form-data; boundary=b0undary\r\nContent-Length: 41943040\r\n"
            + (f"Cookie: access_token={cookie}\r\n" if cookie else "") + "\r\n")
    part = b'--b0undary\r\nContent-Disposition: form-data; name="file"; filename="big.txt"\r\n\r\n' + b"x" * 1024
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head.encode() + part)
        status = sock.recv(4096).split(b"\r\n", 1)[0]
    return int(status.split()[1])


def test_a_file_posted_without_a_current_session_is_refused_before_it_is_read(chat: Chat) -> None:
    """Chainlit parses (and spools to disk) a whole multipart body before it checks the sign-in: the guard answers
    first, for no session, an ended or forged one, and a reader's."""
    assert _upload_status(chat, None) == 401
    assert _upload_status(chat, "ended.or.forged") == 401
    assert _upload_status(chat, _token(chat, "bob")) == 403


# --- sessions end: counted from the sign-in, at sign-out, and only over https on the wire ---


def test_a_re_issued_token_does_not_extend_the_session(chat: Chat) -> None:
    """Chainlit's /auth/jwt gives a fresh token (new issue time and expiry) for any current one: the session still
    ends RAG_SESSION_HOURS after its sign-in."""
    from ui.chat.sessions import sign_in_metadata

    signed_in = time.time() - SESSION_HOURS * 3600 + 20  # a session 20 s from its end
    old = jwt.encode({"identifier": "carol", "display_name": None, "iat": int(signed_in), "exp": int(time.time()) + 60,
                      "metadata": sign_in_metadata(SECRET, chat.context.users["carol"], now=signed_in)},
                     SECRET, algorithm="HS256")
    renewed = httpx.post(f"{chat.url}/chat/auth/jwt", headers={"Authorization": f"Bearer {old}"}, timeout=10)
    assert renewed.status_code == 200, renewed.text
    fresh = renewed.cookies["access_token"]
    assert jwt.decode(fresh, SECRET, algorithms=["HS256"])["iat"] > signed_in + 3600  # Chainlit's new token
    assert current_user(fresh, chat.context) is not None
    assert current_user(fresh, chat.context, now=time.time() + 60) is None  # over with the sign-in, not later


def test_signing_out_ends_the_user_s_sessions_in_every_browser_and_after_a_restart(fresh: Chat) -> None:
    here, there = _token(fresh, "dave"), _token(fresh, "dave")
    assert _user(fresh, there).status_code == 200
    out = httpx.post(f"{fresh.url}/chat/logout", cookies={"access_token": here}, timeout=10)
    assert out.status_code == 200, out.text
    assert _user(fresh, here).status_code == 401 and _user(fresh, there).status_code == 401
    again = _token(fresh, "dave")  # signing in again works at once
    assert _user(fresh, again).status_code == 200
    restarted = ChatContext(fresh.settings, fresh.context.services, fresh.context.users)  # what a restart builds
    assert current_user(there, restarted) is None and current_user(again, restarted) is not None


def test_session_cookies_are_secure_over_https(chat: Chat) -> None:
    plain = _login(chat, "gail")
    assert plain.status_code == 200, plain.text
    assert "secure" not in plain.headers["set-cookie"].lower()  # a loopback demo over http must still sign in
    behind_tls = httpx.post(f"{chat.url}/chat/login", data={"username": "gail", "password": PASSWORDS["gail"]},
                            headers={"X-Forwarded-For": _address(), "X-Forwarded-Proto": "https"}, timeout=30)
    assert behind_tls.status_code == 200, behind_tls.text
    cookie = behind_tls.headers["set-cookie"]
    assert cookie.startswith("access_token=") and "; Secure" in cookie
    assert behind_tls.headers["strict-transport-security"] == "max-age=31536000"


# --- shared threads and other users' ratings ---


def _stored_thread(chat: Chat, thread: str, author: str, step: str) -> None:
    """A thread of `author` holding one answer, marked shared the way Chainlit's share route marks it."""
    import sqlite3

    database = chat.settings.data_dir / "chat.db"
    _token(chat, author)  # a sign-in stores the user: the tables exist from then on
    with sqlite3.connect(database) as db:
        db.execute('INSERT INTO threads ("id", "name", "userIdentifier", "metadata") VALUES (?, ?, ?, ?)',
                   (thread, "Bonus pool?", author, json.dumps({"is_shared": True})))
        db.execute('INSERT INTO steps ("id", "name", "type", "threadId", "output", "metadata") '
                   "VALUES (?, ?, ?, ?, ?, ?)",
                   (step, "Knowledge base", "assistant_message", thread, "The bonus pool is 7,340,000 kroner.", "{}"))


def test_thread_sharing_is_off_at_the_route(chat: Chat) -> None:
    _stored_thread(chat, "t-shared", "alice", "s-shared")
    bob = {"access_token": _token(chat, "bob")}
    for cookies in (bob, {}):
        shared = httpx.get(f"{chat.url}/chat/project/share/t-shared", cookies=cookies, timeout=10)
        assert shared.status_code == 404 and "7,340,000" not in shared.text
    share = httpx.put(f"{chat.url}/chat/project/thread/share", json={"threadId": "t-shared", "isShared": True},
                      cookies={"access_token": _token(chat, "alice")}, timeout=10)
    assert share.status_code == 404


def test_a_user_rates_only_answers_of_their_own_threads(chat: Chat) -> None:
    import sqlite3

    _stored_thread(chat, "t-rated", "alice", "s-rated")
    feedback = {"feedback": {"forId": "s-rated", "threadId": "t-rated", "value": 0, "comment": "[bob was here]"},
                "sessionId": str(uuid.uuid4())}
    bob = httpx.put(f"{chat.url}/chat/feedback", json=feedback, cookies={"access_token": _token(chat, "bob")},
                    timeout=10)
    assert bob.status_code != 200
    with sqlite3.connect(chat.settings.data_dir / "chat.db") as db:
        assert db.execute('SELECT count(*) FROM feedbacks WHERE "forId" = ?', ("s-rated",)).fetchone() == (0,)
    alice = httpx.put(f"{chat.url}/chat/feedback", json=feedback, cookies={"access_token": _token(chat, "alice")},
                      timeout=10)
    assert alice.status_code == 200, alice.text
    rating = {"feedbackId": alice.json()["feedbackId"]}
    gone = httpx.request("DELETE", f"{chat.url}/chat/feedback", json=rating,
                         cookies={"access_token": _token(chat, "bob")}, timeout=10)
    assert gone.status_code != 200
    with sqlite3.connect(chat.settings.data_dir / "chat.db") as db:
        assert db.execute('SELECT count(*) FROM feedbacks WHERE "forId" = ?', ("s-rated",)).fetchone() == (1,)
