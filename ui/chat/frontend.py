"""Chainlit's frontend as the chat serves it: its main script, with source panels that open only when clicked.

Chainlit 2.11 and later open the side panel by themselves whenever `display="side"` elements arrive, titled by
the last one and showing all of them (Chainlit issue #2979; PR #2982 takes that call out). The chat serves
Chainlit's main script with that one call made a no-op: a panel opens when its link is clicked, showing its own
element under its own name, as in Chainlit 2.10 (Chainlit still closes the panel when no side element is left).
A script without the call (a Chainlit that fixed it) is served as it is.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import chainlit
from starlette.requests import Request
from starlette.responses import Response

log = logging.getLogger("rag.chat")
BUILD = Path(chainlit.__file__).parent / "frontend" / "dist"
_MAIN = re.compile(r'<script type="module"[^>]*\bsrc="/assets/([\w.-]+\.js)"')
# MessagesContainer's effect, minified: setSideView({title: side[side.length - 1].name, elements: side})
AUTO_OPEN = re.compile(rb"[\w$]+\(\{title:([\w$]+)\[\1\.length-1\]\.name,elements:\1\}\)")


def without_auto_open(script: bytes) -> bytes:
    """The script with its one call that opens the side panel when side elements arrive made a no-op."""
    patched, count = AUTO_OPEN.subn(b"void 0", script)
    return patched if count == 1 else script


@dataclass(frozen=True, slots=True)
class MainScript:
    """Chainlit's main script as the chat serves it, under the name Chainlit's index.html gives it; gzipped once
    (Chainlit gzips what it serves itself)."""

    name: str
    body: bytes
    gzipped: bytes
    etag: str

    async def serve(self, request: Request) -> Response:
        """The script, gzipped where the browser takes it, or 304 for the version it holds (it asks again each
        time: no-cache)."""
        headers = {"etag": self.etag, "cache-control": "no-cache", "vary": "accept-encoding"}
        if request.headers.get("if-none-match") == self.etag:
            return Response(status_code=304, headers=headers)
        if "gzip" in request.headers.get("accept-encoding", ""):
            return Response(self.gzipped, media_type="text/javascript", headers=headers | {"content-encoding": "gzip"})
        return Response(self.body, media_type="text/javascript", headers=headers)


def main_script(build: Path = BUILD) -> MainScript | None:
    """Chainlit's main script without the panel's auto-open; None (Chainlit serves its own) when it has no
    auto-open or its index.html names no script."""
    found = _MAIN.search((build / "index.html").read_text(encoding="utf-8"))
    if found is None:
        log.warning("Chainlit's index.html names no main script: its source panels may open by themselves")
        return None
    original = (build / "assets" / found[1]).read_bytes()
    body = without_auto_open(original)
    if body == original:
        log.info("Chainlit's main script does not open source panels by itself: served as it is")
        return None
    etag = f'W/"{hashlib.sha256(body).hexdigest()[:32]}"'  # weak: the same for the gzipped body
    return MainScript(found[1], body, gzip.compress(body, mtime=0), etag)
