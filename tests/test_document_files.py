"""A document's PDF at GET /v1/documents/{id}/file (what the chat's PDF viewer reads), against the served app under a
real uvicorn: whole and in byte ranges, only for those who may see it, one 404 for everything else.

Chainlit keeps global state and is mounted once per process (tests/test_chat_security.py): here `create_server`
runs with the Chainlit mount replaced by installing the chat's context alone; everything else is the served app's
own wiring. Sessions are the tokens Chainlit's sign-in issues (HS256 JWTs with the user's session fingerprint).
"""

from __future__ import annotations

import asyncio
import importlib
import io
import random
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import jwt
import pytest
from fastapi import FastAPI
from PIL import Image
from reportlab.lib.pagesizes import A4
from reportlab.lib.utils import ImageReader
from reportlab.pdfgen import canvas

from ingest import service
from rag.config import Settings
from rag.wiring import App
from tests.conftest import serving
from tests.fake_llm import FakeLLMServer
from ui.chat import state
from ui.chat.render import SourcePanel
from ui.chat.sessions import sign_in_metadata
from ui.serving.files import file_url
from ui.serving.services import Services, build_services
from ui.serving.users import hash_password, parse_users

SECRET = secrets.token_hex(32)
STAFF_KEY, HR_KEY = "staff-key-" + secrets.token_hex(8), "hr-key-" + secrets.token_hex(8)
SAME_ORIGIN = {"Sec-Fetch-Site": "same-origin"}  # what the chat page's PDF viewer sends


def _pdf(text: str, noise_px: int = 0) -> bytes:
    """A real PDF with a line of text; `noise_px` adds an incompressible image so that the file spans several of
    the response's 64 KiB reads."""
    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer, pagesize=A4)
    pdf.drawString(50, 800, text)
    if noise_px:
        noise = random.Random(7).randbytes(noise_px * noise_px * 3)
        pdf.drawImage(ImageReader(Image.frombytes("RGB", (noise_px, noise_px), noise)), 50, 400)
    pdf.showPage()
    pdf.save()
    return buffer.getvalue()


@dataclass
class Served:
    url: str
    docs: Path
    ids: dict[str, str]  # source → doc_id
    services: Services

    def get(self, source_or_id: str, token: str | None = None, **headers: str) -> httpx.Response:
        doc_id = self.ids.get(source_or_id, source_or_id)
        cookies = {"access_token": token} if token else None
        return httpx.get(f"{self.url}{file_url(doc_id)}", cookies=cookies, headers=headers, timeout=10)


def _write_documents(docs: Path, outside: Path) -> None:
    for name, groups, text, noise in (("staff guide.pdf", "staff", "Staff get 25 days of leave.", 200),
                                      ("hr.pdf", "hr", "The bonus pool is confidential.", 0),
                                      ("escape.pdf", "staff", "Moved out of the folder later.", 0),
                                      ("gone.pdf", "staff", "Deleted from disk later.", 0)):
        (docs / name).write_bytes(_pdf(text, noise))
        (docs / f"{name}.meta.yaml").write_text(f"groups: [{groups}]\n")
    (docs / "notes.md").write_text("---\ngroups: [staff]\n---\n# Notes\n\nStaff notes in Markdown.\n")
    (outside / "secret.pdf").write_bytes(_pdf("Outside the documents folder."))


def _mount_context_only(app: FastAPI, settings: Settings, services: Callable[[], Services]) -> None:
    state.install(state.ChatContext(settings, services, parse_users(settings.ui_users)))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, real_embedder: object) -> Iterator[Served]:
    from ui.server import create_server

    folder = tmp_path_factory.mktemp("files")
    docs, outside = folder / "docs", folder / "outside"
    docs.mkdir()
    outside.mkdir()
    _write_documents(docs, outside)
    users = (f"alice:{hash_password('alice pw', iterations=1000)}:staff,"
             f"hana:{hash_password('hana pw', iterations=1000)}:hr")
    settings = Settings(data_dir=folder / "data", chroma_url="", docs_dir=docs,  # type: ignore[call-arg]
                        api_keys=f"{STAFF_KEY}:staff,{HR_KEY}:hr", ui_users=users, ui_auth_secret=SECRET,
                        trusted_hosts="", _env_file=None)
    service.sync([docs], settings, embedder=real_embedder)  # type: ignore[arg-type]
    ids = {entry.source: entry.doc_id for entry in service.library(App(settings)).documents()}
    assert set(ids) == {"staff guide.pdf", "hr.pdf", "escape.pdf", "gone.pdf", "notes.md"}
    (docs / "gone.pdf").unlink()
    (docs / "escape.pdf").unlink()
    (docs / "escape.pdf").symlink_to(outside / "secret.pdf")  # a symlink out of the root, after its ingest
    services = build_services(App(settings, embedder=real_embedder, llm=FakeLLMServer(lambda _: "x").llm()))  # type: ignore[arg-type]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("ui.chat.mount.mount_chat", _mount_context_only)
        app = create_server(settings, services)
    with serving(app) as url:
        yield Served(url, docs, ids, services)


def _session(name: str, secret: str = SECRET, age_s: float = 0.0) -> str:
    """The session token Chainlit's sign-in sets as the `access_token` cookie."""
    user = state.current().users[name]
    issued = time.time() - age_s
    claims = {"identifier": name, "display_name": None, "metadata": sign_in_metadata(SECRET, user),
              "iat": int(issued), "exp": int(issued + 3600)}
    return jwt.encode(claims, secret, algorithm="HS256")


