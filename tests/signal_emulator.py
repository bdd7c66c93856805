"""An EMULATOR of signal-cli's daemon JSON-RPC over HTTP (not signal-cli, not Signal), written from signal-cli's published JSON-RPC docs, man page signal-cli-jsonrpc(5).

Built from signal-cli-jsonrpc(5) (`daemon --http`: `POST /api/v1/rpc` with a single JSON-RPC 2.0
request, `GET /api/v1/events` a Server-Sent Events stream of `receive` events, `GET /api/v1/check`;
each event has an `id`, the last 1000 are kept, a client reconnecting with `Last-Event-ID` first
gets the events after it, an unknown id gets all kept events; multi-account mode: an `account`
param on every request and `?account=` on the stream), from signal-cli(1) for the commands' params
(`send`: `recipient` / `groupId`, `message`, `textStyle` as `start:length:STYLE` (BOLD, ITALIC,
SPOILER, STRIKETHROUGH, MONOSPACE; in UTF-16 code units, as Signal's body ranges), `attachments` as paths or RFC 2397 data URIs
`data:<MIME>;filename=<NAME>;base64,<DATA>`, `quoteTimestamp`, `quoteAuthor`; `getAttachment`:
`id` with `recipient` or `groupId`, answering the data in base64; `getUserStatus`; `version`) and
from signal-cli's JSON output records (the envelope: `source`, `sourceNumber`, `sourceUuid`,
`sourceName`, `sourceDevice`, `timestamp`, `dataMessage` with `message`, `mentions` (`number`,
`uuid`, `start`, `length`, the text holding U+FFFC where a mention is), `attachments`
(`contentType`, `filename`, `id`, `size`), `groupInfo` (`groupId`, `groupName`, `type`), `quote`;
`syncMessage`, `receiptMessage`, `typingMessage`; the event's data `{"envelope": ..., "account": ...}`).

What it checks as documented: the JSON content type (415 otherwise), POST only (405), JSON-RPC's
own errors (-32700 parse error, -32600 invalid request, -32601 unknown method, -32602 bad
params), the account param, known recipients (an unregistered number answers
UNREGISTERED_FAILURE in the send's results), data URIs well formed and within Signal's 100 MiB.

What it cannot prove (listed in docs/guide/gateway/signal.md): Signal's protocol, encryption and
delivery (signal-cli's job), what a real signal-cli does with events while no client listens, the
exact error codes and texts of a real signal-cli, rate limits and captchas, how Signal apps show
the text, safety-number changes, and anything of the API not named above.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import threading
import time
import uuid as uuidlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from deadlines import deadline as generous

MAX_ATTACHMENT = 100 * 1024 * 1024
KEEP_EVENTS = 1000
TEXT_STYLE = re.compile(r"(\d+):(\d+):(BOLD|ITALIC|SPOILER|STRIKETHROUGH|MONOSPACE)")
DATA_URI = re.compile(r"data:([\w.+-]+/[\w.+-]+)(?:;filename=([^;,]*))?;base64,(.*)", re.S)


@dataclass
class Sent:
    """A message the account sent (`send`), as the test reads it."""

    recipients: list[str]
    group: str | None
    message: str
    timestamp: int
    attachments: list[tuple[str, str, bytes]] = field(default_factory=list)  # (mime, filename, data)
    quote: tuple[int, str] | None = None
    styles: list[tuple[int, int, str]] = field(default_factory=list)  # textStyle: (start, length, style)

    def styled(self, style: str) -> list[str]:
        """The parts of the message shown in `style` (ranges in UTF-16 code units, as Signal's)."""
        units = self.message.encode("utf-16-le")
        return [units[2 * s:2 * (s + n)].decode("utf-16-le") for s, n, k in self.styles if k == style]


class SignalEmulator:
    """One account's signal-cli daemon. `say` makes a person's message a `receive` event; `sent`
    holds what the account sent, in order."""

    def __init__(self, account: str = "+15550001111", event_ids: bool = True):
        self.account = account
        self.uuid = str(uuidlib.uuid4())
        self.event_ids = event_ids  # False: like a signal-cli whose events carry no id
        self.events: list[tuple[int, str]] = []  # (id, data)
        self.next_event = 1
        self.sent: list[Sent] = []
        self.calls: list[str] = []
        self.attachments: dict[str, bytes] = {}
        self.unregistered: set[str] = set()
        self.people: dict[str, str] = {}  # number -> uuid
        self.streams = 0  # event streams opened
        self.last_event_ids: list[str | None] = []  # the Last-Event-ID of each stream opened
        self.cut = 0  # bumped to close the open streams (a daemon restart, a broken connection)
        self.lock = threading.Condition()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="signal-emulator", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def rpc_url(self) -> str:
        return f"{self.url}/api/v1/rpc"

    def close(self) -> None:
        with self.lock:
            self.cut += 1
            self.lock.notify_all()
        self.server.shutdown()
        self.server.server_close()

    # -- the test's side ----------------------------------------------------------------------------
    def uuid_of(self, number: str) -> str:
        with self.lock:
            return self.people.setdefault(number, str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, number)))

    def say(self, number: str | None, text: str | None, *, uuid: str | None = None, group: str | None = None,
            mention_me: bool = False, attachments: list[dict] | None = None, quote_me: int | None = None,
            extra: dict | None = None, timestamp: int | None = None) -> int:
        """A person's message (from `number`, or from `uuid` alone when the number is hidden),
        in their chat with the account or in `group` (a base64 group id); its timestamp."""
        stamp = timestamp or self._stamp()
        sender_uuid = uuid or (self.uuid_of(number) if number else str(uuidlib.uuid4()))
        data: dict[str, Any] = {"timestamp": stamp, "message": text, "expiresInSeconds": 0, "viewOnce": False}
        if mention_me:
            body = "\ufffc " + (text or "")
            data["message"] = body
            data["mentions"] = [{"name": self.account, "number": self.account, "uuid": self.uuid, "start": 0,
                                 "length": 1}]
        if group:
            data["groupInfo"] = {"groupId": group, "groupName": "the group", "revision": 1, "type": "DELIVER"}
        if attachments:
            data["attachments"] = attachments
        if quote_me is not None:
            data["quote"] = {"id": quote_me, "author": self.account, "authorNumber": self.account,
                             "authorUuid": self.uuid, "text": "", "attachments": []}
        if extra:
            data.update(extra)
        envelope = {"source": number or sender_uuid, "sourceNumber": number, "sourceUuid": sender_uuid,
                    "sourceName": "Person", "sourceDevice": 1, "timestamp": stamp,
                    "serverReceivedTimestamp": stamp + 5, "serverDeliveredTimestamp": stamp + 9,
                    "dataMessage": data}
        self.envelope(envelope)
        return stamp

    def voice(self, number: str, audio: bytes, *, size: int | None = None, mime: str = "audio/aac",
              group: str | None = None, mention_me: bool = False) -> int:
        """A voice note: an attachment signal-cli saved, announced with its (declared) size."""
        aid = f"{uuidlib.uuid4().hex[:20]}.aac"
        with self.lock:
            self.attachments[aid] = audio
        att = {"contentType": mime, "filename": None, "id": aid, "size": len(audio) if size is None else size,
               "width": None, "height": None, "caption": None, "uploadTimestamp": self._stamp()}
        return self.say(number, None if not mention_me else "", group=group, mention_me=mention_me, attachments=[att])

    def envelope(self, envelope: dict, account: str | None = None) -> None:
        self.raw_event(json.dumps({"envelope": envelope, "account": account or self.account}))

    def raw_event(self, data: str, event: str = "receive") -> None:
        """Any event data (a malformed one too), as the stream would carry it."""
        with self.lock:
            self.events.append((self.next_event, f"{event}\n{data}"))
            self.next_event += 1
            del self.events[:-KEEP_EVENTS]
            self.lock.notify_all()

    def drop_streams(self) -> None:
        """Close every open event stream (the daemon restarted, the connection broke)."""
        with self.lock:
            self.cut += 1
            self.lock.notify_all()

    def wait_sent(self, n: int, timeout: float = 30.0, to: str | None = None) -> list[Sent]:
        timeout = generous(timeout)  # tests/deadlines.py: a deadline, generous under load
        deadline = time.time() + timeout
        with self.lock:
            while True:
                got = [s for s in self.sent if to is None or to in s.recipients or s.group == to]
                if len(got) >= n or time.time() > deadline:
                    return got
                self.lock.wait(0.1)

    def wait_streams(self, n: int, timeout: float = 30.0) -> bool:
        timeout = generous(timeout)  # tests/deadlines.py: a deadline, generous under load
        deadline = time.time() + timeout
        with self.lock:
            while self.streams < n and time.time() < deadline:
                self.lock.wait(0.1)
            return self.streams >= n

    def _stamp(self) -> int:
        with self.lock:
            stamp = int(time.time() * 1000)
            last = getattr(self, "_last_stamp", 0)
            stamp = max(stamp, last + 1)
            self._last_stamp = stamp
            return stamp

    # -- JSON-RPC -----------------------------------------------------------------------------------
    def _call(self, request: Any) -> dict | None:
        if not isinstance(request, dict) or request.get("jsonrpc") != "2.0":
            return _error(None, -32600, "invalid request")
        rid, method, params = request.get("id"), request.get("method"), request.get("params", {})
        if not isinstance(method, str):
            return _error(rid, -32600, "method field must be set")
        if not isinstance(params, dict):
            return _error(rid, -32602, "params must be an object")
        self.calls.append(method)
        if params.get("account") not in (None, self.account):
            return _error(rid, -32602, f"Specified account does not exist: {params.get('account')}")
        handler = {"version": self._version, "send": self._send, "getAttachment": self._get_attachment,
                   "getUserStatus": self._user_status}.get(method)
        if handler is None:
            return _error(rid, -32601, f"Method not implemented: {method}")
        try:
            result = handler(params)
        except ValueError as exc:
            return _error(rid, -32602, str(exc))
        except LookupError as exc:
            return _error(rid, -1, str(exc))
        return {"jsonrpc": "2.0", "result": result, "id": rid}

    def _version(self, params: dict) -> dict:
        return {"version": "0.13.99-emulator"}

    def _user_status(self, params: dict) -> list:
        recipients = params.get("recipient")
        recipients = [recipients] if isinstance(recipients, str) else recipients
        if not isinstance(recipients, list):
            raise ValueError("recipient is required")
        return [{"recipient": r, "number": r, "uuid": self.uuid if r == self.account else self.uuid_of(r),
                 "isRegistered": r not in self.unregistered} for r in recipients]

    def _send(self, params: dict) -> dict:
        recipients, group = params.get("recipient"), params.get("groupId")
        recipients = [recipients] if isinstance(recipients, str) else recipients
        if (recipients is None) == (group is None):
            raise ValueError("give recipient or groupId (one of them)")
        if recipients is not None and (not isinstance(recipients, list) or not recipients or
                                       not all(isinstance(r, str) and r for r in recipients)):
            raise ValueError("recipient must be a list of numbers or uuids")
        if group is not None and (not isinstance(group, str) or not group):
            raise ValueError("groupId must be a base64 string")
        message = params.get("message", "")
        if not isinstance(message, str):
            raise ValueError("message must be a string")
        atts = params.get("attachments", params.get("attachment", []))
        atts = [atts] if isinstance(atts, str) else atts
        files = [_data_uri(a) for a in atts]
        if not message and not files:
            raise ValueError("No message given")
        quote = None
        if "quoteTimestamp" in params:
            if not isinstance(params["quoteTimestamp"], int) or not isinstance(params.get("quoteAuthor"), str):
                raise ValueError("quoteTimestamp needs quoteAuthor")
            quote = (params["quoteTimestamp"], params["quoteAuthor"])
        styles = []
        raw_styles = params.get("textStyle", [])
        for st in [raw_styles] if isinstance(raw_styles, str) else raw_styles:
            m = TEXT_STYLE.fullmatch(st) if isinstance(st, str) else None
            if not m:
                raise ValueError(f"Invalid text style: {st!r}")
            start, length = int(m.group(1)), int(m.group(2))
            if start + length > len(message.encode("utf-16-le")) // 2:
                raise ValueError(f"text style {st!r} is past the end of the message")
            styles.append((start, length, m.group(3)))
        stamp = self._stamp()
        results = [{"recipientAddress": {"uuid": self.uuid_of(r), "number": r},
                    "type": "UNREGISTERED_FAILURE" if r in self.unregistered else "SUCCESS"}
                   for r in (recipients or [])]
        if not any(r["type"] == "SUCCESS" for r in results) and results:
            return {"timestamp": stamp, "results": results}
        with self.lock:
            self.sent.append(Sent(list(recipients or []), group, message, stamp, files, quote, styles))
            self.lock.notify_all()
        return {"timestamp": stamp, "results": results or [{"type": "SUCCESS"}]}

    def _get_attachment(self, params: dict) -> dict:
        aid = params.get("id")
        if not isinstance(aid, str) or ("recipient" not in params and "groupId" not in params):
            raise ValueError("id and recipient or groupId are required")
        with self.lock:
            data = self.attachments.get(aid)
        if data is None:
            raise LookupError(f"Attachment file not found: {aid}")
        return {"data": base64.b64encode(data).decode()}

    # -- HTTP ---------------------------------------------------------------------------------------
    def _handler(self):
        emu = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _reply(self, status: int, body: dict | None = None) -> None:
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                if body is not None:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                path = urlsplit(self.path)
                if path.path == "/api/v1/check":
                    return self._reply(200)
                if path.path == "/api/v1/rpc":
                    return self._reply(405)
                if path.path != "/api/v1/events":
                    return self._reply(404)
                account = parse_qs(path.query).get("account", [None])[0]
                if account not in (None, emu.account):
                    return self._reply(400)
                self._events(self.headers.get("Last-Event-ID"))

            def _events(self, last: str | None) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                with emu.lock:
                    emu.streams += 1
                    emu.last_event_ids.append(last)
                    cut = emu.cut
                    ids = [i for i, _ in emu.events]
                    if last is None or not emu.event_ids:
                        start = emu.next_event  # live events only
                    elif last.isdigit() and int(last) in ids:
                        start = int(last) + 1
                    else:
                        start = ids[0] if ids else emu.next_event  # an unknown id: all kept events
                    emu.lock.notify_all()
                try:
                    while True:
                        with emu.lock:
                            todo = [(i, d) for i, d in emu.events if i >= start]
                            if not todo and emu.cut == cut:
                                emu.lock.wait(1.0)
                                todo = [(i, d) for i, d in emu.events if i >= start]
                            if emu.cut != cut:
                                return
                        if not todo:
                            self.wfile.write(b":\n")  # keep-alive
                            self.wfile.flush()
                            continue
                        for i, d in todo:
                            kind, _, data = d.partition("\n")
                            head = f"id:{i}\n" if emu.event_ids else ""
                            lines = "".join(f"data:{line}\n" for line in data.split("\n"))
                            self.wfile.write(f"{head}event:{kind}\n{lines}\n".encode())
                            start = i + 1
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    return
                finally:
                    self.close_connection = True

            def do_POST(self):
                path = urlsplit(self.path).path
                if path != "/api/v1/rpc":
                    return self._reply(404 if path != "/api/v1/events" else 405)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if not (self.headers.get("Content-Type") or "").startswith("application/json"):
                    return self._reply(415)
                try:
                    request = json.loads(body)
                except ValueError:
                    return self._reply(200, _error(None, -32700, "parse error"))
                answer = emu._call(request)
                with emu.lock:
                    emu.lock.notify_all()
                self._reply(200 if answer is not None else 201, answer)

        return Handler


def _error(rid: Any, code: int, message: str) -> dict:
    return {"jsonrpc": "2.0", "error": {"code": code, "message": message, "data": None}, "id": rid}


def _data_uri(value: Any) -> tuple[str, str, bytes]:
    if not isinstance(value, str):
        raise ValueError("an attachment must be a string")
    m = DATA_URI.fullmatch(value)
    if not m:
        raise ValueError("an attachment here must be an RFC 2397 data URI (no shared disk in the emulator)")
    if len(m.group(3)) // 4 * 3 > MAX_ATTACHMENT:
        raise ValueError("attachment too large")
    try:
        data = base64.b64decode(m.group(3), validate=True)
    except binascii.Error:
        raise ValueError("the attachment's base64 is broken") from None
    return m.group(1), m.group(2) or "", data
