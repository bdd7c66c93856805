"""Signal as a gateway channel, through signal-cli in daemon mode (`signal-cli -a ACCOUNT daemon
--http`): its JSON-RPC over HTTP (`POST /api/v1/rpc`) to send, its Server-Sent Events stream
(`GET /api/v1/events`) to receive. signal-cli holds the account's keys and speaks Signal's protocol;
this adapter is an HTTP client of it (httpx), written from the signal-cli-jsonrpc(5) manual.

Receiving: one asyncio loop in its own thread reads the event stream. Each `receive` event's
envelope that is a person's message is handed to the core (`Sink.submit`, which returns once the
message is a durable request), and only then is the event's id saved as the channel's cursor; a
reconnect sends it as `Last-Event-ID`, and a signal-cli that keeps its recent events (the manual:
the last 1000) sends the ones after it first. A message's identity is its author and its sent
timestamp (Signal's own), so the same envelope twice (a replay after a reconnect, after a restart
of signal-cli) is one request. A signal-cli whose events carry no id cannot replay: what it
received while the stream was down is not seen here (the docs say so).

Who is who: `allow` and `admins` are phone numbers in E.164 (`+15551234567`) or Signal account
UUIDs (ACIs), as signal-cli reports the sender it decrypted (`sourceNumber`, else `sourceUuid`),
never profile names. A sender who hides their number is known by their UUID only.

Groups: the agent takes a group message that mentions its account (Signal's mention, not a typed
name) or quotes one of its messages; the group's other lines are remembered and reach the model
only as untrusted context. The agent's own messages, other devices' sync messages, receipts,
typing notices, reactions, edits and deletions are not requests.

Voice notes (an `audio/*` attachment) become an `Audio` whose download (`getAttachment`, base64)
the core runs only if it takes the message. Files out go as attachments (RFC 2397 data URIs, so
signal-cli needs no access to the vault's disk). Replies are plain text with Signal's text styles
(render.styled: bold, italic, strikethrough, monospace as ranges; Signal parses no markup, so
nothing the model writes becomes formatting or a mention). signal-cli's `send` has no idempotency key, so a send cut short by a
crash is marked failed rather than risk a second copy.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ...errors import ConfigError, HermesError
from ...store.vault import Vault
from .access import AccessRules
from .channel import AsyncChannel, ChatSettings, Inbound, Origin, Outbound, Sink, check_api_base, room_context
from .message import Audio, AudioTooLarge
from .render import Styled, styled

log = logging.getLogger(__name__)

PLATFORM = "signal"
NUMBER = re.compile(r"\+[1-9]\d{6,14}")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
GROUP_ID = re.compile(r"[A-Za-z0-9+/=_-]{16,128}")
GROUP_PREFIX = "group."  # a chat id naming a group (its base64 id follows)
MAX_SOURCE = 6_000  # characters of a reply sent; signal-cli sends a longer text as Signal's long-text attachment
MAX_FILE_BYTES = 100 * 1024 * 1024  # Signal takes attachments up to 100 MiB
MAX_EVENT_BYTES = 1_000_000  # one event's data; an envelope is a few kB (attachments are not inline)
CONTEXT_LINES = 10
READ_TIMEOUT_S = 60.0  # signal-cli sends a keep-alive every 15 s
SEND_TIMEOUT_S = 60.0
FETCH_WAIT_S = 120.0
MENTION = "\ufffc"  # the placeholder a mention takes in the message text
# send results that another try gets again (the number left Signal, the identity is untrusted)
FINAL_RESULTS = {"UNREGISTERED_FAILURE", "IDENTITY_FAILURE", "PROOF_REQUIRED_FAILURE"}


@dataclass
class SignalSettings(ChatSettings):
    """`gateway.signal` in hermes.yaml: the account signal-cli runs and where its daemon listens."""

    account: str = ""  # the agent's Signal number (E.164), registered or linked in signal-cli
    rpc_url: str = "http://127.0.0.1:8080/api/v1/rpc"  # signal-cli daemon --http: its JSON-RPC endpoint
    events_url: str = ""  # its event stream; default: /api/v1/events next to rpc_url
    allow: list[str] = field(default_factory=list)  # numbers (+15551234567) or account UUIDs
    admins: list[str] = field(default_factory=list)
    pairing: bool = True
    per_sender_in_rooms: bool = True  # groups: one session per sender


class RpcError(HermesError):
    """signal-cli answered a JSON-RPC error (its code and message)."""

    def __init__(self, code: Any, message: str):
        super().__init__(f"signal-cli error {code}: {message}")
        self.code = code


class Unsendable(HermesError):
    """Signal refused the message for good (the number is not on Signal, an untrusted identity)."""


@dataclass
class SseEvent:
    id: str | None
    event: str
    data: str
    oversize: bool = False  # its data was over MAX_EVENT_BYTES and dropped (the event is skipped, not retried)


class SseReader:
    """Server-Sent Events from lines (the WHATWG format signal-cli writes: `id:`, `event:`,
    `data:` fields, a blank line ends an event, `:` lines are keep-alives)."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.event = ""
        self.data: list[str] = []
        self.size = 0

    def line(self, line: str) -> SseEvent | None:
        if line == "":
            if not self.data and not self.event and not self.size:
                return None
            oversize = self.size > MAX_EVENT_BYTES
            out = SseEvent(self.id, self.event or "message", "" if oversize else "\n".join(self.data), oversize)
            self.event, self.data, self.size = "", [], 0
            return out
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            self.size += len(value)
            if self.size > MAX_EVENT_BYTES:
                self.data = []  # dropped: an envelope is never this big
            else:
                self.data.append(value)
        elif name == "event":
            self.event = value
        elif name == "id" and "\x00" not in value:
            self.id = value
        return None