def test_a_signed_in_reader_gets_the_whole_pdf_inline(served: Served) -> None:
    response = served.get("staff guide.pdf", _session("alice"), **SAME_ORIGIN)
    expected = (served.docs / "staff guide.pdf").read_bytes()
    assert response.status_code == 200, response.text
    assert len(expected) > 2 * 64 * 1024 and response.content == expected
    headers = response.headers
    assert headers["content-type"] == "application/pdf"
    assert headers["content-disposition"] == "inline; filename*=utf-8''staff%20guide.pdf"
    assert (headers["cache-control"], headers["x-content-type-options"]) == ("private", "nosniff")
    assert (headers["accept-ranges"], headers["content-length"]) == ("bytes", str(len(expected)))
    assert "content-encoding" not in headers  # pdf.js reads ranges only from an unencoded file


@pytest.mark.parametrize(("header", "start", "end"), [
    ("bytes=0-1023", 0, 1024), ("bytes=65530-131080", 65530, 131081), ("bytes=100000-", 100000, None),
    ("bytes=-500", -500, None)])
def test_byte_ranges_are_206_with_the_right_bytes(served: Served, header: str, start: int, end: int | None) -> None:
    expected = (served.docs / "staff guide.pdf").read_bytes()
    response = served.get("staff guide.pdf", _session("alice"), Range=header)
    part = expected[start:end]
    first = start % len(expected)
    assert response.status_code == 206, response.text
    assert response.content == part
    assert response.headers["content-range"] == f"bytes {first}-{first + len(part) - 1}/{len(expected)}"
    assert response.headers["cache-control"] == "private"


def test_a_range_past_the_end_is_416(served: Served) -> None:
    size = (served.docs / "staff guide.pdf").stat().st_size
    response = served.get("staff guide.pdf", _session("alice"), Range=f"bytes={size}-")
    assert response.status_code == 416
    assert response.headers["content-range"] == f"bytes */{size}"


def test_everything_a_reader_may_not_read_is_the_same_404(served: Served) -> None:
    token = _session("alice")
    assert served.get("staff guide.pdf", token).status_code == 200
    refused = {what: served.get(what, token) for what in (
        "hr.pdf",  # another group's PDF
        "notes.md",  # hers, but not a PDF
        "gone.pdf",  # hers, deleted from disk
        "escape.pdf",  # hers, now a symlink out of the documents folder
        "0" * 24,  # no such id
    )}
    assert {what: r.status_code for what, r in refused.items()} == dict.fromkeys(refused, 404)
    assert len({r.content for r in refused.values()}) == 1, "the answers differ: they tell what exists"
    assert served.get("hr.pdf", _session("hana")).status_code == 200  # it exists, for the HR group


def test_api_keys_read_their_groups_pdfs(served: Served) -> None:
    hr = httpx.get(f"{served.url}{file_url(served.ids['hr.pdf'])}", headers={"Authorization": f"Bearer {HR_KEY}"})
    assert hr.status_code == 200 and hr.content == (served.docs / "hr.pdf").read_bytes()
    staff = httpx.get(f"{served.url}{file_url(served.ids['hr.pdf'])}",
                      headers={"Authorization": f"Bearer {STAFF_KEY}"})
    assert staff.status_code == 404
    wrong = httpx.get(f"{served.url}{file_url(served.ids['hr.pdf'])}", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 403


def test_no_current_session_is_401(served: Served) -> None:
    assert served.get("staff guide.pdf").status_code == 401
    assert served.get("staff guide.pdf", "not-a-token").status_code == 401
    assert served.get("staff guide.pdf", _session("alice", secret="another secret " * 3)).status_code == 401
    assert served.get("staff guide.pdf", _session("alice", age_s=9 * 3600)).status_code == 401  # past its hours
    response = served.get("staff guide.pdf")
    assert response.json()["error"]["type"] == "unauthorized" and "sign in" in response.json()["error"]["message"]


def test_another_sites_page_cannot_use_the_session(served: Served) -> None:
    """SameSite=lax still sends the cookie when another site links here: the session is not used then."""
    token = _session("alice")
    assert served.get("staff guide.pdf", token, **{"Sec-Fetch-Site": "cross-site"}).status_code == 401
    assert served.get("staff guide.pdf", token, Origin="https://evil.example").status_code == 401
    assert served.get("staff guide.pdf", token, **{"Sec-Fetch-Site": "none"}).status_code == 200  # typed URL


def test_the_route_is_in_the_openapi_document(served: Served) -> None:
    operation = httpx.get(f"{served.url}/openapi.json").json()["paths"]["/v1/documents/{doc_id}/file"]["get"]
    assert {"200", "206", "401", "404", "416"} <= set(operation["responses"])
    assert "application/pdf" in operation["responses"]["206"]["content"]


def test_the_chat_shows_cited_pdfs_from_the_route(served: Served) -> None:
    """The element the chat sends carries the route's URL: no path, no content, so Chainlit copies nothing."""
    import chainlit as cl
    from chainlit.context import init_http_context

    handlers = importlib.reload(importlib.import_module("ui.chat.handlers"))
    staff = served.ids["staff guide.pdf"]
    alice = state.current().users["alice"].principal
    assert handlers._pdf_urls(alice, set(served.ids.values())) == {staff: file_url(staff)}

    async def sent() -> cl.Pdf | cl.Text:
        init_http_context()
        element: cl.Pdf | cl.Text = handlers._element(SourcePanel("[1]", "pdf", "Staff…", file_url(staff), 1))
        await element._create(persist=False)  # what sending it does before it goes to the browser
        return element

    element = asyncio.run(sent())
    assert isinstance(element, cl.Pdf)
    assert (element.url, element.page, element.path, element.content) == (file_url(staff), 1, None, None)
    assert element.chainlit_key is None  # nothing copied into the session's files
