"""WhatsApp through the WhatsApp Business Cloud API: Meta's webhook in, the Graph API out.

In: Meta POSTs each event to `path` on the gateway's HTTP listener (gateway.webhook's `listen:`,
see listener.py), which must be reachable from the internet over https (a reverse proxy). The
webhook is verified once by a GET with `hub.mode=subscribe`, `hub.verify_token` (compared in
constant time with the verify token) and `hub.challenge` (echoed). Every POST is hostile until
its `X-Hub-Signature-256` (HMAC-SHA256 of the raw body with the app secret, constant time) is
right: nothing is parsed before that (a bad or missing one: 401). Then the body must have the
documented shape, checked whole before anything is submitted (else 400, nothing run): text
messages, voice notes and audio (fetched by the core: `GET {api_base}/{media_id}` names a URL,
fetched with the token, within voice.max_bytes), other kinds answered as not read here. Message
ids (`wamid...`) are taken once, also across restarts (the gateway ledger). Delivery receipts and
events for another phone number id are acknowledged and ignored.

Out: `POST {api_base}/{phone_number_id}/messages` (text, cut into 4096-character parts);
files are uploaded (`POST {api_base}/{phone_number_id}/media`) and sent as documents. WhatsApp
lets a business send free text only within 24 hours of the person's last message (the
customer-service window): a reply later than that is not sent, and fails at once with the reason
(so does the Graph API's error 131047, which says the same).

The access token goes only to `api_base`'s origin (scheme, host and port), and to a media URL
only when its origin is that one or one listed in `media_origins`; anything else is refused
without the token. Who is who: `allow` / `admins` are wa_ids (the digits of a phone number, as
WhatsApp names the sender); `customers: true` answers anyone else as a customer.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from ...errors import ConfigError, HermesError, InputError
from ...store.vault import Vault
from . import listener
from .channel import ChannelBase, ChatSettings, Inbound, Origin, Outbound, Sink, check_api_base
from .message import Audio, AudioTooLarge

log = logging.getLogger(__name__)

PLATFORM = "whatsapp"
MAX_BODY = 1024 * 1024  # a webhook POST (Meta's are a few KB; a batch of messages stays far below)
MAX_TEXT = 4096  # characters of one text message
MAX_PARTS = 10
MAX_ID = 200  # characters of a message or media id
WINDOW_S = 24 * 3600  # the customer-service window
WINDOW_CODE = 131047  # the Graph API's "Re-engagement message": outside the 24-hour window
WA_ID = re.compile(r"[1-9]\d{5,19}")
MEDIA_ID = re.compile(r"[A-Za-z0-9_.:-]{1,200}")
TIMEOUT_S = 30.0


@dataclass
class WhatsAppSettings(ChatSettings):
    """`gateway.whatsapp` in hermes.yaml: a WhatsApp Business phone number on the Cloud API."""

    token_env: str = "WHATSAPP_TOKEN"  # the variable holding the access token (Graph API, Bearer)
    app_secret_env: str = "WHATSAPP_APP_SECRET"  # the variable holding the app secret (the key of the HMAC in X-Hub-Signature-256)
    verify_token_env: str = "WHATSAPP_VERIFY_TOKEN"  # the token you typed in Meta's webhook settings (the GET handshake)
    phone_number_id: str = ""  # the business phone number's id (not the number itself)
    # who may use the agent's tools: wa_ids (the phone number's digits, no +); empty = nobody
    allow: list[str] = field(default_factory=list)
    admins: list[str] = field(default_factory=list)  # who may also /merge, /reject, /resume, /reply: wa_ids
    api_base: str = "https://graph.facebook.com/v21.0"  # sends go to {api_base}/{phone_number_id}/messages
    path: str = "/whatsapp"  # the webhook's path, served by gateway.webhook's HTTP listener (its listen:)
    # other origins (scheme://host[:port]) a media URL may be on and get the token: Meta serves media
    # from https://lookaside.fbsbx.com; empty: only api_base's own origin
    media_origins: list[str] = field(default_factory=list)


class Malformed(ValueError):
    """A webhook body (or a part of it) that is not what the Cloud API sends."""


class SendRefused(HermesError):
    """A send the platform will never take (outside the 24-hour window, a bad recipient): not retried."""


def signature_ok(secret: str, body: bytes, header: str | None) -> bool:
    """X-Hub-Signature-256 checked over the raw body, in constant time."""
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest((header or "").encode(), expected.encode())


def origin_of(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of a URL, the port made explicit."""
    parts = urlsplit(url)
    try:
        port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    except ValueError:
        port = -1
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


