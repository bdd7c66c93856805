"""Signed webhooks: `POST /hooks/<route>` makes a request; `GET /hooks/<route>/requests/<id>` says
how it went. Served by uvicorn (Starlette) on `gateway.webhook.listen`, from the daemon.

Signatures: Standard Webhooks (`webhook-id`, `webhook-timestamp`, `webhook-signature`; the
`standardwebhooks` package; the timestamp must be within 300 s) or GitHub's `X-Hub-Signature-256`
(HMAC-SHA256 of the body, compared in constant time; its delivery id is `X-GitHub-Delivery`).
The answers are exact, and checked in this order:
- no such route: 404; a route with no secret configured (or the secret not found): 403. There is
  no insecure mode;
- a body over 256 KiB: 413, from Content-Length, before the body is read (a body without one is
  read only up to the limit);
- a body that is not UTF-8: 400; a bad or missing signature, or a timestamp more than 300 s off: 401;
- more than the route's `rate_per_min` accepted deliveries in a minute: 429;
- a delivery id seen before (the gateway ledger keeps them across restarts): 200 "duplicate";
- otherwise: 202 with `{"id": "<request id>"}`.
The GET is signed like a POST of an empty body and answers `{"status": "pending|ok|error",
"answer": ...}`. The route's `reply_to` (a notify target) also receives the answer.

Each delivery is its own session (thread = the delivery id): webhook events do not share a
conversation. Whoever holds the route's secret may run a prompt, never an admin command.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ...errors import HermesError
from ...store.vault import Vault
from .access import AccessRules
from .channel import ChannelBase, Inbound, Origin, Outbound, Sink, secret_value

log = logging.getLogger(__name__)

MAX_BODY = 256 * 1024
TOLERANCE_S = 300
PLATFORM = "webhook"


@dataclass
class WebhookRoute:
    """One route: POST /hooks/<name>, with its secret and prompt."""

    secret_env: str | None = None  # no secret configured: the route answers 403 (there is no insecure mode)
    scheme: str = "standard"  # standard (Standard Webhooks) | github (X-Hub-Signature-256)
    prompt: str | None = None  # "{payload}" is replaced by the body; default: the payload is the message
    reply_to: str | None = None  # a notify target name that receives the answer
    rate_per_min: int = 60  # more requests a minute are answered 429


@dataclass
class WebhookSettings:
    """Signed webhooks: POST /hooks/<route>."""

    listen: str = "127.0.0.1:8787"  # host:port the webhook server binds
    routes: dict[str, WebhookRoute] = field(default_factory=dict)  # route name -> its secret and prompt


def parse_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise HermesError(f"gateway.webhook.listen must be HOST:PORT, got {listen!r}")
    return host.strip("[]"), int(port)


class BadSignature(Exception):
    pass


def verify(route: WebhookRoute, secret: str, body: bytes, headers) -> str:
    """Check the delivery's signature; its delivery id. Raises BadSignature with the reason."""
    if route.scheme == "github":
        given = headers.get("x-hub-signature-256") or ""
        expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise BadSignature("bad or missing X-Hub-Signature-256")
        delivery = headers.get("x-github-delivery") or ""
        if not delivery:
            raise BadSignature("missing X-GitHub-Delivery")
        return delivery
    from standardwebhooks.webhooks import Webhook

    wh = Webhook(secret) if secret.startswith("whsec_") else Webhook(secret.encode())
    stamp = headers.get("webhook-timestamp") or ""
    try:
        if abs(time.time() - float(stamp)) > TOLERANCE_S:
            raise BadSignature("webhook-timestamp is more than 300 s from now")
    except ValueError:
        raise BadSignature("missing or malformed webhook-timestamp") from None
    try:
        wh.verify(body, {k: headers.get(k) or "" for k in ("webhook-id", "webhook-timestamp", "webhook-signature")},
                  json_parse=False)
    except Exception as exc:  # WebhookVerificationError, and malformed signature headers (split, base64, UTF-8)
        raise BadSignature(f"bad signature ({type(exc).__name__})") from None
    return headers.get("webhook-id") or ""


