"""Files dropped into the chat: the handler adds an admin's through the API's upload use case (real MiniLM, real
Chroma, real files in Chainlit's session folder) and refuses anyone else's; the guard refuses a reader's upload
before Chainlit stores it; Chainlit's upload settings mirror ours.

The handler runs as Chainlit runs it, in an HTTP context carrying the signed-in user's session token; the messages
it sends are recorded as they leave.
"""

from __future__ import annotations

import asyncio
import importlib
import secrets
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import chainlit as cl
import jwt
import pytest
from chainlit.config import FILES_DIRECTORY, config
from chainlit.context import init_http_context
from chainlit.server import validate_file_upload
from starlette.datastructures import Headers, UploadFile
from starlette.types import Message, Receive, Scope, Send

from ingest import service
from rag.config import Settings
from rag.core.access import Principal
from rag.core.ports import Embedder
from rag.wiring import App
from tests.fake_llm import FakeLLMServer
from ui.chat import state, uploads
from ui.chat.guard import ChatGuard
from ui.chat.login import LoginLimiter
from ui.chat.sessions import sign_in_metadata
from ui.serving.services import Services, build_services
from ui.serving.uploads import MAX_FILES
from ui.serving.users import hash_password, parse_users

SECRET = secrets.token_hex(32)
ANSWER = "Staff get 25 days of annual leave per year [1]."
VPN = b"# VPN\n\nConnect to the office VPN with the WireGuard profile named quokka-tunnel.\n"


@dataclass
class Chat:
    services: Services
    handlers: ModuleType
    shown: list[cl.Message] = field(default_factory=list)  # every message the handler sent, as it is now

    @property
    def docs(self) -> Path:
        return self.services.settings.documents_dir

    def texts(self) -> list[str]:
        return [message.content for message in self.shown]

    def stored(self) -> list[str]:
        """The documents folder's files, hidden ones (staged uploads) included."""
        return sorted(path.name for path in self.docs.iterdir())

    def sources(self, query: str, user: str) -> list[str]:
        """The sources of what a user's search finds (the answer engine's own retriever)."""
        principal = state.current().users[user].principal
        return [hit.source for hit in self.services.engine.retriever.search(query, 3, principal)]


