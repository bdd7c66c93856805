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
- a delivery id over 200 characters (or holding control characters): 400, never cut short;
- a form-encoded delivery (GitHub's default content type) without its `payload=` field: 400;
- GitHub's `ping` (sent when the hook is made): 200 "pong", without the model;
- a delivery id seen before (the gateway ledger keeps them across restarts): 200 "duplicate" if it
  was taken, or the same refusal again if it was refused;
- GitHub's scheme signs the body only (not the delivery id, and there is no timestamp): a body
  delivered before on the route within REPLAY_WINDOW_S under another delivery id is a replay: 409;
- more than the route's `rate_per_min` accepted deliveries in a minute: 429;
- the core refuses it (too many from this route, too long, empty): 429, 413 or 422 with the reason,
  never a 202 for something that will not run;
- otherwise: 202 with `{"id": "<request id>"}`.
The GET is signed like a POST of an empty body and answers `{"status": "pending|ok|error",
"answer": ...}`. The route's `reply_to` (a notify target) also receives the answer.

What the model gets: the event's name (`X-GitHub-Event`) and its important fields, then the body
itself when it is short; a longer body is saved whole as a file in the run's workspace
(`payload.json`) and named in the message, so a pull_request event of 30 KB runs like any other.
Webhook bodies have their own limit (MAX_BODY), not a chat message's.

Each delivery is its own session (thread = the delivery id): webhook events do not share a
conversation. Whoever holds the route's secret may run a prompt, never an admin command.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from ...errors import HermesError
from ...store.files import atomic_write
from ...store.vault import Vault
from . import listener
from .access import AccessRules
from .channel import ChannelBase, Inbound, Origin, Outbound, Sink, attachments_dir, secret_value
from .ledger import REFUSED, TOO_LONG, TOO_MANY, Message

log = logging.getLogger(__name__)

MAX_BODY = 256 * 1024  # a delivery's body (GitHub's own pull_request payloads are 20-40 KB)
TOLERANCE_S = 300
PLATFORM = "webhook"
MAX_DELIVERY_ID = 200  # characters; a longer id is refused, never cut (two ids cut alike would be one)
REPLAY_WINDOW_S = 7 * 86400  # a GitHub-scheme body seen within this long under another id is a replay
INLINE_CHARS = 4_000  # a body up to this long is given to the model in the message itself
FIELD_CHARS = 300  # one field of the summary, at most


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


@dataclass
class Payload:
    """What a delivery carries, decoded: its event name (`X-GitHub-Event`, "" when the sender
    names none), its text (a form's `payload=` field decoded) and that text parsed as JSON (None
    when it is not JSON)."""

    event: str
    text: str
    data: Any

    @classmethod
    def read(cls, headers, body: str) -> Payload:
        kind = (headers.get("content-type") or "").split(";")[0].strip().lower()
        text = body
        if kind == "application/x-www-form-urlencoded":
            fields = parse_qs(body, keep_blank_values=True, max_num_fields=100)
            if "payload" not in fields:
                raise ValueError("a form-encoded delivery without its payload= field")
            text = fields["payload"][0]
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        return cls((headers.get("x-github-event") or "").strip()[:100], text, data)

    def facts(self) -> list[str]:
        """The event and its important fields, one line each (what a person reads first)."""
        lines = [f"event: {self.event}"] if self.event else []
        if not isinstance(self.data, dict):
            return lines
        for key in TOP_FIELDS:
            if _scalar(self.data.get(key)):
                lines.append(f"{key}: {_short(self.data[key])}")
        if isinstance(self.data.get("commits"), list):
            lines.append(f"commits: {len(self.data['commits'])}")
        for key, value in self.data.items():
            if isinstance(value, dict) and key in OBJECT_FIELDS:
                shown = [f"{f}={_short(_at(value, f))}" for f in OBJECT_FIELDS[key] if _scalar(_at(value, f))]
                if shown:
                    lines.append(f"{key}: " + ", ".join(shown))
        if not self.event and not lines:  # some other sender's JSON: its top-level values
            lines = [f"{k}: {_short(v)}" for k, v in list(self.data.items())[:20] if _scalar(v)]
        return lines


# The fields worth a line: GitHub's names (other senders' JSON gets its top-level values).
TOP_FIELDS = ("action", "ref", "ref_type", "before", "after", "compare", "zen", "hook_id")
_ITEM = ("number", "title", "state", "draft", "merged", "html_url", "user.login")
OBJECT_FIELDS = {
    "repository": ("full_name", "html_url"),
    "sender": ("login",),
    "organization": ("login",),
    "pull_request": (*_ITEM, "head.ref", "base.ref", "head.sha"),
    "issue": _ITEM,
    "comment": ("user.login", "html_url", "body"),
    "review": ("state", "user.login", "html_url", "body"),
    "workflow_run": ("name", "event", "status", "conclusion", "head_branch", "head_sha", "run_number", "html_url"),
    "workflow_job": ("name", "status", "conclusion", "head_branch", "html_url"),
    "check_run": ("name", "status", "conclusion", "html_url"),
    "check_suite": ("status", "conclusion", "head_branch"),
    "release": ("tag_name", "name", "draft", "prerelease", "html_url"),
    "head_commit": ("id", "message", "author.name"),
    "deployment": ("environment", "ref", "sha"),
    "deployment_status": ("state", "environment", "target_url"),
    "discussion": ("number", "title", "html_url"),
}


def _at(value: dict, path: str) -> Any:
    found: Any = value
    for part in path.split("."):
        found = found.get(part) if isinstance(found, dict) else None
    return found


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool)) and value != ""


