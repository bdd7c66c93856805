"""The one interface every gateway channel implements, and the one the core offers it back.

A channel turns what its platform delivers into `Inbound` messages and hands each to the core's
`Sink`; `Sink.submit` returns only once the message is durably a request (committed or claimed in
the vault), so a channel saves its own cursor (a sync token, a mailbox UID, an update id) *after*
that call: nothing is lost across a crash, and the message id makes a second submit a no-op.
Replies come back through `ChannelBase.send`, addressed by the same `Origin`.

Every behaviour the core may ask of a channel is declared on `ChannelBase` with its default, so a
channel overrides by name (a typo is a new attribute mypy and the base's tests see, never a silent
default), and everything a channel may ask of the core is on `Sink` (a channel never touches the
core's ledger). The contract in prose: README.md next to this file.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import logging
import os
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol
from urllib.parse import urlsplit

from ...errors import ConfigError, HermesError, InputError
from .access import AccessRules, Verdict
from .message import Inbound, Origin, Outbound  # part of this interface: channels import them from here

if TYPE_CHECKING:
    from ...store.vault import Vault
    from .ledger import Message

log = logging.getLogger(__name__)
START_WAIT_S = 60.0  # how long `start` waits for an asyncio channel's first answer from its platform
SEND_WAIT_S = 60.0
# control characters a person's message may carry (all but tab and newline): a NUL makes a request
# file binary, and escapes or C1 codes reach terminals and logs; they are dropped before anything
# reads the message
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def attachments_dir(state_dir: Path, origin: Origin) -> Path:
    """Where a channel saves a message's files (under the workspace, one folder per message, so a
    resubmission rewrites the same files and a command such as /learn finds them by the origin)."""
    key = hashlib.sha256(f"{origin.platform}|{origin.chat}|{origin.message}".encode()).hexdigest()[:16]
    return state_dir / "workspace" / origin.platform / key


@dataclass
class ChatSettings:
    """The access part of a chat channel's settings (its adapter's `Settings` extends it): who may
    talk to the agent and who may decide on learned changes, by the platform's own stable,
    server-authenticated id. An empty allow list is nobody (plus approved pairings)."""

    allow: list[str] = field(default_factory=list)  # who may talk to the agent; empty = nobody (plus approved pairings)
    admins: list[str] = field(default_factory=list)  # who may also /merge and /reject
    pairing: bool = False  # with no allow list, a stranger in a direct chat gets a pairing code to approve
    # anyone not allowed is a customer: answered, with support.tools only (read skills and memory,
    # hand the chat to a person); never a write, a shell, a file or another chat
    customers: bool = False


def printable(text: str) -> str:
    """A message's text without control characters (line ends made `\\n`, tabs kept). The core
    applies it to every channel's messages, so no adapter needs to."""
    return _CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def check_api_base(url: str, key: str) -> None:
    """A platform's API base (`key` names the setting): http(s), and https unless the server is this
    machine, since every call carries the bot's token."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not host:
        raise ConfigError(f"'{key}' must be an http(s) URL, got {url!r}")
    if parts.scheme == "http" and host not in ("localhost", "::1") and not host.startswith("127."):
        raise ConfigError(f"'{key}' sends the bot token with every call: use https (http only to this machine), "
                          f"got {url!r}")


def secret_value(vault: Vault, name: str | None) -> str | None:
    """A channel's secret (a token, a password): from .hermes/secrets.env (never hermes.yaml),
    else the environment; None when not set."""
    if not name:
        return None
    return vault.secrets().get(name) or os.environ.get(name) or None


def others_since(lines: list[tuple[str, str, str]], sender: str, message: str) -> str | None:
    """What others said in a shared room since `sender` last spoke (before `message`: a message
    re-read after a crash sees what it saw the first time, not the lines after it)."""
    ids = [m for m, _, _ in lines]
    if message in ids:
        lines = lines[: ids.index(message)]
    mine = [i for i, (_, who, _) in enumerate(lines) if who == sender]
    since = lines[mine[-1] + 1 :] if mine else lines
    return "\n".join(f"{who}: {continued(text)}" for _, who, text in since) or None


def continued(text: str) -> str:
    """A message's later lines indented: a line break in someone's text never starts a line that
    reads as another person speaking."""
    return "\n    ".join(text.splitlines()) if text else text


def room_context(sink: Sink, room: str, message: str, sender: str, text: str, keep: int) -> str | None:
    """A shared room's line: remembered (its last `keep` lines are kept), and the others' lines
    since the sender last spoke returned, as untrusted context for the sender's request."""
    context = others_since(sink.room_lines(room), sender, message)
    sink.add_room_line(room, message, sender, text[:500], keep)
    return context


