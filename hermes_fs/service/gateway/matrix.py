"""Matrix as a gateway channel, with matrix-nio: DMs and rooms, threads (`m.thread`) as sessions,
replies in the thread, formatted (`formatted_body`, render.py) beside the plain Markdown `body`.

One asyncio loop in its own thread long-polls `/sync`. For each batch, every message event is
handed to the core (`Sink.submit`, which returns once the message is a durable request), and
only then is the batch's `next_batch` token saved (in the gateway ledger): a crash re-reads the
batch, and the message ids make those submits no-ops. So nothing is lost or run twice.

Voice: an `m.audio` message becomes an `Audio` the core downloads from the media repository (only
if it takes the message) and transcribes (service/gateway/voice.py).

Ignored: the agent's own messages, edits (`m.replace`), other non-text messages, malformed events,
everything in encrypted rooms (end-to-end encryption is not supported: the agent cannot read
them, and answers nothing there; `gateway status` names them and says why), invites from senders
who may not talk to the agent. The first start ever reads no history: only messages that arrive
from then on; and a room joined reads none of what was said before the agent joined.

A thread's first message in a thread with no session yet brings the thread's root along, as
untrusted context (the root may be anyone's, and the agent may never have seen it). While a
request from a room is queued or running, the agent shows as typing there.

Replies are sent with the request id as the transaction id, and the device id is kept across
restarts, so Synapse turns a resend after a crash into the same event (`idempotent_send`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from ...errors import HermesError
from ...store.vault import Vault
from .access import Verdict
from .channel import AsyncChannel, ChatSettings, Inbound, Origin, Outbound, Sink, continued, room_context
from .message import Audio, AudioTooLarge
from .render import render

log = logging.getLogger(__name__)

PLATFORM = "matrix"
SYNC_TIMEOUT_MS = 30_000
MAX_BODY_BYTES = 32_000  # a Matrix event is at most 64 KiB; a longer reply is cut with a note
MAX_EVENT_TEXT = 60_000  # body + formatted_body; past this the reply goes as plain text only
MAX_UPLOAD_BYTES = 50_000_000  # within Synapse's default max_upload_size (50M); a smaller server's limit refuses (M_TOO_LARGE)
MATRIX_FORMAT = "org.matrix.custom.html"  # formatted_body's format
CONTEXT_LINES = 10  # a shared room's recent lines kept (in the ledger) for untrusted context
ROOT_CHARS = 2_000  # of a thread's root message, given with the thread's first request
TYPING_TIMEOUT_MS = 30_000  # a typing notice lapses by itself after this (a crash leaves none behind)
TYPING_RENEW_S = 20.0
TYPING_CHECK_S = 1.0  # how often running requests are looked at, to end a notice once answered
ENCRYPTED_REASON = ("end-to-end encrypted, which hermes-fs does not support: nothing there is read or answered; "
                    "talk to the agent in an unencrypted room")


@dataclass
class MatrixSettings(ChatSettings):
    """The Matrix channel: the agent's own account on a homeserver."""

    homeserver: str = "http://127.0.0.1:8008"  # the homeserver's URL
    user_id: str = ""  # the agent's account, @hermes:example.org
    password_env: str | None = None  # the variable holding its password (or access_token_env)
    access_token_env: str | None = None  # the variable holding an access token
    allow: list[str] = field(default_factory=list)  # Matrix user ids; empty = nobody (plus approved pairings)
    admins: list[str] = field(default_factory=list)  # user ids who may /merge and /reject
    pairing: bool = True  # with no allow list, a stranger in a DM gets a pairing code to approve
    per_sender_in_rooms: bool = True  # group rooms: one session per sender


def strip_reply_fallback(body: str) -> str:
    """A reply's body starts with the quoted original (`> <@user> ...`); the person's text follows."""
    lines = body.split("\n")
    if not lines or not lines[0].startswith("> "):
        return body
    i = 0
    while i < len(lines) and lines[i].startswith(">"):
        i += 1
    return "\n".join(lines[i:]).strip()


