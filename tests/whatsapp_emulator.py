"""An EMULATOR of the WhatsApp Business Cloud API (not Meta's servers, not WhatsApp), written from Meta's published Cloud API and Graph API reference.

Built from Meta's reference for the Cloud API: `POST /{version}/{phone_number_id}/messages`
(`messaging_product: whatsapp`, `recipient_type: individual`, `to`, `type` text with `text.body`
of at most 4096 characters and `preview_url`, or document with `document.id` / `filename` /
`caption`; the answer `{"messaging_product", "contacts": [{"input", "wa_id"}], "messages":
[{"id": "wamid..."}]}`), `POST /{version}/{phone_number_id}/media` (multipart: `file`, `type`,
`messaging_product`; answers `{"id"}`), `GET /{version}/{media_id}` (answers `{"messaging_product",
"url", "mime_type", "sha256", "file_size", "id"}`), the media URL fetched with the same Bearer
token, Graph API errors as `{"error": {"message", "type", "code", "error_data": {"details"},
"fbtrace_id"}}` (code 131047 "Re-engagement message" when more than 24 hours have passed since the
person last wrote, 190 for a bad token, 100 for a bad parameter); and of the webhooks Meta sends:
the GET verification (`hub.mode=subscribe`, `hub.verify_token`, `hub.challenge`), POSTs signed with
`X-Hub-Signature-256: sha256=<HMAC-SHA256 of the raw body with the app secret>`, the body
`{"object": "whatsapp_business_account", "entry": [{"id", "changes": [{"value": {"messaging_product":
"whatsapp", "metadata": {"display_phone_number", "phone_number_id"}, "contacts": [{"profile":
{"name"}, "wa_id"}], "messages": [{"from", "id": "wamid...", "timestamp", "type": "text", "text":
{"body"}}]}, "field": "messages"}]}]}` (audio messages: `"audio": {"id", "mime_type", "voice"}`;
receipts under `statuses`).

What it cannot prove (listed in docs/guide/gateway/whatsapp.md): Meta's delivery of webhooks
(retries, batching, ordering, its IP ranges), that a real number is registered and verified, the
templates and pricing rules, the exact error texts and codes beyond those named above, rate
limits, how WhatsApp shows the text, that the real media host (lookaside.fbsbx.com) takes the
token as documented, and the 24-hour window as Meta counts it (the emulator closes it on demand).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

VERSION = "v21.0"


@dataclass
class Sent:
    """One message the emulator took from the business (a text or a document)."""

    to: str
    type: str
    body: str = ""  # text.body, or the document's caption
    document: dict = field(default_factory=dict)  # for a document: id, filename, caption
    file: bytes = b""  # the uploaded document's bytes
    id: str = ""


class WhatsAppEmulator:
    def __init__(self, token: str = "wa-test-token", app_secret: str = "app-secret-for-tests",
                 phone_number_id: str = "1234567890", display_number: str = "15550009999"):
        self.token = token
        self.app_secret = app_secret
        self.phone_number_id = phone_number_id
        self.display_number = display_number
        self.sent: list[Sent] = []
        self.media: dict[str, tuple[bytes, str, int]] = {}  # id -> (bytes, mime, declared size)
        self.uploads: dict[str, tuple[bytes, str, str]] = {}  # id -> (bytes, mime, file name)
        self.closed_window: set[str] = set()  # wa_ids whose 24-hour window Meta says is closed
        self.media_host = "127.0.0.1"  # the host media URLs name (Meta's are on another host than the API's)
        self.calls: list[tuple[str, str, str | None]] = []  # (method, path, Authorization)
        self.cond = threading.Condition()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def api_base(self) -> str:
        return f"{self.url}/{VERSION}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- Meta's side of the webhook (what a test sends to the gateway) ----------------------------
    def body(self, messages: list[dict], sender: str | None = None, name: str = "Customer",
             phone_number_id: str | None = None) -> bytes:
        """A webhook body carrying `messages`, as Meta batches them."""
        value = {"messaging_product": "whatsapp",
                 "metadata": {"display_phone_number": self.display_number,
                              "phone_number_id": phone_number_id or self.phone_number_id},
                 "contacts": [{"profile": {"name": name}, "wa_id": sender or (messages[0]["from"] if messages else "")}],
                 "messages": messages}
        return json.dumps({"object": "whatsapp_business_account",
                           "entry": [{"id": "102290129340398", "changes": [{"value": value, "field": "messages"}]}]}).encode()

    @staticmethod
    def text(sender: str, text: str, mid: str | None = None, when: int | None = None) -> dict:
        return {"from": sender, "id": mid or f"wamid.{uuid.uuid4().hex}", "timestamp": str(when or int(time.time())),
                "type": "text", "text": {"body": text}}

    def voice(self, sender: str, audio: bytes, mime: str = "audio/ogg; codecs=opus", declared: int | None = None,
              mid: str | None = None) -> dict:
        """A voice note: its bytes kept as media (its declared file_size may lie: `declared`)."""
        media_id = str(1000000000 + len(self.media))
        self.media[media_id] = (audio, mime, len(audio) if declared is None else declared)
        return {"from": sender, "id": mid or f"wamid.{uuid.uuid4().hex}", "timestamp": str(int(time.time())),
                "type": "audio", "audio": {"id": media_id, "mime_type": mime, "voice": True}}

    def sign(self, body: bytes, secret: str | None = None) -> str:
        return "sha256=" + hmac.new((secret or self.app_secret).encode(), body, hashlib.sha256).hexdigest()

    def post(self, url: str, body: bytes, signature: str | None = "sign", **headers: str) -> httpx.Response:
        """POST a webhook body as Meta does (signed unless `signature` says otherwise)."""
        h = {"Content-Type": "application/json", **headers}
        if signature == "sign":
            h["X-Hub-Signature-256"] = self.sign(body)
        elif signature is not None:
            h["X-Hub-Signature-256"] = signature
        return httpx.post(url, content=body, headers=h, timeout=60)

    def say(self, url: str, sender: str, text: str, mid: str | None = None) -> httpx.Response:
        return self.post(url, self.body([self.text(sender, text, mid)]))

    # -- what the business sent -------------------------------------------------------------------
    def wait_sent(self, n: int, timeout: float = 30.0, to: str | None = None) -> list[Sent]:
        deadline = time.time() + timeout
        with self.cond:
            while True:
                got = [s for s in self.sent if to is None or s.to == to]
                left = deadline - time.time()
                if len(got) >= n or left <= 0:
                    return got
                self.cond.wait(left)

    # -- the Graph API ----------------------------------------------------------------------------
    def _authorised(self, auth: str | None) -> bool:
        return hmac.compare_digest((auth or "").encode(), f"Bearer {self.token}".encode())

    def _messages(self, data: Any) -> tuple[int, dict]:
        if not isinstance(data, dict) or data.get("messaging_product") != "whatsapp":
            return _error(100, "(#100) The parameter messaging_product is required.")
        to, kind = data.get("to"), data.get("type", "text")
        if not isinstance(to, str) or not re.fullmatch(r"\+?\d{6,20}", to):
            return _error(100, "(#100) Invalid parameter: to")
        if to.lstrip("+") in self.closed_window:
            return _error(131047, "(#131047) Re-engagement message",
                          "Message failed to send because more than 24 hours have passed since the customer last "
                          "replied to this number.")
        if kind == "text":
            body = (data.get("text") or {}).get("body")
            if not isinstance(body, str) or not body or len(body) > 4096:
                return _error(100, "(#100) Invalid parameter: text.body (1 to 4096 characters)")
            sent = Sent(to.lstrip("+"), "text", body)
        elif kind == "document":
            doc = data.get("document") or {}
            if doc.get("id") not in self.uploads:
                return _error(100, "(#100) Invalid parameter: document.id is not an uploaded media id")
            sent = Sent(to.lstrip("+"), "document", doc.get("caption", ""), doc, self.uploads[doc["id"]][0])
        else:
            return _error(100, f"(#100) type {kind} is not emulated")
        sent.id = f"wamid.{uuid.uuid4().hex}"
        with self.cond:
            self.sent.append(sent)
            self.cond.notify_all()
        return 200, {"messaging_product": "whatsapp", "contacts": [{"input": to, "wa_id": to.lstrip("+")}],
                     "messages": [{"id": sent.id}]}

    def _upload(self, content_type: str, raw: bytes) -> tuple[int, dict]:
        msg = BytesParser(policy=HTTP).parsebytes(b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + raw)
        parts = {p.get_param("name", header="content-disposition"): p for p in msg.iter_parts()} \
            if msg.is_multipart() else {}
        if "file" not in parts or (parts.get("messaging_product") is None
                                   or parts["messaging_product"].get_content().strip() != "whatsapp"):
            return _error(100, "(#100) file and messaging_product=whatsapp are required")
        f = parts["file"]
        media_id = str(2000000000 + len(self.uploads))
        self.uploads[media_id] = (f.get_payload(decode=True) or b"", f.get_content_type(), f.get_filename() or "")
        return 200, {"id": media_id}

    def _media_info(self, media_id: str) -> tuple[int, dict]:
        if media_id not in self.media:
            return _error(100, f"(#100) Unsupported get request. Object with ID '{media_id}' does not exist")
        data, mime, declared = self.media[media_id]
        return 200, {"messaging_product": "whatsapp", "url": f"http://{self.media_host}:{self.server.server_address[1]}/media-files/{media_id}", "mime_type": mime,
                     "sha256": hashlib.sha256(data).hexdigest(), "file_size": declared, "id": media_id}

    def _handler(self):
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _reply(self, status: int, body: dict | bytes, kind: str = "application/json") -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _auth(self) -> bool:
                auth = self.headers.get("Authorization")
                owner.calls.append((self.command, self.path, auth))
                if not owner._authorised(auth):
                    self._reply(401, _error(190, "Invalid OAuth access token - Cannot parse access token")[1])
                    return False
                return True

            def do_GET(self):
                if not self._auth():
                    return
                path = self.path.split("?")[0]
                m = re.fullmatch(r"/media-files/(\d+)", path)
                if m and m.group(1) in owner.media:
                    data, mime, _ = owner.media[m.group(1)]
                    return self._reply(200, data, mime.split(";")[0])
                m = re.fullmatch(rf"/{VERSION}/(\d+)", path)
                if m and m.group(1) == owner.phone_number_id:
                    return self._reply(200, {"verified_name": "Test Business", "id": owner.phone_number_id,
                                             "display_phone_number": owner.display_number})
                if m:
                    return self._reply(*owner._media_info(m.group(1)))
                self._reply(404, _error(100, "Unknown path")[1])

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if not self._auth():
                    return
                path = self.path.split("?")[0]
                if path == f"/{VERSION}/{owner.phone_number_id}/messages":
                    try:
                        data = json.loads(raw)
                    except ValueError:
                        return self._reply(*_error(100, "(#100) The body is not JSON"))
                    return self._reply(*owner._messages(data))
                if path == f"/{VERSION}/{owner.phone_number_id}/media":
                    return self._reply(*owner._upload(self.headers.get("Content-Type") or "", raw))
                self._reply(404, _error(100, "Unknown path")[1])

        return Handler


def _error(code: int, message: str, details: str = "") -> tuple[int, dict]:
    return 400, {"error": {"message": message, "type": "OAuthException", "code": code,
                           "error_data": {"messaging_product": "whatsapp", "details": details or message},
                           "fbtrace_id": uuid.uuid4().hex[:20]}}