class Sink(Protocol):
    """What the core offers a channel (the core's `Gateway` implements it). A channel uses these
    and nothing else of the core."""

    def submit(self, message: Inbound) -> str:
        """Make the message a durable request; its request id (the same id for a duplicate).
        Save the channel's cursor only after this returns."""
        ...

    def lookup(self, origin: Origin) -> Message | None:
        """The record of a message already submitted (None: never seen), to answer "duplicate"."""
        ...

    def verdict(self, message: Inbound) -> Verdict:
        """What the access rules say of this sender now (e.g. whether to accept a room invite)."""
        ...

    def channel_state(self, name: str, state: str, detail: str = "") -> None:
        """Report "connected" or "error" (with the reason), shown by `gateway status`; replies
        waiting for the channel go once it says connected."""
        ...

    def cursor(self, key: str) -> str | None:
        """A durable position of the channel (in the gateway's ledger), None before the first."""
        ...

    def set_cursor(self, key: str, value: str) -> None: ...

    def room_lines(self, room: str) -> list[tuple[str, str, str]]:
        """(message, sender, text) of a shared room's remembered lines, oldest first."""
        ...

    def add_room_line(self, room: str, message: str, sender: str, text: str, keep: int) -> None:
        """Remember a shared room's line (once per message id; the room keeps its last `keep`)."""
        ...

    def earlier_message(self, origin: Origin, digest: str, window_s: float) -> str | None:
        """Remember that this message carried the body `digest`; the id of an earlier, other
        message of the same chat with the same body within `window_s` (a replay under a new id, on
        a platform that signs the body but not the id), else None."""
        ...

    def session(self, session_key: str) -> str | None:
        """The session a chat (its session key) continues, None before its first answer."""
        ...

    def request_status(self, rid: str, platform: str | None = None, chat: str | None = None) -> tuple[str, str] | None:
        """("pending" | "ok" | "error", answer) of a request (made from `platform`/`chat` when they
        are given: also one answered on another machine, once its result is synced here); None: no
        such request (there)."""
        ...


class SendCut(HermesError):
    """A send the channel's stop cut short: it may or may not have reached the platform, so it is
    left to the next start's recovery (sent again only where sends are idempotent)."""


