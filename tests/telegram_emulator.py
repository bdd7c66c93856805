"""An EMULATOR of the Telegram Bot API (not Telegram): a local HTTP server for tests, built from the published API.

Built from https://core.telegram.org/bots/api (Bot API 7.x/8.x: "Making requests", "Getting
updates", `getMe`, `getUpdates`, `sendMessage`, "Formatting options" / "HTML style",
`ReplyParameters`, `sendChatAction`, `getFile` (with its 20 MB limit), `sendDocument`, the `Voice` and
`Audio` objects of a message, `deleteWebhook`, "Responses" with
`ok`, `error_code`, `description` and `parameters.retry_after`) and its example payloads. It
answers what a bot sends to `https://api.telegram.org/bot<token>/<method>` and serves files at
`/file/bot<token>/<file_path>`, so the real `python-telegram-bot` library can be pointed at it
(`base_url`). People are driven from the test: `say(...)` queues an update as Telegram would.

What it checks as Telegram documents it: the token; `getUpdates` offsets (an update is confirmed,
and forgotten, once a later offset is asked for; long polling with `timeout`); `parse_mode=HTML`
(only the documented tags, attributes and entities, every tag closed, otherwise 400 "can't parse
entities"); a text over 4096 characters after parsing (400 "message is too long"); a reply to a
message that does not exist (400, unless `allow_sending_without_reply`); unknown chats (400), a
user who blocked the bot (403); flood limits on request (429 with `retry_after`).

What it cannot prove (listed in docs/guide/gateway/telegram.md): Telegram's real rate limits,
real file ids and sizes, how clients render the HTML, privacy mode in groups (here the test
decides which group messages the bot sees), delivery timing, and anything of the API not named
above.
"""

from __future__ import annotations

import html
import json
import re
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from deadlines import deadline as generous

MAX_TEXT = 4096  # characters of a message's text after entities parsing
MAX_DOWNLOAD = 20 * 1024 * 1024  # getFile: "bots can download files of up to 20MB in size"
MAX_UPLOAD = 50 * 1000 * 1000  # sendDocument: "files of any type of up to 50 MB" (multipart upload)
# "Formatting options" -> "HTML style": the tags Telegram accepts, and the attributes each may have
TAGS: dict[str, set[str]] = {
    "b": set(), "strong": set(), "i": set(), "em": set(), "u": set(), "ins": set(), "s": set(), "strike": set(),
    "del": set(), "tg-spoiler": set(), "span": {"class"}, "a": {"href"}, "code": {"class"}, "pre": set(),
    "blockquote": {"expandable"}, "tg-emoji": {"emoji-id"},
}
ENTITY = re.compile(r"&(lt|gt|amp|quot|#\d+|#x[0-9a-fA-F]+);")


class ParseError(Exception):
    pass


class TelegramHTML(HTMLParser):
    """Parses a text as Telegram's HTML parse mode does; raises ParseError where Telegram answers
    400 "can't parse entities". `text` is what the user sees."""

    def __init__(self):
        super().__init__(convert_charrefs=False)
        self.stack: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in TAGS:
            raise ParseError(f'Unsupported start tag "{tag}"')
        for name, value in attrs:
            if name not in TAGS[tag] and not (tag == "blockquote" and name == "expandable"):
                raise ParseError(f'Unsupported attribute "{name}" of tag "{tag}"')
            if tag == "span" and value != "tg-spoiler":
                raise ParseError("Unsupported span class")
        if tag == "code" and "pre" not in self.stack and attrs:
            raise ParseError("code with a class outside pre")
        self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        raise ParseError(f'Unsupported start tag "{tag}/"')

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            raise ParseError(f'Unmatched end tag "{tag}"')
        self.stack.pop()

    def handle_data(self, data):
        if "<" in data or ">" in data:
            raise ParseError("a bare < or > (write &lt; &gt;)")
        if "&" in data:
            raise ParseError("a bare & (write &amp;)")
        self.text.append(data)

    def handle_entityref(self, name):
        if name not in ("lt", "gt", "amp", "quot"):
            raise ParseError(f'Unsupported entity "&{name};"')
        self.text.append(html.unescape(f"&{name};"))

    def handle_charref(self, name):
        self.text.append(html.unescape(f"&#{name};"))

    def parse(self, text: str) -> str:
        self.feed(text)
        self.close()
        if self.rawdata:
            raise ParseError("an unfinished tag")
        if self.stack:
            raise ParseError(f'Can\'t find end tag corresponding to start tag "{self.stack[-1]}"')
        return "".join(self.text)