@dataclass(frozen=True)
class Incoming:
    """One message of a webhook body, checked: who, which id, when, and what it says."""

    sender: str
    message: str
    timestamp: int
    text: str
    audio: tuple[str, str] | None = None  # (media id, mime type) of a voice note or audio file


def _dict(value: Any, what: str) -> dict:
    if not isinstance(value, dict):
        raise Malformed(f"{what} is not an object")
    return value


def _list(value: Any, what: str) -> list:
    if not isinstance(value, list):
        raise Malformed(f"{what} is not a list")
    return value


def _id(value: Any, what: str, pattern: re.Pattern | None = None) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_ID or any(ord(c) < 32 for c in value):
        raise Malformed(f"{what} is missing or not an id")
    if pattern is not None and not pattern.fullmatch(value):
        raise Malformed(f"{what} is not a valid id")
    return value


def parse_body(data: Any, phone_number_id: str) -> list[Incoming]:
    """The messages of a webhook body for this phone number, every part checked first (Malformed:
    the whole body is refused, nothing taken). Receipts and other numbers' events: none."""
    body = _dict(data, "the body")
    if body.get("object") != "whatsapp_business_account":
        raise Malformed("object is not whatsapp_business_account")
    out = []
    for entry in _list(body.get("entry"), "entry"):
        for change in _list(_dict(entry, "an entry").get("changes"), "changes"):
            change = _dict(change, "a change")
            if change.get("field") != "messages":
                continue
            value = _dict(change.get("value"), "a change's value")
            meta = _dict(value.get("metadata"), "metadata")
            if str(meta.get("phone_number_id", "")) != phone_number_id:
                log.info("whatsapp: an event for another phone number id, ignored")
                continue
            for m in _list(value.get("messages", []), "messages"):
                out.append(_message(_dict(m, "a message")))
    return out


def _message(m: dict) -> Incoming:
    sender = _id(m.get("from"), "a message's from", WA_ID)
    mid = _id(m.get("id"), "a message's id")
    stamp = m.get("timestamp")
    if not isinstance(stamp, str) or not stamp.isdigit() or len(stamp) > 12:
        raise Malformed("a message's timestamp is not unix seconds")
    kind = m.get("type")
    if not isinstance(kind, str):
        raise Malformed("a message's type is missing")
    when = min(int(stamp), int(time.time()))
    if kind == "text":
        text = _dict(m.get("text"), "a text message's text").get("body")
        if not isinstance(text, str):
            raise Malformed("a text message without its body")
        return Incoming(sender, mid, when, text)
    if kind == "audio":
        audio = _dict(m.get("audio"), "an audio message's audio")
        given = audio.get("mime_type")
        mime = given if isinstance(given, str) else ""
        return Incoming(sender, mid, when, "", (_id(audio.get("id"), "the audio's media id", MEDIA_ID), mime[:100]))
    caption = ""
    part = m.get(kind)
    if isinstance(part, dict) and isinstance(part.get("caption"), str):
        caption = part["caption"]
    note = f"(a {kind[:30]} message came with this; only text and voice notes are read here)"
    return Incoming(sender, mid, when, f"{caption}\n\n{note}".strip())