class ChannelBase(ABC):
    """A gateway channel: one file under service/gateway/ with one subclass, named in registry.py.

    Built as `Class(vault, settings)`, `settings` being its `Settings` dataclass read from
    `gateway.<name>` in hermes.yaml (strictly: an unknown key is an error naming the key and line).
    The class attributes and methods below are everything the core asks of a channel; the
    defaults are what a channel gets by not saying."""

    name: ClassVar[str]  # the platform: Origin.platform, the `gateway.<name>` section, the ledger's key
    Settings: ClassVar[type]  # the dataclass of its `gateway.<name>` section
    # True when sending the same `Outbound.reply_id` twice yields one message (a transaction id):
    # a send cut short by a crash is then sent again; otherwise it is marked failed, never doubled
    idempotent_send: ClassVar[bool] = False
    # False for channels whose messages are pushed to whichever machine the sender reached (a
    # webhook): nothing to consume once, so no lease across machines (holder.py)
    leased: ClassVar[bool] = True
    # the largest file the platform takes from this bot/account, in bytes; None: the channel sends
    # no files (the reply then says which files were not sent, and why)
    max_file_bytes: ClassVar[int | None] = None
    # True: files travel in the reply itself (`send` gets `Outbound.files`, one e-mail with its
    # attachments; `max_file_bytes` is then their total); False: each file is its own delivery
    # through `send_file`, after the text
    files_in_reply: ClassVar[bool] = False

    def __init__(self, vault: Vault, settings: Any):
        self.vault = vault
        self.settings = settings

    # -- what every channel implements ------------------------------------------------------------
    @abstractmethod
    def start(self, sink: Sink) -> None:
        """Connect and begin delivering messages to `sink` (from the channel's own threads).
        Raising marks the channel `error`; the other channels run."""

    @abstractmethod
    def stop(self) -> None:
        """Disconnect; called before the core stops its workers (also on a settings reload)."""

    @abstractmethod
    def send(self, reply: Outbound) -> str:
        """Deliver a reply in the same chat and thread; the platform's message id. Raises on
        failure: the core records the reason and retries with backoff (see `should_retry`)."""

    def send_file(self, reply: Outbound) -> str:
        """Deliver `reply.files[0]` (with `reply.text` as its caption) in the same chat and thread;
        the platform's message id. Only called when `max_file_bytes` is set and `files_in_reply`
        is False; raises like `send` (the core retries, records, and never sends it twice unless
        `idempotent_send`)."""
        raise InputError(f"the {self.name} channel does not send files")

    # -- what a channel may change -----------------------------------------------------------------
    @property
    def account(self) -> str:
        """What one machine at a time consumes when several share the vault (the lease's name,
        with the channel's): a bot, a user, a mailbox."""
        return "default"

    def access(self) -> AccessRules:
        """Who may talk to the agent through this channel: the `allow` / `admins` / `pairing` of
        its settings (ChatSettings); a channel without them admits nobody unless it says otherwise
        (a signed webhook: whoever holds the route's secret)."""
        if isinstance(self.settings, ChatSettings):
            return AccessRules(list(self.settings.allow), list(self.settings.admins), self.settings.pairing,
                               customers=self.settings.customers)
        return AccessRules()

    def per_sender(self, origin: Origin) -> bool:
        """One session per sender in this shared chat, rather than one for the chat (asked only
        of messages that are not direct)."""
        return False

    def replies_to(self, origin: Origin) -> bool:
        """False: no reply is queued for this message (a webhook route without `reply_to`)."""
        return True

    def progress(self, sink: Sink) -> str | None:
        """The channel's cursor now, published for the next machine to hold it (holder.py)."""
        return None

    def resume(self, sink: Sink, cursor: str) -> None:
        """Go on from the cursor the channel's last holder published (before `start`); a channel
        without a cursor has nothing to do."""
        return None

    def check(self) -> str:
        """`hermes-fs gateway test NAME` and `doctor`: a one-line "ok" or raise HermesError."""
        raise InputError(f"the {self.name} channel has no test")

    def should_retry(self, exc: Exception) -> bool:
        """Whether a failed send is worth another try (False: marked failed at once, e.g. the
        platform said the chat is gone or the bot was blocked)."""
        return True

    def secret(self, name: str | None) -> str | None:
        return secret_value(self.vault, name)


