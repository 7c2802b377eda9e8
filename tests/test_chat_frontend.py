"""Chainlit's main script as the chat serves it: the installed one loses exactly its panel auto-open call."""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.testclient import TestClient

from ui.chat.frontend import AUTO_OPEN, BUILD, main_script, without_auto_open

MINIFIED = (b'const D=r.filter(V=>V.display==="side");if(D.length===0){u(void 0);return}'
            b"if(c){x.current=V,v.current=re,u({title:D[D.length-1].name,elements:D})}},[r]);"
            b"const S=E.useCallback(D=>{if(D.display===\"side\"){u({title:D.name,elements:[D]});return}")


def test_only_the_auto_open_call_goes() -> None:
    """Opening on a click (title: the element's own name, only that element) and closing stay."""
    assert without_auto_open(MINIFIED) == MINIFIED.replace(b"u({title:D[D.length-1].name,elements:D})", b"void 0")
    twice = MINIFIED + MINIFIED
    assert without_auto_open(twice) == twice  # not the script this was written for: left alone
    fixed = MINIFIED.replace(b",u({title:D[D.length-1].name,elements:D})", b"")
    assert without_auto_open(fixed) == fixed  # a Chainlit without the call: served as it is


def test_the_installed_chainlit_script_is_served_without_its_auto_open() -> None:
    """Fails when a Chainlit upgrade changes the script: check then whether panels still open by themselves."""
    script = main_script()
    assert script is not None
    original = (BUILD / "assets" / script.name).read_bytes()
    [call] = [match[0] for match in AUTO_OPEN.finditer(original)]
    assert script.body == original.replace(call, b"void 0") != original


def test_a_chainlit_without_the_call_serves_its_own(tmp_path: Path) -> None:
    (tmp_path / "assets").mkdir()
    (tmp_path / "index.html").write_text('<script type="module" crossorigin src="/assets/index-x1.js"></script>')
    (tmp_path / "assets" / "index-x1.js").write_bytes(b"console.log(1)")
    assert main_script(tmp_path) is None
    (tmp_path / "index.html").write_text("<html></html>")
    assert main_script(tmp_path) is None


def test_the_script_is_gzipped_revalidated_and_answers_304_for_the_version_held() -> None:
    script = main_script()
    assert script is not None
    app = Starlette()
    app.add_route(f"/chat/assets/{script.name}", script.serve, methods=["GET", "HEAD"])
    with TestClient(app) as client:
        first = client.get(f"/chat/assets/{script.name}")  # httpx asks for gzip, and decodes it
        assert first.status_code == 200 and first.content == script.body
        assert first.headers["content-type"].startswith("text/javascript")
        assert (first.headers["content-encoding"], first.headers["etag"], first.headers["cache-control"]) == (
            "gzip", script.etag, "no-cache")
        plain = client.get(f"/chat/assets/{script.name}", headers={"accept-encoding": "identity"})
        assert plain.content == script.body and "content-encoding" not in plain.headers
        again = client.get(f"/chat/assets/{script.name}", headers={"if-none-match": script.etag})
        assert again.status_code == 304 and again.content == b""
