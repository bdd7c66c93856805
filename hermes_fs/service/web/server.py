"""Running the page: `hermes-fs web` in the foreground, or inside the daemon (`web.enabled: true`).

uvicorn serves the Starlette app behind `security.Guard`; a ChangeFeed (watchdog) feeds the
server-sent events that make open pages fetch themselves again when files or branches change.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from ...errors import HermesError
from ...store.vault import Vault
from .feed import ChangeFeed
from .pages import Site
from .security import Guard, Keys, load_token, parse_listen

if TYPE_CHECKING:
    from ...store.claims import RefClaims

log = logging.getLogger(__name__)
PING_S = 20


@dataclass
class WebApp:
    asgi: Any  # the Guard in front of the Starlette app
    guard: Guard
    feed: ChangeFeed
    site: Site


def build(vault: Vault, host: str, port: int, claims: RefClaims | None = None) -> WebApp:
    """The app for one vault, bound (by name) to host:port; the token is made on first use.
    `claims`: the daemon's, when the page runs inside it (decisions are claimed there)."""
    keys = Keys(load_token(vault.secrets_env, host))
    if host in ("0.0.0.0", "::", ""):
        raise HermesError(f"listen on the address you will open in the browser, not {host or 'every address'}: "
                          "the page answers only requests whose Host header names the address it is bound to")
    site = Site(vault, keys, claims)
    feed = ChangeFeed(vault.root, on_change=lambda names: _reload_settings(vault, names))

    async def events(request: Request):
        from sse_starlette.sse import EventSourceResponse

        queue = feed.subscribe()

        async def stream():
            try:
                while True:
                    names = await queue.get()
                    yield {"event": "change", "data": json.dumps(names)}
            except asyncio.CancelledError:
                raise
            finally:
                feed.unsubscribe(queue)

        return EventSourceResponse(stream(), ping=PING_S)

    app = Starlette(routes=[*site.routes(), Route("/events", events)])
    guard = Guard(app, keys, host, port)
    return WebApp(guard, guard, feed, site)


def _reload_settings(vault: Vault, names: list[str]) -> None:
    if "hermes.yaml" in names:
        try:
            vault.reload_config()
        except HermesError as exc:  # the last good settings stay; status shows the error
            log.warning(f"hermes.yaml: {exc}")


class WebServer:
    """uvicorn on its own thread (the daemon's case) or in the foreground (`hermes-fs web`)."""

    def __init__(self, vault: Vault, listen: str, claims: RefClaims | None = None):
        import uvicorn

        host, port = parse_listen(listen)
        self.app = build(vault, host, port, claims)
        self.sock = _bind(host, port)
        self.host, self.port = host, self.sock.getsockname()[1]
        self.app.guard.set_port(self.port)
        config = uvicorn.Config(self.app.asgi, log_level="warning", lifespan="off", timeout_graceful_shutdown=2,
                                log_config=None)  # never uvicorn's dictConfig: it closes the daemon's log handlers
        self.server = uvicorn.Server(config)
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}/"

    def signin_url(self) -> str:
        return f"{self.url}?token={self.app.guard.keys.token}"

    def _warm(self) -> None:
        def work():
            try:
                self.app.site.warm()
            except Exception:  # only a head start: the pages do the same work when asked
                log.exception("warming the web page up failed")

        threading.Thread(target=work, name="web-warm", daemon=True).start()

    def run(self) -> None:
        """Serve until Ctrl-C / SIGTERM (uvicorn's own signal handling)."""
        self.app.feed.start()
        self._warm()
        try:
            self.server.run(sockets=[self.sock])
        finally:
            self.app.feed.stop()

    def start(self) -> None:
        self.app.feed.start()
        self._warm()
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, name="web", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.should_exit = True
        if self.thread:
            self.thread.join(10)
        self.app.feed.stop()
        self.sock.close()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise HermesError(f"cannot listen on {host}:{port}: {exc.strerror} (another `hermes-fs web` or daemon "
                          "serving the page? set web.listen in hermes.yaml or pass --listen)") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


class WebService:
    """The daemon's part for `web.enabled: true` (one entry in services.services_for)."""

    name = "web page"

    def __init__(self, vault: Vault, claims: RefClaims | None = None):
        self.vault = vault
        self.claims = claims
        self.server: WebServer | None = None

    def start(self) -> None:
        self.server = WebServer(self.vault, self.vault.config.web.listen, self.claims)
        self.server.start()
        log.info(f"web page at {self.server.url} (sign in: `hermes-fs web --url`)")

    def stop(self) -> None:
        if self.server:
            self.server.stop()
