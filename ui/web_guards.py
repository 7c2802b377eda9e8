"""What a browser may do with the served app: which Host names it answers to (DNS rebinding), which other sites'
pages may call the API (CORS), and no state-changing request from another site's page (CSRF). ASGI middleware on
the whole app, API and chat alike, ahead of routing, bodies and keys.

A browser tab on any web site can send a POST to `http://127.0.0.1:8000` (a form or `fetch` with `no-cors` needs no
preflight), and a site whose DNS name is re-pointed at 127.0.0.1 can even read the answers. Both carry marks that
other clients do not: a foreign `Host` name for rebinding, a foreign `Origin` (or `Sec-Fetch-Site: cross-site`) for
cross-site requests. Clients that are not browsers send neither and pass.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from rag.config import Settings, is_loopback
from rag.core.errors import ConfigError
from ui.serving.errors import error_response

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
API_PREFIX = "/v1"


def install_web_guards(app: Starlette, settings: Settings) -> None:
    """Trusted hosts outermost, then CORS for the API (when RAG_CORS_ORIGINS lists origins), then the cross-site
    guard: a request from a foreign page is answered before anything reads its body or checks its key."""
    app.add_middleware(CrossSiteGuard, origins=settings.cors_origin_list)  # the last added runs first
    if settings.cors_origin_list:
        app.add_middleware(ApiCors, origins=settings.cors_origin_list)
    app.add_middleware(TrustedHosts, hosts=settings.trusted_host_list)


def host_name(header: str | None) -> str | None:
    """The name in a Host header: lower case, without port, IPv6 without brackets; None when absent or malformed."""
    if not header:
        return None
    header = header.strip().lower()
    if header.startswith("["):
        name, bracket, rest = header[1:].partition("]")
        return name if bracket and (not rest or (rest[0] == ":" and rest[1:].isdigit())) else None
    name, _, port = header.partition(":")
    return name.rstrip(".") if name and (not port or port.isdigit()) else None


def host_allowed(name: str, patterns: Sequence[str]) -> bool:
    """Whether a host name matches an allowed name, `*.domain` (its subdomains) or `*` (any)."""
    return any(pattern in {"*", name} or (pattern.startswith("*.") and name.endswith(pattern[1:]))
               for pattern in patterns)


def is_cross_site(headers: Headers, allowed_origins: Sequence[str]) -> bool:
    """Whether a browser sent this request from a page of another origin that RAG_CORS_ORIGINS does not list.
    The page's origin must name the host the request went to (the scheme is not compared: behind a TLS proxy
    the app sees http while the page is https)."""
    origin = headers.get("origin")
    if origin is not None:
        origin = origin.strip().lower()
        if origin in allowed_origins:
            return False
        # `null`: a sandboxed frame, a file, a redirect across sites: no page of ours.
        return origin == "null" or urlsplit(origin).netloc != headers.get("host", "").strip().lower()
    return headers.get("sec-fetch-site", "").lower() in {"cross-site", "same-site"}


async def refuse(scope: Scope, receive: Receive, send: Send, status: int, kind: str, message: str) -> None:
    """The JSON error body; to a websocket handshake as an HTTP denial where the server supports it, else a close
    before accepting (the client sees 403)."""
    if scope["type"] == "websocket" and "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008, "reason": kind})
        return
    await error_response(status, kind, message)(scope, receive, send)


class TrustedHosts:
    """400 `untrusted_host` for HTTP requests and websocket handshakes naming a host the app does not serve
    (RAG_TRUSTED_HOSTS plus loopback): a page whose DNS name was re-pointed at this machine cannot reach it."""

    def __init__(self, app: ASGIApp, hosts: Sequence[str]) -> None:
        self.app, self.hosts = app, tuple(hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in {"http", "websocket"}:
            name = host_name(Headers(scope=scope).get("host"))
            if name is None or not host_allowed(name, self.hosts):
                await refuse(scope, receive, send, 400, "untrusted_host",
                             f"this server does not answer to the host {name or '(none)'!r}: add it to "
                             "RAG_TRUSTED_HOSTS if it is one of its names")
                return
        await self.app(scope, receive, send)


class CrossSiteGuard:
    """403 `cross_site_request` for POST, PUT, PATCH and DELETE sent by another site's page (Origin, else
    Sec-Fetch-Site), unless its origin is in RAG_CORS_ORIGINS. Keys do not exempt a request: a browser
    attaches cookies and remembered credentials by itself."""

    def __init__(self, app: ASGIApp, origins: Sequence[str]) -> None:
        self.app, self.origins = app, tuple(origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in UNSAFE_METHODS \
                and is_cross_site(Headers(scope=scope), self.origins):
            await refuse(scope, receive, send, 403, "cross_site_request",
                         "requests that change something are not accepted from another site's pages; list that "
                         "site in RAG_CORS_ORIGINS if it should call this server")
            return
        await self.app(scope, receive, send)


class ApiCors:
    """CORS for /v1 only (the chat at /chat has Chainlit's own, set from the same setting): the listed origins
    may call the API with a bearer key, never with cookies (no credentials mode)."""

    def __init__(self, app: ASGIApp, origins: Sequence[str]) -> None:
        self.app = app
        self.cors = CORSMiddleware(app, allow_origins=list(origins), allow_credentials=False,
                                   allow_methods=["GET", "POST", "DELETE"],
                                   allow_headers=["Authorization", "Content-Type"], expose_headers=["Retry-After"],
                                   max_age=600)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        under_api = path == API_PREFIX or path.startswith(API_PREFIX + "/")
        await (self.cors if scope["type"] == "http" and under_api else self.app)(scope, receive, send)


# Where `rag serve` listens, and what a server reachable from the network must not leave open.
WILDCARDS = frozenset({"0.0.0.0", "::", ""})


def is_wildcard(host: str) -> bool:
    """Whether a bind address means every interface of the machine (0.0.0.0, ::)."""
    return host.strip().strip("[]") in WILDCARDS


def open_doors(settings: Settings, chat: bool) -> list[str]:
    """What would let anyone who reaches the port use the server: no API keys, a chat without sign-in."""
    from ui.serving.users import parse_users

    doors = []
    if not settings.api_keys.strip():
        doors.append("RAG_API_KEYS is empty, so every caller of /v1 is served as an anonymous reader")
    if chat and not (settings.ui_auth and parse_users(settings.ui_users)):
        doors.append("the chat has no sign-in (RAG_UI_AUTH=false or no RAG_UI_USERS; or serve --no-chat)")
    return doors


def settings_for_bind(settings: Settings, host: str) -> Settings:
    """The settings to serve on `host` with: a specific address is one of the app's host names; every interface
    (0.0.0.0, ::) answers only to the names RAG_TRUSTED_HOSTS lists, which must then be set."""
    if is_loopback(host):
        return settings
    if is_wildcard(host):
        if not settings.trusted_hosts.strip():
            raise ConfigError(
                f"--host {host} listens on every interface: set RAG_TRUSTED_HOSTS to the names clients use to reach "
                "this server (e.g. kb.example.com,10.0.0.5), so that a web page whose DNS name points here is not "
                "answered (DNS rebinding); `*` accepts any name")
        return settings
    names = ",".join(filter(None, (settings.trusted_hosts, host.strip().strip("[]"))))
    return settings.model_copy(update={"trusted_hosts": names})


def public_name(settings: Settings, host: str) -> str:
    """The host name to show in URLs: the bind address, or for every interface the first trusted real name."""
    if not is_wildcard(host):
        return host.strip().strip("[]")
    names = [name for name in settings.trusted_host_list if "*" not in name and not is_loopback(name)]
    return names[0] if names else "127.0.0.1"


def netloc(name: str, port: int) -> str:
    """`name:port`, with an IPv6 address in brackets."""
    return f"[{name}]:{port}" if ":" in name else f"{name}:{port}"


def local_addresses(host: str) -> list[str]:
    """The addresses a wildcard bind listens on, best effort from the standard library: the host name's
    addresses, the default route's source address, and loopback."""
    families = [socket.AF_INET] if host.strip("[]") == "0.0.0.0" else [socket.AF_INET6, socket.AF_INET]
    found: list[str] = []
    for family in families:
        with contextlib.suppress(OSError):
            found += [str(info[4][0]) for info in socket.getaddrinfo(socket.gethostname(), None, family)]
        with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_DGRAM) as probe:
            # Connecting a UDP socket sends nothing: it only asks the kernel which source address it would use.
            probe.connect(("2001:db8::1" if family == socket.AF_INET6 else "192.0.2.1", 9))
            found.append(str(probe.getsockname()[0]))
        found.append("::1" if family == socket.AF_INET6 else "127.0.0.1")
    return list(dict.fromkeys(found))
