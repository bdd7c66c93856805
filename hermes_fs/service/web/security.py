"""Who may use the page: the vault's token, a cookie, a CSRF token on every POST, the Host header.

- The token is `HERMES_WEB_TOKEN` in `.hermes/secrets.env`, made on first start (a loopback bind
  only: a non-loopback bind without a token the person set is refused).
- The first URL printed carries it once (`?token=`); the answer sets an HttpOnly, SameSite=Strict
  cookie and redirects to the same page without it, so the token leaves the address bar and the
  history. Every request needs the cookie (or `Authorization: Bearer <token>`); else 401.
- Every state-changing request is a POST carrying the CSRF token that the page put in its form; a
  POST whose Origin is another origin is refused before that (403).
- The Host header must name the bound host and port (DNS rebinding: a hostile name that resolves
  to 127.0.0.1 reaches the server, but with its own name in Host).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import time
from dataclasses import dataclass
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

from ...errors import HermesError
from ...store.files import atomic_write
from ...store.notify import read_secrets_env
from .edits import MAX_EDIT_CHARS

TOKEN_NAME = "HERMES_WEB_TOKEN"
COOKIE = "hermes_web"
CSRF_FIELD = "csrf"
SAFE_METHODS = {"GET", "HEAD"}
HEADERS = [
    # scripts and styles only from this server (no inline script: a model's text can never run)
    (b"content-security-policy", b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                 b"frame-ancestors 'none'; form-action 'self'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),  # no-referrer would make form POSTs say `Origin: null`
    (b"cache-control", b"no-store"),
]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_listen(listen: str) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 as `[::1]:9120`) -> (host, port)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise HermesError(f"web.listen must be HOST:PORT, e.g. 127.0.0.1:9120; got {listen!r}")
    return host.strip("[]"), int(port)


def load_token(secrets_env: Path, host: str) -> str:
    """The vault's token; made and stored on first start of a loopback bind."""
    token = read_secrets_env(secrets_env).get(TOKEN_NAME)
    if token:
        if len(token) < 16:
            raise HermesError(f"{TOKEN_NAME} in {secrets_env} is too short (16 characters at least)")
        return token
    if not is_loopback(host):
        raise HermesError(f"refusing to listen on {host} (not loopback) without a token: put {TOKEN_NAME}=<a long "
                          f"random string> in {secrets_env} first")
    token = secrets.token_urlsafe(32)
    text = secrets_env.read_text() if secrets_env.is_file() else ""
    if text and not text.endswith("\n"):
        text += "\n"
    atomic_write(secrets_env, f"{text}{TOKEN_NAME}={token}\n", mode=0o600)
    return token


@dataclass
class Keys:
    """Values derived from the token: the cookie and the CSRF token are not the token itself."""

    token: str

    def derive(self, what: str) -> str:
        return hmac.new(self.token.encode(), what.encode(), hashlib.sha256).hexdigest()

    @property
    def cookie(self) -> str:
        return self.derive("cookie")

    @property
    def csrf(self) -> str:
        return self.derive("csrf")


