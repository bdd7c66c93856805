"""The gateway core: the daemon part that turns channel messages into requests and replies.

`Gateway` is a DaemonService (started by the daemon when `gateway:` names a channel) and the
`Sink` every channel submits to. For each `Inbound` message, in this order:
1. the message key (platform|chat|message id) is looked up in the ledger: a duplicate returns the
   first request's id and does nothing else;
2. access is decided once, here, for every channel (access.py): silence, a pairing code, or go;
   a message over MAX_TEXT characters or over the sender's rate gets a reply saying so;
3. the request file (DESIGN §15: `type: run` or `command`, `origin:` frontmatter) is written to
   .hermes/gateway/requests/<stamp>--<id>.md and fsynced, and the ledger row is written: only then
   does `submit` return, and the channel may save its cursor;
4. the request is queued on its session's serial queue (one at a time per chat, chats in
   parallel); it runs through inbox.process with the gateway's handler table (a chat message
   continues its chat's session; a command runs commands.py), and its result is written;
5. `on_done`: the chat's session is recorded, the reply is queued in the delivery ledger
   (pending), the result and transcript join the commit cadence;
6. the delivery thread sends pending replies through their channel: delivered (with the
   platform's id) or, after retries, failed with the reason. A send cut short by a crash is sent
   again only on channels whose sends are idempotent (`idempotent_send = True`: Matrix uses the
   request id as its transaction id); elsewhere it is marked failed, never sent twice.

The parts with state of their own: delivery.py (the delivery thread, retries, the commit
cadence), leased.py (several machines: each channel account consumed by one machine at a time,
the holder of its lease; a machine taking over neither skips nor repeats a message), registry.py
(which channels exist and are configured). Exactly-once does not wait for the commit: a written
(fsynced) result already means "answered" (inbox.process), and a crash leaves the files to be
committed at the next start.

Settings: a channel added to hermes.yaml while the daemon runs is started on the reload, one
removed is stopped, one whose section changed is restarted with the new settings
(`settings_changed`); the gateway's own settings (workers, rates, commit cadence) apply from the
next start.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from ...agent.boundary import Source
from ...agent.outgoing import OutgoingFile, copy_of, discard, human_size
from ...errors import HermesError, InputError, SessionGone
from ...store.docs import dump_doc
from ...store.files import atomic_write
from ...store.provenance import Act
from ...store.vault import Vault
from .. import inbox
from ..requests import ExecOptions, Handler, Request, Result, SerialExecutor, run_request
from . import commands, handoff, registry, voice
from .access import AccessRules, Verdict, decide, new_code, pairing_text
from .channel import ChannelBase, Inbound, Origin, attachments_dir, printable
from .delivery import STOP_WAIT_S, CommitCadence, Deliverer, set_reply_state
from .leased import LeasedChannels, Parked
from .ledger import (
    ANSWERED_ELSEWHERE,
    CLAIMED,
    DELIVERED,
    EMPTY,
    FAILED,
    IGNORED,
    PENDING,
    REFUSED,
    TOO_LONG,
    TOO_MANY,
    UNHEARD,
    WITH_A_PERSON,
    GatewayLedger,
    Message,
    file_delivery_id,
    ledger_path,
    message_key,
    request_id,
)

if TYPE_CHECKING:
    from ...store.claims import RefClaims
    from .holder import LeaseJournal

log = logging.getLogger(__name__)

MAX_TEXT = 16_000  # characters of one message; longer ones are answered, not run
MAX_REPLY = 30_000  # characters of one reply; a channel may split or cut further
RATE_WINDOW_S = 60.0
GATEWAY_DIR = "gateway"


@dataclass(frozen=True)
class Refusal:
    """A message the core will not run: why (kept with the message: a channel that answers at once,
    such as a webhook, says it instead of accepting) and the reply to the chat ("" = none)."""

    kind: str  # EMPTY, TOO_LONG, TOO_MANY, UNHEARD
    reason: str
    reply: str


@dataclass(frozen=True)
class Heard:
    """A voice message after transcription: the message to take (its text the transcript), or
    why not."""

    message: Inbound
    voice: bool  # the text is a transcript
    refusal: Refusal | None = None


def requests_dir(vault: Vault) -> Path:
    d = vault.state_dir / GATEWAY_DIR / "requests"
    d.mkdir(parents=True, exist_ok=True)
    return d


def state_path(vault: Vault) -> Path:
    return vault.state_dir / GATEWAY_DIR / "state.json"


@dataclass
class ChannelState:
    state: str  # starting | standby | connected | error | stopped
    detail: str = ""
    since: float = 0.0


class RateLimit:
    """At most `per_min` messages per sender in a sliding minute."""

    def __init__(self, per_min: int):
        self.per_min = per_min
        self.seen: dict[str, deque[float]] = {}

    def allow(self, who: str, now: float | None = None) -> tuple[bool, bool]:
        """(allowed, first refusal of this window: say so once, then stay quiet)."""
        now = now or time.time()
        times = self.seen.setdefault(who, deque())
        while times and now - times[0] > RATE_WINDOW_S:
            times.popleft()
        if len(times) >= self.per_min:
            times.append(now)
            return False, len(times) == self.per_min + 1
        times.append(now)
        return True, False


class Gateway:
    """The gateway service; also the Sink of its channels. `channels` given: those and no others
    (tests); otherwise the ones hermes.yaml names, followed across reloads."""

    name = "gateway"

    def __init__(self, vault: Vault, channels: list[ChannelBase] | None = None,
                 note: Callable[[str], None] | None = None, error: Callable[[str], None] | None = None,
                 claims: RefClaims | None = None):
        from ..auto_review import AutoReview

        self.vault = vault
        self.claims = claims  # the daemon's claims on the remote (decisions from chat are claimed there)
        self.config = vault.config.gateway
        self._given = channels
        self.channels: dict[str, ChannelBase] = {}
        self.states: dict[str, ChannelState] = {}
        self.started: set[str] = set()  # channels whose inbound side was started
        self.note = note or log.info
        self.error = error or log.error
        self.ledger = GatewayLedger(ledger_path(vault.state_dir))
        self.executor = SerialExecutor(self.config.workers, "gateway")
        self.submit_lock = threading.Lock()
        self.state_lock = threading.Lock()
        self.reload_lock = threading.Lock()
        self.rates = RateLimit(self.config.sender_rate_per_min)
        self.stopped = threading.Event()
        self.cadence = CommitCadence(vault, self.ledger, self.config.commit_idle_s)
        self.reviews = AutoReview(vault, self._review_done)
        self.session_origins: dict[str, Origin] = {}
        self.handoffs = handoff.HandoffBook(vault.state_dir)
        self.leased = LeasedChannels(vault, self.ledger, self, self.channels.__getitem__, self._start_leased,
                                     self._stop_leased, self._process_parked, self.note)
        self.deliverer = Deliverer(self.ledger, self.channels, self._connected, self.leased.may_send,
                                   self.leased.settle, self.config.retry_base_s, self.error)

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        channels = self._given if self._given is not None else self._load_channels(registry.configured(self.vault))
        for ch in channels:
            self._add(ch)
        self._recover()
        self.deliverer.start()
        for ch in channels:
            self._begin(ch)
        self._write_state()

    def _add(self, ch: ChannelBase) -> None:
        self.channels[ch.name] = ch
        self.states[ch.name] = ChannelState("starting", since=time.time())
        self.leased.add(ch)

    def _begin(self, ch: ChannelBase) -> None:
        if ch.name in self.leased:  # several machines: started once this one holds its lease
            self.channel_state(ch.name, "standby", "waiting for this channel's lease")
            self.leased.start(ch.name)
        else:
            self._start_channel(ch)

    def _start_channel(self, ch: ChannelBase) -> bool:
        try:
            self.started.add(ch.name)
            ch.start(self)
            if self.states[ch.name].state in ("starting", "standby"):
                self.channel_state(ch.name, "connected")
            return True
        except Exception as exc:  # one channel down never stops the others
            log.exception("gateway channel %s did not start", ch.name)
            self.channel_state(ch.name, "error", f"{type(exc).__name__}: {exc}")
            return False

    def _load_channels(self, names: list[str]) -> list[ChannelBase]:
        out = []
        for name in names:
            try:
                out.append(registry.load_channel(self.vault, name))
            except Exception as exc:  # e.g. bad settings, a library missing: that channel is down, the rest run
                log.warning("gateway channel %s could not be built: %s", name, exc)
                self.states[name] = ChannelState("error", f"{type(exc).__name__}: {exc}"[:300], time.time())
                self.error(f"gateway {name}: {exc}")
        return out

    def _start_leased(self, name: str, journal: LeaseJournal) -> None:
        """This machine holds `name` now: start it where its last holder stopped."""
        ch = self.channels[name]
        if name in self.started and self._given is None:  # a stopped channel is not restarted: a new one
            ch = self.channels[name] = registry.load_channel(self.vault, name)
        if journal.cursor is not None:
            ch.resume(self, journal.cursor)
        if not self._start_channel(ch):
            raise HermesError(f"gateway {name} did not start here")

    def _stop_leased(self, name: str, why: str) -> None:
        ch = self.channels.get(name)
        if ch is not None:
            self._stop_one(ch)
        self.error(f"gateway {name}: stopped consuming here: {why}")
        self.channel_state(name, "standby", f"another machine may hold this channel ({why})")

    def _stop_one(self, ch: ChannelBase) -> None:
        try:
            ch.stop()
        except Exception:
            log.exception("gateway channel %s: error while stopping", ch.name)

    def stop(self, send_wait_s: float = STOP_WAIT_S) -> None:
        """Stop in order: channels, the turns, the delivery thread (waiting `send_wait_s` for the send
        under way), the final commit, and the ledger last."""
        self.stopped.set()
        self.leased.stop()
        for ch in list(self.channels.values()):
            if ch.name in self.started:
                self._stop_one(ch)
            self.states[ch.name] = ChannelState("stopped", since=time.time())
        self.executor.shutdown(wait=True)  # the running turn finishes; queued ones stay claimed on disk
        if not self.deliverer.stop(send_wait_s):
            log.warning("gateway: a reply was still being sent at stop; the next start recovers it")
        self.cadence.flush(final=True)
        self.reviews.join(60)
        self.leased.hand_over()
        self._write_state(running=False)
        self.ledger.close()

    # -- settings changed while running --------------------------------------------------------------
    def settings_changed(self) -> None:
        """hermes.yaml was reloaded (the daemon calls this): start the channels it names now, stop
        the ones it no longer names, restart a channel whose section changed. A section that does
        not validate leaves its running channel as it was, and says why."""
        if self._given is not None or self.stopped.is_set():
            return
        with self.reload_lock:
            names = registry.configured(self.vault)
            for name in [n for n in self.channels if n not in names]:
                self._remove(name, "no longer in hermes.yaml")
            for name in [n for n in self.states if n not in names and n not in self.channels]:
                del self.states[name]  # a channel that never built, now gone from the settings
            for name in names:
                self._follow(name)
            self._write_state()

    def _follow(self, name: str) -> None:
        try:
            settings = registry.settings(self.vault, name)
        except HermesError as exc:
            self.error(f"gateway {name}: settings not applied: {exc}")
            if name not in self.channels:
                self.channel_state(name, "error", str(exc))
            return
        running = self.channels.get(name)
        if running is not None and running.settings == settings:
            return
        if running is not None:
            self._remove(name, "its settings changed")
        try:
            ch = registry.channel_class(name)(self.vault, settings)
        except Exception as exc:
            self.channel_state(name, "error", f"{type(exc).__name__}: {exc}")
            return
        self._add(ch)
        self.deliverer.recover([name])
        self._begin(ch)
        self.note(f"gateway {name}: started after hermes.yaml changed")

    def _remove(self, name: str, why: str) -> None:
        ch = self.channels.pop(name)
        self.leased.remove(name)
        if name in self.started:
            self._stop_one(ch)
            self.started.discard(name)
        self.states.pop(name, None)
        self.note(f"gateway {name}: stopped ({why})")

    def _recover(self) -> None:
        """After a crash or stop: commit results left uncommitted, settle interrupted sends, and
        queue the claimed requests again (before any channel starts, so a message delivered again
        finds its first request)."""
        left = [p for p in self.vault.git.changed_under(inbox.RESULTS_DIR) if p.endswith(".md")]
        if left:
            for rel in left:
                rid = inbox.request_of_result(rel)
                set_reply_state(self.vault, rel, self.ledger.delivery(rid), self.ledger.file_deliveries(rid))
            self.vault.git.commit_paths(left + self.vault.git.changed_under("sessions"),
                                        f"gateway: {len(left)} request(s) (after an interruption)",
                                        Act.gateway())
        self.deliverer.recover(list(self.channels))
        for c in inbox.pending_taken(self.vault, requests_dir(self.vault), GATEWAY_DIR):
            try:
                origin = self._claim_origin(c)
            except (InputError, OSError) as exc:
                self.error(f"gateway request {c.name} unreadable ({exc}); answered as an error")
                self.executor.submit(c.name, partial(self._process, c, c.name, None))
                continue
            row = self.ledger.message(message_key(origin))
            if row is None:  # the claim was written, the crash came before its row
                self.ledger.add_message(origin, origin.session_key(), CLAIMED, c.path.name)
                row = self.ledger.message(message_key(origin))
            assert row is not None
            if origin.platform in self.leased:  # runs only if this machine gets the lease and the
                self.leased.park(Parked(c, row.session_key, origin))  # journal still says nobody answered it
                continue
            self.note(f"gateway: resuming request {c.name}")
            self.executor.submit(row.session_key, partial(self._process, c, row.session_key, origin))

    # -- channel state ----------------------------------------------------------------------------
    def channel_state(self, name: str, state: str, detail: str = "") -> None:
        """Channels report connected / error here (shown by `gateway status`)."""
        old = self.states.get(name)
        if old and old.state == state and old.detail == detail:
            return
        self.states[name] = ChannelState(state, detail[:300], time.time())
        if state == "error":
            self.error(f"gateway {name}: {detail}")
        elif state == "connected":
            self.note(f"gateway {name}: connected")
        self._write_state()
        if state == "connected":
            self.deliverer.wake.set()  # replies waiting for this channel can go now

    def _write_state(self, running: bool = True) -> None:
        with self.state_lock:
            data = {"running": running, "pid": os.getpid(), "updated": time.time(),
                    "channels": {n: {"state": s.state, "detail": s.detail, "since": s.since}
                                 for n, s in list(self.states.items())}}
            atomic_write(state_path(self.vault), json.dumps(data, indent=2))

    def _connected(self) -> list[str]:
        return [n for n, s in list(self.states.items()) if s.state == "connected"]

    # -- the Sink ---------------------------------------------------------------------------------
    def rules(self, platform: str) -> AccessRules:
        """The access rules of a channel now (a channel that is gone admits nobody)."""
        ch = self.channels.get(platform)
        return ch.access() if ch is not None else AccessRules()

    def verdict(self, message: Inbound) -> Verdict:
        return decide(self.rules(message.origin.platform), self.ledger, message)

    def lookup(self, origin: Origin) -> Message | None:
        """The ledger's row for a message (None: never seen): channels use it to tell a duplicate."""
        return self.ledger.message(message_key(origin))

    def cursor(self, key: str) -> str | None:
        return self.ledger.cursor(key)

    def set_cursor(self, key: str, value: str) -> None:
        self.ledger.set_cursor(key, value)

    def room_lines(self, room: str) -> list[tuple[str, str, str]]:
        return self.ledger.room_lines(room)

    def add_room_line(self, room: str, message: str, sender: str, text: str, keep: int) -> None:
        self.ledger.add_room_line(room, message, sender, printable(text), keep)

    def submit(self, message: Inbound) -> str:
        """Make the message a durable request (or a recorded refusal); its request id. A second
        submit of the same message returns the same id and does nothing. Control characters are
        dropped here, for every channel (a voice message's transcript too), before anything reads it."""
        heard = self._hear(message) if message.audio is not None else Heard(message, False)
        message = replace(heard.message, text=printable(heard.message.text),
                          context=printable(heard.message.context) if heard.message.context else None)
        origin = message.origin
        rid = request_id(origin)
        ch = self.channels.get(origin.platform)
        skey = origin.session_key(per_sender=not message.direct and ch is not None and ch.per_sender(origin))
        with self.submit_lock:
            if self.ledger.message(message_key(origin)) is not None:
                return rid
            entry = self.leased.answered_by_last_holder(origin.platform, rid)
            if entry is not None:
                self.ledger.add_message(origin, skey, ANSWERED_ELSEWHERE)
                log.info("gateway %s: %s was answered on %s", origin.platform, rid, entry.host)
                return rid
            verdict = self.verdict(message)
            if verdict is Verdict.SILENCE:
                self.ledger.add_message(origin, skey, IGNORED)
                log.info("gateway %s: ignored a message from a sender who is not allowed", origin.platform)
                return rid
            self.leased.take(origin.platform, rid)
            held = self._with_a_person(origin, verdict)
            if held is not None:
                self.ledger.add_message(origin, skey, REFUSED)
                self.ledger.refuse_message(rid, WITH_A_PERSON, f"this chat is with a person ({held.key})")
                self.leased.settle(origin.platform, rid)
            elif verdict is Verdict.PAIR:
                self.ledger.add_message(origin, skey, REFUSED)
                code = new_code(self.ledger, origin.platform, origin.sender)
                if code:  # never logged; the ledger drops the text once it is sent
                    self._reply(rid, origin, pairing_text(code), keep_text=False)
                    self.note(f"gateway {origin.platform}: pairing code sent to a new sender")
                else:
                    self.leased.settle(origin.platform, rid)
                return rid
            else:
                text = message.text.strip()
                refusal = heard.refusal or self._refusal(origin, text, message)
                if refusal is not None:
                    self.ledger.add_message(origin, skey, REFUSED)
                    self.ledger.refuse_message(rid, refusal.kind, refusal.reason)  # the sender can ask why
                    if refusal.reply:
                        self._reply(rid, origin, refusal.reply)
                    else:
                        self.leased.settle(origin.platform, rid)
                    return rid
                claim = self._write_claim(rid, message, text, heard.voice)
                self.ledger.add_message(origin, skey, CLAIMED, claim.path.name)
        if held is not None:  # outside the lock: telling the owner may take a while
            return self._forward(held, rid, message.text)
        self.executor.submit(skey, partial(self._process, claim, skey, origin))
        return rid

    def _hear(self, message: Inbound) -> Heard:
        """Transcribe a voice message (outside the submit lock: it takes seconds), but only one
        that would run: a duplicate, a stranger's or a pairing sender's audio is never fetched."""
        assert message.audio is not None
        bare = replace(message, audio=None)
        verdict = self.verdict(message)
        if self.lookup(message.origin) is not None or verdict in (Verdict.SILENCE, Verdict.PAIR) \
                or self._with_a_person(message.origin, verdict) is not None:
            return Heard(bare, False)
        try:
            transcript = voice.hear(self.vault, message.audio)
        except voice.Unheard as exc:
            return Heard(bare, False, Refusal(UNHEARD, str(exc), voice.refusal_reply(str(exc))))
        return Heard(replace(bare, text=voice.request_text(message.text, transcript)), True)

    def _refusal(self, origin: Origin, text: str, message: Inbound) -> Refusal | None:
        """Why the message is not run (and what to reply, "" = nothing), or None to take it."""
        if not text and not message.attachments:
            return Refusal(EMPTY, "an empty message", "" if not message.direct else "(an empty message: nothing to do)")
        if len(message.text) > MAX_TEXT:
            why = f"{len(message.text)} characters long; at most {MAX_TEXT} are taken"
            return Refusal(TOO_LONG, f"the message is {why}", f"Your message is {why}. Nothing was run: send it "
                                                              "shorter, or as a file.")
        allowed, first = self.rates.allow(f"{origin.platform}|{origin.sender}")
        if not allowed:
            why = f"more than {self.config.sender_rate_per_min} messages a minute from this sender"
            return Refusal(TOO_MANY, why, (f"Too many messages ({why}); this one and the next ones this minute are "
                                           "not run. Wait a minute.") if first else "")
        return None

    def _write_claim(self, rid: str, message: Inbound, text: str, heard: bool = False) -> inbox.TakenRequest:
        kind = "command" if commands.parse(text) else "run"
        if message.attachments and kind == "run":
            text += "\n\n(Attached files, saved in your workspace: " + ", ".join(p.name for p in message.attachments) + ")"
        req = Request(kind, text, origin=message.origin, context=message.context or None, voice=heard)
        stamp = inbox.new_stamp()
        name = f"{rid}.md"
        path = requests_dir(self.vault) / f"{stamp}--{name}"
        atomic_write(path, dump_doc(req.meta(), f"\n{text}\n"), fsync=True)
        _fsync_dir(path.parent)
        return inbox.TakenRequest(path, name, stamp, GATEWAY_DIR)

    def session(self, session_key: str) -> str | None:
        return self.ledger.session(session_key)

    def earlier_message(self, origin: Origin, digest: str, window_s: float) -> str | None:
        return self.ledger.earlier_message(origin, digest, time.time(), window_s)

    def request_status(self, rid: str, platform: str | None = None, chat: str | None = None) -> tuple[str, str] | None:
        """("pending" | "ok" | "error", answer) of a request, or None when there is no such request
        (made from `platform`/`chat`, when given). A request answered on another machine is told
        by its result once sync has brought it here (only with `platform`/`chat`: the result's
        origin must match them)."""
        row = self.ledger.message_by_id(rid)
        if row is not None and platform is not None and not row.key.startswith(f"{platform}|{chat}|"):
            return None
        if row is None or row.state == ANSWERED_ELSEWHERE:
            found = self._status_elsewhere(rid, platform, chat) if platform is not None and chat is not None else None
            if found is not None or row is None:
                return found
            return "pending", "answered on another machine; its result arrives here with the next sync"
        if row.state == IGNORED:
            return None
        if row.state == CLAIMED:
            return "pending", ""
        if row.state == REFUSED:
            return "error", f"refused: {row.answer}" if row.answer else "refused"
        return row.status or "error", row.answer or ""

    def _status_elsewhere(self, rid: str, platform: str, chat: str) -> tuple[str, str] | None:
        """The status of a request answered on another machine, from its result come here through
        sync (None until then), if the original request came from `platform`/`chat`."""
        found = inbox.committed_result(self.vault, rid)
        if found is None:
            return None
        result, original = found
        try:
            origin = inbox.parse_request(original, f"gateway/{rid}.md", ("run", "command"), chat=True).origin
        except HermesError:
            origin = None
        if origin is None or origin.platform != platform or origin.chat != chat or request_id(origin) != rid:
            return None
        return result.status if result.status in ("ok", "error") else "error", result.body

    # -- running ----------------------------------------------------------------------------------
    def _claim_origin(self, c: inbox.TakenRequest) -> Origin:
        req = inbox.parse_request(c.path.read_text(encoding="utf-8"), c.inbox_rel, ("run", "command"), chat=True)
        if req.origin is None:
            raise InputError("a gateway request without an origin", c.inbox_rel)
        return req.origin

    def _process_parked(self, p: Parked) -> None:
        self.executor.submit(p.session_key, partial(self._process, p.claim, p.session_key, p.origin))

    def _process(self, c: inbox.TakenRequest, skey: str, origin: Origin | None) -> None:
        if self.stopped.is_set():
            return  # stays claimed; run at the next start
        handlers: dict[str, Handler] = {"run": partial(self._run_chat, skey),
                                        "command": partial(self._run_command, skey)}
        customer = origin is None or self._is_customer(origin)
        options = ExecOptions(source=Source.GATEWAY, commit_session=False, auto_review=self.reviews,
                              send_files=not customer and self._sends_files(origin),
                              destinations=() if customer else self.destinations(origin), customer=customer,
                              handoff=partial(self._handoff, origin, skey) if customer and origin else None)
        try:
            inbox.process(self.vault, c, self.note, options, partial(self._done, c, skey, origin),
                          chat=True, commit=False, handlers=handlers)
        except Exception as exc:
            log.exception("gateway request %s: unexpected error", c.name)
            self.error(f"gateway request {c.name} failed before its result was written: {exc}")

    def _run_chat(self, skey: str, vault: Vault, req: Request, options: ExecOptions) -> Result:
        req.session = self.ledger.session(skey)
        if req.session and req.origin:
            self.session_origins[req.session] = req.origin
        try:
            result = run_request(vault, req, options)
        except SessionGone:
            if not req.session:
                raise
            self.note(f"gateway: session {req.session} is gone; starting a new one")
            req.session = None
            result = run_request(vault, req, options)
        if result.session and req.origin:
            self.session_origins[result.session] = req.origin
        if options.customer and req.origin is not None and self._handed_now(req.origin):
            result.body = f"{result.body}\n\n{handoff.CUSTOMER_LINE}".strip()
        transcript = voice.transcript_of(req.text) if req.voice else None
        if transcript:  # the person sees what was heard, first
            result.body = f"{voice.transcript_quote(transcript)}\n\n{result.body}"
        return result

    def _run_command(self, skey: str, vault: Vault, req: Request, options: ExecOptions) -> Result:
        assert req.origin is not None  # a gateway request always has one (_claim_origin)
        ledger = self.ledger
        cmd = commands.parse(req.text) or commands.Command("help", "")
        verdict = self.verdict(Inbound(req.origin, req.text))  # the settings now, not at submit
        admin = verdict is Verdict.ADMIN
        if verdict not in (Verdict.ADMIN, Verdict.ALLOWED) and cmd.name not in commands.CUSTOMER_COMMANDS:
            return Result("error", f"/{cmd.name} is not available here. {commands.CUSTOMER_HELP}", "command",
                          outcome=cmd.name)
        folder = attachments_dir(vault.state_dir, req.origin)
        files = sorted(p for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []
        ctx = commands.ChatContext(vault, admin, ledger.session(skey), lambda: ledger.set_session(skey, None), files,
                                   req.text, self.claims, self.handoffs, self._owner_reply)
        status, answer = commands.run(cmd, ctx)
        return Result(status, answer, "command", outcome=cmd.name)

    def _done(self, c: inbox.TakenRequest, skey: str, origin: Origin | None, result: Result) -> None:
        rid = c.request_id
        if result.type == "run" and result.session:
            self.ledger.set_session(skey, result.session)
        self.ledger.finish_message(rid, result.status, result.body)
        if origin is not None and self._replies(origin):
            text = result.body if len(result.body) <= MAX_REPLY else \
                result.body[:MAX_REPLY] + f"\n[... {len(result.body) - MAX_REPLY} more characters]"
            self._queue_reply(rid, origin, text or "(no answer)", result.files)
        else:
            for f in result.files:  # nowhere to send them
                discard(f)
            if origin is not None:
                self.leased.settle(origin.platform, rid)
        self.cadence.add(rid, c.result_rel, [p for p in result.paths if p != c.result_rel])

    def _queue_reply(self, rid: str, origin: Origin, text: str, files: list[OutgoingFile]) -> None:
        """The answer, then its files: in the reply itself where the channel attaches them (e-mail),
        else each as its own delivery (so a restart knows which arrived). A file the channel cannot
        take (no file support, over its size limit) is not sent, and the reply says so."""
        ch = self.channels.get(origin.platform)
        numbered = list(enumerate(files, 1))
        fits, notes = files_that_fit([f for _, f in numbered if not f.to], ch)
        later = [(file_delivery_id(rid, n), f) for n, f in numbered if f in fits]
        for n, f in numbered:
            if f.to:
                notes.append(self._queue_elsewhere(file_delivery_id(rid, n), origin, f))
        if notes:
            text += "\n\n" + "\n".join(notes)
        if ch is not None and ch.files_in_reply:
            self.deliverer.queue(rid, origin, text, files=fits)
            return
        self.deliverer.queue(rid, origin, text)
        for fid, f in later:
            self.deliverer.queue(fid, origin, f.caption, files=[f])

    def _queue_elsewhere(self, fid: str, origin: Origin, f: OutgoingFile) -> str:
        """A file the agent sent to named destinations (gateway.destinations): one delivery each,
        on that destination's channel; checked again here (the settings now, the sender's right).
        The line the answer gets about it."""
        allowed = self.destinations(origin)
        sent, refused = [], []
        for name in f.to:
            dest = self.config.destinations.get(name)
            ch = self.channels.get(dest.channel) if dest is not None else None
            if dest is None or ch is None or name not in allowed:
                refused.append(f"{name}: not a destination this chat may send to")
                continue
            copy = copy_of(f)  # each delivery owns (and removes) its copy
            if not files_that_fit([copy], ch)[0]:
                refused.append(f"{name}: {human_size(f.size)} is over what {ch.name} takes")
                continue
            to = Origin(dest.channel, dest.chat, dest.chat, f"{fid}~{name}", dest.thread)
            self.deliverer.queue(f"{fid}~{name}", to, f.caption, files=[copy])
            sent.append(name)
        discard(f)
        line = f"({f.name} is sent to {', '.join(sent)}.)" if sent else ""
        if refused:
            line = (line + " " if line else "") + f"({f.name} was not sent to {'; '.join(refused)}.)"
        return line

    # -- customers and hand-offs --------------------------------------------------------------------
    def _is_customer(self, origin: Origin) -> bool:
        """Whether a message runs as a customer's: decided from the settings now (fail closed:
        anyone who is not allowed or an admin now gets the support tools only)."""
        return self.verdict(Inbound(origin, "")) not in (Verdict.ADMIN, Verdict.ALLOWED)

    def _with_a_person(self, origin: Origin, verdict: Verdict) -> handoff.Handoff | None:
        """The open hand-off of this chat, for a customer's message (the allowed and admins of a
        shared room are answered as before: only customers' turns can hand a chat over)."""
        if verdict is not Verdict.CUSTOMER:
            return None
        return self.handoffs.get(handoff.chat_key(origin.platform, origin.chat))

    def _forward(self, held: handoff.Handoff, rid: str, text: str) -> str:
        """A message in a chat with a person: passed on to the owner, nothing run, nothing answered."""
        log.info("gateway %s: a message in a chat with a person, passed to the owner", held.platform)
        if text.strip():
            self._tell_owner(f"forward:{rid}", handoff.forwarded_text(held, printable(text)))
        return rid

    def _handoff(self, origin: Origin, skey: str, reason: str, summary: str) -> str:
        """The `handoff` tool of a customer's turn: the chat is with a person from now on (also
        across restarts), and the owner is told; what the model is told back."""
        record = handoff.new_handoff(origin, reason, summary, self.ledger.session(skey))
        if not self.handoffs.open(record):
            return "ok: this chat is already with a person; tell the customer someone will answer here"
        told = self._tell_owner(f"handoff:{record.key}:{record.opened}", handoff.owner_text(record))
        self.handoffs.set_told(record.key, told)
        self.note(f"gateway: {record.key} handed to a person ({record.reason[:80]}); owner: {told}")
        if told.startswith("not told"):
            self.error(f"gateway: hand-off of {record.key}: the owner was {told}")
            return (f"ok: this chat is now with a person, but the owner could not be reached ({told}); tell the "
                    "customer a person will answer here as soon as they can")
        return "ok: the owner has your summary and this chat is now with a person; tell the customer so, briefly"

    def _handed_now(self, origin: Origin) -> bool:
        """Whether the turn just run handed its chat over (the customer is then told so)."""
        return self.handoffs.get(handoff.chat_key(origin.platform, origin.chat)) is not None

    def _tell_owner(self, key: str, text: str) -> str:
        """Send `text` to support.handoff.owner (a notify target, or a chat of a running channel);
        how it went, in a few words."""
        owner = self.vault.config.support.handoff.owner
        if owner is None:
            return "not told: support.handoff.owner is not set"
        if isinstance(owner, str):
            [d] = self.vault.notifier.send([owner], "hermes-fs: a chat handed to you", text)
            return f"notify {owner}" if d.ok else f"not told: notify {owner} failed ({d.error})"
        if owner.channel not in self.channels:
            return f"not told: the {owner.channel} channel does not run here"
        to = Origin(owner.channel, owner.chat, owner.chat, key, owner.thread)
        self.deliverer.queue(request_id(to), to, text)
        return f"{owner.channel}:{owner.chat}"

    def _owner_reply(self, key: str, text: str) -> str:
        """An admin's `/reply CHANNEL:CHAT text`: sent to a customer whose chat is with a person."""
        held = self.handoffs.get(key)
        if held is None:
            raise InputError(f"{key} is not with a person (see /handoffs); replies go only to handed-over chats")
        if held.platform not in self.channels:
            raise InputError(f"the {held.platform} channel does not run here")
        to = Origin(held.platform, held.chat, held.sender, f"owner-reply:{time.time_ns()}", held.thread)
        self.deliverer.queue(request_id(to), to, text)
        return f"Sent to {key} (its delivery is retried like any reply)."

    def destinations(self, origin: Origin | None) -> tuple[str, ...]:
        """The named destinations this sender may send files to: listed in the destination's
        `senders` as `<channel>:<sender id>`, on a channel that runs here and carries files."""
        if origin is None:
            return ()
        me = f"{origin.platform}:{origin.sender}".lower()
        return tuple(name for name, d in self.config.destinations.items()
                     if me in {s.strip().lower() for s in d.senders}
                     and (ch := self.channels.get(d.channel)) is not None and ch.max_file_bytes is not None)

    def _sends_files(self, origin: Origin | None) -> bool:
        """Whether the agent is offered send_file: its answer goes back to a chat that takes files."""
        if origin is None:
            return False
        ch = self.channels.get(origin.platform)
        return ch is not None and ch.max_file_bytes is not None and ch.replies_to(origin)

    def _replies(self, origin: Origin) -> bool:
        ch = self.channels.get(origin.platform)
        return ch is not None and ch.replies_to(origin)

    def _reply(self, rid: str, origin: Origin, text: str, keep_text: bool = True) -> None:
        """Queue a reply, if the channel replies to this chat at all: a reply with nowhere to go
        (a webhook route without `reply_to`) is never queued, so never retried."""
        if not self._replies(origin):
            self.leased.settle(origin.platform, rid)
            return
        self.deliverer.queue(rid, origin, text, keep_text)

    def _review_done(self, session: str, line: str) -> None:
        """An automatic review finished: say so in the chat it came from."""
        origin = self.session_origins.get(session)
        self.note(f"gateway: automatic review of {session}: {line}")
        if origin is not None and not self.stopped.is_set() and not self._is_customer(origin):  # not the owner's business
            note = Origin(origin.platform, origin.chat, origin.sender, f"review:{session}:{line[:40]}", origin.thread)
            self._reply(request_id(note), note, f"(automatic review of this chat) {line}")  # a note, not a reply

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """True once no request is queued or running and no reply is pending (tests, bench)."""
        deadline = time.time() + timeout
        if not self.executor.wait_idle(timeout):
            return False
        while time.time() < deadline:
            if self.deliverer.idle(list(self.channels)):
                return True
            time.sleep(0.05)
        return False


def files_that_fit(files: list[OutgoingFile], ch: ChannelBase | None) -> tuple[list[OutgoingFile], list[str]]:
    """The files a channel can take (within `max_file_bytes`: each, or all together where they
    travel in the reply), and a line for each one it cannot, saying why (its staged copy goes)."""
    limit = ch.max_file_bytes if ch is not None else None
    where = ch.name if ch is not None else "this channel"
    fits: list[OutgoingFile] = []
    notes: list[str] = []
    total = 0
    for f in files:
        size = f.size + (total if ch is not None and ch.files_in_reply else 0)
        if limit is None:
            notes.append(f"({f.name} was not sent: {where} does not carry files here.)")
        elif size > limit:
            notes.append(f"({f.name} was not sent: {human_size(f.size)} is over the {human_size(limit)} "
                         f"{where} takes{' in one message' if ch is not None and ch.files_in_reply else ''}.)")
        else:
            fits.append(f)
            total += f.size
            continue
        discard(f)
    return fits, notes


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["DELIVERED", "FAILED", "PENDING", "Gateway", "requests_dir", "state_path"]
