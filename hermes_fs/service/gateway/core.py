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

Several machines (a vault with `remote:`): each channel account is consumed by one machine at a
time, the holder of its lease (holder.py); the others stand by. The holder publishes each message
as taken before it can be answered and each reply as sending before it is sent, so a machine
taking over neither skips nor repeats a message and never answers one twice.

Commit cadence: a chat never "ends", so its results and transcript are committed together once
the gateway has been idle for `gateway.commit_idle_s` or COMMIT_BATCH requests are waiting, and at
stop. Exactly-once does not wait for the commit: a written (fsynced) result already means
"answered" (inbox.process), and a crash leaves the files to be committed at the next start.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...agent.boundary import Source
from ...errors import HermesError, InputError, SessionGone
from ...store.docs import dump_doc, parse_doc
from ...store.files import atomic_write
from ...store.provenance import Act
from ...store.vault import Vault
from .. import inbox
from ..requests import ExecOptions, Handler, Request, Result, SerialExecutor, run_request
from . import commands
from .access import CODE_TTL_S, AccessRules, Verdict, decide, new_code, pairing_text
from .channel import Channel, Inbound, Origin, Outbound, attachments_dir
from .ledger import (
    ANSWERED,
    CLAIMED,
    DELIVERED,
    EMPTY,
    FAILED,
    IGNORED,
    PENDING,
    SENDING,
    TOO_LONG,
    TOO_MANY,
    Ledger,
    ledger_path,
    message_key,
    request_id,
)

if TYPE_CHECKING:
    from ...store.claims import RefClaims
    from ..auto_review import AutoReview
    from .holder import ChannelHolder, Journal

log = logging.getLogger(__name__)

# Channel adapters by name: "module:Class", imported only when hermes.yaml names the channel.
# Each class is built as Class(vault, settings) with its section of `gateway:` in hermes.yaml.
CHANNELS = {
    "webhook": "hermes_fs.service.gateway.webhook:WebhookChannel",
    "matrix": "hermes_fs.service.gateway.matrix:MatrixChannel",
    "email": "hermes_fs.service.gateway.email:EmailChannel",
}
MAX_TEXT = 16_000  # characters of one message; longer ones are answered, not run


@dataclass(frozen=True)
class Refusal:
    """A message the core will not run: why (kept with the message: a channel that answers at once,
    such as a webhook, says it instead of accepting) and the reply to the chat ("" = none)."""

    kind: str  # EMPTY, TOO_LONG, TOO_MANY
    reason: str
    reply: str
MAX_REPLY = 30_000  # characters of one reply; a channel may split or cut further
COMMIT_BATCH = 20
DELIVERY_TRIES = 8
RATE_WINDOW_S = 60.0
GATEWAY_DIR = "gateway"


def requests_dir(vault: Vault) -> Path:
    d = vault.state_dir / GATEWAY_DIR / "requests"
    d.mkdir(parents=True, exist_ok=True)
    return d


def state_path(vault: Vault) -> Path:
    return vault.state_dir / GATEWAY_DIR / "state.json"


def load_channel(vault: Vault, name: str, settings: Any) -> Channel:
    import importlib

    module, _, cls = CHANNELS[name].partition(":")
    return getattr(importlib.import_module(module), cls)(vault, settings)


def configured(vault: Vault) -> list[str]:
    """The channel names hermes.yaml turns on, in a fixed order."""
    cfg = vault.config.gateway
    return [name for name in CHANNELS if getattr(cfg, name, None) is not None]


@dataclass
class ChannelState:
    state: str  # starting | connected | error | stopped
    detail: str = ""
    since: float = 0.0