def events_url(settings: SignalSettings) -> str:
    if settings.events_url:
        return settings.events_url
    parts = urlsplit(settings.rpc_url)
    path = parts.path.rsplit("/", 1)[0] + "/events"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class SignalChannel(AsyncChannel):
    name = PLATFORM
    Settings = SignalSettings
    idempotent_send = False  # JSON-RPC `send` has no idempotency key: a send cut short is not repeated
    max_file_bytes = MAX_FILE_BYTES

    def __init__(self, vault: Vault, settings: SignalSettings):
        super().__init__(vault, settings)
        self.settings: SignalSettings = settings
        if settings.account and not NUMBER.fullmatch(settings.account.strip()):
            raise ConfigError(f"'gateway.signal.account' must be the agent's number in E.164 (+15551234567), "
                              f"got {settings.account!r}")
        self.allow = _people(settings.allow, "allow")
        self.admins = _people(settings.admins, "admins")
        check_api_base(settings.rpc_url, "gateway.signal.rpc_url")
        check_api_base(events_url(settings), "gateway.signal.events_url")
        self.http: Any = None  # httpx.AsyncClient
        self.me_uuid = ""  # the account's own UUID (getUserStatus), to see mentions of it
        self.ids = 0

    # -- settings ---------------------------------------------------------------------------------
    @property
    def me(self) -> str:
        return self.settings.account.strip()

    @property
    def account(self) -> str:
        return self.me or "default"

    @property
    def cursor_key(self) -> str:
        return f"signal:{self.account}"

    def access(self) -> AccessRules:
        return AccessRules(self.allow, self.admins, self.settings.pairing, customers=self.settings.customers)

    def per_sender(self, origin: Origin) -> bool:
        return self.settings.per_sender_in_rooms

    def progress(self, sink: Sink) -> str | None:
        return sink.cursor(self.cursor_key)

    def resume(self, sink: Sink, cursor: str) -> None:
        if cursor:
            sink.set_cursor(self.cursor_key, cursor)

    def should_retry(self, exc: Exception) -> bool:
        """Signal's final refusals (not on Signal, untrusted identity) and a JSON-RPC error about
        the request itself (bad params: -32602) come again; a daemon out of reach is worth a retry."""
        if isinstance(exc, Unsendable):
            return False
        return not (isinstance(exc, RpcError) and exc.code in (-32600, -32601, -32602))

    # -- AsyncChannel -----------------------------------------------------------------------------
    def prepare(self) -> None:
        if not self.me:
            raise HermesError("gateway.signal.account is not set (the agent's number, as registered in signal-cli)")

    @property
    def endpoint(self) -> str:
        return self.settings.rpc_url

    def connected(self) -> bool:
        return self.http is not None

    async def disconnect(self) -> None:
        if self.http is not None:
            await self.http.aclose()

    def send(self, reply: Outbound) -> str:
        return self.in_loop(self._send(reply, []), SEND_TIMEOUT_S + 5)

    def send_file(self, reply: Outbound) -> str:
        """One file as an attachment of a message (its caption the text), in the same chat."""
        return self.in_loop(self._send_file(reply), 600)

    def check(self) -> str:
        """`gateway test signal` / `doctor`: the daemon answers and knows the account."""
        self.prepare()
        return asyncio.run(self._check())

    # -- JSON-RPC ---------------------------------------------------------------------------------
    def _client(self):
        import httpx

        return httpx.AsyncClient(timeout=httpx.Timeout(SEND_TIMEOUT_S, connect=10.0, read=READ_TIMEOUT_S))

    async def rpc(self, method: str, params: dict[str, Any], http: Any = None, timeout: float = SEND_TIMEOUT_S) -> Any:
        """One JSON-RPC 2.0 call; its `result`, or RpcError / HermesError."""
        import httpx

        self.ids += 1
        body = {"jsonrpc": "2.0", "method": method, "params": {"account": self.me, **params}, "id": self.ids}
        try:
            resp = await (http or self.http).post(self.settings.rpc_url, json=body, timeout=timeout)
        except httpx.HTTPError as exc:
            raise HermesError(f"cannot reach signal-cli at {self.settings.rpc_url}: {type(exc).__name__} {exc}") from None
        if resp.status_code != 200:
            raise HermesError(f"signal-cli answered HTTP {resp.status_code} to {method}")
        try:
            answer = resp.json()
        except ValueError:
            raise HermesError(f"signal-cli's answer to {method} is not JSON") from None
        if not isinstance(answer, dict) or answer.get("id") != body["id"]:
            raise HermesError(f"signal-cli's answer to {method} is not the answer to this call")
        error = answer.get("error")
        if error is not None:
            err = error if isinstance(error, dict) else {}
            raise RpcError(err.get("code"), _str(err.get("message"))[:300] or "no message")
        return answer.get("result")

    async def _check(self) -> str:
        async with self._client() as http:
            try:
                version = await self.rpc("version", {}, http)
            except RpcError as exc:
                raise HermesError(f"signal-cli at {self.settings.rpc_url} refused: {exc}") from None
            await self._whoami(http)
        v = version.get("version") if isinstance(version, dict) else version
        return f"signal-cli {v or '(version unknown)'} at {self.settings.rpc_url} runs {self.me}"

    async def _whoami(self, http: Any) -> None:
        """The account's own UUID, from signal-cli (mentions name it by UUID); raises when
        signal-cli does not know the account (e.g. not registered there)."""
        try:
            status = await self.rpc("getUserStatus", {"recipient": [self.me]}, http)
        except RpcError as exc:
            raise HermesError(f"signal-cli does not run {self.me} ({exc}): register or link it first") from None
        for entry in status if isinstance(status, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("uuid"), str):
                self.me_uuid = entry["uuid"].lower()

    # -- the loop ---------------------------------------------------------------------------------
    async def main(self) -> None:
        http = self._client()
        try:
            await self._whoami(http)
        except HermesError as exc:
            self.failure = str(exc)
            await http.aclose()
            return
        self.http = http
        delay = 1.0
        try:
            while not self.stopping.is_set():
                try:
                    await self._stream()
                    delay = 1.0
                except Exception as exc:  # the stream broke: report, wait, reconnect
                    if self.stopping.is_set():
                        break
                    self.report("error", f"the event stream of {events_url(self.settings)} broke: "
                                         f"{type(exc).__name__} {exc}"[:300])
                    self.ready.set()
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 60.0)
        finally:
            await http.aclose()

    async def _stream(self) -> None:
        import httpx

        assert self.sink is not None
        headers = {"Accept": "text/event-stream"}
        last = self.sink.cursor(self.cursor_key)
        if last:
            headers["Last-Event-ID"] = last
        url = events_url(self.settings)
        async with self.http.stream("GET", url, params={"account": self.me}, headers=headers,
                                    timeout=httpx.Timeout(30.0, read=READ_TIMEOUT_S)) as resp:
            if resp.status_code != 200:
                raise HermesError(f"HTTP {resp.status_code}")
            self.report("connected")
            self.ready.set()
            reader = SseReader()
            async for line in resp.aiter_lines():
                if self.stopping.is_set():
                    return
                event = reader.line(line.rstrip("\r"))
                if event is not None:
                    await self._event(event)

    async def _event(self, event: SseEvent) -> None:
        assert self.sink is not None
        message = None
        if event.oversize:
            log.warning("signal: skipped event %s, over %d bytes", event.id or "(no id)", MAX_EVENT_BYTES)
        elif event.event == "receive":
            try:
                message = self._inbound(json.loads(event.data))
            except Exception:  # a malformed event is skipped, never the end of the channel
                log.warning("signal: skipped a malformed event %s", event.id or "(no id)", exc_info=True)
        if message is not None:
            await asyncio.to_thread(self.sink.submit, message)
        if event.id:  # after the message is durable: a reconnect asks for what came after it
            self.sink.set_cursor(self.cursor_key, event.id)

    # -- reading an envelope ----------------------------------------------------------------------
    def _inbound(self, params: Any) -> Inbound | None:
        if not isinstance(params, dict):
            return None
        if "result" in params and "subscription" in params:  # the manual-receive form
            params = params["result"] if isinstance(params["result"], dict) else {}
        account = params.get("account")
        if isinstance(account, str) and account and account != self.me:
            return None  # another account of a multi-account daemon
        env = params.get("envelope")
        if not isinstance(env, dict) or params.get("exception") is not None:
            return None
        data = env.get("dataMessage")
        if not isinstance(data, dict):
            return None  # receipts, typing, sync messages of the account's other devices, calls, stories
        number, uuid = _str(env.get("sourceNumber")), _str(env.get("sourceUuid")).lower()
        sender = number if NUMBER.fullmatch(number) else uuid if UUID.fullmatch(uuid) else ""
        stamp = _int(env.get("timestamp"))
        if not sender or stamp is None or number == self.me or (uuid and uuid == self.me_uuid):
            return None
        if data.get("reaction") is not None or data.get("remoteDelete") is not None:
            return None
        text = _str(data.get("message"))
        audio = self._audio(data.get("attachments"), sender, data.get("groupInfo"))
        group = data.get("groupInfo")
        if not text.strip() and audio is None:
            return None
        mid = f"{sender}:{stamp}"
        if group is None:
            return Inbound(Origin(PLATFORM, sender, sender, mid), text, direct=True, audio=audio)
        gid = _str(group.get("groupId")) if isinstance(group, dict) else ""
        if not GROUP_ID.fullmatch(gid) or (isinstance(group, dict) and group.get("type") == "UPDATE"):
            return None
        addressed, text = self._addressed(data, text)
        assert self.sink is not None
        chat = GROUP_PREFIX + gid
        context = room_context(self.sink, f"signal:{chat}", f"signal:{chat}:{mid}", sender,
                               text or ("(a voice message)" if audio else ""), CONTEXT_LINES)
        if not addressed:
            return None
        return Inbound(Origin(PLATFORM, chat, sender, mid), text, direct=False, context=context, audio=audio)

    def _addressed(self, data: dict[str, Any], text: str) -> tuple[bool, str]:
        """Whether a group message is for the agent (a mention of its account, or a quote of its
        message), and its text without that mention."""
        mentions = data.get("mentions")
        for m in mentions if isinstance(mentions, list) else []:
            if not isinstance(m, dict):
                continue
            who_num, who_uuid = _str(m.get("number")), _str(m.get("uuid")).lower()
            if who_num == self.me or (self.me_uuid and who_uuid == self.me_uuid):
                start, length = _int(m.get("start")), _int(m.get("length"))
                if start is not None and length is not None and 0 <= start < len(text) and 0 < length <= len(text):
                    text = text[:start] + text[start + length:]
                return True, text.replace(MENTION, "").strip()
        quote = data.get("quote")
        if isinstance(quote, dict):
            author, author_uuid = _str(quote.get("authorNumber") or quote.get("author")), _str(quote.get("authorUuid"))
            if author == self.me or (self.me_uuid and author_uuid.lower() == self.me_uuid):
                return True, text.replace(MENTION, "").strip()
        return False, text

    def _audio(self, attachments: Any, sender: str, group: Any) -> Audio | None:
        if not isinstance(attachments, list):
            return None
        for a in attachments:
            if not isinstance(a, dict):
                continue
            mime, aid = _str(a.get("contentType")), _str(a.get("id"))
            if mime.startswith("audio/") and aid and len(aid) <= 200:
                where = {"groupId": group["groupId"]} if isinstance(group, dict) and isinstance(group.get("groupId"), str) \
                    else {"recipient": sender}
                return Audio(partial(self._download, aid, where), mime, _str(a.get("filename"))[:200] or "voice note",
                             _int(a.get("size")))
        return None

    def _download(self, aid: str, where: dict[str, str], limit: int) -> bytes:
        """An attachment's bytes (from the core's thread, on the channel's loop), at most `limit`."""
        return self.in_loop(self._fetch(aid, where, limit), FETCH_WAIT_S)

    async def _fetch(self, aid: str, where: dict[str, str], limit: int) -> bytes:
        got = await self.rpc("getAttachment", {"id": aid, **where}, timeout=FETCH_WAIT_S)
        data = got.get("data") if isinstance(got, dict) else got
        if not isinstance(data, str):
            raise HermesError("signal-cli gave no attachment data")
        if len(data) // 4 * 3 > limit + 3:  # the base64's length tells the size before decoding
            raise AudioTooLarge(f"about {len(data) // 4 * 3} bytes, over the {limit} byte limit")
        raw = base64.b64decode(data, validate=True)
        if len(raw) > limit:
            raise AudioTooLarge(f"{len(raw)} bytes, over the {limit} byte limit")
        return raw

    # -- sending ----------------------------------------------------------------------------------
    def _where(self, o: Origin) -> dict[str, Any]:
        if o.chat.startswith(GROUP_PREFIX):
            where: dict[str, Any] = {"groupId": o.chat[len(GROUP_PREFIX):]}
        else:
            where = {"recipient": [o.chat]}
        author, _, stamp = o.message.rpartition(":")
        if o.chat.startswith(GROUP_PREFIX) and stamp.isdigit() and author:  # in a group: quote what it answers
            where.update(quoteTimestamp=int(stamp), quoteAuthor=author)
        return where

    async def _send(self, reply: Outbound, attachments: list[str], style: bool = True) -> str:
        text = styled(cut(reply.text)) if style else Styled(reply.text, [])
        params: dict[str, Any] = {**self._where(reply.origin), "message": text.text or "(no answer)"}
        if text.styles:
            params["textStyle"] = [f"{start}:{length}:{kind}" for start, length, kind in text.styles]
        if attachments:
            params["attachments"] = attachments
        result = await self.rpc("send", params)
        results = result.get("results") if isinstance(result, dict) else None
        if isinstance(results, list) and results:
            kinds = [_str(r.get("type")) for r in results if isinstance(r, dict)]
            if kinds and all(k != "SUCCESS" for k in kinds):
                why = ", ".join(sorted(set(kinds)))
                if any(k in FINAL_RESULTS for k in kinds):
                    raise Unsendable(f"Signal refused the message: {why}")
                raise HermesError(f"the message was not sent: {why}")
        stamp = result.get("timestamp") if isinstance(result, dict) else None
        return str(stamp or "")

    async def _send_file(self, reply: Outbound) -> str:
        f = reply.files[0]
        data = await asyncio.to_thread(f.path.read_bytes)
        name = re.sub(r"[;,\s]", "_", f.name)[:200] or "file"
        uri = f"data:{f.mime or 'application/octet-stream'};filename={name};base64,{base64.b64encode(data).decode()}"
        return await self._send(Outbound(reply.origin, reply.text[:2000], reply.reply_id), [uri], style=False)


def cut(text: str, limit: int = MAX_SOURCE) -> str:
    if len(text) <= limit:
        return text or "(no answer)"
    return text[:limit] + f"\n\n[... cut: {len(text) - limit} more characters]"


def _people(values: list[str], key: str) -> list[str]:
    out = []
    for v in values:
        text = str(v).strip()
        if NUMBER.fullmatch(text):
            out.append(text)
        elif UUID.fullmatch(text.lower()):
            out.append(text.lower())
        else:
            raise ConfigError(f"'gateway.signal.{key}' must hold phone numbers in E.164 (+15551234567) or Signal "
                              f"account UUIDs, got {text!r} (profile names are chosen by their owners)")
    return out


__all__ = ["SignalChannel", "SignalSettings", "SseReader"]