class Guard:
    """ASGI middleware in front of every route (SSE included)."""

    def __init__(self, app, keys: Keys, host: str, port: int):
        self.app = app
        self.keys = keys
        self.port = port
        names = {host, f"[{host}]"} if ":" in host else {host}
        if is_loopback(host):
            names |= {"localhost", "127.0.0.1", "[::1]"}
        self.hosts = {f"{n}:{port}".encode() for n in names}
        self.origins = {b"http://" + h for h in self.hosts}

    def set_port(self, port: int) -> None:
        """The real port, once a bind to port 0 has chosen one."""
        self.hosts = {h.rsplit(b":", 1)[0] + f":{port}".encode() for h in self.hosts}
        self.origins = {b"http://" + h for h in self.hosts}
        self.port = port

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        if headers.get(b"host", b"") not in self.hosts:
            return await _plain(send, 421, "wrong Host header: open the page by the address hermes-fs web printed")

        started = time.perf_counter()

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                took = f"app;dur={(time.perf_counter() - started) * 1000:.1f}".encode()  # server time, for bench/web.py
                message = {**message, "headers": [*message.get("headers", []), *HEADERS, (b"server-timing", took)]}
            await send(message)

        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if "token" in query and scope["method"] in SAFE_METHODS:
            if not _same(query["token"], self.keys.token):
                return await _plain(send_with_headers, 401, "wrong token")
            rest = urlencode({k: v for k, v in query.items() if k != "token"})
            location = "/" + scope.get("path", "/").lstrip("/") + (f"?{rest}" if rest else "")  # never `//host`
            cookie = f"{COOKIE}={self.keys.cookie}; HttpOnly; SameSite=Strict; Path=/"
            return await _plain(send_with_headers, 303, "signed in", [(b"location", location.encode()),
                                                                       (b"set-cookie", cookie.encode())])
        if not self._signed_in(headers):
            return await _plain(send_with_headers, 401, "hermes-fs web: not signed in. Open the URL with the token "
                                                        "that `hermes-fs web` printed (the token is HERMES_WEB_TOKEN "
                                                        "in .hermes/secrets.env).")
        if scope["method"] not in SAFE_METHODS:
            origin = headers.get(b"origin")
            if origin is not None and origin not in self.origins:
                return await _plain(send_with_headers, 403, "cross-origin request refused")
            if scope["method"] != "POST":
                return await _plain(send_with_headers, 405, "only GET and POST")
            try:
                receive = await _checked_csrf(receive, headers, self.keys.csrf)
            except _TooLarge:
                return await _too_large(send_with_headers, headers.get(b"accept", b"").decode("latin-1"),
                                        f"the form is over {MAX_FORM_BYTES:,} bytes: nothing was saved (a file edited "
                                        f"here holds at most {MAX_EDIT_CHARS:,} characters)")
            if receive is None:
                return await _plain(send_with_headers, 403, "missing or wrong CSRF token (reload the page and try again)")
        return await self.app(scope, receive, send_with_headers)

    def _signed_in(self, headers: dict) -> bool:
        auth = headers.get(b"authorization", b"")
        if auth and hmac.compare_digest(auth, f"Bearer {self.keys.token}".encode()):
            return True
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get(b"cookie", b"").decode("latin-1"))
        except Exception:
            return False
        given = cookie.get(COOKIE)
        return given is not None and _same(given.value, self.keys.cookie)


def _same(given: str, expected: str) -> bool:
    """Constant-time comparison of what a request sent (any characters) with a secret."""
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected.encode())


# Room for the editor's longest text however it is written: a character of four UTF-8 bytes
# is twelve in a urlencoded form. The editor's limit (characters) is the one a person meets.
MAX_FORM_BYTES = 12 * MAX_EDIT_CHARS + (1 << 16)


class _TooLarge(Exception):
    """A POST body over MAX_FORM_BYTES: answered 413, never taken for a CSRF failure."""


async def _checked_csrf(receive, headers: dict, expected: str):
    """Read the whole body, check the CSRF field of its urlencoded form (or the X-CSRF-Token
    header), and hand the same body on to the app; None when the token is missing or wrong."""
    declared = headers.get(b"content-length", b"")
    if declared.isdigit() and int(declared) > MAX_FORM_BYTES:
        raise _TooLarge
    chunks = bytearray()
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks += message.get("body", b"")
        more = message.get("more_body", False)
        if len(chunks) > MAX_FORM_BYTES:
            raise _TooLarge
    body = bytes(chunks)
    given = headers.get(b"x-csrf-token", b"").decode("latin-1")
    kind = headers.get(b"content-type", b"").split(b";")[0].strip()
    if not given and kind == b"application/x-www-form-urlencoded":
        given = dict(parse_qsl(body.decode("latin-1"))).get(CSRF_FIELD, "")
    if not given or not _same(given, expected):
        return None
    sent = False

    async def replay():
        nonlocal sent
        if sent:
            return await receive()  # what comes after the body: a disconnect
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def wants_json(accept: str) -> bool:
    """A client asking for JSON (an API call) rather than a page."""
    kinds = [part.split(";")[0].strip().lower() for part in accept.split(",")]
    return "application/json" in kinds and "text/html" not in kinds


async def _too_large(send, accept: str, text: str) -> None:
    """413 as JSON `{"error": ..., "max_chars": ...}` for an API client, else a small HTML page."""
    import html
    import json

    if wants_json(accept):
        kind, body = b"application/json", json.dumps({"error": text, "max_chars": MAX_EDIT_CHARS}).encode()
    else:
        kind = b"text/html; charset=utf-8"
        body = (f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Too large</title></head>"
                f"<body><h1>Too large</h1><p>{html.escape(text)}</p></body></html>\n").encode()
    await send({"type": "http.response.start", "status": 413, "headers": [(b"content-type", kind)]})
    await send({"type": "http.response.body", "body": body})


async def _plain(send, status: int, text: str, extra: list | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), *(extra or [])]})
    await send({"type": "http.response.body", "body": (text + "\n").encode()})
