"""An EMULATOR of Slack's Web API and Socket Mode (not Slack): a local server for tests, built from the published docs.

Built from Slack's API documentation (docs.slack.dev: "Using Socket Mode" -- `apps.connections.open`,
the `hello` and `disconnect` frames, envelopes with `envelope_id`, `accepts_response_payload`,
`retry_attempt` / `retry_reason`, acknowledgements by envelope id; the Events API's
`event_callback` with `event_id`, `message` (channel_type im / channel) and `app_mention` events,
`thread_ts`; slash command payloads; "Formatting text for app surfaces" (mrkdwn, the `&`, `<`, `>`
escapes, `<url|text>`, `<@U..>`, `<!channel>`); the methods `auth.test`, `apps.connections.open`,
`chat.postMessage`, `files.getUploadURLExternal`, `files.completeUploadExternal`, and their error
responses `{"ok": false, "error": ...}`, HTTP 429 with `Retry-After`) and the example payloads in
slack-sdk's own tests. The real slack-sdk is pointed at it (`base_url`, and the websocket URL it
hands out). People are driven from the test: `say(...)` and `slash(...)` push envelopes as Slack would.

What it checks as Slack documents it: the bot token (`xoxb-`) for Web API methods and the app-level
token (`xapp-`) for `apps.connections.open`; a websocket URL's ticket is good for one connection;
each envelope is delivered until it is acknowledged (`{"envelope_id": ...}`): again after
`ack_timeout_s` on the same socket and on the next connection, with `retry_attempt` counting and
`retry_reason` set (slash commands are never delivered again: an unacknowledged one is recorded as
the error a person would see); `chat.postMessage` to a channel the bot is not in (`not_in_channel`,
unless `chat:write.public` for a public channel), to an unknown or archived channel, without text,
or over 40,000 characters; rate limits on request (429, `Retry-After`); mrkdwn that a Slack client
would misread (a bare `&` or `<`) is refused here, so a test sees it; `url_private` downloads only
with the bot token (without it, a sign-in page, as Slack answers); an upload's three steps (an
upload URL and file id, the bytes POSTed there, the completion sharing it in a channel/thread).

What it cannot prove (listed in docs/guide/gateway/slack.md): Slack's real rate limits, how
clients render mrkdwn, real file ids and upload processing, Enterprise Grid, event ordering and
delivery timing across Slack's servers, reconnect timing, and anything of the API not named above.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web
from deadlines import deadline as generous

TEAM, APP = "T0HERMES", "A0HERMES"
BOT_USER, BOT_ID = "U0BOT", "B0BOT"
MAX_TEXT = 40_000  # chat.postMessage: longer texts are refused (msg_too_long)
MAX_FILE = 1_000_000_000  # a file is at most 1 GB
TOKEN_RE = re.compile(r"<([^<>]*)>")


class MrkdwnError(Exception):
    pass


def read_mrkdwn(text: str) -> tuple[str, list[str], list[str]]:
    """(what a person sees, the links, the mentions and broadcasts) of a mrkdwn text; raises
    MrkdwnError where a client would misread it (a `<` that opens no token, a bare `&`)."""
    links: list[str] = []
    specials: list[str] = []

    def token(m: re.Match) -> str:
        inner = m.group(1)
        target, _, label = inner.partition("|")
        if target.startswith(("@", "!", "#")):
            specials.append(target)
            return label or target
        if not re.match(r"(https?|mailto):", target):
            raise MrkdwnError(f"<{inner}> is neither a link nor a mention")
        links.append(target)
        return label or target

    shown = TOKEN_RE.sub(token, text)
    if "<" in shown.replace("&lt;", ""):
        raise MrkdwnError("a bare < (Slack reads it as the start of a link or a mention)")
    if re.search(r"&(?!(amp|lt|gt);)", shown):
        raise MrkdwnError("a bare & (Slack's mrkdwn needs &amp;)")
    return shown.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"), links, specials


@dataclass
class Channel:
    id: str
    kind: str  # im | channel | group (a private channel)
    members: set[str] = field(default_factory=set)
    archived: bool = False


@dataclass
class Sent:
    """A message the bot posted."""

    channel: str
    text: str
    ts: str
    thread_ts: str | None
    args: dict[str, Any]
    visible: str = ""
    links: list[str] = field(default_factory=list)
    specials: list[str] = field(default_factory=list)


@dataclass
class SlackFile:
    id: str
    name: str
    data: bytes
    mime: str
    declared: int = 0  # the length given to files.getUploadURLExternal
    uploaded: bool = False
    completed: bool = False


@dataclass
class Shared:
    """A file the bot shared in a channel."""

    id: str
    name: str
    data: bytes
    channel: str
    thread_ts: str | None
    comment: str
    visible: str


@dataclass
class Pending:
    """An envelope waiting for its acknowledgement."""

    frame: dict[str, Any]
    attempts: int = 0
    delivered_at: float = 0.0
    on: Any = None  # the socket it was last delivered on


class SlackEmulator:
    def __init__(self, ack_timeout_s: float = 3.0, scopes: set[str] | None = None):
        self.bot_token = "xoxb-1111-2222-hermestestbottoken"
        self.app_token = f"xapp-1-{APP}-3333-hermestestapptoken"
        self.ack_timeout_s = ack_timeout_s
        self.scopes = scopes if scopes is not None else {"chat:write", "im:history", "app_mentions:read"}
        self.channels: dict[str, Channel] = {}
        self.sent: list[Sent] = []
        self.files: dict[str, SlackFile] = {}  # file id -> file (people's and the bot's)
        self.shared: list[Shared] = []  # files the bot shared (files.completeUploadExternal)
        self.downloads: list[str] = []  # file ids fetched through url_private
        self.calls: list[str] = []
        self.acked: list[str] = []  # envelope ids, in the order acknowledged
        self.unanswered_commands: list[dict] = []  # slash commands not acknowledged in time
        self.limited: dict[str, int] = {}  # method -> how many next calls get 429
        self.on_ack: Any = None  # called with the acknowledged envelope's frame (before it is forgotten)
        self.lose_acks: set[str] = set()  # envelope ids whose acknowledgements are lost on the way
        self.lost: list[str] = []
        self.connections = 0
        self.pending: dict[str, Pending] = {}
        self.tickets: set[str] = set()
        self.sockets: list[web.WebSocketResponse] = []
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self._ts = itertools.count(1)
        self._events = itertools.count(1)
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(started,), daemon=True, name="slack-emulator")
        self.thread.start()
        started.wait(10)
        self.url = f"http://127.0.0.1:{self.port}/api"

    # -- the server ---------------------------------------------------------------------------------
    def _serve(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/api/{method}", self._api)
        app.router.add_get("/link/", self._link)
        app.router.add_post("/upload/v1/{file_id}", self._upload)
        app.router.add_get("/files-pri/{key}/{name}", self._download)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.redeliverer = self.loop.create_task(self._redeliver())
        started.set()
        self.loop.run_forever()

    def close(self) -> None:
        async def shut():
            self.redeliverer.cancel()
            for ws in list(self.sockets):
                await ws.close()
            await self.runner.cleanup()

        try:
            asyncio.run_coroutine_threadsafe(shut(), self.loop).result(10)
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        with self.lock:
            self.calls.append(method)
        args: dict[str, Any] = {}
        if request.content_type == "application/json":
            body = await request.json()
            args = body if isinstance(body, dict) else {}
        elif request.can_read_body:
            args = dict(await request.post())
        args = {**dict(request.query), **args}  # slack-sdk sends some methods' arguments as query parameters
        auth = request.headers.get("Authorization", "")
        token = auth[7:] if auth.startswith("Bearer ") else str(args.get("token", ""))
        if self.limited.get(method, 0) > 0:
            self.limited[method] -= 1
            return web.json_response({"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": "1"})
        handler = getattr(self, "m_" + method.replace(".", "_"), None)
        if handler is None:
            return _error("unknown_method")
        if method == "apps.connections.open":
            if not token.startswith("xapp-"):
                return _error("not_allowed_token_type" if token else "not_authed")
            if token != self.app_token:
                return _error("invalid_auth")
        elif not token:
            return _error("not_authed")
        elif token != self.bot_token:
            return _error("invalid_auth")
        return web.json_response(handler(args))

    def m_auth_test(self, args: dict) -> dict:
        return {"ok": True, "url": "https://hermes-test.slack.com/", "team": "Hermes Test", "user": "hermes",
                "team_id": TEAM, "user_id": BOT_USER, "bot_id": BOT_ID, "is_enterprise_install": False}

    def m_apps_connections_open(self, args: dict) -> dict:
        ticket = uuid.uuid4().hex
        with self.lock:
            self.tickets.add(ticket)
        return {"ok": True, "url": f"ws://127.0.0.1:{self.port}/link/?ticket={ticket}&app_id={APP}"}

    def m_chat_postMessage(self, args: dict) -> dict:
        channel, text = str(args.get("channel") or ""), args.get("text")
        with self.lock:
            ch = self.channels.get(channel)
            if ch is None:
                return {"ok": False, "error": "channel_not_found"}
            if ch.archived:
                return {"ok": False, "error": "is_archived"}
            if BOT_USER not in ch.members and not (ch.kind == "channel" and "chat:write.public" in self.scopes):
                return {"ok": False, "error": "not_in_channel"}
            if not isinstance(text, str) or not text.strip():
                return {"ok": False, "error": "no_text"}
            if len(text) > MAX_TEXT:
                return {"ok": False, "error": "msg_too_long"}
            try:
                visible, links, specials = read_mrkdwn(text)
            except MrkdwnError as exc:
                return {"ok": False, "error": "invalid_arguments", "detail": str(exc)}
            ts = self._next_ts()
            thread = args.get("thread_ts")
            self.sent.append(Sent(channel, text, ts, str(thread) if thread else None, dict(args), visible, links,
                                  specials))
            self.changed.notify_all()
        return {"ok": True, "channel": channel, "ts": ts,
                "message": {"type": "message", "user": BOT_USER, "bot_id": BOT_ID, "text": text, "ts": ts}}

    def m_files_getUploadURLExternal(self, args: dict) -> dict:
        name, length = str(args.get("filename") or ""), str(args.get("length") or "")
        if not name or not length.isdigit():
            return {"ok": False, "error": "invalid_arguments"}
        if int(length) > MAX_FILE:
            return {"ok": False, "error": "file_too_large"}  # hypothetical name: the limit is documented, not its error
        fid = f"F{next(self._ts):010d}"
        with self.lock:
            self.files[fid] = SlackFile(fid, name, b"", "", declared=int(length))
        return {"ok": True, "upload_url": f"http://127.0.0.1:{self.port}/upload/v1/{fid}", "file_id": fid}

    def m_files_completeUploadExternal(self, args: dict) -> dict:
        try:
            files = json.loads(str(args.get("files") or ""))
        except ValueError:
            return {"ok": False, "error": "invalid_arguments"}
        channel = str(args.get("channel_id") or "")
        with self.lock:
            ch = self.channels.get(channel)
            if channel and ch is None:
                return {"ok": False, "error": "channel_not_found"}
            if ch is not None and BOT_USER not in ch.members:
                return {"ok": False, "error": "not_in_channel"}
            done = []
            for item in files if isinstance(files, list) else []:
                f = self.files.get(str(item.get("id"))) if isinstance(item, dict) else None
                if f is None or not f.uploaded or f.completed:
                    return {"ok": False, "error": "file_not_found" if f is None or not f.uploaded else "file_uploaded"}
                if len(f.data) != f.declared:
                    return {"ok": False, "error": "file_upload_size_mismatch"}
                f.completed = True
                done.append({"id": f.id, "title": item.get("title") or f.name})
                comment = str(args.get("initial_comment") or "")
                self.shared.append(Shared(f.id, f.name, f.data, channel, args.get("thread_ts"), comment,
                                          read_mrkdwn(comment)[0] if comment else ""))
            self.changed.notify_all()
        return {"ok": True, "files": done}

    async def _upload(self, request: web.Request) -> web.Response:
        data = await request.read()
        with self.lock:
            f = self.files.get(request.match_info["file_id"])
            if f is None or f.uploaded:
                return web.Response(status=404, text="unknown upload")
            f.data, f.uploaded = data, True
        return web.Response(text=f"OK - {len(data)}")

    async def _download(self, request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        key = request.match_info["key"]
        with self.lock:
            f = self.files.get(key.split("-", 1)[-1])
        if auth != f"Bearer {self.bot_token}":  # Slack shows its sign-in page to a request without the token
            return web.Response(text="<html>sign in to Slack</html>", content_type="text/html")
        if f is None:
            return web.Response(status=404)
        with self.lock:
            self.downloads.append(f.id)
        return web.Response(body=f.data, content_type=f.mime or "application/octet-stream")

    def share_file(self, user: str, data: bytes, name: str, mime: str, text: str = "", channel: str | None = None,
                   thread_ts: str | None = None, duration_ms: int | None = None, extra: dict | None = None) -> str:
        """A person shares a file (an audio clip recorded in Slack, or an uploaded one) in a
        message: the file_share message event, with the file object as the Events API sends it."""
        fid = f"F{next(self._ts):010d}"
        kind = name.rsplit(".", 1)[-1].lower() if "." in name else "binary"
        with self.lock:
            self.files[fid] = SlackFile(fid, name, data, mime, declared=len(data), uploaded=True, completed=True)
        url = f"http://127.0.0.1:{self.port}/files-pri/{TEAM}-{fid}/{name}"
        obj: dict[str, Any] = {"id": fid, "created": int(time.time()), "timestamp": int(time.time()), "name": name,
                               "title": name, "mimetype": mime, "filetype": kind, "pretty_type": kind.upper(),
                               "user": user, "size": len(data), "mode": "hosted", "is_external": False,
                               "url_private": url, "url_private_download": url + "?download=1",
                               "permalink": f"https://hermes-test.slack.com/files/{user}/{fid}/{name}"}
        if duration_ms is not None:
            obj.update(subtype="slack_audio", duration_ms=duration_ms)
        obj.update(extra or {})
        return self.say(user, text, channel=channel, thread_ts=thread_ts,
                        extra={"subtype": "file_share", "files": [obj], "upload": False, "display_as_bot": False})

    async def _link(self, request: web.Request) -> web.WebSocketResponse:
        ticket = request.query.get("ticket", "")
        with self.lock:
            if ticket not in self.tickets:
                raise web.HTTPUnauthorized(text="invalid or used ticket")
            self.tickets.discard(ticket)
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        with self.lock:
            self.connections += 1
            self.sockets.append(ws)
        await ws.send_str(json.dumps({"type": "hello", "num_connections": len(self.sockets),
                                      "debug_info": {"host": "applink-emulator", "build_number": 1,
                                                     "approximate_connection_time": 18060},
                                      "connection_info": {"app_id": APP}}))
        await self._deliver_pending(ws)
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    self._ack(msg.data)
        finally:
            with self.lock:
                if ws in self.sockets:
                    self.sockets.remove(ws)
        return ws

    def _ack(self, data: str) -> None:
        try:
            body = json.loads(data)
        except ValueError:
            return
        eid = body.get("envelope_id") if isinstance(body, dict) else None
        with self.lock:
            if eid in self.lose_acks:
                self.lost.append(eid)
                self.changed.notify_all()
                return
            p = self.pending.pop(eid, None) if isinstance(eid, str) else None
            if p is None:
                return
            self.acked.append(eid)
            self.changed.notify_all()
        if self.on_ack is not None:
            self.on_ack(p.frame)

    async def _deliver_pending(self, ws: web.WebSocketResponse) -> None:
        with self.lock:
            waiting = [p for p in self.pending.values() if p.on is not ws]
        for p in waiting:
            await self._send_frame(p, ws)

    async def _send_frame(self, p: Pending, ws: web.WebSocketResponse) -> None:
        frame = dict(p.frame)
        if p.attempts and frame["type"] == "events_api":
            frame["retry_attempt"], frame["retry_reason"] = p.attempts, "http_timeout"
        p.attempts += 1
        p.delivered_at, p.on = time.monotonic(), ws
        try:
            await ws.send_str(json.dumps(frame))
        except (ConnectionError, RuntimeError):
            p.on = None

    async def _redeliver(self) -> None:
        """Slack's retries: an envelope not acknowledged in time comes again (a slash command does
        not: the person sees an error)."""
        while True:
            await asyncio.sleep(0.2)
            now = time.monotonic()
            with self.lock:
                late = [p for p in self.pending.values() if p.on is not None and now - p.delivered_at > self.ack_timeout_s]
                ws = self.sockets[-1] if self.sockets else None
            for p in late:
                if p.frame["type"] == "slash_commands":
                    with self.lock:
                        self.pending.pop(p.frame["envelope_id"], None)
                        self.unanswered_commands.append(p.frame)
                elif p.attempts <= 3 and ws is not None:
                    await self._send_frame(p, ws)

    # -- what people do ----------------------------------------------------------------------------
    def _next_ts(self) -> str:
        return f"{1_700_000_000 + next(self._ts)}.000100"

    def dm(self, user: str) -> Channel:
        cid = "D" + user[1:]
        with self.lock:
            return self.channels.setdefault(cid, Channel(cid, "im", {user, BOT_USER}))

    def channel(self, cid: str, members: set[str] | None = None, kind: str = "channel") -> Channel:
        with self.lock:
            ch = self.channels.setdefault(cid, Channel(cid, kind, set()))
            ch.members |= set(members or ())
            return ch

    def say(self, user: str, text: str, channel: str | None = None, thread_ts: str | None = None,
            extra: dict | None = None) -> str:
        """A person posts a message: the events Slack sends the app (message.im for a DM; in a
        channel the bot is in, message.channels, and app_mention when it mentions the bot). Its ts."""
        ch = self.dm(user) if channel is None else self.channel(channel)
        ts = self._next_ts()
        event: dict[str, Any] = {"client_msg_id": str(uuid.uuid4()), "type": "message", "text": text, "user": user,
                                 "ts": ts, "team": TEAM, "channel": ch.id, "event_ts": ts,
                                 "channel_type": "im" if ch.kind == "im" else ch.kind}
        if thread_ts:
            event["thread_ts"] = thread_ts
        event.update(extra or {})
        if BOT_USER in ch.members:
            self.event(event)
        if ch.kind != "im" and f"<@{BOT_USER}>" in text:
            mention = {k: v for k, v in event.items() if k != "channel_type"}
            mention["type"] = "app_mention"
            self.event(mention)
        return ts

    def event(self, event: dict[str, Any]) -> dict[str, Any]:
        """An Events API envelope around `event`; returned (to deliver again in a test)."""
        n = next(self._events)
        payload = {"token": "verification-token", "team_id": TEAM, "api_app_id": APP, "event": event,
                   "type": "event_callback", "event_id": f"Ev{n:08d}", "event_time": int(time.time()),
                   "authorizations": [{"enterprise_id": None, "team_id": TEAM, "user_id": BOT_USER, "is_bot": True,
                                       "is_enterprise_install": False}],
                   "is_ext_shared_channel": False, "event_context": f"4-{event.get('type')}-{TEAM}-{event.get('channel')}"}
        return self.push({"envelope_id": str(uuid.uuid4()), "payload": payload, "type": "events_api",
                          "accepts_response_payload": False, "retry_attempt": 0, "retry_reason": ""})

    def slash(self, user: str, text: str, channel: str | None = None, command: str = "/hermes") -> dict[str, Any]:
        ch = self.dm(user) if channel is None else self.channel(channel)
        payload = {"token": "verification-token", "team_id": TEAM, "team_domain": "hermes-test", "channel_id": ch.id,
                   "channel_name": "directmessage" if ch.kind == "im" else ch.id.lower(), "user_id": user,
                   "user_name": user.lower(), "command": command, "text": text, "api_app_id": APP,
                   "is_enterprise_install": "false",
                   "response_url": f"https://hooks.slack.com/commands/{TEAM}/1/{uuid.uuid4().hex}",
                   "trigger_id": f"{next(self._ts)}.{uuid.uuid4().int % 10**10}.{uuid.uuid4().hex[:32]}"}
        return self.push({"envelope_id": str(uuid.uuid4()), "payload": payload, "type": "slash_commands",
                          "accepts_response_payload": True})

    def push(self, frame: dict[str, Any]) -> dict[str, Any]:
        """Deliver an envelope on the current connection (or on the next one) until acknowledged."""
        p = Pending(frame)
        with self.lock:
            self.pending[frame["envelope_id"]] = p
            ws = self.sockets[-1] if self.sockets else None
        if ws is not None:
            asyncio.run_coroutine_threadsafe(self._send_frame(p, ws), self.loop).result(10)
        return frame

    def again(self, frame: dict[str, Any], attempt: int = 1, reason: str = "http_timeout") -> None:
        """Slack's retry of an envelope's event: the same event id in a new envelope."""
        self.push(dict(frame, envelope_id=str(uuid.uuid4()), retry_attempt=attempt, retry_reason=reason))

    def raw(self, text: str) -> None:
        """Any text frame on the current socket (malformed envelopes)."""
        with self.lock:
            ws = self.sockets[-1]
        asyncio.run_coroutine_threadsafe(ws.send_str(text), self.loop).result(10)

    def refresh(self, reason: str = "refresh_requested") -> None:
        """Slack's notice that the connection will be replaced: the client opens a new one."""
        self.raw(json.dumps({"type": "disconnect", "reason": reason, "debug_info": {"host": "applink-emulator"}}))

    # -- what tests wait for -----------------------------------------------------------------------
    def wait_sent(self, n: int, timeout: float = 60, channel: str | None = None) -> list[Sent]:
        timeout = generous(timeout)  # tests/deadlines.py: a deadline, generous under load
        deadline = time.monotonic() + timeout
        with self.lock:
            while True:
                got = [s for s in self.sent if channel is None or s.channel == channel]
                left = deadline - time.monotonic()
                if len(got) >= n or left <= 0:
                    return got
                self.changed.wait(min(left, 0.5))

    def wait_acked(self, frame: dict[str, Any], timeout: float = 30) -> bool:
        timeout = generous(timeout)  # tests/deadlines.py: a deadline, generous under load
        deadline = time.monotonic() + timeout
        with self.lock:
            while frame["envelope_id"] not in self.acked:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(min(left, 0.5))
            return True

    def unacked(self) -> int:
        with self.lock:
            return len(self.pending)


def _error(code: str) -> web.Response:
    return web.json_response({"ok": False, "error": code})
