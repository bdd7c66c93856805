"""Discord as a gateway channel, with discord.py: the Gateway websocket in, the REST API out.
Direct messages, guild channels when the bot is mentioned (or replied to), and slash commands for
the chat commands.

One asyncio loop in its own thread runs discord.py's client. `api_base` is where every REST call
goes (discord.py's `Route.BASE`, which the library itself sets for the API version), and the
Gateway's URL is what `GET {api_base}/gateway/bot` answers (discord.py's auto-sharded client asks
it, as Discord documents for bots). discord.py keeps the websocket: HELLO, IDENTIFY, heartbeats,
RESUME after a broken connection (Discord then replays the events the bot missed).

Messages sent while the daemon was down: Discord replays missed events only to a connection that
resumes its session, so after each fresh session (READY) the channel reads the history of the
chats it has seen (`GET /channels/{id}/messages?after=` the last message it took there; the last
CHATS_KEPT chats, in the gateway's ledger) and takes what it missed, the core's dedupe keeping each
message once.

Messages and slash commands are read from the Gateway's raw `MESSAGE_CREATE` and
`INTERACTION_CREATE` payloads (the client's parsers for those two events are this adapter's), so
each payload is type-checked here and one the library could not parse is skipped instead of
breaking the connection. They are handled in arrival order; the core dedupes by message id (an
interaction by its id), so an event replayed after a RESUME is one request.

Who is who: `allow` and `admins` are Discord user ids (snowflakes, the `author.id` Discord puts on
every message), never usernames or nicknames.

Where the agent answers: a DM in the DM; in a guild channel, a message that mentions the bot (a
real mention, `<@bot id>`, not a typed name) or replies to one of its messages, answered as a
reply to it. With `message_content: true` (a privileged intent, switched on in the Developer
Portal) the channel's other lines are remembered and reach the model as untrusted context.
Messages of bots and webhooks (the agent's own too) and system messages are not requests.

Slash commands: each chat command (commands.py's list) is registered as an application command
with its argument as an option; a use is acknowledged at once ("thinking…", Discord asks for an
answer within 3 seconds) once it is a durable request, and the answer then edits that
acknowledgement (within Discord's 15 minutes; later, or after a restart, it is posted in the
channel). A stranger's slash command is not acknowledged (silence).

Replies: Discord shows the model's Markdown as it is; mentions in it never ping (allowed mentions:
none). A reply over Discord's 2,000 characters goes as several messages (at most 5, then cut).
Voice messages (an `audio/*` attachment) become an `Audio` the core fetches only if it takes the
message. Discord has no idempotency key for a message, so a send cut short by a crash is marked
failed rather than risk a second copy.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any
from urllib.parse import urlsplit

from ...errors import ConfigError, HermesError
from ...store.vault import Vault
from . import commands
from .access import AccessRules
from .channel import AsyncChannel, ChatSettings, Inbound, Origin, Outbound, check_api_base, room_context
from .ledger import IGNORED
from .message import Audio, AudioTooLarge

log = logging.getLogger(__name__)

PLATFORM = "discord"
SNOWFLAKE = re.compile(r"[1-9]\d{15,20}")
MAX_MESSAGE = 2000  # characters of one message
MAX_PARTS = 5  # messages one reply may take
MAX_FILE_BYTES = 10 * 1024 * 1024  # what a bot may upload to a server without boosts
CONTEXT_LINES = 10
READY_WAIT_S = 60.0
FETCH_WAIT_S = 120.0
TOKEN_TTL_S = 14 * 60  # an interaction's token is valid 15 minutes
CHATS_KEPT = 50  # chats whose last message is remembered, to read what was missed after a restart
HISTORY_LIMIT = 100  # messages read back per chat (Discord's most per call)
PERSON_TYPES = {0, 19}  # DEFAULT, REPLY (the rest: joins, pins, boosts, ...)
CDN_HOSTS = ("cdn.discordapp.com", "media.discordapp.net")
DEFAULT_API = "https://discord.com/api/v10"
# HTTP statuses / JSON codes Discord answers that another try gets again
FINAL_STATUS = {400, 401, 403, 404}


@dataclass
class DiscordSettings(ChatSettings):
    """`gateway.discord` in hermes.yaml: a bot application. `allow` / `admins`: user ids (snowflakes)."""

    token_env: str = "DISCORD_BOT_TOKEN"  # the variable holding the bot token (.hermes/secrets.env)
    api_base: str = DEFAULT_API  # the REST API; the Gateway URL comes from GET {api_base}/gateway/bot
    # who may talk to the agent: user ids (snowflakes), quoted or not (YAML writes ids as numbers); empty = nobody
    # (plus approved pairings)
    allow: list[str | int] = field(default_factory=list)  # type: ignore[assignment]
    # who may also /merge and /reject (and /resume, /reply): user ids (snowflakes)
    admins: list[str | int] = field(default_factory=list)  # type: ignore[assignment]
    pairing: bool = True
    per_sender_in_rooms: bool = True  # guild channels: one session per sender
    message_content: bool = False  # the privileged intent: others' lines in a channel as untrusted context
    slash_commands: bool = True  # register the chat commands as application commands


@dataclass(frozen=True)
class Pending:
    """An acknowledged slash command whose answer edits the acknowledgement."""

    interaction: Any  # discord.Interaction
    since: float


class Malformed(ValueError):
    """A payload without what Discord documents it to have: skipped."""


def _snowflake(value: Any, what: str) -> str:
    if isinstance(value, str) and SNOWFLAKE.fullmatch(value):
        return value
    raise Malformed(f"{what} is not a snowflake")


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def command_specs() -> list[dict[str, Any]]:
    """The chat commands (commands.HELP, the gateway's own list) as Discord application commands:
    `/name [focus]` has an optional option `focus`, `/name BRANCH` a required option `branch`."""
    out = []
    for line in commands.HELP.splitlines()[1:]:
        m = re.match(r"^/(\w+)((?:\s+\[?[A-Za-z]+\]?)?)\s{2,}(.+)$", line.strip())
        if not m or m.group(1) not in commands.NAMES:
            continue
        name, arg, description = m.group(1), m.group(2).strip(), m.group(3).strip()
        spec: dict[str, Any] = {"name": name, "type": 1, "description": description[:100]}
        if arg:
            option = arg.strip("[]").lower()
            spec["options"] = [{"type": 3, "name": option, "description": option, "required": not arg.startswith("[")}]
        out.append(spec)
    return out


def split(text: str) -> list[str]:
    """A reply as Discord messages: at most MAX_PARTS of MAX_MESSAGE characters, cut on line ends
    where it can; what does not fit is cut with a note."""
    text = text or "(no answer)"
    parts: list[str] = []
    while text and len(parts) < MAX_PARTS:
        if len(text) <= MAX_MESSAGE:
            parts.append(text)
            text = ""
            break
        at = text.rfind("\n", 0, MAX_MESSAGE)
        at = at if at > MAX_MESSAGE // 2 else MAX_MESSAGE
        parts.append(text[:at])
        text = text[at:].lstrip("\n")
    if text:
        note = f"\n[... cut: {len(text)} more characters]"
        parts[-1] = parts[-1][: MAX_MESSAGE - len(note)] + note
    return parts


class DiscordChannel(AsyncChannel):
    name = PLATFORM
    Settings = DiscordSettings
    idempotent_send = False  # no idempotency key for a message: a send cut short is not repeated
    max_file_bytes = MAX_FILE_BYTES

    def __init__(self, vault: Vault, settings: DiscordSettings):
        super().__init__(vault, settings)
        self.settings: DiscordSettings = settings
        self.allow = _user_ids(settings.allow, "allow")
        self.admins = _user_ids(settings.admins, "admins")
        check_api_base(settings.api_base, "gateway.discord.api_base")
        self.client: Any = None
        self.me = ""  # the bot's user id
        self.app = ""  # the application id
        self.events: asyncio.Queue[tuple[str, Any]] | None = None
        self.pending: dict[str, Pending] = {}  # interaction id -> its acknowledgement, for the answer
        self.on_ready = asyncio.Event()
        self.catching_up: asyncio.Task | None = None

    # -- settings ---------------------------------------------------------------------------------
    def _token(self) -> str:
        token = self.secret(self.settings.token_env)
        if not token:
            raise HermesError(f"{self.settings.token_env} is not set in .hermes/secrets.env (the bot token, from the "
                              "Developer Portal: your application > Bot > Reset Token)")
        token = token.strip()
        if token.lower().startswith("bot "):
            token = token[4:].strip()
        if not re.fullmatch(r"[\w-]{20,}\.[\w-]{4,}\.[\w-]{20,}", token):
            raise HermesError(f"{self.settings.token_env} does not look like a bot token (three dot-separated parts)")
        return token

    @property
    def account(self) -> str:
        """The bot's id (the token's first part is the bot's id in base64): one machine at a time."""
        import base64

        try:
            head = self._token().split(".")[0]
            return base64.b64decode(head + "=" * (-len(head) % 4)).decode("ascii")
        except (HermesError, ValueError):
            return "default"

    def access(self) -> AccessRules:
        return AccessRules(self.allow, self.admins, self.settings.pairing, customers=self.settings.customers)

    def per_sender(self, origin: Origin) -> bool:
        return self.settings.per_sender_in_rooms

    def should_retry(self, exc: Exception) -> bool:
        """Discord's refusals (unknown channel, cannot message this user, missing access, a bad
        request) come again; rate limits (discord.py waits them out), server errors and the
        network are worth another try."""
        import discord

        if isinstance(exc, discord.HTTPException) and not isinstance(exc, discord.DiscordServerError):
            return exc.status not in FINAL_STATUS
        return True

    # -- AsyncChannel -----------------------------------------------------------------------------
    def prepare(self) -> None:
        self._token()

    @property
    def endpoint(self) -> str:
        return self.settings.api_base

    def connected(self) -> bool:
        return self.client is not None

    async def disconnect(self) -> None:
        if self.client is not None:
            await self.client.close()

    def send(self, reply: Outbound) -> str:
        return self.in_loop(self._send(reply))

    def send_file(self, reply: Outbound) -> str:
        return self.in_loop(self._send_file(reply), 300)

    def check(self) -> str:
        """`gateway test discord` / `doctor`: the token works (users/@me) and the Gateway is named
        (gateway/bot)."""
        self.prepare()
        return asyncio.run(self._check())

    # -- the client -------------------------------------------------------------------------------
    def _client(self) -> Any:
        import discord

        discord.http.Route.BASE = self.settings.api_base.rstrip("/")  # every REST call, interactions too
        intents = discord.Intents.none()
        intents.guilds = intents.guild_messages = intents.dm_messages = True
        intents.message_content = self.settings.message_content
        client = _client_class()(self, intents=intents, shard_count=None,
                                 allowed_mentions=discord.AllowedMentions.none(), chunk_guilds_at_startup=False,
                                 member_cache_flags=discord.MemberCacheFlags.none(), max_messages=None)
        parsers = client._connection.parsers  # the two events read raw here (see the module's docstring)
        parsers["MESSAGE_CREATE"] = partial(self._raw, "message")
        parsers["INTERACTION_CREATE"] = partial(self._raw, "interaction")
        return client

    async def _login(self, client: Any) -> None:
        import aiohttp
        import discord

        try:
            await client.login(self._token())
        except discord.LoginFailure:
            raise HermesError("the bot token was refused (401): check it in the Developer Portal") from None
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            raise HermesError(f"cannot reach {self.settings.api_base}: {exc}") from None
        self.me, self.app = str(client.user.id), str(client.application_id)

    async def _check(self) -> str:
        client = self._client()
        try:
            await self._login(client)
            shards, url, _ = await client.http.get_bot_gateway()
            return f"logged in to {self.settings.api_base} as {client.user} (bot id {self.me}); Gateway {url}"
        finally:
            await client.close()

    async def main(self) -> None:
        import discord

        client = self._client()
        try:
            await self._login(client)
        except HermesError as exc:
            self.failure = str(exc)
            await client.close()
            return
        self.client = client
        self.events = asyncio.Queue()
        consumer = asyncio.create_task(self._consume())
        running = asyncio.create_task(client.connect(reconnect=True))
        ready = asyncio.create_task(self.on_ready.wait())
        try:
            done, _ = await asyncio.wait({running, ready}, timeout=READY_WAIT_S, return_when=asyncio.FIRST_COMPLETED)
            if ready not in done:
                why = running.exception() if running in done else None
                if isinstance(why, discord.PrivilegedIntentsRequired):
                    self.failure = ("Discord refused the message content intent: switch it on in the Developer "
                                    "Portal (Bot > Privileged Gateway Intents) or set message_content: false")
                else:
                    self.failure = f"the Gateway did not become ready: {why or 'no READY within 60 s'}"
                return
            await self._register_commands()
            self.report("connected")
            self.ready.set()
            await running  # until the client is closed (stop) or fails for good
        finally:
            ready.cancel()
            consumer.cancel()
            if not running.done():
                running.cancel()
            await client.close()

    async def _register_commands(self) -> None:
        if not self.settings.slash_commands:
            return
        try:
            await self.client.http.bulk_upsert_global_commands(int(self.app), command_specs())
        except Exception as exc:  # the channel works without them
            log.warning("discord: slash commands not registered: %s", exc)

    def ready_now(self) -> None:
        """discord.py's on_ready (the client's cache is filled, a fresh session): the channel is up,
        and what was missed since the last session is read back."""
        self.on_ready.set()
        self.report("connected")
        if self.catching_up is None or self.catching_up.done():
            self.catching_up = asyncio.get_running_loop().create_task(self._catch_up())

    # -- what was missed while down -----------------------------------------------------------------
    @property
    def chats_key(self) -> str:
        return f"discord:{self.account}:chats"

    def _chats(self) -> dict[str, dict[str, Any]]:
        """chat id -> {"last": the last message id taken there, "guild": its guild or None}."""
        import json

        assert self.sink is not None
        try:
            data = json.loads(self.sink.cursor(self.chats_key) or "{}")
        except ValueError:
            return {}
        return {k: v for k, v in data.items() if isinstance(v, dict) and SNOWFLAKE.fullmatch(k)
                and isinstance(v.get("last"), str) and SNOWFLAKE.fullmatch(v["last"])} if isinstance(data, dict) else {}

    def _seen(self, d: dict[str, Any]) -> None:
        """Remember a chat's newest message taken (after the core has it)."""
        import json

        assert self.sink is not None
        chat, mid = _str(d.get("channel_id")), _str(d.get("id"))
        if not SNOWFLAKE.fullmatch(chat) or not SNOWFLAKE.fullmatch(mid):
            return
        chats = self._chats()
        old = chats.pop(chat, None)
        if old is not None and int(old["last"]) >= int(mid):
            chats[chat] = old
        else:
            guild = d.get("guild_id")
            chats[chat] = {"last": mid, "guild": guild if isinstance(guild, str) and SNOWFLAKE.fullmatch(guild) else None}
        self.sink.set_cursor(self.chats_key, json.dumps(dict(list(chats.items())[-CHATS_KEPT:])))

    async def _catch_up(self) -> None:
        """Each remembered chat's messages after the last one taken, oldest first, into the queue
        (Discord's history has no guild id: the remembered one is put back)."""
        assert self.events is not None
        for chat, seen in self._chats().items():
            try:
                got = await self.client.http.logs_from(int(chat), HISTORY_LIMIT, after=int(seen["last"]))
            except Exception as exc:  # a chat gone or out of reach: the others still
                log.info("discord: history of %s not read: %s", chat, exc)
                continue
            for d in sorted((m for m in got if isinstance(m, dict) and SNOWFLAKE.fullmatch(_str(m.get("id")))),
                            key=lambda m: int(m["id"])):
                if seen.get("guild") and "guild_id" not in d:
                    d["guild_id"] = seen["guild"]
                self.events.put_nowait(("message", d))

    # -- events -----------------------------------------------------------------------------------
    def _raw(self, kind: str, data: Any) -> None:
        """The client's parser for MESSAGE_CREATE / INTERACTION_CREATE: queued in arrival order."""
        if self.events is not None:
            self.events.put_nowait((kind, data))

    async def _consume(self) -> None:
        assert self.events is not None and self.sink is not None
        while True:
            kind, data = await self.events.get()
            try:
                if kind == "message":
                    message = self._message(data)
                    if message is not None:
                        await asyncio.to_thread(self.sink.submit, message)
                    self._seen(data)
                else:
                    await self._interaction(data)
            except Malformed as exc:
                log.warning("discord: skipped a malformed %s: %s", kind, exc)
            except Exception:  # one bad event is never the end of the channel
                log.exception("discord: skipped a %s", kind)

    def _message(self, d: Any) -> Inbound | None:
        if not isinstance(d, dict):
            raise Malformed("the event's data is not an object")
        author = d.get("author")
        if not isinstance(author, dict):
            raise Malformed("no author")
        if author.get("bot") is True or author.get("system") is True or d.get("webhook_id") is not None:
            return None
        mid, chat = _snowflake(d.get("id"), "id"), _snowflake(d.get("channel_id"), "channel_id")
        user = _snowflake(author.get("id"), "author.id")
        if user == self.me or d.get("type", 0) not in PERSON_TYPES:
            return None
        raw = _str(d.get("content"))
        audio = self._audio(d.get("attachments"))
        guild = d.get("guild_id")
        if guild is None:
            if not raw.strip() and audio is None:
                return None
            return Inbound(Origin(PLATFORM, chat, user, mid), raw, direct=True, audio=audio)
        _snowflake(guild, "guild_id")
        mentioned = self.me and (f"<@{self.me}>" in raw or f"<@!{self.me}>" in raw or any(
            isinstance(m, dict) and m.get("id") == self.me for m in (d.get("mentions") or [])
            if isinstance(d.get("mentions"), list)))
        ref = d.get("referenced_message")
        replied = isinstance(ref, dict) and isinstance(ref.get("author"), dict) and ref["author"].get("id") == self.me
        text = re.sub(rf"<@!?{self.me}>", "", raw).strip() if self.me else raw.strip()
        assert self.sink is not None
        context = None
        if text or audio:
            context = room_context(self.sink, f"discord:{chat}", f"discord:{chat}:{mid}", user,
                                   text or "(a voice message)", CONTEXT_LINES)
        if not (mentioned or replied) or (not text and audio is None):
            return None
        return Inbound(Origin(PLATFORM, chat, user, mid), text, direct=False, context=context, audio=audio)

    async def _interaction(self, d: Any) -> None:
        """A slash command: a durable request first, then acknowledged (deferred) so Discord shows
        "thinking…"; its answer edits that acknowledgement (`send`)."""
        import discord

        assert self.sink is not None
        if not isinstance(d, dict) or d.get("type") != 2:
            return  # pings, buttons, autocomplete: none offered
        iid, chat = _snowflake(d.get("id"), "id"), _snowflake(d.get("channel_id"), "channel_id")
        if _str(d.get("application_id")) != self.app or not _str(d.get("token")):
            raise Malformed("an interaction for another application, or without its token")
        who = d.get("member", {}).get("user") if isinstance(d.get("member"), dict) else d.get("user")
        if not isinstance(who, dict):
            raise Malformed("no user")
        user = _snowflake(who.get("id"), "user.id")
        data = d.get("data")
        if not isinstance(data, dict) or _str(data.get("name")) not in commands.NAMES:
            raise Malformed("not one of the chat commands")
        args = [str(o.get("value")) for o in data.get("options") or [] if isinstance(o, dict)
                and isinstance(o.get("value"), (str, int))] if isinstance(data.get("options"), list) else []
        text = f"/{data['name']} {' '.join(args)}".strip()
        origin = Origin(PLATFORM, chat, user, f"interaction:{iid}")
        message = Inbound(origin, text, direct=d.get("guild_id") is None)
        interaction = discord.Interaction(data=d, state=self.client._connection)  # type: ignore[arg-type]
        await asyncio.to_thread(self.sink.submit, message)
        row = self.sink.lookup(origin)
        if row is None or row.state == IGNORED:
            return  # a stranger: silence
        try:
            await interaction.response.defer(thinking=True)
        except discord.HTTPException as exc:  # too late (3 s) or already answered: the reply goes to the channel
            log.warning("discord: interaction %s not acknowledged: %s", iid, exc)
            return
        self.pending[iid] = Pending(interaction, time.monotonic())  # the answer (or a refusal's reply) edits it

    # -- voice messages in ------------------------------------------------------------------------
    def _audio(self, attachments: Any) -> Audio | None:
        if not isinstance(attachments, list):
            return None
        for a in attachments:
            if not isinstance(a, dict):
                continue
            mime, url = _str(a.get("content_type")), _str(a.get("url"))
            if not mime.startswith("audio/") or not url:
                continue
            size = a.get("size") if isinstance(a.get("size"), int) else None
            secs = a.get("duration_secs") if isinstance(a.get("duration_secs"), (int, float)) else None
            return Audio(partial(self._fetch, url), mime, _str(a.get("filename"))[:200], size,
                         float(secs) if secs is not None else None)
        return None

    def _fetch(self, url: str, limit: int) -> bytes:
        parts, api = urlsplit(url), urlsplit(self.settings.api_base)
        host = parts.hostname or ""
        if not (host in CDN_HOSTS and parts.scheme == "https") and not (host == api.hostname and parts.scheme == api.scheme):
            raise HermesError(f"an attachment URL outside Discord's CDN ({host}): not fetched")
        return self.in_loop(self._download(url, limit), FETCH_WAIT_S)

    async def _download(self, url: str, limit: int) -> bytes:
        import httpx

        async with httpx.AsyncClient(timeout=FETCH_WAIT_S, follow_redirects=False) as http, \
                http.stream("GET", url) as resp:
            if resp.status_code != 200:
                raise HermesError(f"Discord's CDN answered {resp.status_code} for the attachment")
            data = bytearray()
            async for chunk in resp.aiter_bytes(65536):
                data += chunk
                if len(data) > limit:
                    raise AudioTooLarge(f"more than {limit} bytes")
            return bytes(data)

    # -- sending ----------------------------------------------------------------------------------
    def _acknowledged(self, o: Origin) -> Any:
        """The slash command's acknowledgement this answer edits (None: post in the channel)."""
        if not o.message.startswith("interaction:"):
            return None
        p = self.pending.pop(o.message.split(":", 1)[1], None)
        for iid in [k for k, v in self.pending.items() if time.monotonic() - v.since > TOKEN_TTL_S]:
            del self.pending[iid]
        return p.interaction if p is not None and time.monotonic() - p.since < TOKEN_TTL_S else None

    async def _send(self, reply: Outbound) -> str:
        import discord

        o = reply.origin
        parts = split(reply.text)
        none = discord.AllowedMentions.none()
        interaction = self._acknowledged(o)
        channel = self.client.get_partial_messageable(int(o.chat))
        sent_id = ""
        for n, part in enumerate(parts):
            if n == 0 and interaction is not None:
                try:
                    msg = await interaction.edit_original_response(content=part, allowed_mentions=none)
                    sent_id = str(msg.id)
                    continue
                except discord.HTTPException as exc:  # the token expired: into the channel
                    log.info("discord: interaction answer went to the channel: %s", exc)
            ref = None
            if n == 0 and o.message.isdigit():
                ref = discord.MessageReference(message_id=int(o.message), channel_id=int(o.chat), fail_if_not_exists=False)
            msg = await channel.send(part, allowed_mentions=none, reference=ref)
            sent_id = str(msg.id)
        return sent_id

    async def _send_file(self, reply: Outbound) -> str:
        import discord

        f = reply.files[0]
        channel = self.client.get_partial_messageable(int(reply.origin.chat))
        msg = await channel.send(reply.text[:MAX_MESSAGE] or None, file=discord.File(str(f.path), filename=f.name),
                                 allowed_mentions=discord.AllowedMentions.none())
        return str(msg.id)


@cache
def _client_class():
    """discord.py's auto-sharded client (it asks GET /gateway/bot for the Gateway's URL), telling
    the channel when it is ready."""
    import discord

    class HermesClient(discord.AutoShardedClient):
        def __init__(self, channel: DiscordChannel, **kwargs: Any):
            super().__init__(**kwargs)
            self.hermes = channel

        async def on_ready(self) -> None:
            self.hermes.ready_now()

        async def on_shard_resumed(self, shard_id: int) -> None:
            self.hermes.report("connected")

        async def on_error(self, event: str, *args: Any, **kwargs: Any) -> None:
            log.exception("discord: error in %s", event)

    return HermesClient


def _user_ids(values: list[str | int], key: str) -> list[str]:
    out = []
    for v in values:
        text = str(v).strip()
        if not SNOWFLAKE.fullmatch(text):
            raise ConfigError(f"'gateway.discord.{key}' must hold Discord user ids (snowflakes, 17-20 digits), got "
                              f"{text!r} (usernames change; Developer Mode > right-click a person > Copy User ID)")
        out.append(text)
    return out


__all__ = ["DiscordChannel", "DiscordSettings", "command_specs", "split"]