class WebhookChannel(ChannelBase):
    name = PLATFORM
    Settings = WebhookSettings
    idempotent_send = False  # replies go through Apprise, which cannot tell a resend
    # pushed to the machine its sender's URL names, so there is nothing to consume once: every
    # machine with the gateway listens (holder.py leases only the channels that pull)
    leased = False

    def __init__(self, vault: Vault, settings: WebhookSettings):
        super().__init__(vault, settings)
        self.settings: WebhookSettings = settings
        self.host, self.port = parse_listen(settings.listen)
        self.server: Any = None
        self.thread: threading.Thread | None = None
        self.sink: Sink | None = None
        self.accepted: dict[str, deque[float]] = {}
        self.rate_lock = threading.Lock()

    # -- the channel interface --------------------------------------------------------------------
    def access(self) -> AccessRules:
        return AccessRules(authenticated=True)  # the route's secret is the proof; no one is an admin

    def start(self, sink: Sink) -> None:
        import uvicorn

        self.sink = sink
        # log_config=None: uvicorn's own dictConfig would close every handler of the process,
        # the daemon's log file among them
        config = uvicorn.Config(self.app(), host=self.host, port=self.port, log_level="warning",
                                access_log=False, lifespan="off", log_config=None)
        self.server = server = uvicorn.Server(config)
        self.thread = threading.Thread(target=server.run, name="gateway-webhook", daemon=True)
        self.thread.start()
        deadline = time.time() + 15
        while not server.started and self.thread.is_alive() and time.time() < deadline:
            time.sleep(0.02)
        if not server.started:
            raise HermesError(f"webhook listener could not start on {self.settings.listen} (port in use?)")

    @property
    def bound_port(self) -> int:
        """The port actually listened on (listen: HOST:0 picks a free one)."""
        assert self.server is not None
        return self.server.servers[0].sockets[0].getsockname()[1]

    def stop(self) -> None:
        if self.server is not None:
            self.server.should_exit = True
        if self.thread:
            self.thread.join(10)

    def check(self) -> str:
        """`gateway test webhook`: every route has its secret, and the listener answers a signed
        request (the daemon's, when one runs; else a listener started here for the test)."""
        missing = [n for n, r in self.settings.routes.items() if not secret_value(self.vault, r.secret_env)]
        if missing:
            raise HermesError(f"route(s) without a secret in .hermes/secrets.env: {', '.join(missing)} (they answer 403)")
        if not self.settings.routes:
            raise HermesError("no routes under gateway.webhook.routes")
        import httpx

        name, route = next(iter(self.settings.routes.items()))
        secret = secret_value(self.vault, route.secret_env) or ""
        headers = sign_standard(secret, "hermes-test", b"") if route.scheme == "standard" else sign_github(secret, "hermes-test", b"")
        url = f"http://{self.host}:{self.port}/hooks/{name}/requests/none"
        try:
            answer = httpx.get(url, headers=headers, timeout=5)
        except httpx.HTTPError:
            from ..daemon_state import is_running

            if is_running(self.vault):
                raise HermesError(f"the daemon runs but nothing answers on {self.settings.listen}; see "
                                  "`hermes-fs gateway status`") from None
            return (f"{len(self.settings.routes)} route(s), each with its secret; the daemon will listen on "
                    f"{self.settings.listen} (not running now)")
        if answer.status_code != 404:
            raise HermesError(f"{url} answered {answer.status_code} to a signed request: {answer.text[:200]}")
        return f"listening on {self.settings.listen}; {len(self.settings.routes)} route(s), each with its secret"

    def replies_to(self, origin: Origin) -> bool:
        route = self.settings.routes.get(origin.chat)
        return bool(route and route.reply_to)

    def send(self, reply: Outbound) -> str:
        route = self.settings.routes.get(reply.origin.chat)
        if route is None or not route.reply_to:
            raise HermesError(f"route {reply.origin.chat} has no reply_to")
        [d] = self.vault.notifier.send([route.reply_to], f"hermes-fs: webhook {reply.origin.chat}", reply.text)
        if not d.ok:
            raise HermesError(d.error or "notification failed")
        return f"notify:{route.reply_to}"

    # -- HTTP -------------------------------------------------------------------------------------
    def app(self):
        from starlette.applications import Starlette
        from starlette.routing import Route

        return Starlette(routes=[Route("/hooks/{route}", self.post, methods=["POST"]),
                                 Route("/hooks/{route}/requests/{rid}", self.get, methods=["GET"])])

    def _route(self, name: str):
        """(route, secret) or an error response."""
        from starlette.responses import JSONResponse

        route = self.settings.routes.get(name)
        if route is None:
            return None, JSONResponse({"error": "no such route"}, 404)
        secret = secret_value(self.vault, route.secret_env)
        if not secret:
            return None, JSONResponse({"error": "this route has no secret configured (secret_env, with its value in "
                                                ".hermes/secrets.env); nothing is accepted without one"}, 403)
        return (route, secret), None

    async def post(self, request):
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import JSONResponse

        name = request.path_params["route"]
        found, refusal = self._route(name)
        if refusal:
            return refusal
        route, secret = found
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
            return JSONResponse({"error": f"body over {MAX_BODY} bytes" if length.isdigit() else "bad Content-Length"},
                                413 if length.isdigit() else 400)
        body = await self._read(request)
        if body is None:
            return JSONResponse({"error": f"body over {MAX_BODY} bytes"}, 413)
        try:
            payload = body.decode("utf-8")
        except UnicodeDecodeError:
            return JSONResponse({"error": "the body is not UTF-8 text"}, 400)
        try:
            delivery = verify(route, secret, body, request.headers)
        except BadSignature as exc:
            log.info("webhook %s: refused (%s)", name, exc)
            return JSONResponse({"error": str(exc)}, 401)
        assert self.sink is not None
        origin = Origin(PLATFORM, name, f"route:{name}", delivery[:200], thread=delivery[:200])
        if self.sink.lookup(origin) is not None:
            return JSONResponse({"status": "duplicate", "id": _rid(origin)}, 200)
        if not self._within_rate(name, route.rate_per_min):
            return JSONResponse({"error": f"more than {route.rate_per_min} deliveries a minute on this route"}, 429)
        text = route.prompt.replace("{payload}", payload) if route.prompt else payload
        rid = await run_in_threadpool(self.sink.submit, Inbound(origin, text, direct=True))
        return JSONResponse({"id": rid}, 202)

    async def get(self, request):
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import JSONResponse

        name, rid = request.path_params["route"], request.path_params["rid"]
        found, refusal = self._route(name)
        if refusal:
            return refusal
        route, secret = found
        try:
            verify(route, secret, b"", request.headers)
        except BadSignature as exc:
            return JSONResponse({"error": str(exc)}, 401)
        assert self.sink is not None
        state = await run_in_threadpool(self.sink.request_status, rid, PLATFORM, name)
        if state is None:
            return JSONResponse({"error": "no such request on this route"}, 404)
        return JSONResponse({"status": state[0], "answer": state[1]}, 200)

    async def _read(self, request) -> bytes | None:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    def _within_rate(self, name: str, per_min: int) -> bool:
        now = time.time()
        with self.rate_lock:
            times = self.accepted.setdefault(name, deque())
            while times and now - times[0] > 60:
                times.popleft()
            if len(times) >= per_min:
                return False
            times.append(now)
            return True


def _rid(origin: Origin) -> str:
    from .ledger import request_id

    return request_id(origin)


def sign_standard(secret: str, msg_id: str, body: bytes, timestamp: float | None = None) -> dict[str, str]:
    """Headers of a Standard Webhooks delivery (for `gateway test webhook`, the tests and the bench)."""
    from datetime import UTC, datetime

    from standardwebhooks.webhooks import Webhook

    wh = Webhook(secret) if secret.startswith("whsec_") else Webhook(secret.encode())
    when = datetime.fromtimestamp(timestamp if timestamp is not None else time.time(), UTC)
    return {"webhook-id": msg_id, "webhook-timestamp": str(int(when.timestamp())),
            "webhook-signature": wh.sign(msg_id, when, body.decode())}


def sign_github(secret: str, delivery: str, body: bytes) -> dict[str, str]:
    return {"X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()}


__all__ = ["WebhookChannel", "sign_github", "sign_standard", "verify"]
