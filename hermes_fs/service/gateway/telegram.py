"""Telegram as a gateway channel, with python-telegram-bot: long polling (`getUpdates`, no public
URL needed), private chats and groups, replies in the same chat as replies to the message.

One asyncio loop in its own thread long-polls `getUpdates`. Each update is handed to the core
(`Sink.submit`, which returns once the message is a durable request), and only then is its
`update_id` saved as the channel's cursor (in the gateway ledger); the next `getUpdates` asks for
the updates after it, which is what tells Telegram the earlier ones were received. A crash before
the cursor is saved gets the same update again, and its message id makes that submit a no-op: so
nothing is lost or answered twice. Telegram keeps unconfirmed updates for 24 hours, so messages
sent while the daemon was down are read when it starts.

Who is who: `allow` and `admins` are numeric Telegram user ids (the `from.id` Telegram puts on
every message), never usernames, which their owners change and others can then take.

Groups: the bot takes a message addressed to it (a command, `/command@thisbot`, a mention of
@thisbot, or a reply to one of its messages); the others are remembered as the room's recent lines
and reach the model only as untrusted context. A command addressed to another bot is not ours.

Voice notes (`voice`) and audio files (`audio`) become an `Audio` whose download (`getFile`,
then the file's URL) the core runs only if it takes the message; their transcript is the message
(service/gateway/voice.py), a caption coming first.

Replies: Markdown rendered as Telegram's HTML subset by render.py (`inline_html`: bold, italic,
strikethrough, code, pre, links, block quotes; lists and headings as text; escaped and sanitised);
a reply Telegram cannot parse is sent again as plain text. A reply
longer than a message holds is cut with a note. Telegram has no idempotency key for sends, so a
send cut short by a crash is marked failed rather than risk a second copy (`idempotent_send`).
"""

from __future__ import annotations

import asyncio
import html
import logging
import re
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any

from ...errors import ConfigError, HermesError
from ...store.vault import Vault
from .access import AccessRules
from .channel import AsyncChannel, ChatSettings, Inbound, Origin, Outbound, Sink, check_api_base, room_context
from .ledger import CLAIMED
from .message import Audio, AudioTooLarge
from .render import inline_html

log = logging.getLogger(__name__)

PLATFORM = "telegram"
POLL_S = 25  # long polling: Telegram holds getUpdates this long when there is nothing new
MAX_SOURCE = 3800  # characters of a reply's Markdown sent; a message holds 4096 after formatting
MAX_DOCUMENT_BYTES = 50_000_000  # sendDocument: "files of any type of up to 50 MB" from a bot
MAX_CAPTION = 1024  # a document's caption, in characters
CONTEXT_LINES = 10  # a group's recent lines kept (in the ledger) for untrusted context
USER_ID = re.compile(r"[1-9]\d{0,19}")


@dataclass
class TelegramSettings(ChatSettings):
    """`gateway.telegram` in hermes.yaml. `allow` / `admins`: numeric user ids (quoted or not)."""

    token_env: str | None = None  # the variable holding the bot token from BotFather (.hermes/secrets.env)
    api_base: str = "https://api.telegram.org"  # a Bot API server (a local one, or a test emulator)
    # who may talk to the agent: numeric user ids, quoted or not (YAML writes ids as numbers); empty = nobody
    # (plus approved pairings)
    allow: list[str | int] = field(default_factory=list)  # type: ignore[assignment]
    # who may also /merge and /reject (and /resume, /reply): numeric user ids
    admins: list[str | int] = field(default_factory=list)  # type: ignore[assignment]
    pairing: bool = True
    per_sender_in_rooms: bool = True  # groups: one session per sender


def cut(markdown: str, limit: int = MAX_SOURCE) -> str:
    if len(markdown) <= limit:
        return markdown
    return markdown[:limit] + f"\n\n[... cut: {len(markdown) - limit} more characters]"


# -- reading an update -----------------------------------------------------------------------------

@dataclass
class Update:
    """What the channel needs of one `getUpdates` entry (read from the JSON, type-checked)."""

    update_id: int
    message: dict[str, Any] | None