def visible_text(text: str, parse_mode: str | None) -> str:
    if parse_mode is None:
        return text
    if parse_mode.upper() != "HTML":
        raise ParseError(f"parse mode {parse_mode} is not emulated")
    return TelegramHTML().parse(text)


class ApiError(Exception):
    def __init__(self, code: int, description: str, parameters: dict | None = None):
        super().__init__(description)
        self.code, self.description, self.parameters = code, description, parameters


@dataclass
class Sent:
    """A message the bot sent (sendMessage / sendDocument), as the test reads it."""

    chat_id: int
    message_id: int
    text: str  # as sent (with its HTML)
    parse_mode: str | None
    visible: str  # what the user sees
    reply_to: int | None
    thread: int | None
    document: bytes | None = None
    filename: str | None = None


@dataclass
class Chat:
    id: int
    type: str  # private | group | supergroup
    title: str | None = None
    messages: set[int] = field(default_factory=set)
    blocked: bool = False  # a private chat whose user blocked the bot


class TelegramEmulator:
    """The emulated Bot API for one bot. `say` makes a person's message an update; `sent` holds
    what the bot sent, in order."""

    def __init__(self, token: str = "123456789:AAEmulatorTokenNotATelegramOne_0123", username: str = "hermes_test_bot"):
        self.token = token
        self.bot_id = int(token.split(":")[0])
        self.username = username
        self.updates: list[dict] = []
        self.next_update = 100_000
        self.next_message: dict[int, int] = {}
        self.chats: dict[int, Chat] = {}
        self.sent: list[Sent] = []
        self.actions: list[tuple[int, str]] = []
        self.files: dict[str, tuple[str, bytes]] = {}  # file_id -> (file_path, content)
        self.calls: list[str] = []
        self.flood: dict[str, int] = {}  # method -> how many next calls answer 429
        self.lock = threading.Condition()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="telegram-emulator", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- the test's side: people and chats --------------------------------------------------------
    def chat(self, chat_id: int, type: str = "private", title: str | None = None) -> Chat:
        with self.lock:
            return self.chats.setdefault(chat_id, Chat(chat_id, type, title))

    def say(self, user_id: int, text: str | None, chat_id: int | None = None, first_name: str = "Person",
            username: str | None = None, reply_to: int | None = None, thread: int | None = None,
            extra: dict | None = None) -> int:
        """A person's message to the bot (a private chat with the person unless `chat_id` names a
        group made with `chat`); the message id."""
        chat = self.chat(chat_id if chat_id is not None else user_id)
        with self.lock:
            mid = self.next_message.get(chat.id, 0) + 1
            self.next_message[chat.id] = mid
            chat.messages.add(mid)
            user = {"id": user_id, "is_bot": False, "first_name": first_name}
            if username:
                user["username"] = username
            message: dict[str, Any] = {"message_id": mid, "from": user, "date": int(time.time()),
                                       "chat": self._chat_json(chat)}
            if text is not None:
                message["text"] = text
                entities = [{"type": "bot_command", "offset": 0, "length": len(text.split()[0])}] \
                    if text.startswith("/") else []
                if entities:
                    message["entities"] = entities
            if reply_to is not None:
                replied = self._message_json(chat, reply_to)
                if any(s.chat_id == chat.id and s.message_id == reply_to for s in self.sent):
                    replied["from"] = self._bot_json()  # a reply to one of the bot's own messages
                message["reply_to_message"] = replied
            if thread is not None:
                message["message_thread_id"] = thread
                message["is_topic_message"] = True
            message.update(extra or {})
            self._queue({"message": message})
        return mid

    def say_voice(self, user_id: int, audio: bytes, duration: int, chat_id: int | None = None, kind: str = "voice",
                  caption: str | None = None, reply_to: int | None = None, file_size: int | None = None,
                  file_name: str = "speech.m4a", mime_type: str | None = None) -> int:
        """A person's voice note (`kind` "voice": OGG/Opus, as Telegram's apps record them) or audio
        file ("audio", with its file name); `file_size` overrides the size the update declares."""
        file_id = self.add_file(audio, "voice.ogg" if kind == "voice" else file_name)
        media: dict[str, Any] = {"file_id": file_id, "file_unique_id": f"U{file_id}", "duration": duration,
                                 "mime_type": mime_type or ("audio/ogg" if kind == "voice" else "audio/mp4"),
                                 "file_size": len(audio) if file_size is None else file_size}
        if kind == "audio":
            media["file_name"] = file_name
        extra: dict[str, Any] = {kind: media}
        if caption is not None:
            extra["caption"] = caption
        return self.say(user_id, None, chat_id=chat_id, reply_to=reply_to, extra=extra)

    def raw_update(self, update: dict) -> int:
        """An update exactly as given (plus its update_id): malformed ones for the bad-input tests."""
        with self.lock:
            return self._queue(update)

    def _queue(self, update: dict) -> int:
        self.next_update += 1
        self.updates.append({"update_id": self.next_update, **update})
        self.lock.notify_all()
        return self.next_update

    def wait_sent(self, n: int, timeout: float = 60.0, chat_id: int | None = None) -> list[Sent]:
        """The first `n` messages the bot sent (to `chat_id`), waiting up to `timeout`."""
        timeout = generous(timeout)  # tests/deadlines.py: a deadline, generous under load
        deadline = time.time() + timeout
        with self.lock:
            while True:
                got = [s for s in self.sent if chat_id is None or s.chat_id == chat_id]
                if len(got) >= n or time.time() >= deadline:
                    return got
                self.lock.wait(min(0.2, max(0.0, deadline - time.time())))

    def pending_updates(self) -> int:
        with self.lock:
            return len(self.updates)

    def _chat_json(self, chat: Chat) -> dict:
        if chat.type == "private":
            return {"id": chat.id, "type": "private", "first_name": "Person"}
        return {"id": chat.id, "type": chat.type, "title": chat.title or "a group"}

    def _message_json(self, chat: Chat, message_id: int) -> dict:
        return {"message_id": message_id, "date": int(time.time()), "chat": self._chat_json(chat)}

    def _bot_json(self) -> dict:
        return {"id": self.bot_id, "is_bot": True, "first_name": "Hermes", "username": self.username,
                "can_join_groups": True, "can_read_all_group_messages": False, "supports_inline_queries": False}

    # -- the Bot API ------------------------------------------------------------------------------
    def call(self, method: str, params: dict[str, Any], files: dict[str, tuple[str, bytes]]) -> Any:
        with self.lock:
            self.calls.append(method)
            if self.flood.get(method):
                self.flood[method] -= 1
                raise ApiError(429, "Too Many Requests: retry after 1", {"retry_after": 1})
        handler = getattr(self, "api_" + method, None)
        if handler is None:
            raise ApiError(404, "Not Found: method not found")
        return handler(params, files)

    def api_getMe(self, params, files):
        return self._bot_json()

    def api_deleteWebhook(self, params, files):
        return True

    def api_getUpdates(self, params, files):
        offset = _int(params.get("offset"), 0)
        limit = min(max(_int(params.get("limit"), 100), 1), 100)
        timeout = min(max(_int(params.get("timeout"), 0), 0), 50)
        deadline = time.time() + timeout
        with self.lock:
            if offset:
                # "An update is considered confirmed as soon as getUpdates is called with an offset
                # higher than its update_id"; a negative offset counts from the end of the queue
                if offset < 0:
                    self.updates = self.updates[offset:]
                else:
                    self.updates = [u for u in self.updates if u["update_id"] >= offset]
            while not self.updates and time.time() < deadline:
                self.lock.wait(min(0.5, deadline - time.time()))
            return [json.loads(json.dumps(u)) for u in self.updates[:limit]]

    def api_sendChatAction(self, params, files):
        chat = self._target(params)
        if params.get("action") not in ("typing", "upload_photo", "record_video", "upload_video", "record_voice",
                                        "upload_voice", "upload_document", "choose_sticker", "find_location",
                                        "record_video_note", "upload_video_note"):
            raise ApiError(400, "Bad Request: wrong parameter action in request")
        with self.lock:
            self.actions.append((chat.id, params["action"]))
        return True

    def api_sendMessage(self, params, files):
        chat = self._target(params)
        text = params.get("text")
        if not isinstance(text, str) or not text.strip():
            raise ApiError(400, "Bad Request: message text is empty")
        parse_mode = params.get("parse_mode") or None
        try:
            visible = visible_text(text, parse_mode)
        except ParseError as exc:
            raise ApiError(400, f"Bad Request: can't parse entities: {exc}") from None
        if len(visible) > MAX_TEXT:
            raise ApiError(400, "Bad Request: message is too long")
        return self._deliver(chat, params, text, parse_mode, visible)

    def api_sendDocument(self, params, files):
        chat = self._target(params)
        if "document" not in files:
            raise ApiError(400, "Bad Request: there is no document in the request")
        name, content = files["document"]
        if len(content) > MAX_UPLOAD:  # "Bots can currently send files of any type of up to 50 MB in size"
            raise ApiError(413, "Request Entity Too Large")
        caption = params.get("caption") or ""
        try:
            visible = visible_text(caption, params.get("parse_mode") or None)
        except ParseError as exc:
            raise ApiError(400, f"Bad Request: can't parse entities: {exc}") from None
        if len(visible) > 1024:
            raise ApiError(400, "Bad Request: message caption is too long")
        sent = self._deliver(chat, params, caption, params.get("parse_mode") or None, visible, (name, content))
        file_id = f"DOC{len(self.files) + 1:04d}"
        self.files[file_id] = (f"documents/file_{len(self.files)}{_suffix(name)}", content)
        sent["document"] = {"file_id": file_id, "file_unique_id": f"U{file_id}", "file_name": name,
                            "file_size": len(content)}
        return sent

    def api_getFile(self, params, files):
        file_id = params.get("file_id")
        if file_id not in self.files:
            raise ApiError(400, "Bad Request: invalid file_id")
        path, content = self.files[file_id]
        if len(content) > MAX_DOWNLOAD:  # "the maximum file size to download is 20 MB"
            raise ApiError(400, "Bad Request: file is too big")
        return {"file_id": file_id, "file_unique_id": f"U{file_id}", "file_size": len(content), "file_path": path}

    def add_file(self, content: bytes, name: str) -> str:
        """A file a person sent (its file_id, as in a document message's `document.file_id`)."""
        with self.lock:
            file_id = f"IN{len(self.files) + 1:04d}"
            self.files[file_id] = (f"documents/file_{len(self.files)}{_suffix(name)}", content)
            return file_id

    def _target(self, params) -> Chat:
        chat_id = _int(params.get("chat_id"), None)
        chat = self.chats.get(chat_id) if chat_id is not None else None
        if chat is None:
            raise ApiError(400, "Bad Request: chat not found")
        if chat.blocked:
            raise ApiError(403, "Forbidden: bot was blocked by the user")
        return chat

    def _deliver(self, chat: Chat, params, text: str, parse_mode: str | None, visible: str,
                 document: tuple[str, bytes] | None = None) -> dict:
        reply = params.get("reply_parameters")
        if isinstance(reply, str):
            reply = json.loads(reply)
        reply_to = _int((reply or {}).get("message_id"), None) if reply else _int(params.get("reply_to_message_id"), None)
        lenient = bool((reply or {}).get("allow_sending_without_reply")) or params.get("allow_sending_without_reply") in (True, "true")
        with self.lock:
            if reply_to is not None and reply_to not in chat.messages:
                if not lenient:
                    raise ApiError(400, "Bad Request: message to be replied not found")
                reply_to = None
            mid = self.next_message.get(chat.id, 0) + 1
            self.next_message[chat.id] = mid
            chat.messages.add(mid)
            thread = _int(params.get("message_thread_id"), None)
            self.sent.append(Sent(chat.id, mid, text, parse_mode, visible, reply_to, thread,
                                  document[1] if document else None, document[0] if document else None))
            self.lock.notify_all()
        message: dict[str, Any] = {"message_id": mid, "from": self._bot_json(), "date": int(time.time()),
                                   "chat": self._chat_json(chat), "text": visible}
        if reply_to is not None:
            message["reply_to_message"] = self._message_json(chat, reply_to)
        return message

    # -- HTTP -------------------------------------------------------------------------------------
    def _handler(self):
        emulator = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                self._serve()

            def do_POST(self):
                self._serve()

            def _serve(self):
                path = urllib.parse.urlsplit(self.path)
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                prefix = f"/file/bot{emulator.token}/"
                file_url = urllib.parse.unquote(path.path)  # clients percent-encode the token's colon
                if file_url.startswith(prefix):
                    return self._file(file_url[len(prefix):])
                m = re.fullmatch(r"/bot([^/]+)/(\w+)", path.path)
                if not m:
                    return self._json(404, {"ok": False, "error_code": 404, "description": "Not Found"})
                if m.group(1) != emulator.token:
                    return self._json(401, {"ok": False, "error_code": 401, "description": "Unauthorized"})
                try:
                    params, files = _params(path.query, self.headers.get("content-type") or "", body)
                    result = emulator.call(m.group(2), params, files)
                except ApiError as exc:
                    answer: dict[str, Any] = {"ok": False, "error_code": exc.code, "description": exc.description}
                    if exc.parameters:
                        answer["parameters"] = exc.parameters
                    return self._json(exc.code, answer)
                except (ValueError, KeyError) as exc:
                    return self._json(400, {"ok": False, "error_code": 400, "description": f"Bad Request: {exc}"})
                self._json(200, {"ok": True, "result": result})

            def _file(self, file_path: str):
                for path, content in emulator.files.values():
                    if path == file_path:
                        self.send_response(200)
                        self.send_header("content-type", "application/octet-stream")
                        self.send_header("content-length", str(len(content)))
                        self.end_headers()
                        self.wfile.write(content)
                        return
                self._json(404, {"ok": False, "error_code": 404, "description": "Not Found"})

            def _json(self, code: int, data: dict):
                raw = json.dumps(data).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        return Handler