def cut(text: str, limit: int = MAX_BODY_BYTES) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    kept = data[:limit].decode(errors="ignore")
    return kept + f"\n[... cut: {len(data) - limit} more bytes]"


def reply_content(reply: Outbound) -> dict[str, Any]:
    """The m.room.message content of a reply: the Markdown as `body`, and as sanitised HTML in
    `formatted_body` when it has any formatting (a plain sentence goes as `body` alone)."""
    body = cut(reply.text)
    content: dict[str, Any] = {"msgtype": "m.text", "body": body}
    shown = render(body)
    if not shown.plain and len(body.encode()) + len(shown.html.encode()) <= MAX_EVENT_TEXT:
        content["format"] = MATRIX_FORMAT
        content["formatted_body"] = shown.html
    o = reply.origin
    if o.thread:
        content["m.relates_to"] = {"rel_type": "m.thread", "event_id": o.thread, "is_falling_back": True,
                                   "m.in_reply_to": {"event_id": o.message}}
    elif o.message.startswith("$"):
        content["m.relates_to"] = {"m.in_reply_to": {"event_id": o.message}}
    return content


def file_content(reply: Outbound, uri: str) -> dict[str, Any]:
    """The m.file event of an uploaded file: the caption (or the name) as `body`, the file's own
    name in `filename`, in the same thread and as a reply to the message, like the answer."""
    f = reply.files[0]
    content: dict[str, Any] = {"msgtype": "m.file", "body": reply.text or f.name, "filename": f.name, "url": uri,
                               "info": {"mimetype": f.mime, "size": f.size}}
    relates = reply_content(Outbound(reply.origin, "", reply.reply_id)).get("m.relates_to")
    if relates:
        content["m.relates_to"] = relates
    return content


