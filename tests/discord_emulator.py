"""An EMULATOR of Discord's REST API and Gateway (not Discord), written from Discord's published API/Gateway docs, for tests on 127.0.0.1.

Built from https://discord.com/developers/docs: "Reference" (base URL `/api/v10`, `Authorization:
Bot <token>`, error JSON `{"code", "message"}`, snowflakes as strings), "Gateway" (Get Gateway Bot
`GET /gateway/bot` with `url`, `shards`, `session_start_limit`; the connection with `?v=10&encoding=
json&compress=zlib-stream` (zlib transport compression: one zlib context per connection, each
message ending in Z_SYNC_FLUSH's `00 00 ff ff`); opcodes HELLO 10 with `heartbeat_interval`,
IDENTIFY 2, HEARTBEAT 1 / HEARTBEAT_ACK 11, DISPATCH 0 with `s` and `t`, RESUME 6 with `session_id`
and `seq` (the missed events replayed, then RESUMED), READY with `user`, `guilds`, `session_id`,
`resume_gateway_url`, `shard`, `application`; close codes 4000 unknown error (resumable), 4001
unknown opcode, 4002 decode error, 4004 authentication failed, 4014 disallowed intents), "Gateway
Events" (MESSAGE_CREATE: a message with `guild_id` in guilds, `mentions`, `referenced_message`;
INTERACTION_CREATE), "Users" (`GET /users/@me`), "Application" (`GET /oauth2/applications/@me`),
"Messages" (`POST /channels/{id}/messages` as JSON or multipart with `payload_json` and
`files[n]`, `content` at most 2000 characters, `message_reference`, `allowed_mentions`; `GET
/channels/{id}/messages` with `after` / `before` / `limit`, newest first, without `guild_id`),
"Receiving and Responding" (`POST /interactions/{id}/{token}/callback` within 3 seconds, once;
`PATCH /webhooks/{application.id}/{token}/messages/@original`) and "Application Commands"
(`PUT /applications/{id}/commands`, names `^[-_\\w]{1,32}$` in lowercase, descriptions 1-100).

What it checks as documented: the token on every call (401) and in IDENTIFY (4004), the message
content intent (4014 when not allowed for the app), content length (400, code 50035), unknown
channels (404, 10003), a user who cannot be messaged (403, 50007), an interaction answered late or
twice (10062, 40060), a command's shape.

What it cannot prove (listed in docs/guide/gateway/discord.md): Discord's real rate limits and
buckets, sharding past one shard, what Discord sends a bot without the message content intent, how
clients render Markdown, permissions and roles, voice message encoding, CDN URLs and their
expiry, delivery timing, and anything of the API not named above.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import threading
import time
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import WSMsgType, web
from deadlines import deadline as generous

MAX_CONTENT = 2000
COMMAND_NAME = re.compile(r"^[-_\w]{1,32}$")
IDS = itertools.count(1_200_000_000_000_000_000)
MESSAGE_CONTENT = 1 << 15


def snowflake() -> str:
    return str(next(IDS))


@dataclass
class Sent:
    """A message the bot posted (or an interaction answer), as the test reads it."""

    channel_id: str
    id: str
    content: str
    reference: str | None = None  # the message it replies to
    allowed_mentions: Any = None
    files: list[tuple[str, bytes]] = field(default_factory=list)
    interaction: str | None = None  # the interaction whose acknowledgement it edited


class DiscordEmulator:
    """The emulated Discord for one bot application. `dm`, `say` and `slash` make events as
    Discord would; `sent` holds what the bot posted, in order."""

    def __init__(self, token: str = "MTIwMDAwMDAwMDAwMDAwMDAx.GhErMe.emulatorTokenNotADiscordOne_0123456",
                 message_content_allowed: bool = True, heartbeat_ms: int = 1000):
        self.token = token
        self.bot_id = "1200000000000000001"
        self.app_id = "1200000000000000002"
        self.message_content_allowed = message_content_allowed
        self.heartbeat_ms = heartbeat_ms
        self.sent: list[Sent] = []
        self.calls: list[str] = []
        self.commands: list[dict] = []
        self.identifies: list[dict] = []
        self.resumes = 0
        self.heartbeats = 0
        self.dm_channels: dict[str, str] = {}  # user id -> DM channel id
        self.guild_channels: dict[str, str] = {}  # channel id -> guild id
        self.blocked: set[str] = set()  # users who cannot be messaged (their DM channel answers 403)
        self.interactions: dict[str, dict] = {}  # id -> {token, at, acked}
        self.files: dict[str, bytes] = {}  # path under /cdn -> bytes
        self.history: dict[str, list[dict]] = {}  # channel id -> its messages (as REST returns them), oldest first
        self.sessions: dict[str, list[tuple[int, str, Any]]] = {}  # session id -> dispatched (s, t, d)
        self.sockets: list[tuple[web.WebSocketResponse, dict]] = []
        self.lock = threading.Condition()
        self.loop = asyncio.new_event_loop()
        self.port = 0
        started = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(started,), name="discord-emulator", daemon=True)
        self.thread.start()
        started.wait(180)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base(self) -> str:
        return f"{self.url}/api/v10"

    def close(self) -> None:
        async def stop():
            for ws, _ in list(self.sockets):
                await ws.close(code=1001)
            await self.runner.cleanup()

        try:
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(15)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(15)

    # -- the test's side ------------------------------------------------------------------------------
    def user(self, uid: str, bot: bool = False) -> dict:
        return {"id": uid, "username": f"person{uid[-4:]}", "discriminator": "0", "global_name": None,
                "avatar": None, "bot": bot}

    def dm(self, uid: str, content: str, *, attachments: list[dict] | None = None, extra: dict | None = None) -> str:
        """A person's direct message to the bot; its id."""
        with self.lock:
            chat = self.dm_channels.setdefault(uid, snowflake())
        return self._message(chat, uid, content, None, attachments=attachments, extra=extra)

    def say(self, guild: str, channel: str, uid: str, content: str, *, mention: bool = False,
            reply_to: Sent | None = None, extra: dict | None = None) -> str:
        """A person's message in a guild channel (`mention`: a real mention of the bot first)."""
        with self.lock:
            self.guild_channels[channel] = guild
        mentions = [self.user(self.bot_id, bot=True)] if mention else []
        if mention:
            content = f"<@{self.bot_id}> {content}"
        more: dict[str, Any] = {"mentions": mentions}
        if reply_to is not None:
            more["referenced_message"] = self._message_json(reply_to.channel_id, reply_to.id, self.bot_id,
                                                            reply_to.content, bot=True)
            more["message_reference"] = {"message_id": reply_to.id, "channel_id": reply_to.channel_id}
            more["type"] = 19
        return self._message(channel, uid, content, guild, extra={**more, **(extra or {})})

    def slash(self, uid: str, name: str, options: dict[str, str] | None = None, *, guild: str | None = None,
              channel: str | None = None, application_id: str | None = None) -> str:
        """A person's use of the bot's slash command (in their DM, or in a guild channel)."""
        iid, token = snowflake(), f"interaction-token-{snowflake()}"
        with self.lock:
            chat = channel or self.dm_channels.setdefault(uid, snowflake())
            self.interactions[iid] = {"token": token, "at": time.monotonic(), "acked": None, "channel": chat}
        d: dict[str, Any] = {
            "id": iid, "application_id": application_id or self.app_id, "type": 2, "token": token, "version": 1,
            "data": {"id": snowflake(), "name": name, "type": 1,
                     "options": [{"name": k, "type": 3, "value": v} for k, v in (options or {}).items()]},
            "channel_id": chat, "channel": {"id": chat, "type": 1 if guild is None else 0},
            "locale": "en-US", "app_permissions": "0", "attachment_size_limit": 10 * 1024 * 1024,
            "entitlements": [], "authorizing_integration_owners": {}, "context": 1 if guild is None else 0,
        }
        if guild is None:
            d["user"] = self.user(uid)
        else:
            d["guild_id"] = guild
            d["guild_locale"] = "en-US"
            d["member"] = {"user": self.user(uid), "roles": [], "joined_at": _now(), "deaf": False, "mute": False,
                           "flags": 0, "permissions": "0"}
        self.dispatch("INTERACTION_CREATE", d)
        return iid

    def voice(self, uid: str, audio: bytes, *, size: int | None = None, seconds: float = 2.0) -> str:
        """A voice message in a DM: an audio attachment on the CDN (here, this server)."""
        path = f"attachments/{snowflake()}/voice-message.ogg"
        with self.lock:
            self.files[path] = audio
        att = {"id": snowflake(), "filename": "voice-message.ogg", "size": len(audio) if size is None else size,
               "url": f"{self.url}/cdn/{path}", "proxy_url": f"{self.url}/cdn/{path}", "content_type": "audio/ogg",
               "duration_secs": seconds, "waveform": "AAAA"}
        return self.dm(uid, "", attachments=[att], extra={"flags": 8192})

    def dispatch(self, t: str, d: Any) -> None:
        """Any DISPATCH event (a malformed one too) to every connected session."""
        asyncio.run_coroutine_threadsafe(self._dispatch(t, d), self.loop).result(10)

    def drop(self, code: int = 4000) -> None:
        """Close the open Gateway connections (4000: resumable, as Discord's unknown error)."""
        async def go():
            for ws, _ in list(self.sockets):
                await ws.close(code=code)

        asyncio.run_coroutine_threadsafe(go(), self.loop).result(10)

    def wait_sent(self, n: int, timeout: float = 30.0, channel: str | None = None) -> list[Sent]:
        timeout = generous(timeout)  # tests/deadlines.py: a deadline, generous under load
        deadline = time.time() + timeout
        with self.lock:
            while True:
                got = [s for s in self.sent if channel is None or s.channel_id == channel]
                if len(got) >= n or time.time() > deadline:
                    return got
                self.lock.wait(0.1)

    def wait_for(self, what, timeout: float = 30.0) -> bool:
        timeout = generous(timeout)  # tests/deadlines.py: a deadline, generous under load
        deadline = time.time() + timeout
        with self.lock:
            while not what() and time.time() < deadline:
                self.lock.wait(0.1)
            return bool(what())

    # -- events -------------------------------------------------------------------------------------
    def _message_json(self, chat: str, mid: str, uid: str, content: str, guild: str | None = None,
                      bot: bool = False) -> dict:
        m: dict[str, Any] = {"id": mid, "channel_id": chat, "author": self.user(uid, bot), "content": content,
                             "timestamp": _now(), "edited_timestamp": None, "tts": False, "mention_everyone": False,
                             "mentions": [], "mention_roles": [], "attachments": [], "embeds": [], "pinned": False,
                             "type": 0, "flags": 0, "components": []}
        if guild:
            m["guild_id"] = guild
        return m

    def _message(self, chat: str, uid: str, content: str, guild: str | None, *, attachments: list[dict] | None = None,
                 extra: dict | None = None) -> str:
        mid = snowflake()
        m = self._message_json(chat, mid, uid, content, guild)
        if attachments:
            m["attachments"] = attachments
        m.update(extra or {})
        with self.lock:
            self.history.setdefault(chat, []).append({k: v for k, v in m.items() if k != "guild_id"})
        # "Message Content": without the intent a guild message that neither mentions nor answers the bot
        # comes without its content
        if guild and not self._content_intent() and not any(
                isinstance(x, dict) and x.get("id") == self.bot_id for x in m.get("mentions") or []) and \
                not (isinstance(m.get("referenced_message"), dict)):
            m["content"] = ""
        self.dispatch("MESSAGE_CREATE", m)
        return mid

    def _content_intent(self) -> bool:
        return bool(self.identifies and int(self.identifies[-1].get("intents", 0)) & MESSAGE_CONTENT)

    async def _dispatch(self, t: str, d: Any) -> None:
        for ws, conn in list(self.sockets):
            if conn.get("session") is None:
                continue
            history = self.sessions[conn["session"]]
            s = (history[-1][0] if history else 0) + 1
            history.append((s, t, d))
            await self._send(ws, conn, {"op": 0, "t": t, "s": s, "d": d})

    async def _send(self, ws: web.WebSocketResponse, conn: dict, payload: dict) -> None:
        data = json.dumps(payload)
        z = conn.get("zlib")
        if z is not None:
            await ws.send_bytes(z.compress(data.encode()) + z.flush(zlib.Z_SYNC_FLUSH))
        else:
            await ws.send_str(data)

    # -- the server ---------------------------------------------------------------------------------
    def _serve(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/cdn/{path:.+}", self._cdn)
        app.router.add_route("*", "/api/v10/{path:.+}", self._rest)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        started.set()
        self.loop.run_forever()

    async def _cdn(self, request: web.Request) -> web.Response:
        with self.lock:
            self.calls.append(f"GET /cdn/{request.match_info['path']}")
        data = self.files.get(request.match_info["path"])
        return web.Response(body=data, content_type="audio/ogg") if data is not None else web.Response(status=404)

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        conn: dict[str, Any] = {"session": None}
        if request.query.get("compress") == "zlib-stream":
            conn["zlib"] = zlib.compressobj()
        self.sockets.append((ws, conn))
        await self._send(ws, conn, {"op": 10, "d": {"heartbeat_interval": self.heartbeat_ms}, "s": None, "t": None})
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                try:
                    frame = json.loads(msg.data)
                except ValueError:
                    await ws.close(code=4002, message=b"Error while decoding payload.")
                    break
                if not await self._op(ws, conn, frame):
                    break
        finally:
            self.sockets.remove((ws, conn))
        return ws

    async def _op(self, ws: web.WebSocketResponse, conn: dict, frame: dict) -> bool:
        op, d = frame.get("op"), frame.get("d")
        if op == 1:
            with self.lock:
                self.heartbeats += 1
            await self._send(ws, conn, {"op": 11, "d": None, "s": None, "t": None})
            return True
        if op == 2:
            if not isinstance(d, dict) or d.get("token") != self.token:
                await ws.close(code=4004, message=b"Authentication failed.")
                return False
            if int(d.get("intents", 0)) & MESSAGE_CONTENT and not self.message_content_allowed:
                await ws.close(code=4014, message=b"Disallowed intent(s).")
                return False
            with self.lock:
                self.identifies.append(d)
            sid = snowflake()
            self.sessions[sid] = []
            conn["session"] = sid
            ready = {"v": 10, "user": {**self.user(self.bot_id, bot=True), "username": "hermes", "verified": True,
                                       "mfa_enabled": False, "flags": 0},
                     "guilds": [], "session_id": sid, "resume_gateway_url": f"ws://127.0.0.1:{self.port}/gateway",
                     "shard": d.get("shard") or [0, 1], "application": {"id": self.app_id, "flags": 0},
                     "private_channels": [], "relationships": [], "presences": []}
            self.sessions[sid].append((1, "READY", ready))
            await self._send(ws, conn, {"op": 0, "t": "READY", "s": 1, "d": ready})
            return True
        if op == 6:
            if not isinstance(d, dict) or d.get("token") != self.token or d.get("session_id") not in self.sessions:
                await self._send(ws, conn, {"op": 9, "d": False, "s": None, "t": None})  # INVALID_SESSION
                return True
            conn["session"] = d["session_id"]
            with self.lock:
                self.resumes += 1
                self.lock.notify_all()
            seq = d.get("seq") or 0
            for s, t, data in self.sessions[d["session_id"]]:
                if s > seq:
                    await self._send(ws, conn, {"op": 0, "t": t, "s": s, "d": data})
            last = self.sessions[d["session_id"]][-1][0] if self.sessions[d["session_id"]] else 0
            self.sessions[d["session_id"]].append((last + 1, "RESUMED", {}))
            await self._send(ws, conn, {"op": 0, "t": "RESUMED", "s": last + 1, "d": {}})
            return True
        if op in (3, 4, 8):  # presence, voice state, request guild members: accepted, nothing to do here
            return True
        await ws.close(code=4001, message=b"Unknown opcode.")
        return False

    async def _rest(self, request: web.Request) -> web.Response:
        path, method = request.match_info["path"], request.method
        with self.lock:
            self.calls.append(f"{method} /{path}")
        if request.headers.get("Authorization") != f"Bot {self.token}" and not path.startswith(("interactions/", "webhooks/")):
            return _error(401, 0, "401: Unauthorized")
        try:
            if method == "GET" and path == "users/@me":
                return _json({**self.user(self.bot_id, bot=True), "username": "hermes", "verified": True,
                                          "mfa_enabled": False, "flags": 0})
            if method == "GET" and path == "oauth2/applications/@me":
                return _json({"id": self.app_id, "name": "hermes", "icon": None, "description": "",
                                          "bot_public": False, "bot_require_code_grant": False, "flags": 0,
                                          "owner": self.user("1200000000000000099"), "verify_key": "00" * 32,
                                          "team": None, "summary": "", "rpc_origins": []})
            if method == "GET" and path == "gateway/bot":
                return _json({"url": f"ws://127.0.0.1:{self.port}/gateway", "shards": 1,
                                          "session_start_limit": {"total": 1000, "remaining": 999,
                                                                  "reset_after": 0, "max_concurrency": 1}})
            m = re.fullmatch(r"applications/(\d+)/commands", path)
            if m and method == "PUT":
                return await self._commands(m.group(1), await request.json())
            m = re.fullmatch(r"channels/(\d+)/messages", path)
            if m and method == "POST":
                return await self._post_message(m.group(1), request)
            m = re.fullmatch(r"interactions/(\d+)/([^/]+)/callback", path)
            if m and method == "POST":
                return await self._callback(m.group(1), m.group(2), await request.json())
            m = re.fullmatch(r"webhooks/(\d+)/([^/]+)/messages/@original", path)
            if m and method == "PATCH":
                return await self._edit_original(m.group(1), m.group(2), await request.json())
            m = re.fullmatch(r"channels/(\d+)/messages", path)
            if m and method == "GET":
                return self._history(m.group(1), request.query)
            m = re.fullmatch(r"channels/(\d+)/typing", path)
            if m and method == "POST":
                return web.Response(status=204)
        except ValueError:
            return _error(400, 50109, "The request body contains invalid JSON.")
        return _error(404, 0, "404: Not Found")

    async def _commands(self, app: str, body: Any) -> web.Response:
        if app != self.app_id:
            return _error(403, 50001, "Missing Access")
        if not isinstance(body, list):
            return _error(400, 50035, "Invalid Form Body")
        for c in body:
            name, desc = c.get("name", ""), c.get("description", "")
            if not COMMAND_NAME.fullmatch(name) or name != name.lower() or not 1 <= len(desc) <= 100:
                return _error(400, 50035, f"Invalid Form Body: command {name!r}")
            for o in c.get("options", []):
                if not COMMAND_NAME.fullmatch(o.get("name", "")) or not 1 <= len(o.get("description", "")) <= 100:
                    return _error(400, 50035, f"Invalid Form Body: option of {name!r}")
        with self.lock:
            self.commands = [{**c, "id": snowflake(), "application_id": self.app_id, "version": snowflake()}
                             for c in body]
            self.lock.notify_all()
        return _json(self.commands)

    async def _post_message(self, chat: str, request: web.Request) -> web.Response:
        files: list[tuple[str, bytes]] = []
        if request.content_type.startswith("multipart/"):
            payload: dict[str, Any] = {}
            reader = await request.multipart()
            async for part in reader:
                if part.name == "payload_json":
                    payload = json.loads(await part.text())
                elif part.name and part.name.startswith("files["):
                    files.append((part.filename or "", bytes(await part.read())))
        else:
            payload = await request.json()
        known = set(self.dm_channels.values()) | set(self.guild_channels)
        if chat not in known:
            return _error(404, 10003, "Unknown Channel")
        if chat in {self.dm_channels.get(u) for u in self.blocked}:
            return _error(403, 50007, "Cannot send messages to this user")
        content = payload.get("content") or ""
        if len(content) > MAX_CONTENT:
            return _error(400, 50035, "Invalid Form Body: content: Must be 2000 or fewer in length.")
        if not content and not files:
            return _error(400, 50006, "Cannot send an empty message")
        ref = payload.get("message_reference") or {}
        mid = ref.get("message_id")
        sent = Sent(chat, snowflake(), content, str(mid) if mid is not None else None, payload.get("allowed_mentions"),
                    files)
        answer = self._message_json(chat, sent.id, self.bot_id, content, bot=True)
        with self.lock:
            self.sent.append(sent)
            self.history.setdefault(chat, []).append(answer)
            self.lock.notify_all()
        return _json(answer)

    def _history(self, chat: str, query: Any) -> web.Response:
        """"Get Channel Messages": newest first, `after` / `before` a message id, `limit` 1-100."""
        if chat not in set(self.dm_channels.values()) | set(self.guild_channels):
            return _error(404, 10003, "Unknown Channel")
        try:
            limit = int(query.get("limit", 50))
            after, before = int(query.get("after", 0)), int(query.get("before", 1 << 64))
        except ValueError:
            return _error(400, 50035, "Invalid Form Body")
        if not 1 <= limit <= 100:
            return _error(400, 50035, "Invalid Form Body: limit")
        with self.lock:
            found = [m for m in self.history.get(chat, []) if after < int(m["id"]) < before]
        found = found[:limit] if "after" in query else found[-limit:]
        return _json(list(reversed(found)))

    async def _callback(self, iid: str, token: str, body: Any) -> web.Response:
        it = self.interactions.get(iid)
        if it is None or it["token"] != token or time.monotonic() - it["at"] > 3.0:
            return _error(404, 10062, "Unknown interaction")
        if it["acked"] is not None:
            return _error(400, 40060, "Interaction has already been acknowledged.")
        it["acked"] = body.get("type")
        with self.lock:
            self.lock.notify_all()
        return _json({"interaction": {"id": iid, "type": 2, "response_message_loading": True,
                                                  "response_message_ephemeral": False},
                                  "resource": {"type": body.get("type")}})

    async def _edit_original(self, app: str, token: str, body: Any) -> web.Response:
        found = [(iid, it) for iid, it in self.interactions.items() if it["token"] == token]
        if app != self.app_id or not found or found[0][1]["acked"] is None:
            return _error(404, 10015, "Unknown Webhook")
        content = body.get("content") or ""
        if len(content) > MAX_CONTENT:
            return _error(400, 50035, "Invalid Form Body: content: Must be 2000 or fewer in length.")
        iid, chat = found[0][0], found[0][1]["channel"]
        sent = Sent(chat, snowflake(), content, None, body.get("allowed_mentions"), [], interaction=iid)
        with self.lock:
            self.sent.append(sent)
            self.lock.notify_all()
        return _json(self._message_json(chat, sent.id, self.bot_id, content, bot=True))


def _json(body: Any, status: int = 200) -> web.Response:
    """A JSON answer with Discord's exact content type (`application/json`, no charset: discord.py
    reads a body as JSON only then)."""
    return web.Response(body=json.dumps(body).encode(), status=status, headers={"Content-Type": "application/json"})


def _error(status: int, code: int, message: str) -> web.Response:
    return _json({"code": code, "message": message}, status=status)


def _now() -> str:
    return datetime.now(UTC).isoformat()
