"""Slack as a gateway channel, with slack-sdk in Socket Mode (a websocket the app opens: no public
URL needed): direct messages, @mentions in channels, threads, and the `/hermes` slash command.

One asyncio loop in its own thread holds the Socket Mode connection (slack-sdk reconnects on
Slack's `disconnect` notices and on a dead socket). Every envelope Slack pushes is handled in
arrival order: its message is handed to the core (`Sink.submit`, which returns once the message is
a durable request), and only then is the envelope acknowledged. Slack delivers an envelope that
was not acknowledged again (`retry_attempt`, `retry_reason`), also after a crash; a message's
identity is its channel and `ts` (a slash command's, its `trigger_id`), so the core takes a
delivery it has seen before as a no-op, and the same message in two events (`message` and
`app_mention`) is one request. Nothing is lost or answered twice.

Who is who: `allow` and `admins` are Slack user ids (`U0123ABC`, `W0123ABC` on Enterprise Grid),
which Slack puts on every event itself; never display names, which anyone can change.

Where the agent answers: a direct message in the DM (a DM thread in that thread); an @mention in a
channel in a thread under the mention, and that thread is then a conversation with the agent
(its later messages need no mention), one session per thread; `/hermes <command>` in the channel
it was typed in. Other channel messages are remembered as the channel's recent lines and reach the
model only as untrusted context. Messages of bots (the agent's own included), edits and deletions
are not requests.

Replies: the Markdown rendered as Slack's mrkdwn by render.py (the model's `&`, `<` and `>`
escaped: it can write no mention, @channel or link markup of its own), link previews off. The Web
API has no idempotency key for `chat.postMessage`, so a send cut short by a crash is marked failed
rather than risk a second copy (`idempotent_send`).
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from ...errors import ConfigError, HermesError
from ...store.vault import Vault
from .access import AccessRules
from .channel import AsyncChannel, ChatSettings, Inbound, Origin, Outbound, check_api_base, room_context
from .ledger import CLAIMED, DONE
from .message import Audio, AudioTooLarge
from .render import mrkdwn

log = logging.getLogger(__name__)

PLATFORM = "slack"
USER_ID = re.compile(r"[UW][A-Z0-9]{2,20}")
MAX_SOURCE = 7_000  # characters of a reply's Markdown sent: escaped as mrkdwn it stays under Slack's 40,000
CONTEXT_LINES = 10  # a channel's (or thread's) recent lines kept for untrusted context
HELLO_WAIT_S = 30.0  # how long a new Socket Mode connection may take to say hello
MAX_FILE_BYTES = 1_000_000_000  # Slack takes files up to 1 GB
FETCH_WAIT_S = 120.0  # a voice message's download, at most
UPLOAD_WAIT_S = 600.0
AUDIO_TYPES = {"mp3", "m4a", "mp4", "aac", "ogg", "oga", "opus", "webm", "wav", "flac"}  # Slack's `filetype`s
# subtypes of a message event that are still a person's message (the rest: edits, joins, bots ...)
PERSON_SUBTYPES = {None, "thread_broadcast", "file_share"}
# errors of chat.postMessage that another try will get again
FINAL_ERRORS = {"channel_not_found", "not_in_channel", "is_archived", "invalid_auth", "account_inactive",
                "token_revoked", "token_expired", "msg_too_long", "no_text", "restricted_action", "missing_scope",
                "not_authed", "cannot_reply_to_message", "ekm_access_denied", "team_access_not_granted"}


@dataclass
class SlackSettings(ChatSettings):
    """The Slack channel: a Slack app in Socket Mode. `allow` / `admins`: Slack member ids (U0123ABC),
    never display names."""

    bot_token_env: str = "SLACK_BOT_TOKEN"  # the variable holding the bot token (xoxb-...) in .hermes/secrets.env
    app_token_env: str = "SLACK_APP_TOKEN"  # the variable holding the app-level token (xapp-..., connections:write)
    api_base: str = "https://slack.com/api"  # the Web API (a test emulator in the tests)
    allow: list[str] = field(default_factory=list)  # Slack user ids who may talk to the agent; empty = nobody
    admins: list[str] = field(default_factory=list)  # Slack user ids who may also /merge and /reject
    pairing: bool = True  # with no allow list, a stranger in a DM gets a pairing code to approve


@dataclass(frozen=True)
class Envelope:
    """One Socket Mode envelope (read from the JSON frame, type-checked)."""

    id: str
    type: str  # events_api | slash_commands | interactive
    payload: dict[str, Any]
    retry_attempt: int = 0
    retry_reason: str = ""


class Malformed(ValueError):
    """An envelope or event without what Slack documents it to have: skipped (and acknowledged)."""


def read_envelope(frame: Any) -> Envelope | str:
    """The envelope a frame holds, or why it is none (a hello or another notice is not an error)."""
    if not isinstance(frame, dict):
        return "a frame that is not a JSON object"
    kind, eid, payload = frame.get("type"), frame.get("envelope_id"), frame.get("payload")
    if not isinstance(eid, str) or not eid:
        return f"a {kind!r} frame without an envelope_id"
    if kind not in ("events_api", "slash_commands", "interactive"):
        return f"an envelope of unknown type {kind!r}"
    if not isinstance(payload, dict):
        return f"envelope {eid}: its payload is not an object"
    attempt = frame.get("retry_attempt")
    reason = frame.get("retry_reason")
    return Envelope(eid, kind, payload, attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else 0,
                    reason if isinstance(reason, str) else "")


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise Malformed(f"{what} is missing or not a string")
    return value


def _optional(value: Any) -> str:
    return value if isinstance(value, str) else ""


def plain_text(text: str, bot: str) -> str:
    """A message's text as the person wrote it: the mention of the agent taken out, other mentions
    and links in Slack's `<...>` markup written out, and Slack's three escapes undone."""
    text = re.sub(rf"<@{re.escape(bot)}(\|[^>]*)?>", "", text) if bot else text

    def written(m: re.Match) -> str:
        inner = m.group(1)
        target, _, label = inner.partition("|")
        if target.startswith(("@", "#")):
            return label and f"{target[0]}{label}" or target
        if target.startswith("!"):
            return f"@{label or target[1:].split('^')[0]}"
        return f"{label} ({target})" if label and label != target else target

    text = re.sub(r"<([^<>\n]{1,2000})>", written, text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


class SlackChannel(AsyncChannel):
    name = PLATFORM
    Settings = SlackSettings
    idempotent_send = False  # chat.postMessage has no idempotency key: a send cut short is not repeated
    max_file_bytes = MAX_FILE_BYTES  # files go out through files.getUploadURLExternal / completeUploadExternal

    def __init__(self, vault: Vault, settings: SlackSettings):
        super().__init__(vault, settings)
        self.settings: SlackSettings = settings
        self.allow = _user_ids(settings.allow, "allow")
        self.admins = _user_ids(settings.admins, "admins")
        check_api_base(settings.api_base, "gateway.slack.api_base")
        self.web: Any = None  # AsyncWebClient with the bot token
        self.socket: Any = None  # the Socket Mode client
        self.bot_user = ""  # the agent's own user id (auth.test)
        self.bot_id = ""
        self.team = ""
        self.envelopes: asyncio.Queue[Envelope] | None = None
        self.hello = asyncio.Event()

    # -- settings ---------------------------------------------------------------------------------
    def _tokens(self) -> tuple[str, str]:
        s = self.settings
        bot, app = self.secret(s.bot_token_env), self.secret(s.app_token_env)
        if not bot:
            raise HermesError(f"{s.bot_token_env} is not set in .hermes/secrets.env (the bot token, xoxb-...)")
        if not app:
            raise HermesError(f"{s.app_token_env} is not set in .hermes/secrets.env (an app-level token, xapp-..., "
                              "with the connections:write scope)")
        bot, app = bot.strip(), app.strip()
        if bot.startswith("xapp-") and app.startswith("xoxb-"):
            raise HermesError(f"{s.bot_token_env} and {s.app_token_env} are swapped in .hermes/secrets.env: "
                              f"{s.bot_token_env} is the bot token (xoxb-...), {s.app_token_env} the app-level one (xapp-...)")
        if not bot.startswith("xoxb-"):
            raise HermesError(f"{s.bot_token_env} is not a bot token: a bot token starts with xoxb- (the Bot User "
                              "OAuth Token, under Install App)")
        if not app.startswith("xapp-"):
            raise HermesError(f"{s.app_token_env} is not an app-level token: an app-level token starts with xapp- "
                              "(Basic Information → App-Level Tokens)")
        return bot, app

    @property
    def account(self) -> str:
        """The app's id (in its app-level token): what one machine at a time consumes."""
        try:
            parts = self._tokens()[1].split("-")
        except HermesError:
            return "default"
        return parts[2] if len(parts) > 2 and parts[2] else "default"

    def access(self) -> AccessRules:
        return AccessRules(self.allow, self.admins, self.settings.pairing, customers=self.settings.customers)

    def should_retry(self, exc: Exception) -> bool:
        """Slack's refusals that another try gets again (the channel is gone or archived, the bot
        is not in it, the token was revoked); network errors and rate limits are worth a retry."""
        from slack_sdk.errors import SlackApiError

        if isinstance(exc, SlackApiError):
            return _error(exc) not in FINAL_ERRORS
        return True

    # -- AsyncChannel -----------------------------------------------------------------------------
    def prepare(self) -> None:
        self._tokens()

    @property
    def endpoint(self) -> str:
        return self.settings.api_base

    def connected(self) -> bool:
        return self.web is not None

    async def disconnect(self) -> None:
        if self.socket is not None:
            await self.socket.close()

    def send(self, reply: Outbound) -> str:
        return self.in_loop(self._send(reply))

    def send_file(self, reply: Outbound) -> str:
        """One file, uploaded in Slack's three steps (an upload URL, the bytes, the completion that
        shares it in the chat and thread, with the caption as its comment); the file's id."""
        return self.in_loop(self._send_file(reply), UPLOAD_WAIT_S)

    def check(self) -> str:
        """`gateway test slack` / `doctor`: the bot token works (auth.test) and the app-level token
        opens a Socket Mode connection (apps.connections.open)."""
        return asyncio.run(self._check())

    def _clients(self) -> tuple[Any, Any]:
        """(the Web API client with the bot token, one for the app-level token's calls)."""
        from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
        from slack_sdk.web.async_client import AsyncWebClient

        bot, _ = self._tokens()
        base = self.settings.api_base.rstrip("/") + "/"
        web = AsyncWebClient(token=bot, base_url=base, timeout=30)
        web.retry_handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=1))  # waits out Retry-After once
        return web, AsyncWebClient(base_url=base, timeout=30)

    async def _login(self, web: Any, apps: Any) -> str:
        """Who the bot is (auth.test), and a Socket Mode URL (apps.connections.open). HermesError
        with what to fix when a token is refused or Slack is out of reach."""
        from aiohttp import ClientError
        from slack_sdk.errors import SlackApiError

        _, app = self._tokens()
        try:
            me = await web.auth_test()
        except SlackApiError as exc:
            raise HermesError(f"the bot token was refused ({_error(exc)}): check {self.settings.bot_token_env}") from None
        except (TimeoutError, ClientError, OSError) as exc:
            raise HermesError(f"cannot reach {self.settings.api_base}: {exc}") from None
        self.bot_user, self.bot_id = str(me.get("user_id") or ""), str(me.get("bot_id") or "")
        self.team = f"{me.get('team') or me.get('team_id')}"
        try:
            opened = await apps.apps_connections_open(app_token=app)
        except SlackApiError as exc:
            raise HermesError(f"the app-level token was refused ({_error(exc)}): check {self.settings.app_token_env}, "
                              "its connections:write scope, and that Socket Mode is on for the app") from None
        url = opened.get("url")
        if not isinstance(url, str) or not url.startswith(("wss://", "ws://")):
            raise HermesError("apps.connections.open gave no websocket URL")
        return url

    async def main(self) -> None:
        from slack_sdk.socket_mode.aiohttp import SocketModeClient

        web, apps = self._clients()
        try:
            url = await self._login(web, apps)
        except HermesError as exc:
            self.failure = str(exc)
            return
        self.web = web
        self.envelopes = asyncio.Queue()
        self.socket = SocketModeClient(app_token=self._tokens()[1], web_client=apps, logger=log)
        self.socket.message_listeners.append(self._on_frame)
        self.socket.wss_uri = url
        consumer = asyncio.create_task(self._consume())
        try:
            await self.socket.connect()
            try:
                await asyncio.wait_for(self.hello.wait(), HELLO_WAIT_S)
            except TimeoutError:
                self.failure = f"the Socket Mode connection said no hello within {HELLO_WAIT_S:.0f} s"
                return
            while not self.stopping.is_set():
                await asyncio.sleep(0.5)
        finally:
            consumer.cancel()
            await self.socket.close()

    async def _check(self) -> str:
        web, apps = self._clients()
        await self._login(web, apps)
        return f"logged in to {self.settings.api_base} as {self.bot_user} in {self.team}; Socket Mode can connect"

    # -- envelopes --------------------------------------------------------------------------------
    async def _on_frame(self, client: Any, frame: dict, raw: str | None) -> None:
        """Every frame of the socket, in arrival order: queued for `_consume` (which acknowledges
        each envelope once its message is durable). It queues before it could suspend, so the
        envelopes keep Slack's order."""
        kind = frame.get("type") if isinstance(frame, dict) else None
        if kind == "hello":
            self.hello.set()
            self.report("connected")
            self.ready.set()
            return
        got = read_envelope(frame)
        if isinstance(got, str):
            log.warning("slack: skipped %s", got if frame else f"a frame that is not JSON: {(raw or '')[:80]!r}")
            if isinstance(frame, dict) and isinstance(frame.get("envelope_id"), str):
                await self._ack(str(frame["envelope_id"]))  # nothing in it to take: never delivered again
            return
        assert self.envelopes is not None
        self.envelopes.put_nowait(got)

    async def _consume(self) -> None:
        assert self.envelopes is not None and self.sink is not None
        while True:
            env = await self.envelopes.get()
            try:
                message = self._inbound(env)
            except Malformed as exc:
                log.warning("slack: skipped a malformed %s envelope %s: %s", env.type, env.id, exc)
                message = None
            except Exception:  # a bug on one envelope is never the end of the channel
                log.exception("slack: skipped envelope %s", env.id)
                message = None
            if message is not None:
                if env.retry_attempt and self.sink.lookup(message.origin) is not None:
                    log.info("slack: envelope %s is Slack's retry %d (%s) of a message already taken",
                             env.id, env.retry_attempt, env.retry_reason or "no reason given")
                try:
                    await asyncio.to_thread(self.sink.submit, message)
                except Exception:  # not acknowledged: Slack delivers it again
                    log.exception("slack: could not take message %s; Slack will deliver it again", message.origin.message)
                    continue
            await self._ack(env.id)  # only now: the message is a durable request (or was none)

    async def _ack(self, envelope_id: str) -> None:
        try:
            await self.socket.send_socket_mode_response({"envelope_id": envelope_id})
        except Exception as exc:  # the socket went away: Slack delivers the envelope again
            log.warning("slack: envelope %s not acknowledged (%s); it comes again", envelope_id, exc)

    def _inbound(self, env: Envelope) -> Inbound | None:
        if env.type == "slash_commands":
            return self._slash(env.payload)
        if env.type != "events_api":
            return None  # buttons and shortcuts: the app offers none
        event = env.payload.get("event")
        if not isinstance(event, dict):
            raise Malformed("its event is not an object")
        if event.get("type") not in ("message", "app_mention"):
            return None
        return self._message(event)

    def _slash(self, p: dict[str, Any]) -> Inbound:
        """`/hermes refine focus` -> the command `/hermes refine focus` (commands.py reads it)."""
        user, chat = _text(p.get("user_id"), "user_id"), _text(p.get("channel_id"), "channel_id")
        command = _text(p.get("command"), "command")
        trigger, text = _optional(p.get("trigger_id")), _optional(p.get("text"))
        if not command.startswith("/") or not trigger:
            raise Malformed("a slash command without its command or trigger_id")
        origin = Origin(PLATFORM, chat, user, f"command:{trigger}")
        return Inbound(origin, f"/hermes {plain_text(text, self.bot_user)}".strip(), direct=chat.startswith("D"))

    def _message(self, e: dict[str, Any]) -> Inbound | None:
        if e.get("subtype") not in PERSON_SUBTYPES or e.get("bot_id") or e.get("bot_profile"):
            return None  # edits, deletions, joins, and every bot (the agent's own replies too)
        user, chat, ts = _text(e.get("user"), "user"), _text(e.get("channel"), "channel"), _text(e.get("ts"), "ts")
        if user == self.bot_user:
            return None
        raw, in_thread = _optional(e.get("text")), _optional(e.get("thread_ts"))
        thread = in_thread if in_thread and in_thread != ts else None  # a root has its own ts as thread_ts
        kind = e.get("channel_type")
        direct = kind == "im" or (kind is None and chat.startswith("D"))
        text = plain_text(raw, self.bot_user).strip()
        audio = self._audio(e.get("files"))
        if not text and audio is None:
            return None  # a file shared without words, or a message with nothing in it
        if direct:
            return Inbound(Origin(PLATFORM, chat, user, ts, thread), text, direct=True, audio=audio)
        mentioned = bool(self.bot_user) and f"<@{self.bot_user}" in raw
        origin = Origin(PLATFORM, chat, user, ts, thread or ts)  # a mention starts a thread of its own
        assert self.sink is not None
        ours = mentioned or e.get("type") == "app_mention" or (thread is not None and self._our_thread(chat, thread))
        context = room_context(self.sink, f"slack:{chat}:{thread or '-'}", f"slack:{chat}:{ts}", user, text,
                               CONTEXT_LINES)
        return Inbound(origin, text, direct=False, context=context, audio=audio) if ours else None

    # -- voice messages in --------------------------------------------------------------------------
    def _audio(self, files: Any) -> Audio | None:
        """The first audio file a message shares (a Slack audio clip or an uploaded recording), as
        the core's `Audio`: fetched only if the core decides to (never for a stranger)."""
        if not isinstance(files, list):
            return None
        for f in files:
            if not isinstance(f, dict):
                continue
            mime, kind = _optional(f.get("mimetype")), _optional(f.get("filetype"))
            url = _optional(f.get("url_private_download")) or _optional(f.get("url_private"))
            if not url or not (mime.startswith("audio/") or f.get("subtype") == "slack_audio" or kind in AUDIO_TYPES):
                continue
            size = f.get("size") if isinstance(f.get("size"), int) else None
            ms = f.get("duration_ms") if isinstance(f.get("duration_ms"), (int, float)) else None
            return Audio(partial(self._fetch, url), mime, _optional(f.get("name"))[:200], size,
                         ms / 1000 if ms is not None else None)
        return None

    def _fetch(self, url: str, limit: int) -> bytes:
        """A file's bytes from Slack (from the core's thread, on the channel's loop), at most `limit`."""
        self._check_file_url(url)
        return self.in_loop(self._download(url, limit), FETCH_WAIT_S)

    def _check_file_url(self, url: str) -> None:
        """The bot token goes only to the API's exact origin (scheme, host and port: another port of
        the same host is another server) or to Slack's own hosts over https on port 443 (its files
        are on files.slack.com), never to wherever an event's URL points."""
        check_token_origin(url, self.settings.api_base)

    async def _download(self, url: str, limit: int) -> bytes:
        import aiohttp

        bot, _ = self._tokens()
        timeout = aiohttp.ClientTimeout(total=FETCH_WAIT_S)
        async with aiohttp.ClientSession(timeout=timeout) as session, \
                session.get(url, headers={"Authorization": f"Bearer {bot}"}, allow_redirects=False) as resp:
            if resp.status != 200:
                raise HermesError(f"Slack answered {resp.status} for the file")
            if resp.content_type == "text/html":  # Slack's sign-in page: the token may not read files
                raise HermesError("Slack sent a web page instead of the file (does the app have files:read?)")
            data = bytearray()
            async for chunk in resp.content.iter_chunked(65536):
                data += chunk
                if len(data) > limit:
                    raise AudioTooLarge(f"more than {limit} bytes")
            return bytes(data)

    def _our_thread(self, chat: str, thread: str) -> bool:
        """A thread is a conversation with the agent once its first message was a request to it."""
        assert self.sink is not None
        root = self.sink.lookup(Origin(PLATFORM, chat, "", thread))
        return (root is not None and root.state in (CLAIMED, DONE)) or \
            self.sink.session(Origin(PLATFORM, chat, "", "", thread).session_key()) is not None

    async def _send(self, reply: Outbound) -> str:
        o = reply.origin
        kwargs: dict[str, Any] = {"channel": o.chat, "text": mrkdwn(cut(reply.text)) or "(no answer)", "mrkdwn": True,
                                  "unfurl_links": False, "unfurl_media": False}
        if o.thread:
            kwargs["thread_ts"] = o.thread
        sent = await self.web.chat_postMessage(**kwargs)
        return str(sent.get("ts") or "")

    async def _send_file(self, reply: Outbound) -> str:
        if not reply.files:
            raise HermesError("no file to send")
        done = await self.web.files_upload_v2(**(await _upload_args(reply)))
        shared = done.get("files") or [done.get("file") or {}]
        return str((shared[0] or {}).get("id") or "")


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of a URL, the port made explicit for http and https."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:  # a port that is not a number
        port = -1
    return scheme, (parts.hostname or "").lower(), port if port is not None else {"http": 80, "https": 443}.get(scheme)


