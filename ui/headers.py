"""Security headers on every response of the served app, API and chat alike (ASGI middleware, outermost).

The Content-Security-Policy is the backstop behind the chat's sanitised rendering: whatever a document or an
answer manages to put on the page, the browser fetches nothing from outside the app (images, styles, fonts,
scripts, socket and fetch targets all `'self'`), runs no script but the app's own files and the inline scripts
this middleware stamped with the response's nonce, and no other site may frame the app. HTML pages are rewritten
on the way out: each `<script>` gets the nonce, and links to outside hosts (Chainlit's index.html asks Google Fonts
and jsDelivr for fonts and a KaTeX stylesheet) are dropped so that the browser does not even try.
"""

from __future__ import annotations

import gzip
import re
import secrets
from collections.abc import Iterable

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_HTML_BYTES = 2 * 1024 * 1024  # pages larger than this go out unrewritten (their inline scripts then blocked)
SCRIPT_TAG = re.compile(rb"<script\b(?![^>]*\bnonce=)", re.IGNORECASE)
EXTERNAL_LINK = re.compile(rb"<link\b[^>]*\bhref=[\"']?(?:https?:)?//[^>]*>", re.IGNORECASE)
HOST = re.compile(r"(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?")
# FastAPI's /docs and /redoc pages load Swagger UI and ReDoc from jsDelivr: only there is that CDN allowed.
DOCS_CDN = "https://cdn.jsdelivr.net"
DOCS_IMAGES = "https://fastapi.tiangolo.com"  # the docs pages' favicon


def content_security_policy(nonce: str, host: str | None, docs: bool = False) -> str:
    """The policy of one response: `host` (the request's Host header) names the chat socket's ws/wss origin."""
    sockets = f" ws://{host} wss://{host}" if host and HOST.fullmatch(host) else ""
    cdn = f" {DOCS_CDN}" if docs else ""
    directives = {
        "default-src": "'self'",
        "script-src": f"'self' 'nonce-{nonce}'{cdn}",
        "style-src": f"'self' 'unsafe-inline'{cdn}",  # Chainlit's components (toasts, panels) inject style tags
        "img-src": "'self' data: blob:" + (f" {DOCS_IMAGES}" if docs else ""),
        "font-src": "'self' data:",
        "connect-src": f"'self'{sockets}",
        "worker-src": "'self' blob:",  # the PDF viewer's worker
        "frame-ancestors": "'none'",
        "object-src": "'none'",
        "base-uri": "'self'",
        "form-action": "'self'",
    }
    return "; ".join(f"{name} {value}" for name, value in directives.items())


def security_headers(scope: Scope, nonce: str, docs: bool = False, https: bool = False) -> dict[str, str]:
    """Every header this middleware adds to a response of `scope`'s request (a header the app set stays)."""
    host = next((value.decode("latin-1") for key, value in scope["headers"] if key == b"host"), None)
    headers = {
        "content-security-policy": content_security_policy(nonce, host, docs),
        "x-content-type-options": "nosniff",
        "x-frame-options": "DENY",
        "referrer-policy": "no-referrer",
        "cross-origin-opener-policy": "same-origin",
        "cross-origin-resource-policy": "same-origin",
        "permissions-policy": "camera=(), microphone=(), geolocation=()",
    }
    if https or scope.get("scheme") == "https":  # `https`: RAG_HTTPS, a TLS proxy in front
        headers["strict-transport-security"] = "max-age=31536000"
    return headers


def rewrite_html(html: bytes, nonce: str, strip_external: bool = True) -> bytes:
    """The page with the nonce on each `<script>` and, with `strip_external`, without `<link>`s to other hosts."""
    if strip_external:
        html = EXTERNAL_LINK.sub(b"", html)
    return SCRIPT_TAG.sub(b'<script nonce="' + nonce.encode() + b'"', html)


class SecurityHeaders:
    """Adds security_headers to every HTTP response, and rewrites HTML pages for their nonce."""

    def __init__(self, app: ASGIApp, docs_paths: Iterable[str | None] = (), https: bool = False) -> None:
        self.app = app
        self.docs_paths = frozenset(path for path in docs_paths if path)
        self.https = https

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        docs = scope["path"] in self.docs_paths
        await self.app(scope, receive, _Response(send, secrets.token_urlsafe(16), scope, docs, self.https).send)


class _Response:
    """One response on its way out: headers added at its start, an HTML body held back and rewritten."""

    def __init__(self, send: Send, nonce: str, scope: Scope, docs: bool, https: bool) -> None:
        self.downstream, self.nonce, self.docs = send, nonce, docs
        self.headers = security_headers(scope, nonce, docs, https)
        self.rewrite = scope["method"] != "HEAD"
        self.start: Message | None = None  # an HTML response's start, held until its body is complete
        self.body = b""

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = MutableHeaders(raw=list(message.get("headers", [])))
            for name, value in self.headers.items():
                headers.setdefault(name, value)
            message = {**message, "headers": headers.raw}
            if self.rewrite and headers.get("content-type", "").startswith("text/html"):
                self.start = message
                return
        elif message["type"] == "http.response.body" and self.start is not None:
            self.body += message.get("body", b"")
            if message.get("more_body", False) and len(self.body) <= MAX_HTML_BYTES:
                return
            await self._flush(more_body=message.get("more_body", False))
            return
        await self.downstream(message)

    async def _flush(self, more_body: bool) -> None:
        start, body = self.start, self.body
        assert start is not None
        self.start, self.body = None, b""
        headers = MutableHeaders(raw=start["headers"])
        page = None if more_body else _decoded(body, headers.get("content-encoding"))
        if page is not None:
            body = rewrite_html(page, self.nonce, strip_external=not self.docs)
            del headers["content-encoding"]
            headers["content-length"] = str(len(body))
        await self.downstream({**start, "headers": headers.raw})
        await self.downstream({"type": "http.response.body", "body": body, "more_body": more_body})


def _decoded(body: bytes, encoding: str | None) -> bytes | None:
    """The page's bytes without content encoding (Chainlit's app gzips); None for an encoding we do not undo."""
    if not encoding or encoding == "identity":
        return body
    if encoding == "gzip":
        try:
            return gzip.decompress(body)
        except (OSError, EOFError):
            return None
    return None