def split(text: str) -> list[str]:
    """A reply as WhatsApp text messages of at most MAX_TEXT characters, cut on line ends."""
    text = text or "(no answer)"
    parts: list[str] = []
    while text and len(parts) < MAX_PARTS:
        if len(text) <= MAX_TEXT:
            parts.append(text)
            break
        at = text.rfind("\n", 0, MAX_TEXT)
        at = at if at > MAX_TEXT // 2 else MAX_TEXT
        parts.append(text[:at])
        text = text[at:].lstrip("\n")
    else:
        if text:
            parts[-1] = parts[-1][: MAX_TEXT - 40] + f"\n[... cut: {len(text)} more characters]"
    return parts


class WhatsAppChannel(ChannelBase):
    name = PLATFORM
    Settings = WhatsAppSettings
    idempotent_send = False  # the Cloud API has no client-chosen id: a send cut short is not repeated
    leased = False  # Meta pushes to the URL it was given: whichever machine serves it takes the message
    max_file_bytes = 100 * 1024 * 1024  # the Cloud API's documents

    def __init__(self, vault: Vault, settings: WhatsAppSettings):
        super().__init__(vault, settings)
        self.settings: WhatsAppSettings = settings
        self.sink: Sink | None = None
        self.client: Any = None
        for key, value in (("allow", settings.allow), ("admins", settings.admins)):
            for who in value:
                if not isinstance(who, str) or not WA_ID.fullmatch(who.lstrip("+")):
                    raise ConfigError(f"gateway.whatsapp.{key}: {who!r} is not a wa_id (the number's digits)")
        check_api_base(settings.api_base, "gateway.whatsapp.api_base")
        self.api = settings.api_base.rstrip("/")
        self.origins = {origin_of(self.api)} | {origin_of(o) for o in settings.media_origins}

    # -- settings and secrets ---------------------------------------------------------------------
    def access(self):
        rules = super().access()
        rules.allow = [a.lstrip("+") for a in rules.allow]
        rules.admins = [a.lstrip("+") for a in rules.admins]
        return rules

    def _secrets(self) -> tuple[str, str, str]:
        values = [self.secret(n) for n in (self.settings.token_env, self.settings.app_secret_env,
                                           self.settings.verify_token_env)]
        names = (self.settings.token_env, self.settings.app_secret_env, self.settings.verify_token_env)
        missing = [n for n, v in zip(names, values, strict=True) if not v]
        if missing:
            raise ConfigError(f"gateway.whatsapp: {', '.join(missing)} not set in .hermes/secrets.env")
        if not self.settings.phone_number_id.isdigit():
            raise ConfigError("gateway.whatsapp.phone_number_id must be the number's id (digits)")
        return values[0] or "", values[1] or "", values[2] or ""

    # -- the channel interface --------------------------------------------------------------------
    def start(self, sink: Sink) -> None:
        import httpx

        self._secrets()
        if listener.serving(self.vault) is None:
            raise HermesError("no HTTP listener runs in this gateway for Meta's callbacks: set `listen:` in the signed "
                              "hooks' section of gateway (see the guide's set-up)")
        self.sink = sink
        self.client = httpx.Client(timeout=TIMEOUT_S, follow_redirects=False)
        listener.mount(self.vault, self.settings.path, self.handle)

    def stop(self) -> None:
        listener.unmount(self.vault, self.settings.path)
        if self.client is not None:
            self.client.close()

    def check(self) -> str:
        import httpx

        token, _, _ = self._secrets()
        with httpx.Client(timeout=TIMEOUT_S, follow_redirects=False) as client:
            r = client.get(f"{self.api}/{self.settings.phone_number_id}", headers=self._auth(token))
        if r.status_code != 200:
            raise HermesError(f"the Graph API answered {r.status_code}: {_error(r)[1]}")
        listen = listener.serving(self.vault)
        where = f"served on {listen}{self.settings.path}" if listen else "the gateway's HTTP listener is not running here"
        return f"phone number {self.settings.phone_number_id} answers; {where}"

    def should_retry(self, exc: Exception) -> bool:
        return not isinstance(exc, (SendRefused, InputError))

    # -- the webhook ------------------------------------------------------------------------------
    async def handle(self, request) -> Any:
        from starlette.responses import JSONResponse, PlainTextResponse

        if request.method == "GET":
            return self._verify(request.query_params, PlainTextResponse)
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
            return JSONResponse({"error": f"body over {MAX_BODY} bytes" if length.isdigit() else "bad Content-Length"},
                                413 if (length or "").isdigit() else 400)
        body = await listener.read_body(request, MAX_BODY)
        if body is None:
            return JSONResponse({"error": f"body over {MAX_BODY} bytes"}, 413)
        secret = self.secret(self.settings.app_secret_env)
        if not secret:
            return JSONResponse({"error": "no app secret configured: nothing is accepted"}, 403)
        if not signature_ok(secret, body, request.headers.get("x-hub-signature-256")):
            log.info("whatsapp: a POST with a bad or missing X-Hub-Signature-256, refused")
            return JSONResponse({"error": "bad or missing X-Hub-Signature-256"}, 401)
        try:
            messages = parse_body(json.loads(body.decode("utf-8")), self.settings.phone_number_id)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # Malformed is a ValueError
            log.info("whatsapp: a malformed webhook body, refused: %s", exc)
            return JSONResponse({"error": f"malformed: {exc}"[:300]}, 400)
        from starlette.concurrency import run_in_threadpool

        taken = [await run_in_threadpool(self._take, m) for m in messages]
        return JSONResponse({"status": "ok", "messages": len(taken)}, 200)

    def _verify(self, query, response) -> Any:
        """Meta's subscription handshake: the challenge back only for the right verify token."""
        token = self.secret(self.settings.verify_token_env)
        given = query.get("hub.verify_token") or ""
        challenge = query.get("hub.challenge") or ""
        if not token or query.get("hub.mode") != "subscribe" or not hmac.compare_digest(given.encode(), token.encode()):
            return response("verification refused", 403)
        if not challenge or len(challenge) > 200 or not challenge.isprintable():
            return response("no usable hub.challenge", 400)
        return response(challenge, 200)

    def _take(self, m: Incoming) -> str:
        """Submit one message (a duplicate id does nothing); remember when the person last wrote."""
        assert self.sink is not None
        origin = Origin(PLATFORM, m.sender, m.sender, m.message)
        if self.sink.lookup(origin) is not None:
            return "duplicate"
        last = self.sink.cursor(_window_key(m.sender))
        if last is None or int(last) < m.timestamp:
            self.sink.set_cursor(_window_key(m.sender), str(m.timestamp))
        audio = None
        if m.audio is not None:
            media_id, mime = m.audio
            audio = Audio(partial(self._fetch_media, media_id), mime, f"{media_id}.audio")
        return self.sink.submit(Inbound(origin, m.text, direct=True, audio=audio))

    # -- the Graph API ----------------------------------------------------------------------------
    def _auth(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.secret(self.settings.token_env) or ''}"}

    def _authorised(self, url: str) -> dict[str, str]:
        """The token's header for a URL on an allowed origin; raises for any other (it is never sent there)."""
        if origin_of(url) not in self.origins:
            raise HermesError(f"a media URL on {urlsplit(url).hostname or '?'} is not on api_base's origin (nor in "
                              "gateway.whatsapp.media_origins): the token is not sent there")
        return self._auth()

    def _fetch_media(self, media_id: str, limit: int) -> bytes:
        """A voice note's bytes: its URL from the media endpoint, then the file, at most `limit`."""
        info = self._call("GET", f"{self.api}/{media_id}", params={"phone_number_id": self.settings.phone_number_id})
        size = info.get("file_size")
        if isinstance(size, int) and size > limit:
            raise AudioTooLarge(f"{size} bytes, over the {limit} byte limit")
        url = info.get("url")
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            raise HermesError("the media endpoint named no URL")
        chunks, got = [], 0
        with self.client.stream("GET", url, headers=self._authorised(url)) as r:
            if r.status_code != 200:
                raise HermesError(f"the media download answered {r.status_code}")
            for chunk in r.iter_bytes():
                got += len(chunk)
                if got > limit:
                    raise AudioTooLarge(f"over the {limit} byte limit")
                chunks.append(chunk)
        return b"".join(chunks)

    def _call(self, method: str, url: str, **kw: Any) -> dict:
        """One Graph API call with the token (only to api_base's origin); its JSON, or raise:
        SendRefused for what another try cannot change."""
        r = self.client.request(method, url, headers=self._authorised(url), **kw)
        if r.status_code == 200:
            try:
                data = r.json()
            except ValueError:
                raise HermesError("the Graph API answered with something that is not JSON") from None
            if isinstance(data, dict):
                return data
            raise HermesError("the Graph API answered with something that is not an object")
        code, message = _error(r)
        if code == WINDOW_CODE:
            raise SendRefused(f"not sent: more than 24 hours since this person last wrote (WhatsApp's customer-service "
                              f"window; error {WINDOW_CODE}); only a template message may start a conversation")
        if r.status_code == 429 or r.status_code >= 500:
            raise HermesError(f"the Graph API answered {r.status_code}: {message}")
        raise SendRefused(f"the Graph API refused it ({r.status_code}, error {code}): {message}")

    def _window_open(self, wa_id: str) -> None:
        """Refuse a send outside the 24-hour customer-service window (known from our own ledger)."""
        assert self.sink is not None
        last = self.sink.cursor(_window_key(wa_id))
        if last is not None and time.time() - int(last) > WINDOW_S:
            hours = int((time.time() - int(last)) // 3600)
            raise SendRefused(f"not sent: this person last wrote {hours} hours ago, outside WhatsApp's 24-hour "
                              "customer-service window (free text is not allowed; a template message is needed)")

    def send(self, reply: Outbound) -> str:
        to = reply.origin.chat
        self._window_open(to)
        ids = []
        for part in split(reply.text):
            data = self._call("POST", f"{self.api}/{self.settings.phone_number_id}/messages", json={
                "messaging_product": "whatsapp", "recipient_type": "individual", "to": to, "type": "text",
                "text": {"preview_url": False, "body": part}})
            ids.append(_message_id(data))
        return ids[-1]

    def send_file(self, reply: Outbound) -> str:
        f = reply.files[0]
        self._window_open(reply.origin.chat)
        mime = f.mime or "application/octet-stream"
        with open(f.path, "rb") as fh:
            uploaded = self._call("POST", f"{self.api}/{self.settings.phone_number_id}/media",
                                  data={"messaging_product": "whatsapp", "type": mime},
                                  files={"file": (f.name, fh, mime)})
        media = uploaded.get("id")
        if not isinstance(media, str) or not media:
            raise HermesError("the media upload named no id")
        document: dict[str, str] = {"id": media, "filename": f.name}
        if reply.text:
            document["caption"] = reply.text[:1024]
        data = self._call("POST", f"{self.api}/{self.settings.phone_number_id}/messages", json={
            "messaging_product": "whatsapp", "recipient_type": "individual", "to": reply.origin.chat,
            "type": "document", "document": document})
        return _message_id(data)


def _window_key(wa_id: str) -> str:
    return f"{PLATFORM}:last-in:{wa_id}"


def _message_id(data: dict) -> str:
    messages = data.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[0], dict) and isinstance(messages[0].get("id"), str):
        return messages[0]["id"]
    raise HermesError("the Graph API took the message but named no id")


def _error(r: Any) -> tuple[int | None, str]:
    """(code, message) of a Graph API error answer."""
    try:
        err = r.json().get("error") or {}
    except (ValueError, AttributeError):
        return None, r.text[:200]
    if not isinstance(err, dict):
        return None, str(err)[:200]
    details = (err.get("error_data") or {}).get("details") if isinstance(err.get("error_data"), dict) else None
    code = err.get("code") if isinstance(err.get("code"), int) else None
    return code, str(details or err.get("message") or "unknown error")[:300]


__all__ = ["WhatsAppChannel", "WhatsAppSettings", "parse_body", "signature_ok"]