def check_token_origin(url: str, api_base: str) -> None:
    """Raise unless the bot token may go to `url`: the API's own origin, or Slack's over https."""
    scheme, host, port = origin(url)
    if (scheme, host, port) == origin(api_base):
        return
    if (host != "slack.com" and not host.endswith(".slack.com")) or parts_userinfo(url):
        raise HermesError(f"a file URL outside Slack's API ({scheme}://{host}:{port}): not fetched with the bot token")
    if scheme != "https" or port != 443:
        raise HermesError(f"a file URL on Slack without https on port 443 ({scheme}://{host}:{port}): "
                          "not fetched with the bot token")


def parts_userinfo(url: str) -> bool:
    """A URL carrying user@ before its host (a host name that is not the real one to a reader)."""
    return "@" in urlsplit(url).netloc


async def _upload_args(reply: Outbound) -> dict[str, Any]:
    """files_upload_v2's arguments for the reply's one file (read in a thread: it may be large)."""
    f = reply.files[0]
    data = await asyncio.to_thread(f.path.read_bytes)
    args: dict[str, Any] = {"file": data, "filename": f.name, "title": f.name, "channel": reply.origin.chat}
    if reply.origin.thread:
        args["thread_ts"] = reply.origin.thread
    if reply.text.strip():
        args["initial_comment"] = mrkdwn(cut(reply.text))
    return args


def cut(markdown: str, limit: int = MAX_SOURCE) -> str:
    if len(markdown) <= limit:
        return markdown
    return markdown[:limit] + f"\n\n[... cut: {len(markdown) - limit} more characters]"


def _error(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    try:
        return str(response["error"]) if response is not None else str(exc)
    except (KeyError, TypeError):
        return str(exc)


def _user_ids(values: list[str], key: str) -> list[str]:
    out = []
    for v in values:
        text = str(v).strip()
        if not USER_ID.fullmatch(text):
            raise ConfigError(f"'gateway.slack.{key}' must hold Slack user ids such as U0123ABC, got {text!r} "
                              "(display names change; a person's id is under their profile's ⋮ > Copy member ID)")
        out.append(text)
    return out


__all__ = ["SlackChannel", "SlackSettings", "plain_text", "read_envelope"]