class CommitCadence:
    """Results and transcripts of chat turns, committed together when the gateway is idle for
    `idle_s`, when `batch` requests wait, or at stop. Before the commit each result's `reply:`
    field is set from the delivery ledger, so the committed result says what became of its reply."""

    def __init__(self, vault: Vault, ledger: Ledger, idle_s: float, batch: int = COMMIT_BATCH):
        self.vault = vault
        self.ledger = ledger
        self.idle_s = idle_s
        self.batch = batch
        self.paths: dict[str, None] = {}  # ordered set
        self.results: dict[str, str] = {}  # request id -> result path
        self.lock = threading.Lock()
        self.flushing = threading.Lock()
        self.timer: threading.Timer | None = None

    def add(self, rid: str, result_rel: str, paths: list[str]) -> None:
        with self.lock:
            self.results[rid] = result_rel
            for p in [result_rel, *paths]:
                self.paths[p] = None
            due = len(self.results) >= self.batch
            if self.timer:
                self.timer.cancel()
            self.timer = None
            if not due:
                self.timer = threading.Timer(self.idle_s, self.flush)
                self.timer.daemon = True
                self.timer.start()
        if due:
            self.flush()

    def flush(self, final: bool = False) -> str | None:
        """Commit what waits. A result whose reply is still pending or being sent waits for the
        next flush (so the committed file says how its reply went), unless `final` (at stop).
        One flush at a time: the final one waits for a timer's commit under way, which would
        otherwise die half-done with the process (its timer thread is a daemon thread)."""
        with self.flushing:
            return self._flush(final)

    def _flush(self, final: bool) -> str | None:
        with self.lock:
            if self.timer:
                self.timer.cancel()
                self.timer = None
            results = dict(self.results)
            unsettled = set() if final else {rid for rid in results if self._unsettled(rid)}
            ready = {rid: rel for rid, rel in results.items() if rid not in unsettled}
            held = {results[rid] for rid in unsettled}
            paths = [p for p in self.paths if p not in held]
            for rid in ready:
                del self.results[rid]
            for p in paths:
                del self.paths[p]
            if unsettled and not final:
                self.timer = threading.Timer(self.idle_s, self.flush)
                self.timer.daemon = True
                self.timer.start()
        if not paths:
            return None
        for rid, rel in ready.items():
            set_reply_state(self.vault, rel, self.ledger.delivery(rid))
        try:
            return self.vault.git.commit_paths(paths, f"gateway: {len(ready)} request(s)", Act.gateway())
        except HermesError as exc:  # e.g. a secret the redactor missed: the files stay, and are retried
            log.error("gateway commit failed: %s", exc)
            with self.lock:
                for p in paths:
                    self.paths.setdefault(p, None)
                self.results.update(ready)
            return None

    def _unsettled(self, rid: str) -> bool:
        d = self.ledger.delivery(rid)
        return d is not None and d.state in (PENDING, SENDING)