@pytest.fixture
def chat(settings: Settings, real_embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> Iterator[Chat]:
    local = settings.model_copy(update={"ui_auth": True, "ui_auth_secret": SECRET, "ingest_wait_s": 0.5,
                                        "max_upload_mb": 0.05})
    local.documents_dir.mkdir(parents=True)
    (local.documents_dir / "leave.md").write_text("# Leave\n\nStaff get 25 days of annual leave per year.\n")
    service.sync([local.documents_dir], local, embedder=real_embedder)
    services = build_services(App(local, embedder=real_embedder, llm=FakeLLMServer(lambda _: ANSWER).llm()))
    users = parse_users(f"root:{hash_password('r', 1000)}:*:admin,alice:{hash_password('a', 1000)}:staff,"
                        f"hana:{hash_password('h', 1000)}:hr:admin")
    state.install(state.ChatContext(local, lambda: services, users))
    chat = Chat(services, importlib.reload(importlib.import_module("ui.chat.handlers")))

    async def send(message: cl.Message) -> Any:
        chat.shown.append(message)
        return await original_send(message)  # type: ignore[no-untyped-call]

    original_send = cl.Message.send
    monkeypatch.setattr(cl.Message, "send", send)
    yield chat
    services.ingest_pool.shutdown()


def _token(name: str) -> str:
    """The session token Chainlit's sign-in issues (as in tests/test_document_files.py)."""
    user = state.current().users[name]
    claims = {"identifier": name, "display_name": None, "metadata": sign_in_metadata(SECRET, user),
              "iat": int(time.time()), "exp": int(time.time() + 3600)}
    return jwt.encode(claims, SECRET, algorithm="HS256")


def _drop(chat: Chat, user: str, files: list[tuple[str, bytes]], question: str = "") -> list[Path]:
    """`user` sends a message with `files` as Chainlit hands them over: each already stored in the session's folder
    and listed among the session's files. Returns where they were stored."""

    async def send() -> list[Path]:
        init_http_context(user=cl.User(identifier=user), auth_token=_token(user))
        session = cl.context.session
        folder = FILES_DIRECTORY / session.id
        folder.mkdir(parents=True)
        elements, paths, keys = [], [], []
        for name, data in files:
            key = str(uuid.uuid4())
            path = folder / key
            path.write_bytes(data)
            session.files[key] = {"id": key, "path": path, "name": name, "type": "text/markdown", "size": len(data)}
            elements.append(cl.File(name=name, path=str(path), mime="text/markdown", chainlit_key=key))
            paths.append(path)
            keys.append(key)
        await chat.handlers.on_message(cl.Message(content=question, elements=elements))
        assert not set(keys) & set(session.files), "the session still lists a dropped file"
        assert not any(path.exists() for path in paths), "a dropped file is still in the session's folder"
        shutil.rmtree(folder)  # what Chainlit does when the session ends (the answer's source panels are there)
        return paths

    return asyncio.run(send())


def test_an_admins_file_is_added_and_searchable_with_progress(chat: Chat) -> None:
    _drop(chat, "root", [("VPN guide.md", VPN)])
    assert chat.texts() == ["✅ `VPN guide.md` added: 1 passage, visible to everyone."]
    assert chat.stored() == ["VPN guide.md", "leave.md"]  # nothing staged left behind
    assert chat.sources("Which WireGuard profile do I use for the VPN?", "alice")[0] == "VPN guide.md"


def test_front_matter_groups_label_the_document_as_for_the_api(chat: Chat) -> None:
    """No label of the chat's own: the document's front matter (or sidecar) decides, as for rag-ingest and the API."""
    _drop(chat, "root", [("payroll.md", b"---\ngroups: [hr]\n---\n# Payroll\n\nPayslips come on the 25th.\n")])
    assert chat.texts() == ["✅ `payroll.md` added: 1 passage, visible to the groups `hr`."]
    assert "payroll.md" not in chat.sources("When do payslips come?", "alice")
    assert chat.sources("When do payslips come?", "root")[0] == "payroll.md"


def test_a_readers_files_are_refused_and_removed(chat: Chat) -> None:
    paths = _drop(chat, "alice", [("VPN guide.md", VPN), ("notes.md", b"# Notes\n")])
    assert chat.texts() == ["⚠️ Only administrators can add documents to the knowledge base; `VPN guide.md`, "
                            "`notes.md` not stored."]
    assert chat.stored() == ["leave.md"] and not any(path.exists() for path in paths)
    assert "VPN guide.md" not in chat.sources("WireGuard profile quokka-tunnel", "root")


def test_the_apis_limits_and_errors(chat: Chat) -> None:
    """Type, size (RAG_MAX_UPLOAD_MB, here 0.05), unreadable content: each file its own clear message, the others
    still added; nothing of a refused file stays."""
    broken_pdf = b"%PDF-1.7\nthis is not a PDF body\n"
    _drop(chat, "root", [("tool.exe", b"MZ"), ("big.md", b"# Big\n" + b"word " * 12_000),
                         ("broken.pdf", broken_pdf), ("VPN guide.md", VPN)])
    texts = chat.texts()
    assert texts[:2] == ["⚠️ `tool.exe` was not added: tool.exe: supported types are PDF, Markdown, TXT/RST, HTML, DOCX",
                         "⚠️ `big.md` was not added: upload over 51.2 KiB (RAG_MAX_UPLOAD_MB)"]
    assert texts[2].startswith("⚠️ `broken.pdf` was not added: broken.pdf: "), texts[2]
    assert texts[3] == "✅ `VPN guide.md` added: 1 passage, visible to everyone."
    assert chat.stored() == ["VPN guide.md", "leave.md"]


def test_more_files_than_allowed_are_all_refused(chat: Chat) -> None:
    paths = _drop(chat, "root", [(f"n{n}.md", b"# N\n") for n in range(MAX_FILES + 1)])
    assert chat.texts()[0].startswith(f"⚠️ Drop at most {MAX_FILES} files at a time; `n0.md`, ")
    assert chat.stored() == ["leave.md"] and not any(path.exists() for path in paths)


def test_a_busy_index_says_ingest_busy(chat: Chat) -> None:
    with chat.services.library.lock("a test's sync"):
        _drop(chat, "root", [("VPN guide.md", VPN)])
    assert chat.texts()[0].startswith("⚠️ `VPN guide.md` was not added: ingest busy (another ingest is running: "
                                      "a test's sync"), chat.texts()
    assert chat.stored() == ["leave.md"]


def test_a_document_of_the_same_name_is_replaced_only_when_the_admin_says_so(
        chat: Chat, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def answer(replace: bool) -> None:
        async def confirm(name: str, language: str) -> bool:
            asked.append(name)
            return replace
        monkeypatch.setattr(uploads, "confirm_replace", confirm)

    answer(False)
    _drop(chat, "root", [("leave.md", b"# Leave\n\nStaff get 30 days of annual leave.\n")])
    answer(True)
    _drop(chat, "root", [("leave.md", b"# Leave\n\nStaff get 31 days of annual leave.\n")])
    assert asked == ["leave.md", "leave.md"]
    assert chat.texts() == ["⚠️ `leave.md` was not added: kept the indexed version",
                            "✅ `leave.md` replaced: 1 passage, visible to everyone."]
    assert "31 days" in (chat.docs / "leave.md").read_text() and chat.stored() == ["leave.md"]


def test_an_admin_of_some_groups_uploads_into_a_folder_of_its_own_labelled_with_them(chat: Chat) -> None:
    """hana administers hr only. Her payroll.md does not touch root's finance document of that name: it lands in
    `hr/`, labelled hr (so staff do not retrieve it), and she cannot label a document with groups she lacks."""
    _drop(chat, "root", [("payroll.md", b"---\ngroups: [finance]\n---\n# Payroll\n\nFinance only.\n")])
    _drop(chat, "hana", [("payroll.md", b"# Payroll\n\nPayroll questions go to the hr team quokka desk.\n")])
    assert "Finance only" in (chat.docs / "payroll.md").read_text()
    assert (chat.docs / "hr" / "payroll.md.meta.yaml").read_text() == "groups: [hr]\n"
    assert chat.sources("payroll quokka desk", "hana")[0] == "hr/payroll.md"
    assert "hr/payroll.md" not in chat.sources("payroll quokka desk", "alice")  # staff: not in hr
    _drop(chat, "hana", [("budget.md", b"---\ngroups: [finance]\n---\n# Budget\n\nPlanted.\n")])
    assert chat.texts()[-1].startswith("⚠️ `budget.md` was not added: budget.md is labelled with groups you are "
                                       "not in (finance)")
    assert not (chat.docs / "hr" / "budget.md").exists() and not (chat.docs / "hr" / "budget.md.meta.yaml").exists()


def test_a_name_the_admin_may_not_see_gets_the_answer_of_one_it_may(chat: Chat) -> None:
    """A finance document that root put into hr's folder: hana's upload of that name, replace or not, is told
    exactly what an existing hr document without replace tells her, nothing about its groups."""
    (chat.docs / "hr").mkdir()
    (chat.docs / "hr" / "secret.md").write_text("---\ngroups: [finance]\n---\n# Secret\n\nFinance only.\n")
    (chat.docs / "hr" / "mine.md").write_text("---\ngroups: [hr]\n---\n# Mine\n\nHr only.\n")
    chat.services.library.sync([chat.docs])
    _drop(chat, "hana", [("secret.md", b"# Secret\n\nReplaced.\n"), ("mine.md", b"# Mine\n\nAgain.\n")])
    hidden, visible = chat.texts()[-2:]
    assert hidden.replace("secret.md", "NAME") == visible.replace("mine.md", "NAME"), (hidden, visible)
    assert "kept the indexed version" in hidden and "groups" not in hidden
    assert "Finance only" in (chat.docs / "hr" / "secret.md").read_text()


def test_the_question_with_the_files_is_answered_after_them(chat: Chat) -> None:
    _drop(chat, "root", [("VPN guide.md", VPN)], question="How many days of annual leave do staff get?")
    texts = chat.texts()
    assert texts[0] == "✅ `VPN guide.md` added: 1 passage, visible to everyone."
    assert texts[-1].startswith("Staff get 25 days of annual leave per year [1]."), texts


def test_only_files_in_chainlits_session_folder_are_taken(chat: Chat, tmp_path: Path) -> None:
    """An element pointing anywhere else is neither ingested nor removed; one already handled (an edited message
    keeps its elements) is not taken again."""
    elsewhere, handled = tmp_path / "keep.md", FILES_DIRECTORY / f"{uuid.uuid4()}.md"
    elsewhere.write_bytes(VPN)

    async def dropped(path: Path) -> list[object]:
        init_http_context()
        return list(uploads.dropped_files(cl.Message(content="", elements=[cl.File(name="k", path=str(path))])))

    assert asyncio.run(dropped(elsewhere)) == [] and elsewhere.exists()
    assert asyncio.run(dropped(handled)) == []
    handled.write_bytes(VPN)
    try:
        assert len(asyncio.run(dropped(handled))) == 1
    finally:
        handled.unlink()


def _scope(path: str, token: str | None) -> Scope:
    headers = [(b"cookie", f"access_token={token}".encode())] if token else []
    return {"type": "http", "method": "POST", "path": f"/chat{path}", "root_path": "/chat", "headers": headers,
            "query_string": b""}


def test_the_guard_refuses_a_readers_upload_before_chainlit_reads_it(chat: Chat) -> None:
    reached: list[str] = []

    async def chainlit(scope: Scope, receive: Receive, send: Send) -> None:
        reached.append(scope["path"])

    async def call(path: str, token: str | None) -> int:
        sent: list[Message] = []

        async def send(message: Message) -> None:
            sent.append(message)

        async def receive() -> Message:
            raise AssertionError("the body was read")

        guard = ChatGuard(chainlit, login=LoginLimiter(5, 60.0, 2))
        await guard(_scope(path, token), receive, send)
        return int(sent[0]["status"]) if sent else 0

    assert asyncio.run(call("/project/file", _token("alice"))) == 403
    assert asyncio.run(call("/project/file", _token("root"))) == 0  # on to Chainlit
    assert asyncio.run(call("/project/file", None)) == 401  # Chainlit would store the body before asking
    assert asyncio.run(call("/project/file", "not-a-session")) == 401
    assert reached == ["/chat/project/file"]


def test_chainlits_upload_settings_mirror_ours(chat: Chat, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config.features, "spontaneous_file_upload", config.features.spontaneous_file_upload)
    uploads.configure(config, Settings(max_upload_mb=2.5, _env_file=None))  # type: ignore[call-arg]
    feature = config.features.spontaneous_file_upload
    # 2.5 MiB is 2.62 MB: the browser (10^6 bytes) and Chainlit's server (MiB) let 3 through; ours refuses exactly.
    assert feature is not None and (feature.enabled, feature.max_files, feature.max_size_mb) == (True, 10, 3)

    def check(name: str, mime: str, size: int = 10) -> None:
        validate_file_upload(UploadFile(file=None, filename=name, size=size,  # type: ignore[arg-type]
                                        headers=Headers({"content-type": mime})))

    for name, mime in (("a.md", "text/markdown"), ("a.rst", "application/octet-stream"), ("a.pdf", "application/pdf"),
                       ("a.docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document")):
        check(name, mime)
    for name, mime, size in (("a.exe", "application/x-msdownload", 10), ("a.png", "image/png", 10),
                             ("a.md", "text/markdown", 4 * 2**20)):
        with pytest.raises(ValueError, match=r"not allowed|too large"):
            check(name, mime, size)
    # The attach button: shown to admins only, through their one chat profile's settings.
    admin, reader = uploads.chat_profiles(Principal("root", role="admin")), uploads.chat_profiles(Principal("alice"))
    assert len(admin) == len(reader) == 1 and admin[0].config_overrides is None
    shown = config.with_overrides(reader[0].config_overrides).features.spontaneous_file_upload
    assert shown is not None and not shown.enabled and shown.accept == feature.accept