class MatrixChannel(AsyncChannel):
    name = PLATFORM
    Settings = MatrixSettings
    idempotent_send = True  # the request id is the transaction id, on a device kept across restarts
    max_file_bytes = MAX_UPLOAD_BYTES

    def __init__(self, vault: Vault, settings: MatrixSettings):
        super().__init__(vault, settings)
        self.settings: MatrixSettings = settings
        self.client: Any = None
        self.encrypted: set[str] = set()  # joined rooms that are end-to-end encrypted (ignored)
        self.typing: dict[str, set[str]] = {}  # room -> ids of its requests queued or running
        self.rooted: set[tuple[str, str]] = set()  # (room, thread) whose root went with a request

    @property
    def cursor_key(self) -> str:
        return f"matrix:{self.settings.user_id}"

    @property
    def account(self) -> str:
        """What one machine at a time consumes when several share the vault (holder.py)."""
        return self.settings.user_id or "default"

    def per_sender(self, origin: Origin) -> bool:
        return self.settings.per_sender_in_rooms

    def progress(self, sink: Sink) -> str | None:
        """The since-token, for the next holder of the channel (holder.py)."""
        return sink.cursor(self.cursor_key)

    def resume(self, sink: Sink, cursor: str) -> None:
        """Go on from the since-token the channel's last holder published (holder.py)."""
        sink.set_cursor(self.cursor_key, cursor)

    # -- settings ---------------------------------------------------------------------------------
    def _credentials(self) -> tuple[str | None, str | None]:
        s = self.settings
        if not s.user_id:
            raise HermesError("gateway.matrix.user_id is not set (the agent's account, e.g. @hermes:example.org)")
        token = self.secret(s.access_token_env)
        password = self.secret(s.password_env)
        if not token and not password:
            named = s.access_token_env or s.password_env
            raise HermesError(f"{named} is not set in .hermes/secrets.env" if named else
                              "gateway.matrix needs password_env or access_token_env (the value in .hermes/secrets.env)")
        return token, password

    # -- the channel interface --------------------------------------------------------------------
    def prepare(self) -> None:
        self._credentials()

    @property
    def endpoint(self) -> str:
        return "the homeserver"

    def connected(self) -> bool:
        return self.client is not None

    async def disconnect(self) -> None:
        if self.client is not None:
            await self.client.close()

    def send(self, reply: Outbound) -> str:
        return self.in_loop(self._send(reply))

    def send_file(self, reply: Outbound) -> str:
        return self.in_loop(self._send_file(reply), 300)

    def should_retry(self, exc: Exception) -> bool:
        """An upload the homeserver refuses as too large is refused again."""
        return "M_TOO_LARGE" not in str(exc)

    def check(self) -> str:
        """`gateway test matrix` / `doctor`: log in (a device of its own, logged out again) and whoami."""
        return asyncio.run(self._check())

    # -- the loop ---------------------------------------------------------------------------------
    async def main(self) -> None:
        from nio import AsyncClient, AsyncClientConfig

        config = AsyncClientConfig(encryption_enabled=False, store_sync_tokens=False)
        self.client = AsyncClient(self.settings.homeserver, self.settings.user_id, store_path=None, config=config)
        try:
            await self._login()
        except HermesError as exc:
            self.failure = str(exc)
            return
        assert self.sink is not None
        typing = asyncio.create_task(self._keep_typing())
        try:
            await self._sync_loop(self.sink)
        finally:
            typing.cancel()

    async def _sync_loop(self, sink: Sink) -> None:
        since = sink.cursor(self.cursor_key)
        first = since is None
        delay = 1.0
        while not self.stopping.is_set():
            # the first sync of a start returns at once: the daemon's start waits for it (ready), never a long poll
            poll = 0 if first or not self.ready.is_set() else SYNC_TIMEOUT_MS
            resp = await self.client.sync(timeout=poll, since=since, full_state=first)
            if self.stopping.is_set():
                return
            if not hasattr(resp, "next_batch"):
                detail = f"sync failed: {getattr(resp, 'message', resp)}"
                if getattr(resp, "status_code", "") == "M_UNKNOWN_TOKEN":
                    try:
                        await self._login()
                        continue
                    except HermesError as exc:
                        detail = str(exc)
                self.report("error", detail)
                self.ready.set()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 60.0)
                continue
            delay = 1.0
            await self._handle(resp, history=first)
            sink.set_cursor(self.cursor_key, resp.next_batch)  # after every message of the batch is durable
            since, first = resp.next_batch, False
            self._note_encrypted_rooms()
            self.report("connected", self.notes())
            self.ready.set()

    async def _login(self) -> None:
        assert self.sink is not None
        sink = self.sink
        token, password = self._credentials()
        device = sink.cursor(f"{self.cursor_key}:device")
        if token:
            self.client.access_token = token
            who = await self.client.whoami()
            if not hasattr(who, "user_id"):
                raise HermesError(f"the access token was refused: {getattr(who, 'message', who)}")
            if who.user_id != self.settings.user_id:
                raise HermesError(f"the access token is {who.user_id}'s, not {self.settings.user_id}'s")
            self.client.user_id = who.user_id
            self.client.device_id = who.device_id or device
        else:
            if device:
                self.client.device_id = device  # the same device: Synapse keeps its transaction ids
            resp = await self.client.login(password, device_name="hermes-fs")
            if not hasattr(resp, "access_token"):
                raise HermesError(f"login as {self.settings.user_id} failed: {getattr(resp, 'message', resp)}")
        if self.client.device_id:
            sink.set_cursor(f"{self.cursor_key}:device", self.client.device_id)

    async def _check(self) -> str:
        from nio import AsyncClient, AsyncClientConfig

        token, password = self._credentials()
        client = AsyncClient(self.settings.homeserver, self.settings.user_id, store_path=None,
                             config=AsyncClientConfig(encryption_enabled=False, store_sync_tokens=False))
        try:
            if token:
                client.access_token = token
            else:
                resp = await client.login(password, device_name="hermes-fs check")
                if not hasattr(resp, "access_token"):
                    raise HermesError(f"login as {self.settings.user_id} failed: {getattr(resp, 'message', resp)}")
            who = await client.whoami()
            if not hasattr(who, "user_id"):
                raise HermesError(f"whoami failed: {getattr(who, 'message', who)}")
            if not token:
                await client.logout()
            return f"logged in to {self.settings.homeserver} as {who.user_id}"
        except OSError as exc:
            raise HermesError(f"cannot reach {self.settings.homeserver}: {exc}") from None
        finally:
            await client.close()

    # -- events -----------------------------------------------------------------------------------
    async def _handle(self, resp, history: bool) -> None:
        for room_id, info in resp.rooms.invite.items():
            await self._invite(room_id, info)
        if history:
            return  # the first start ever: what was said before is not a request
        for room_id, info in resp.rooms.join.items():
            events = list(info.timeline.events)
            for event in events[self._after_own_join(events):]:
                try:
                    message = self._inbound(room_id, event)
                except Exception:  # a malformed event is skipped, never the end of the channel
                    log.warning("matrix: skipped a malformed event in %s", room_id, exc_info=True)
                    continue
                if message is not None:
                    await self._submit(message)

    def _after_own_join(self, events: list) -> int:
        """Where the room's news starts: after the agent's own join, when this batch has it. A room
        just joined comes with what was said before (its visible history): that is context for a
        thread (its root), never a request."""
        start = 0
        for i, event in enumerate(events):
            source = getattr(event, "source", None)
            if not isinstance(source, dict) or source.get("type") != "m.room.member" \
                    or source.get("state_key") != self.settings.user_id:
                continue
            membership = getattr(event, "membership", None)  # nio's RoomMemberEvent
            before = getattr(event, "prev_membership", None)
            if membership == "join" and before != "join":  # a join, not a profile change
                start = i + 1
        return start

    async def _submit(self, message: Inbound) -> None:
        assert self.sink is not None
        if message.origin.thread:
            await self._with_root(message)
        rid = await asyncio.to_thread(self.sink.submit, message)
        try:
            if (await asyncio.to_thread(self.sink.request_status, rid) or ("",))[0] == "pending":
                self.typing.setdefault(message.origin.chat, set()).add(rid)
                await self._type(message.origin.chat, True)
        except Exception:  # a notice is a courtesy: never the end of the channel
            log.warning("matrix: typing notice failed", exc_info=True)

    # -- a thread's root --------------------------------------------------------------------------
    async def _with_root(self, message: Inbound) -> None:
        """Give the thread's root with the first request of a thread that has no session yet."""
        o = message.origin
        assert o.thread and self.sink is not None
        key = (o.chat, o.thread)
        skey = o.session_key(per_sender=not message.direct and self.per_sender(o))
        if key in self.rooted or self.sink.session(skey) or self.sink.lookup(o) is not None:
            return
        self.rooted.add(key)
        try:
            root = await self._root_line(o.chat, o.thread)
        except Exception:  # the request still runs, without its root
            log.warning("matrix: could not read the root of a thread in %s", o.chat, exc_info=True)
            root = None
        if root:
            message.context = root + (f"\n\n{message.context}" if message.context else "")

    async def _root_line(self, room_id: str, event_id: str) -> str | None:
        """"<sender> (the thread's first message): <text>", or None when it cannot be read as text."""
        resp = await self.client.room_get_event(room_id, event_id)
        source = getattr(getattr(resp, "event", None), "source", None)
        if not isinstance(source, dict) or source.get("type") != "m.room.message":
            return None
        content, sender = source.get("content"), source.get("sender")
        body = content.get("body") if isinstance(content, dict) else None
        if not isinstance(body, str) or not isinstance(sender, str) or not body.strip():
            return None
        text = strip_reply_fallback(body)[:ROOT_CHARS]
        who = "you (the agent)" if sender == self.settings.user_id else sender
        return f"{who} (the thread's first message): {continued(text)}"

    # -- typing notices ---------------------------------------------------------------------------
    async def _keep_typing(self) -> None:
        """Renew each room's typing notice while one of its requests is queued or running; end it
        once none is (the reply follows)."""
        renewed: dict[str, float] = {}
        while True:
            await asyncio.sleep(TYPING_CHECK_S)
            try:
                await self._typing_round(renewed)
            except Exception:  # a notice is a courtesy: never the end of the channel
                log.warning("matrix: typing notice failed", exc_info=True)

    async def _typing_round(self, renewed: dict[str, float]) -> None:
        assert self.sink is not None
        status = self.sink.request_status
        now = asyncio.get_running_loop().time()
        for room, rids in list(self.typing.items()):
            for rid in list(rids):
                if (await asyncio.to_thread(status, rid) or ("",))[0] != "pending":
                    rids.discard(rid)
            if not rids:
                del self.typing[room]
                renewed.pop(room, None)
                await self._type(room, False)
            elif now - renewed.setdefault(room, now) >= TYPING_RENEW_S:
                renewed[room] = now
                await self._type(room, True)

    async def _type(self, room: str, on: bool) -> None:
        from nio import RoomTypingError

        resp = await self.client.room_typing(room, on, timeout=TYPING_TIMEOUT_MS)
        if isinstance(resp, RoomTypingError):
            log.info("matrix: typing notice in %s refused: %s", room, resp.message)

    async def _invite(self, room_id: str, info) -> None:
        own = self.settings.user_id
        inviter, direct = None, False
        for ev in getattr(info, "invite_state", []) or []:
            source = getattr(ev, "source", {}) or {}
            if source.get("type") == "m.room.member" and source.get("state_key") == own:
                inviter = source.get("sender")
                content = getattr(ev, "content", None) or source.get("content") or {}  # nio moves it out of source
                direct = isinstance(content, dict) and content.get("is_direct") is True
        if not inviter or self.sink is None:
            return
        verdict = self.sink.verdict(Inbound(Origin(PLATFORM, room_id, inviter, f"invite:{room_id}"), "", direct=direct))
        if verdict is Verdict.SILENCE:
            log.info("matrix: ignored an invite from a sender who may not talk to the agent")
            return
        resp = await self.client.join(room_id)
        if not hasattr(resp, "room_id"):
            log.warning("matrix: could not join %s: %s", room_id, getattr(resp, "message", resp))

    def _inbound(self, room_id: str, event) -> Inbound | None:
        source = getattr(event, "source", None)
        if not isinstance(source, dict) or source.get("type") != "m.room.message":
            if isinstance(source, dict) and source.get("type") == "m.room.encrypted":
                self._note_encrypted(room_id)
            return None
        sender, event_id = source.get("sender"), source.get("event_id")
        content = source.get("content")
        if not isinstance(sender, str) or not isinstance(event_id, str) or not isinstance(content, dict):
            return None
        if sender == self.settings.user_id:
            return None  # our own replies
        room = self.client.rooms.get(room_id)
        if room is not None and room.encrypted:
            self._note_encrypted(room_id)
            return None
        found = content.get("m.relates_to")
        relates: dict = found if isinstance(found, dict) else {}
        if relates.get("rel_type") == "m.replace" or "m.new_content" in content:
            return None  # an edit of an earlier message
        body = content.get("body")
        audio = self._audio(content)
        if audio is not None and isinstance(body, str):  # m.audio: `body` is a caption only beside a `filename`
            body = body if isinstance(content.get("filename"), str) and body != content["filename"] else ""
        elif content.get("msgtype") not in ("m.text", "m.notice", "m.emote") or not isinstance(body, str):
            return None
        if content.get("msgtype") == "m.notice":
            return None  # notices are what bots send; answering them is how two bots loop
        thread = relates.get("event_id") if relates.get("rel_type") == "m.thread" else None
        text = strip_reply_fallback(body) if "m.in_reply_to" in relates and not thread else body
        direct = room is not None and (room.member_count or 0) <= 2
        context = None
        if not direct and self.sink is not None:
            context = room_context(self.sink, room_id, event_id, sender, text, CONTEXT_LINES)
        origin = Origin(PLATFORM, room_id, sender, event_id, thread if isinstance(thread, str) else None)
        return Inbound(origin, text, direct=direct, context=context, audio=audio)

    def _audio(self, content: dict) -> Audio | None:
        """An `m.audio` message (voice notes too: `org.matrix.msc3245.voice`), downloaded from the
        media repository by the core only if it takes the message; unencrypted media only."""
        url = content.get("url")
        if content.get("msgtype") != "m.audio" or not isinstance(url, str) or not url.startswith("mxc://"):
            return None
        found = content.get("info")
        info: dict = found if isinstance(found, dict) else {}
        size, duration = info.get("size"), info.get("duration")  # duration: milliseconds
        name = content.get("filename") if isinstance(content.get("filename"), str) else content.get("body")
        return Audio(lambda limit: self._download(url, limit), str(info.get("mimetype") or ""),
                     str(name or "audio")[:200], size if isinstance(size, int) and not isinstance(size, bool) else None,
                     duration / 1000 if isinstance(duration, int) and not isinstance(duration, bool) else None)

    def _download(self, mxc: str, limit: int) -> bytes:
        """The media's bytes, at most `limit` (called from the core's thread: the loop downloads)."""
        return self.in_loop(self._fetch_media(mxc, limit), 120)

    async def _fetch_media(self, mxc: str, limit: int) -> bytes:
        resp = await self.client.download(mxc=mxc)
        body = getattr(resp, "body", None)
        if not isinstance(body, bytes):
            raise HermesError(f"the homeserver did not give the media: {getattr(resp, 'message', resp)}")
        if len(body) > limit:
            raise AudioTooLarge(f"{len(body)} bytes, over the {limit} byte limit")
        return body

    def _note_encrypted(self, room_id: str) -> None:
        if room_id not in self.encrypted:
            self.encrypted.add(room_id)
            log.warning("matrix: %s is %s", room_id, ENCRYPTED_REASON)

    def _note_encrypted_rooms(self) -> None:
        for room_id, room in list(self.client.rooms.items()):
            if room.encrypted:
                self._note_encrypted(room_id)
        self.encrypted &= set(self.client.rooms)  # a room left is no longer ignored

    def notes(self) -> str:
        """What `gateway status` shows beside "connected": the rooms ignored, and why."""
        if not self.encrypted:
            return ""
        rooms = sorted(self.encrypted)
        named = ", ".join(rooms[:3]) + (f" and {len(rooms) - 3} more" if len(rooms) > 3 else "")
        return f"ignoring {len(rooms)} room(s), {ENCRYPTED_REASON}: {named}"

    async def _send_file(self, reply: Outbound) -> str:
        """Upload to the media repository, then an m.file event pointing at it, with the request's
        file delivery id as the transaction id (a resend after a crash is one event; at worst the
        upload is repeated, unseen)."""
        f = reply.files[0]
        with open(f.path, "rb") as data:
            upload, _ = await self.client.upload(data, content_type=f.mime, filename=f.name, filesize=f.size)
        uri = getattr(upload, "content_uri", None)
        if not uri:
            raise HermesError(f"the homeserver refused the upload: {getattr(upload, 'message', upload)}")
        resp = await self.client.room_send(reply.origin.chat, "m.room.message", file_content(reply, uri),
                                           tx_id=reply.reply_id, ignore_unverified_devices=True)
        if not hasattr(resp, "event_id"):
            raise HermesError(f"the homeserver refused the file: {getattr(resp, 'message', resp)}")
        return resp.event_id

    async def _send(self, reply: Outbound) -> str:
        o = reply.origin
        content = reply_content(reply)
        resp = await self.client.room_send(o.chat, "m.room.message", content, tx_id=reply.reply_id,
                                           ignore_unverified_devices=True)
        if not hasattr(resp, "event_id"):
            raise HermesError(f"the homeserver refused the reply: {getattr(resp, 'message', resp)}")
        return resp.event_id


__all__ = ["MatrixChannel", "file_content", "reply_content", "strip_reply_fallback"]