def _short(value: Any) -> str:
    text = " ".join(str(value).split())  # one line: a field's text never starts a line of its own
    return text if len(text) <= FIELD_CHARS else text[:FIELD_CHARS] + "…"


def valid_delivery_id(delivery: str) -> str | None:
    """Why a delivery id cannot be used as one (None: it can)."""
    if len(delivery) > MAX_DELIVERY_ID:
        return f"the delivery id is {len(delivery)} characters long; at most {MAX_DELIVERY_ID} are taken"
    if any(ord(c) < 32 or ord(c) == 127 for c in delivery):
        return "the delivery id holds control characters"
    return None


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
        listener.serve(self.vault, self.settings.listen)  # other channels' paths are served here too (listener.py)
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
            listener.unserve(self.vault)
            raise HermesError(f"webhook listener could not start on {self.settings.listen} (port in use?)")

    @property
    def bound_port(self) -> int:
        """The port actually listened on (listen: HOST:0 picks a free one)."""
        assert self.server is not None
        return self.server.servers[0].sockets[0].getsockname()[1]

    def stop(self) -> None:
        listener.unserve(self.vault)
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
                                 Route("/hooks/{route}/requests/{rid}", self.get, methods=["GET"]),
                                 Route("/{rest:path}", self.mounted, methods=["GET", "POST"])])

    async def mounted(self, request):
        """A path another channel serves on this listener (listener.mount), else 404."""
        from starlette.responses import JSONResponse

        found = listener.handler(self.vault, request.url.path)
        if found is None:
            return JSONResponse({"error": "not found"}, 404)
        return await found(request)

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
        body = await listener.read_body(request, MAX_BODY)
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
        problem = valid_delivery_id(delivery)
        if problem:
            return JSONResponse({"error": problem}, 400)
        try:
            event = Payload.read(request.headers, payload)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, 400)
        if event.event == "ping":  # the hook was made (or its settings saved): nothing to run
            return JSONResponse({"status": "pong", "zen": _short((event.data or {}).get("zen", ""))
                                 if isinstance(event.data, dict) else ""}, 200)
        assert self.sink is not None
        origin = Origin(PLATFORM, name, f"route:{name}", delivery, thread=delivery)
        seen = self.sink.lookup(origin)
        if seen is not None:
            return _refused(seen) or JSONResponse({"status": "duplicate", "id": _rid(origin)}, 200)
        if route.scheme == "github":
            earlier = self.sink.earlier_message(origin, hashlib.sha256(body).hexdigest(), REPLAY_WINDOW_S)
            if earlier is not None:
                log.warning("webhook %s: a replayed body under a new delivery id, refused", name)
                return JSONResponse({"error": f"this body was delivered before (delivery {earlier}): a replay "
                                              "under a new delivery id is not run"}, 409)
        if not self._within_rate(name, route.rate_per_min):
            return JSONResponse({"error": f"more than {route.rate_per_min} deliveries a minute on this route"}, 429)
        text, files = self._message(route, origin, event)
        rid = await run_in_threadpool(self.sink.submit, Inbound(origin, text, direct=True, attachments=files))
        taken = self.sink.lookup(origin)
        refused = _refused(taken) if taken is not None else None
        return refused or JSONResponse({"id": rid}, 202)

    def _message(self, route: WebhookRoute, origin: Origin, event: Payload) -> tuple[str, list[Path]]:
        """The text the model gets, and the files beside it: the event and its fields, then the
        body inline when it is short, else whole in a file of the run's workspace."""
        files: list[Path] = []
        if len(event.text) <= INLINE_CHARS:
            body = event.text
        else:
            name = "payload.json" if event.data is not None else "payload.txt"
            saved = attachments_dir(self.vault.state_dir, origin) / name
            atomic_write(saved, event.text, mode=0o600)
            files.append(saved)
            body = (f"(the body, {len(event.text)} characters, is too long to show here; read it whole from the "
                    f"file {saved})")
        facts = event.facts() if event.event or files else []  # a short body of another sender: as it came
        payload = "\n".join([*facts, "", body]) if facts else body
        return (route.prompt.replace("{payload}", payload) if route.prompt else payload), files

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


def _refused(row: Message):
    """The answer for a delivery the core refused (never a 202: it will not run), or None."""
    from starlette.responses import JSONResponse

    if row.state != REFUSED:
        return None
    code = {TOO_MANY: 429, TOO_LONG: 413}.get(row.status or "", 422)
    return JSONResponse({"error": f"not run: {row.answer or 'refused'}"}, code)


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