def _params(query: str, content_type: str, body: bytes) -> tuple[dict[str, Any], dict[str, tuple[str, bytes]]]:
    """A request's parameters, in any of the four ways the Bot API takes them (query string,
    urlencoded, JSON, multipart); object-valued parameters may be JSON-serialized strings."""
    params: dict[str, Any] = dict(urllib.parse.parse_qsl(query))
    files: dict[str, tuple[str, bytes]] = {}
    kind = content_type.split(";")[0].strip().lower()
    if kind == "application/json" and body:
        params.update(json.loads(body))
    elif kind == "application/x-www-form-urlencoded":
        params.update(urllib.parse.parse_qsl(body.decode()))
    elif kind == "multipart/form-data":
        msg = BytesParser(policy=HTTP).parsebytes(b"content-type: " + content_type.encode() + b"\r\n\r\n" + body)
        for part in msg.iter_parts():
            name = part.get_param("name", header="content-disposition")
            filename = part.get_filename()
            payload = part.get_payload(decode=True) or b""
            if filename is not None:
                files[str(name)] = (filename, payload)
            else:
                params[str(name)] = payload.decode()
    for key in ("reply_parameters", "reply_markup", "link_preview_options"):
        if isinstance(params.get(key), str):
            params[key] = json.loads(params[key])
    return params, files


def _int(value: Any, default):
    if value is None or value == "":
        return default
    return int(value)


def _suffix(name: str) -> str:
    return "." + name.rsplit(".", 1)[1] if "." in name else ""