def set_reply_state(vault: Vault, rel: str, delivery) -> None:
    """Record the reply's delivery in the result's frontmatter (`reply: {state, id|reason}`)."""
    path = vault.root / rel
    try:
        text = path.read_text(encoding="utf-8")
        doc = parse_doc(text, rel)
    except (OSError, InputError):
        return
    if delivery is None:
        reply: dict[str, Any] = {"state": "none"}
    else:
        reply = {"state": delivery.state, "attempts": delivery.attempts}
        if delivery.platform_id:
            reply["id"] = delivery.platform_id
        if delivery.reason and delivery.state != DELIVERED:
            reply["reason"] = delivery.reason
    if doc.meta.get("reply") == reply:
        return
    meta = {**doc.meta, "reply": reply}
    atomic_write(path, dump_doc(meta, doc.body), fsync=True)


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
    """The gateway service; also the Sink of its channels."""

    name = "gateway"

    def __init__(self, vault: Vault, channels: list[Channel] | None = None,
                 note: Callable[[str], None] | None = None, error: Callable[[str], None] | None = None,
                 claims: RefClaims | None = None):
        self.vault = vault
        self.claims = claims  # the daemon's claims on the remote (decisions from chat are claimed there)
        self.config = vault.config.gateway
        self._given = channels
        self.channels: dict[str, Channel] = {}
        self.states: dict[str, ChannelState] = {}
        self.note = note or log.info
        self.error = error or log.error
        self.ledger: Ledger | None = None
        self.executor = SerialExecutor(self.config.workers, "gateway")
        self.submit_lock = threading.Lock()
        self.rates = RateLimit(self.config.sender_rate_per_min)
        self.kick = threading.Event()
        self.stopped = threading.Event()
        self.delivery_thread: threading.Thread | None = None
        self.cadence: CommitCadence | None = None
        self.reviews: AutoReview | None = None
        self.session_origins: dict[str, Origin] = {}
        self.state_lock = threading.Lock()
        self.holders: dict[str, ChannelHolder] = {}  # channel -> its lease (only with `remote:`)
        self.merged: set[str] = set()  # channels held here whose last holder's shared state is taken in
        self.parked: dict[str, list[tuple[inbox.TakenRequest, str, Origin]]] = {}  # claims waiting for their lease
        self.started: set[str] = set()  # channels whose inbound side was started

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        from ..auto_review import AutoReview

        self.ledger = Ledger(ledger_path(self.vault.state_dir))
        self.cadence = CommitCadence(self.vault, self.ledger, self.config.commit_idle_s)
        self.reviews = AutoReview(self.vault, self._review_done)
        channels = self._given if self._given is not None else self._load_channels()
        for ch in channels:
            self.channels[ch.name] = ch
            self.states[ch.name] = ChannelState("starting", since=time.time())
            holder = self._holder(ch)
            if holder is not None:
                self.holders[ch.name] = holder
        self._recover()
        self.delivery_thread = threading.Thread(target=self._deliver_loop, name="gateway-delivery", daemon=True)
        self.delivery_thread.start()
        for ch in channels:
            if ch.name in self.holders:  # several machines: started once this one holds its lease
                self.channel_state(ch.name, "standby", "waiting for this channel's lease")
                self.holders[ch.name].start()
            else:
                self._start_channel(ch)
        self._write_state()

    def _start_channel(self, ch: Channel) -> bool:
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

    # -- one consumer across machines (holder.py) -------------------------------------------------
    def _holder(self, ch: Channel) -> ChannelHolder | None:
        from .holder import ChannelHolder, lease_for

        if not getattr(ch, "leased", True):
            return None
        lease = lease_for(self.vault, f"{ch.name}/{getattr(ch, 'account', '') or 'default'}")
        if lease is None:
            return None
        return ChannelHolder(lease, self.vault.config.sync.lease_s, partial(self._progress, ch.name),
                             partial(self._acquired, ch.name), partial(self._released, ch.name),
                             partial(self._shared, ch.name))

    def _progress(self, name: str) -> str | None:
        progress = getattr(self.channels.get(name), "progress", None)
        return progress(self.ledger) if progress is not None else None

    def _shared(self, name: str) -> dict | None:
        """What the channel's next holder takes in (ledger.shared_state); None (the journal keeps
        what it has) until this hold has taken in the last holder's."""
        if name not in self.merged or self.ledger is None:
            return None
        return self.ledger.shared_state(name, time.time() - CODE_TTL_S)

    def _acquired(self, name: str, journal: Journal) -> None:
        """This machine now holds `name`: go on where the journal says, then start consuming."""
        from .holder import TAKEN

        assert self.ledger
        taken_in = self.ledger.merge_shared(name, journal.shared)
        if taken_in:
            self.note(f"gateway {name}: took in {taken_in} chat session(s), approval(s) and code(s) from the last holder")
        self.merged.add(name)
        ch = self.channels[name]
        if name in self.started and self._given is None:  # a stopped channel is not restarted: a new one
            ch = self.channels[name] = load_channel(self.vault, name, getattr(self.config, name))
        resume = getattr(ch, "resume", None)
        if resume is not None and journal.cursor is not None:
            resume(self.ledger, journal.cursor)
        for c, skey, origin in self.parked.pop(name, []):
            rid = c.name.removesuffix(".md")
            entry = journal.entries.get(rid)
            if entry is not None and entry.state == TAKEN:
                self.holders[name].take(rid)
                self.note(f"gateway: resuming request {c.name}")
                self.executor.submit(skey, partial(self._process, c, skey, origin))
            else:  # answered by the machine that took the channel over meanwhile
                c.path.unlink(missing_ok=True)
                self.ledger.finish_message(rid, "error", f"answered on {entry.host if entry else 'another machine'}")
                self.note(f"gateway: request {c.name} was answered on {entry.host if entry else 'another machine'}")
        self.note(f"gateway {name}: this machine holds the channel now")
        if not self._start_channel(ch):
            raise HermesError(f"gateway {name} did not start here")

    def _released(self, name: str, why: str) -> None:
        self.merged.discard(name)
        ch = self.channels.get(name)
        if ch is not None:
            try:
                ch.stop()
            except Exception:
                log.exception("gateway channel %s: error while stopping", name)
        self.error(f"gateway {name}: stopped consuming here: {why}")
        self.channel_state(name, "standby", f"another machine may hold this channel ({why})")

    def _settle(self, platform: str, rid: str) -> None:
        holder = self.holders.get(platform)
        if holder is not None:
            holder.settled(rid)

    def _load_channels(self) -> list[Channel]:
        out = []
        for name in configured(self.vault):
            try:
                out.append(load_channel(self.vault, name, getattr(self.config, name)))
            except Exception as exc:  # e.g. bad settings, a library missing: that channel is down, the rest run
                log.exception("gateway channel %s could not be built", name)
                self.states[name] = ChannelState("error", f"{type(exc).__name__}: {exc}"[:300], time.time())
        return out

    def stop(self) -> None:
        self.stopped.set()
        for holder in self.holders.values():
            holder.stop()
        for ch in self.channels.values():
            if ch.name not in self.started:
                self.states[ch.name] = ChannelState("stopped", since=time.time())
                continue
            try:
                ch.stop()
            except Exception:
                log.exception("gateway channel %s: error while stopping", ch.name)
            self.states[ch.name] = ChannelState("stopped", since=time.time())
        self.executor.shutdown(wait=True)  # the running turn finishes; queued ones stay claimed on disk
        self.kick.set()
        if self.delivery_thread:
            self.delivery_thread.join(30)
        if self.cadence:
            self.cadence.flush(final=True)
        if self.reviews:
            self.reviews.join(60)
        for holder in self.holders.values():
            holder.hand_over()  # another machine takes the channels over at once
        self._write_state(running=False)
        if self.ledger:
            self.ledger.close()

    def _recover(self) -> None:
        """After a crash or stop: commit results left uncommitted, settle interrupted sends, and
        queue the claimed requests again (before any channel starts, so a message delivered again
        finds its first request)."""
        assert self.ledger and self.cadence
        left = [p for p in self.vault.git.changed_under(inbox.RESULTS_DIR) if p.endswith(".md")]
        if left:
            for rel in left:
                rid = inbox.request_of_result(rel)
                set_reply_state(self.vault, rel, self.ledger.delivery(rid))
            self.vault.git.commit_paths(left + self.vault.git.changed_under("sessions"),
                                        f"gateway: {len(left)} request(s) (after an interruption)",
                                        Act.gateway())
        for d in self.ledger.interrupted_sends():
            ch = self.channels.get(d.platform)
            if ch is None:
                continue
            if getattr(ch, "idempotent_send", False):
                self.ledger.resend(d.id)
            else:
                self.ledger.mark_failed(d.id, "the daemon stopped while sending; not sent again, so it "
                                              "cannot arrive twice")
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
            if origin.platform in self.holders:  # runs only if this machine gets the lease and the
                self.parked.setdefault(origin.platform, []).append((c, row.session_key, origin))  # journal
                continue  # still says nobody answered it
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
            self.kick.set()  # replies waiting for this channel can go now

    def _write_state(self, running: bool = True) -> None:
        with self.state_lock:
            data = {"running": running, "pid": os.getpid(), "updated": time.time(),
                    "channels": {n: {"state": s.state, "detail": s.detail, "since": s.since}
                                 for n, s in self.states.items()}}
            atomic_write(state_path(self.vault), json.dumps(data, indent=2))

    def rules(self, platform: str) -> AccessRules:
        ch = self.channels.get(platform)
        given = getattr(ch, "access", None)
        if isinstance(given, AccessRules):
            return given
        return AccessRules.from_config(getattr(self.config, platform, None))

    def _per_sender(self, platform: str) -> bool:
        return bool(getattr(getattr(self.config, platform, None), "per_sender_in_rooms", False))

    # -- the Sink ---------------------------------------------------------------------------------
    def submit(self, message: Inbound) -> str:
        """Make the message a durable request (or a recorded refusal); its request id. A second
        submit of the same message returns the same id and does nothing."""
        assert self.ledger, "the gateway is not started"
        origin = message.origin
        rid = request_id(origin)
        skey = origin.session_key(per_sender=not message.direct and self._per_sender(origin.platform))
        holder = self.holders.get(origin.platform)
        with self.submit_lock:
            if self.ledger.message(message_key(origin)) is not None:
                return rid
            entry = holder.state(rid) if holder is not None else None
            if entry is not None and entry.state != "taken":  # answered by the channel's last holder
                self.ledger.add_message(origin, skey, ANSWERED)
                log.info("gateway %s: %s was answered on %s", origin.platform, rid, entry.host)
                return rid
            verdict = decide(self.rules(origin.platform), self.ledger, message)
            if verdict is Verdict.SILENCE:
                self.ledger.add_message(origin, skey, IGNORED)
                log.info("gateway %s: ignored a message from a sender who is not allowed", origin.platform)
                return rid
            if holder is not None:
                holder.take(rid)  # published before anything can answer it; NotHeld: not taken here
            if verdict is Verdict.PAIR:
                self.ledger.add_message(origin, skey, ANSWERED)
                code = new_code(self.ledger, origin.platform, origin.sender)
                if code:  # never logged; the ledger drops the text once it is sent
                    self._reply(rid, origin, pairing_text(code), keep_text=False)
                    self.note(f"gateway {origin.platform}: pairing code sent to a new sender")
                else:
                    self._settle(origin.platform, rid)
                return rid
            text = message.text.strip()
            refusal = self._refusal(origin, text, message)
            if refusal is not None:
                self.ledger.add_message(origin, skey, ANSWERED)
                self.ledger.refuse_message(rid, refusal.kind, refusal.reason)  # the sender can ask why
                if refusal.reply:
                    self._reply(rid, origin, refusal.reply)
                else:
                    self._settle(origin.platform, rid)
                return rid
            claim = self._write_claim(rid, message, text)
            self.ledger.add_message(origin, skey, CLAIMED, claim.path.name)
        self.executor.submit(skey, partial(self._process, claim, skey, origin))
        return rid

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

    def _write_claim(self, rid: str, message: Inbound, text: str) -> inbox.TakenRequest:
        kind = "command" if commands.parse(text) else "run"
        if message.attachments and kind == "run":
            text += "\n\n(Attached files, saved in your workspace: " + ", ".join(p.name for p in message.attachments) + ")"
        req = Request(kind, text, origin=message.origin, context=message.context or None)
        stamp = inbox.new_stamp()
        name = f"{rid}.md"
        path = requests_dir(self.vault) / f"{stamp}--{name}"
        atomic_write(path, dump_doc(req.meta(), f"\n{text}\n"), fsync=True)
        _fsync_dir(path.parent)
        return inbox.TakenRequest(path, name, stamp, GATEWAY_DIR)

    def lookup(self, origin: Origin):
        """The ledger's row for a message (None: never seen): channels use it to tell a duplicate."""
        assert self.ledger
        return self.ledger.message(message_key(origin))

    def request_status(self, rid: str) -> tuple[str, str] | None:
        """("pending" | "ok" | "error", answer) of a request, or None when there is no such request."""
        assert self.ledger
        row = self.ledger.message_by_id(rid)
        if row is None or row.state == IGNORED:
            return None
        if row.state == CLAIMED:
            return "pending", ""
        if row.state == ANSWERED:
            return "error", f"refused: {row.answer}" if row.answer else "refused"
        return row.status or "error", row.answer or ""

    def status_elsewhere(self, rid: str, matches: Callable[[Origin], bool]) -> tuple[str, str] | None:
        """The status of a request this machine's ledger does not know: answered on another machine,
        its result come here through sync (None until then). `matches(origin)` must accept the
        original request's origin (the caller's route)."""
        found = inbox.committed_result(self.vault, rid)
        if found is None:
            return None
        result, original = found
        try:
            origin = inbox.parse_request(original, f"gateway/{rid}.md", ("run", "command"), chat=True).origin
        except HermesError:
            origin = None
        if origin is None or not matches(origin):
            return None
        return result.status if result.status in ("ok", "error") else "error", result.body

    # -- running ----------------------------------------------------------------------------------
    def _claim_origin(self, c: inbox.TakenRequest) -> Origin:
        req = inbox.parse_request(c.path.read_text(encoding="utf-8"), c.inbox_rel, ("run", "command"), chat=True)
        if req.origin is None:
            raise InputError("a gateway request without an origin", c.inbox_rel)
        return req.origin

    def _process(self, c: inbox.TakenRequest, skey: str, origin: Origin | None) -> None:
        if self.stopped.is_set():
            return  # stays claimed; run at the next start
        handlers: dict[str, Handler] = {"run": partial(self._run_chat, skey),
                                        "command": partial(self._run_command, skey)}
        options = ExecOptions(source=Source.GATEWAY, commit_session=False, auto_review=self.reviews)
        try:
            inbox.process(self.vault, c, self.note, options, partial(self._done, c, skey, origin),
                          chat=True, commit=False, handlers=handlers)
        except Exception as exc:
            log.exception("gateway request %s: unexpected error", c.name)
            self.error(f"gateway request {c.name} failed before its result was written: {exc}")

    def _run_chat(self, skey: str, vault: Vault, req: Request, options: ExecOptions) -> Result:
        assert self.ledger
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
        return result

    def _run_command(self, skey: str, vault: Vault, req: Request, options: ExecOptions) -> Result:
        assert self.ledger and req.origin
        ledger = self.ledger
        cmd = commands.parse(req.text) or commands.Command("help", "")
        admin = decide(self.rules(req.origin.platform), ledger,
                       Inbound(req.origin, req.text)) is Verdict.ADMIN  # the settings now, not at submit
        folder = attachments_dir(vault.state_dir, req.origin)
        files = sorted(p for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []
        ctx = commands.ChatContext(vault, admin, ledger.session(skey), lambda: ledger.set_session(skey, None), files,
                                   req.text, self.claims)
        status, answer = commands.run(cmd, ctx)
        return Result(status, answer, "command", outcome=cmd.name)

    def _done(self, c: inbox.TakenRequest, skey: str, origin: Origin | None, result: Result) -> None:
        assert self.ledger and self.cadence
        rid = c.request_id
        if result.type == "run" and result.session:
            self.ledger.set_session(skey, result.session)
        self.ledger.finish_message(rid, result.status, result.body)
        if origin is not None and self._replies(origin):
            text = result.body if len(result.body) <= MAX_REPLY else \
                result.body[:MAX_REPLY] + f"\n[... {len(result.body) - MAX_REPLY} more characters]"
            self._reply(rid, origin, text or "(no answer)")
        elif origin is not None:
            self._settle(origin.platform, rid)
        self.cadence.add(rid, c.result_rel, [p for p in result.paths if p != c.result_rel])

    def _replies(self, origin: Origin) -> bool:
        ch = self.channels.get(origin.platform)
        wants = getattr(ch, "replies_to", None)
        return ch is not None and (wants is None or bool(wants(origin)))

    def _reply(self, rid: str, origin: Origin, text: str, keep_text: bool = True) -> None:
        """Queue a reply, if the channel replies to this chat at all: a reply with nowhere to go
        (a webhook route without `reply_to`) is never queued, so never retried."""
        assert self.ledger
        if not self._replies(origin):
            self._settle(origin.platform, rid)
            return
        if self.ledger.add_delivery(rid, origin, text, keep_text):
            self.kick.set()

    def _review_done(self, session: str, line: str) -> None:
        """An automatic review finished: say so in the chat it came from."""
        origin = self.session_origins.get(session)
        self.note(f"gateway: automatic review of {session}: {line}")
        if origin is not None and self.ledger is not None and not self.stopped.is_set():
            note = Origin(origin.platform, origin.chat, origin.sender, f"review:{session}:{line[:40]}", origin.thread)
            self._reply(request_id(note), note, f"(automatic review of this chat) {line}")  # a note, not a reply

    # -- delivery ---------------------------------------------------------------------------------
    def _connected(self) -> list[str]:
        return [n for n, s in self.states.items() if s.state == "connected"]

    def _deliver_loop(self) -> None:
        assert self.ledger
        while not self.stopped.is_set():
            self.kick.clear()
            for d in self.ledger.due_deliveries(self._connected()):
                if self.stopped.is_set():
                    return
                self._deliver(d)
            nxt = self.ledger.next_try()
            wait = 30.0 if nxt is None else min(30.0, max(0.05, nxt - time.time()))
            self.kick.wait(wait)

    def _deliver(self, d) -> None:
        assert self.ledger
        ch = self.channels.get(d.platform)
        if ch is None:
            return
        holder = self.holders.get(d.platform)
        go = holder.sending(d.id) if holder is not None else "go"
        if go == "wait":
            return  # this machine does not hold the channel now
        if go == "answered":
            self.ledger.mark_failed(d.id, "not sent: another machine answered this message")
            return
        if not self.ledger.mark_sending(d.id):
            return
        try:
            platform_id = ch.send(Outbound(d.origin, d.text, d.id))
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"[:300]
            tries = d.attempts + 1
            if tries >= DELIVERY_TRIES:
                self.ledger.mark_failed(d.id, reason)
                self._settle(d.platform, d.id)
                self.error(f"gateway {d.platform}: reply {d.id} failed after {tries} tries: {reason}")
            else:
                self.ledger.mark_retry(d.id, reason, min(300.0, self.config.retry_base_s * 2 ** (tries - 1)))
                log.warning("gateway %s: reply %s not sent (%s); will retry", d.platform, d.id, reason)
            return
        self.ledger.mark_delivered(d.id, str(platform_id or ""))
        self._settle(d.platform, d.id)

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """True once no request is queued or running and no reply is pending (tests, bench)."""
        deadline = time.time() + timeout
        if not self.executor.wait_idle(timeout):
            return False
        assert self.ledger
        while time.time() < deadline:
            # one read of every reply's state: two reads (due ones, then sending ones) missed a
            # reply that went from sending back to pending between them (a CI failure)
            if all(not (counts := self.ledger.delivery_counts(p)).get(PENDING) and not counts.get(SENDING)
                   for p in self.channels):
                return True
            time.sleep(0.05)
        return False


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["CHANNELS", "DELIVERED", "FAILED", "PENDING", "Gateway", "configured", "load_channel"]