def read_update(raw: Any) -> Update | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("update_id"), int) or isinstance(raw["update_id"], bool):
        return None
    message = raw.get("message")
    return Update(raw["update_id"], message if isinstance(message, dict) else None)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class TelegramChannel(AsyncChannel):
    name = PLATFORM
    Settings = TelegramSettings
    idempotent_send = False  # the Bot API has no idempotency key: a send cut short is not repeated
    max_file_bytes = MAX_DOCUMENT_BYTES

    def __init__(self, vault: Vault, settings: TelegramSettings):
        super().__init__(vault, settings)
        self.settings: TelegramSettings = settings
        self.allow = _user_ids(settings.allow, "allow")
        self.admins = _user_ids(settings.admins, "admins")
        check_api_base(settings.api_base, "gateway.telegram.api_base")
        self.bot: Any = None
        self.me: dict[str, Any] = {}

    # -- settings ---------------------------------------------------------------------------------
    def _token(self) -> str:
        if not self.settings.token_env:
            raise HermesError("gateway.telegram.token_env is not set (the variable holding the bot token from BotFather)")
        token = self.secret(self.settings.token_env)
        if not token:
            raise HermesError(f"{self.settings.token_env} is not set in .hermes/secrets.env")
        if not re.fullmatch(r"\d{1,20}:[\w-]{20,}", token.strip()):
            raise HermesError(f"{self.settings.token_env} does not look like a bot token (digits, a colon, then the secret)")
        return token.strip()

    @property
    def account(self) -> str:
        """The bot's id (the public part of its token): what one machine at a time consumes."""
        try:
            return self._token().split(":")[0]
        except HermesError:
            return "default"

    @property
    def cursor_key(self) -> str:
        return f"telegram:{self.account}"

    def access(self) -> AccessRules:
        return AccessRules(self.allow, self.admins, self.settings.pairing, customers=self.settings.customers)

    def per_sender(self, origin: Origin) -> bool:
        return self.settings.per_sender_in_rooms

    def progress(self, sink: Sink) -> str | None:
        """The last update id handled, for the next holder of the channel (holder.py)."""
        return sink.cursor(self.cursor_key)

    def resume(self, sink: Sink, cursor: str) -> None:
        if cursor.isdigit():
            sink.set_cursor(self.cursor_key, cursor)

    def should_retry(self, exc: Exception) -> bool:
        """A refusal by Telegram (the chat is gone, the bot was blocked or removed, a bad request)
        will be refused again; network errors, time-outs and flood waits are worth another try."""
        from telegram.error import BadRequest, ChatMigrated, Forbidden, InvalidToken

        return not isinstance(exc, (BadRequest, Forbidden, ChatMigrated, InvalidToken))

    # -- the channel interface --------------------------------------------------------------------
    def prepare(self) -> None:
        self._token()

    @property
    def endpoint(self) -> str:
        return self.settings.api_base

    def connected(self) -> bool:
        return self.bot is not None

    def send(self, reply: Outbound) -> str:
        return self.in_loop(self._send(reply))

    def send_file(self, reply: Outbound) -> str:
        """One file as a document (`sendDocument`, a multipart upload), a reply to the message."""
        return self.in_loop(self._send_document(reply), 300)

    def check(self) -> str:
        """`gateway test telegram` / `doctor`: the token works (getMe)."""
        return asyncio.run(self._check())

    # -- the loop ---------------------------------------------------------------------------------
    def _bot(self):
        from telegram.request import HTTPXRequest

        base = self.settings.api_base.rstrip("/")
        return _bot_class()(self._token(), base_url=f"{base}/bot", base_file_url=f"{base}/file/bot",
                            request=HTTPXRequest(connection_pool_size=4, read_timeout=30, write_timeout=30),
                            get_updates_request=HTTPXRequest(read_timeout=POLL_S + 15))

    async def main(self) -> None:
        from telegram.error import InvalidToken, NetworkError, RetryAfter

        self.bot = self._bot()
        try:
            await self.bot.initialize()  # getMe: who the bot is (its username names it in groups)
            self.me = {"id": self.bot.bot.id, "username": (self.bot.bot.username or "").lower()}
        except InvalidToken:
            self.failure = "the bot token was refused (InvalidToken): check it with BotFather"
            return
        except NetworkError as exc:
            self.failure = f"cannot reach {self.settings.api_base}: {exc}"
            return
        assert self.sink is not None
        delay = 1.0
        try:
            while not self.stopping.is_set():
                cursor = self.sink.cursor(self.cursor_key)
                try:
                    # the first poll returns at once: `start` waits for it (else a quiet chat holds it POLL_S)
                    wait = POLL_S if self.ready.is_set() else 0
                    batch = await self.bot.raw_updates(int(cursor) + 1 if cursor else None, wait)
                except RetryAfter as exc:
                    await asyncio.sleep(_seconds(exc.retry_after))
                    continue
                except InvalidToken:
                    self.report("error", "the bot token was refused (InvalidToken)")
                    self.ready.set()
                    await asyncio.sleep(60)
                    continue
                except NetworkError as exc:  # TimedOut included
                    self.report("error", f"getUpdates failed: {exc}")
                    self.ready.set()
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 60.0)
                    continue
                delay = 1.0
                self.report("connected")
                self.ready.set()
                await self._handle(batch if isinstance(batch, list) else [])
        finally:
            try:
                await self.bot.shutdown()
            except Exception:
                pass

    async def _handle(self, batch: list) -> None:
        assert self.sink is not None
        for raw in batch:
            update = read_update(raw)
            if update is None:
                log.warning("telegram: skipped a malformed update")
                continue
            try:
                message = self._inbound(update.message) if update.message is not None else None
            except Exception:  # a malformed message is skipped, never the end of the channel
                log.warning("telegram: skipped a malformed message in update %d", update.update_id, exc_info=True)
                message = None
            if message is not None:
                await asyncio.to_thread(self.sink.submit, message)
                await self._typing(message)
            # after the message is durable (or was not a request): the next getUpdates confirms it
            self.sink.set_cursor(self.cursor_key, str(update.update_id))

    async def _typing(self, message: Inbound) -> None:
        """"typing…" in the chat while the request runs (Telegram shows it for 5 s or until the
        reply), for a message that became a request to run."""
        assert self.sink is not None
        row = self.sink.lookup(message.origin)
        if row is None or row.state != CLAIMED:
            return
        o = message.origin
        try:
            await self.bot.send_chat_action(int(o.chat), "typing",
                                            message_thread_id=int(o.thread) if o.thread else None)
        except Exception as exc:  # only a courtesy
            log.info("telegram: typing notice not sent: %s", exc)

    def _inbound(self, m: dict[str, Any]) -> Inbound | None:
        chat, sender, mid = m.get("chat"), m.get("from"), _int(m.get("message_id"))
        if not isinstance(chat, dict) or not isinstance(sender, dict) or mid is None:
            return None  # channel posts and anonymous group admins have no `from`
        chat_id, user_id = _int(chat.get("id")), _int(sender.get("id"))
        if chat_id is None or user_id is None or sender.get("is_bot") is True:
            return None
        audio = self._audio(m)
        text = m.get("text") if isinstance(m.get("text"), str) else m.get("caption")
        if not isinstance(text, str):
            if audio is None:
                return None  # stickers, photos without a caption: not requests here
            text = ""  # a voice note: its transcript is the message (the core's)
        direct = chat.get("type") == "private"
        thread = _int(m.get("message_thread_id")) if m.get("is_topic_message") is True else None
        origin = Origin(PLATFORM, str(chat_id), str(user_id), str(mid), str(thread) if thread else None)
        if not direct:
            addressed, text = self._addressed(m, text)
            assert self.sink is not None
            context = room_context(self.sink, f"telegram:{chat_id}", f"telegram:{chat_id}:{mid}", str(user_id),
                                   text or ("(a voice message)" if audio else ""), CONTEXT_LINES)
            if not addressed:
                return None
            return Inbound(origin, text, direct=False, context=context, audio=audio)
        text, _ = self._command(text)
        return Inbound(origin, text, direct=True, audio=audio)

    def _audio(self, m: dict[str, Any]) -> Audio | None:
        """A voice note (`voice`: OGG/Opus) or an audio file (`audio`), fetched by the core only
        if it takes the message (getFile, then the file's URL)."""
        for kind in ("voice", "audio"):
            media = m.get(kind)
            if isinstance(media, dict) and isinstance(media.get("file_id"), str):
                duration = _int(media.get("duration"))
                return Audio(partial(self._download, media["file_id"]), str(media.get("mime_type") or ""),
                             str(media.get("file_name") or kind), _int(media.get("file_size")),
                             float(duration) if duration is not None else None)
        return None

    def _download(self, file_id: str, limit: int) -> bytes:
        """A file's bytes, at most `limit` (called from the core's thread: the loop downloads)."""
        return self.in_loop(self._fetch_file(file_id, limit), 120)

    async def _fetch_file(self, file_id: str, limit: int) -> bytes:
        file = await self.bot.get_file(file_id)  # the Bot API hands out files up to 20 MB
        if file.file_size is not None and file.file_size > limit:
            raise AudioTooLarge(f"{file.file_size} bytes, over the {limit} byte limit")
        data = await file.download_as_bytearray()
        if len(data) > limit:
            raise AudioTooLarge(f"{len(data)} bytes, over the {limit} byte limit")
        return bytes(data)

    def _addressed(self, m: dict[str, Any], text: str) -> tuple[bool, str]:
        """Whether a group message is for this bot, and its text without the bot's @name."""
        text, for_us = self._command(text)
        if for_us is not None:
            return for_us, text
        name = self.me.get("username") or ""
        mention = re.compile(rf"(?<![\w@])@{re.escape(name)}\b", re.I) if name else None
        if mention is not None and mention.search(text):
            return True, mention.sub("", text, count=1).strip()
        replied = m.get("reply_to_message")
        if isinstance(replied, dict) and isinstance(replied.get("from"), dict):
            return _int(replied["from"].get("id")) == self.me.get("id"), text
        return False, text

    def _command(self, text: str) -> tuple[str, bool | None]:
        """`/cmd@thisbot args` -> `/cmd args` (and Telegram's `/start` -> `/help`). The second
        value: None for a message that is not a command; for a command, whether it is this bot's
        (`/cmd@otherbot` is not)."""
        m = re.match(r"^(/[A-Za-z]\w*)@(\w+)(.*)$", text, re.S)
        if m:
            text, ours = m.group(1) + m.group(3), m.group(2).lower() == (self.me.get("username") or "")
        elif re.match(r"^/[A-Za-z]", text):  # Telegram's bot commands; `!cmd` in a group needs a mention
            ours = True
        else:
            return text, None
        return re.sub(r"^/start\b", "/help", text), ours  # Telegram's first message to a bot asks what it does

    async def _send(self, reply: Outbound) -> str:
        from telegram.error import BadRequest

        source = cut(reply.text)
        kwargs = _reply_kwargs(reply.origin)
        try:
            sent = await self.bot.send_message(text=inline_html(source) or html.escape(source), parse_mode="HTML",
                                               **kwargs)
        except BadRequest as exc:
            if "parse entities" not in str(exc).lower():
                raise
            log.warning("telegram: the reply's formatting was refused (%s); sent as plain text", exc)
            sent = await self.bot.send_message(text=source, **kwargs)
        return str(sent.message_id)

    async def _send_document(self, reply: Outbound) -> str:
        f = reply.files[0]
        kwargs = _reply_kwargs(reply.origin)
        caption = reply.text[:MAX_CAPTION] if reply.text else None  # plain text: never refused for its markup
        with open(f.path, "rb") as data:
            sent = await self.bot.send_document(document=data, filename=f.name, caption=caption,
                                                read_timeout=120, write_timeout=120, **kwargs)
        return str(sent.message_id)

    async def _check(self) -> str:
        from telegram.error import InvalidToken, NetworkError

        bot = self._bot()
        try:
            async with bot:
                me = bot.bot
                return f"logged in to {self.settings.api_base} as @{me.username} (bot id {me.id})"
        except InvalidToken:
            raise HermesError("the bot token was refused (InvalidToken): check it with BotFather") from None
        except NetworkError as exc:
            raise HermesError(f"cannot reach {self.settings.api_base}: {exc}") from None