class AsyncChannel(ChannelBase):
    """A channel whose platform library is asyncio: one event loop on a thread of its own runs
    `main()` (connect, then read the platform until `stopping`), and `send` hands coroutines to it.

    `start` returns once the loop says `ready` (its first answer from the platform, good or bad)
    and raises when `failure` was set by then (bad credentials, a platform out of reach); a failure
    of `main()` later is reported as the channel's `error` state, never a silent dead thread."""

    def __init__(self, vault: Vault, settings: Any):
        super().__init__(vault, settings)
        self.sink: Sink | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task | None = None
        self.thread: threading.Thread | None = None
        self.ready = threading.Event()  # set by main() on its first answer, or when the loop ends
        self.failure: str | None = None  # why the channel could not start (set before `ready`)
        self.stopping = threading.Event()
        self._handed: set[concurrent.futures.Future] = set()  # sends handed to the loop, not yet answered
        self._handed_lock = threading.Lock()

    # -- what an asyncio channel implements -------------------------------------------------------
    @abstractmethod
    def prepare(self) -> None:
        """Check the settings and secrets before the loop starts (raise HermesError)."""

    @abstractmethod
    async def main(self) -> None:
        """Connect, set `ready`, and read the platform until `stopping` (or set `failure` and return)."""

    @property
    def endpoint(self) -> str:
        """The server the channel talks to, as named in its errors."""
        return f"the {self.name} server"

    def connected(self) -> bool:
        """Whether a send can be handed to the loop now (the client exists)."""
        return True

    async def disconnect(self) -> None:
        """Close the platform's client from inside the loop before `main()` is cancelled."""
        return None

    # -- ChannelBase ------------------------------------------------------------------------------
    def start(self, sink: Sink) -> None:
        self.prepare()
        self.sink = sink
        self.thread = threading.Thread(target=self._run, name=f"gateway-{self.name}", daemon=True)
        self.thread.start()
        if not self.ready.wait(START_WAIT_S) or self.failure:
            self.stopping.set()
            raise HermesError(self.failure or f"no answer from {self.endpoint} within {START_WAIT_S:.0f} s")

    def stop(self) -> None:
        self.stopping.set()
        loop, task = self.loop, self.task
        if loop is not None and task is not None and not task.done() and not loop.is_closed():
            self._disconnect_in(loop)
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # the loop is already closed
                pass
        if self.thread:
            self.thread.join(15)

    def _disconnect_in(self, loop: asyncio.AbstractEventLoop) -> None:
        """`disconnect()` on the loop, waited for while the loop runs (at most 10 s)."""
        coro = self.disconnect()
        try:
            fut = asyncio.run_coroutine_threadsafe(coro, loop)
        except RuntimeError:  # closed meanwhile
            coro.close()
            return
        for _ in range(100):
            try:
                fut.result(0.1)
                return
            except TimeoutError:
                if self.thread is None or not self.thread.is_alive():
                    break
            except Exception:  # the client would not close: the task is cancelled next
                return
        fut.cancel()
        coro.close()  # never started: the loop ended first

    def in_loop(self, coro: Coroutine[Any, Any, Any], timeout: float = SEND_WAIT_S) -> Any:
        """Run `coro` on the channel's loop from another thread (a sender) and wait for its result."""
        loop = self.loop
        if loop is None or loop.is_closed() or self.stopping.is_set() or not self.connected():
            coro.close()
            raise HermesError(f"not connected to {self.endpoint}")
        try:
            fut = asyncio.run_coroutine_threadsafe(coro, loop)
        except RuntimeError:  # the loop closed since the check above
            coro.close()
            raise HermesError(f"not connected to {self.endpoint}") from None
        with self._handed_lock:
            self._handed.add(fut)
        if loop.is_closed():  # closed meanwhile, maybe before the coroutine became a task
            fut.cancel()
        try:
            return fut.result(timeout)
        except concurrent.futures.CancelledError:
            raise SendCut(f"the {self.name} channel stopped during the send") from None
        finally:
            with self._handed_lock:
                self._handed.discard(fut)

    def report(self, state: str, detail: str = "") -> None:
        """The channel's state for `gateway status` ("connected" or "error" with the reason)."""
        if self.sink is not None:
            self.sink.channel_state(self.name, state, detail)

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()
        try:
            self.task = self.loop.create_task(self.main())
            self.loop.run_until_complete(self.task)
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # a bug or a library failure: reported, never a silent dead thread
            log.exception("%s channel stopped", self.name)
            self.failure = self.failure or f"{type(exc).__name__}: {exc}"
            self.report("error", self.failure)
        finally:
            self.ready.set()
            self._cancel_handed()
            self.loop.close()

    def _cancel_handed(self) -> None:
        """Cancel the sends `in_loop` handed to the loop that ended without them, so the threads
        waiting for them hear at once (`SendCut`) instead of after SEND_WAIT_S."""
        assert self.loop is not None
        rest = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
        for t in rest:
            t.cancel()
        if rest:
            self.loop.run_until_complete(asyncio.gather(*rest, return_exceptions=True))
        with self._handed_lock:  # and those not yet a task when the loop stopped
            for fut in self._handed:
                fut.cancel()