def _reply_kwargs(o: Origin) -> dict[str, Any]:
    """Where a reply goes: the chat, its topic, and as a reply to the message (notes such as an
    automatic review answer no message)."""
    from telegram import ReplyParameters

    kwargs: dict[str, Any] = {"chat_id": int(o.chat)}
    if o.thread:
        kwargs["message_thread_id"] = int(o.thread)
    if o.message.isdigit():
        kwargs["reply_parameters"] = ReplyParameters(message_id=int(o.message), allow_sending_without_reply=True)
    return kwargs


@cache
def _bot_class():
    """python-telegram-bot's Bot, with `getUpdates` read as raw JSON: each update is then checked
    on its own, so one the library cannot parse is skipped instead of stopping the channel."""
    from telegram import Bot

    class RawUpdatesBot(Bot):
        async def raw_updates(self, offset: int | None, timeout: int) -> list:
            data: dict[str, Any] = {"timeout": timeout, "allowed_updates": ["message"]}
            if offset is not None:
                data["offset"] = offset
            return await self._post("getUpdates", data, read_timeout=timeout + 15)

    return RawUpdatesBot


def _user_ids(values: list[str | int], key: str) -> list[str]:
    out = []
    for v in values:
        text = str(v).strip()
        if not USER_ID.fullmatch(text):
            raise ConfigError(f"'gateway.telegram.{key}' must hold numeric Telegram user ids, got {text!r} "
                              "(usernames change hands; a bot such as @userinfobot tells a person their id)")
        out.append(text)
    return out


def _seconds(value: Any) -> float:
    return float(value.total_seconds()) if hasattr(value, "total_seconds") else float(value)


__all__ = ["TelegramChannel", "TelegramSettings"]
