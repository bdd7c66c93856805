"""Replies out, and the results that record them: the gateway's delivery thread and commit cadence.

`Deliverer` owns the delivery thread: each reply in the ledger goes pending -> sending ->
delivered (with the platform's id) or, after DELIVERY_TRIES or a send the channel says is not
worth retrying, failed with the reason. Only replies for connected channels are tried; a reply
cut short by a crash is sent again only on channels whose sends are idempotent (otherwise it is
marked failed: never sent twice). Whether this machine may send a reply now (several machines:
the channel's lease) is asked of a callback, so this module knows nothing of leases.

`CommitCadence`: a chat never "ends", so its results and transcripts are committed together once
the gateway has been idle for `commit_idle_s`, when COMMIT_BATCH requests wait, or at stop; each
result's `reply:` frontmatter says what became of its reply before it is committed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from ...agent.outgoing import OutgoingFile, discard
from ...errors import HermesError, InputError
from ...store.docs import dump_doc, parse_doc
from ...store.files import atomic_write
from ...store.provenance import Act
from ...store.vault import Vault
from .channel import ChannelBase, Origin, Outbound, SendCut
from .ledger import DELIVERED, PENDING, SENDING, Delivery, GatewayLedger, LedgerClosed

log = logging.getLogger(__name__)

COMMIT_BATCH = 20
DELIVERY_TRIES = 8
MAX_BACKOFF_S = 300.0
IDLE_WAKE_S = 30.0  # the delivery thread looks at the ledger at least this often
STOP_WAIT_S = 30.0  # how long a stop waits for the send under way

GO, WAIT, ANSWERED_ELSEWHERE = "go", "wait", "answered"  # what `may_send` says of a reply


class Deliverer:
    """The delivery thread. `channels` is the core's live map (channels come and go on a reload);
    `connected()` names the channels that may send now; `may_send(platform, rid)` says GO, WAIT
    (this machine does not hold the channel now) or ANSWERED_ELSEWHERE; `settle(platform, rid)`
    is called once a reply is delivered or failed for good."""

    def __init__(self, ledger: GatewayLedger, channels: Mapping[str, ChannelBase], connected: Callable[[], list[str]],
                 may_send: Callable[[str, str], str], settle: Callable[[str, str], None], retry_base_s: float,
                 error: Callable[[str], None]):
        self.ledger = ledger
        self.channels = channels
        self.connected = connected
        self.may_send = may_send
        self.settle = settle
        self.retry_base_s = retry_base_s
        self.error = error
        self.wake = threading.Event()
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._loop, name="gateway-delivery", daemon=True)
        self.thread.start()

    def stop(self, wait_s: float = STOP_WAIT_S) -> bool:
        """Stop after the send under way; False when that send outlives `wait_s` (the thread then
        ends when it next uses the ledger, closed by then: see `_loop`)."""
        self.stopped.set()
        self.wake.set()
        if self.thread:
            self.thread.join(wait_s)
            return not self.thread.is_alive()
        return True

    def queue(self, rid: str, origin: Origin, text: str, keep_text: bool = True,
              files: list[OutgoingFile] | None = None) -> None:
        """A reply to send (once: the same `rid` again is a no-op); `keep_text=False` drops the
        text from the ledger once sent (a pairing code); `files` travel with it (an id from
        `file_delivery_id`: one file, the text its caption)."""
        if self.ledger.add_delivery(rid, origin, text, keep_text, files):
            self.wake.set()

    def recover(self, platforms: list[str]) -> None:
        """After a crash, for these channels (none of their replies is being sent now): a send
        that was under way is sent again where the channel's sends are idempotent, else marked
        failed (it may have arrived; it must not arrive twice)."""
        for d in self.ledger.interrupted_sends():
            ch = self.channels.get(d.platform)
            if ch is None or d.platform not in platforms:
                continue
            if ch.idempotent_send:
                self.ledger.resend(d.id)
            else:
                self.ledger.mark_failed(d.id, "the daemon stopped while sending; not sent again, so it "
                                              "cannot arrive twice")
                _discard(d)

    def idle(self, platforms: list[str]) -> bool:
        # one read of every reply's state: two reads (due ones, then sending ones) missed a reply
        # that went from sending back to pending between them
        return all(not (counts := self.ledger.delivery_counts(p)).get(PENDING) and not counts.get(SENDING)
                   for p in platforms)

    def _loop(self) -> None:
        try:
            while not self.stopped.is_set():
                self.wake.clear()
                for d in self.ledger.due_deliveries(self.connected()):
                    if self.stopped.is_set():
                        return
                    self._deliver(d)
                nxt = self.ledger.next_try()
                self.wake.wait(IDLE_WAKE_S if nxt is None else min(IDLE_WAKE_S, max(0.05, nxt - time.time())))
        except LedgerClosed:  # a send outlived the stop: its reply stays `sending`, for the next start's recovery
            log.info("gateway: the delivery thread ended after the stop")

    def _deliver(self, d: Delivery) -> None:
        ch = self.channels.get(d.platform)
        if ch is None:
            return
        go = self.may_send(d.platform, d.id)
        if go == WAIT:
            return
        if go == ANSWERED_ELSEWHERE:
            self.ledger.mark_failed(d.id, "not sent: another machine answered this message")
            return
        missing = [f.name for f in d.files if not f.path.is_file()]
        if missing:  # its staged copy is gone (.hermes/ cleared by hand): nothing to send, say why
            self.ledger.mark_failed(d.id, f"the staged copy of {', '.join(missing)} is gone; not sent")
            self.settle(d.platform, d.id)
            return
        if not self.ledger.mark_sending(d.id):
            return
        out = Outbound(d.origin, d.text, d.id, list(d.files))
        try:
            platform_id = ch.send_file(out) if d.files and not ch.files_in_reply else ch.send(out)
        except Exception as exc:
            if isinstance(exc, SendCut):  # it stays `sending`, for the next start's recovery
                log.info("gateway %s: reply %s: %s", d.platform, d.id, exc)
                return
            self._failed(ch, d, exc)
            return
        self.ledger.mark_delivered(d.id, str(platform_id or ""))
        _discard(d)
        self.settle(d.platform, d.id)

    def _failed(self, ch: ChannelBase, d: Delivery, exc: Exception) -> None:
        reason = f"{type(exc).__name__}: {exc}"[:300]
        tries = d.attempts + 1
        if tries >= DELIVERY_TRIES or not ch.should_retry(exc):
            self.ledger.mark_failed(d.id, reason)
            _discard(d)
            self.settle(d.platform, d.id)
            self.error(f"gateway {d.platform}: reply {d.id} failed after {tries} tr{'y' if tries == 1 else 'ies'}: "
                       f"{reason}")
        else:
            self.ledger.mark_retry(d.id, reason, min(MAX_BACKOFF_S, self.retry_base_s * 2 ** (tries - 1)))
            log.warning("gateway %s: reply %s not sent (%s); will retry", d.platform, d.id, reason)


def _discard(d: Delivery) -> None:
    """A settled delivery's staged files are not needed any more."""
    for f in d.files:
        discard(f)


class CommitCadence:
    """Results and transcripts of chat turns, committed together when the gateway is idle for
    `idle_s`, when `batch` requests wait, or at stop. Before the commit each result's `reply:`
    field is set from the delivery ledger, so the committed result says what became of its reply."""

    def __init__(self, vault: Vault, ledger: GatewayLedger, idle_s: float, batch: int = COMMIT_BATCH):
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
            set_reply_state(self.vault, rel, self.ledger.delivery(rid), self.ledger.file_deliveries(rid))
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
        ds = [self.ledger.delivery(rid), *self.ledger.file_deliveries(rid)]
        return any(d is not None and d.state in (PENDING, SENDING) for d in ds)


def set_reply_state(vault: Vault, rel: str, delivery: Delivery | None, files: list[Delivery] | None = None) -> None:
    """Record the reply's delivery in the result's frontmatter (`reply: {state, id|reason}`, and
    `files:` with each file sent on its own: name, state, id or reason)."""
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
        if delivery.files:
            reply["files"] = [f.name for f in delivery.files]
    sent = [_file_state(d) for d in files or []]
    if sent:
        reply["file_deliveries"] = sent
    if doc.meta.get("reply") == reply:
        return
    meta = {**doc.meta, "reply": reply}
    atomic_write(path, dump_doc(meta, doc.body), fsync=True)


__all__ = ["ANSWERED_ELSEWHERE", "GO", "WAIT", "CommitCadence", "Deliverer", "set_reply_state"]


def _file_state(d: Delivery) -> dict[str, Any]:
    state: dict[str, Any] = {"name": d.files[0].name if d.files else "?", "state": d.state}
    if d.platform_id:
        state["id"] = d.platform_id
    if d.reason and d.state != DELIVERED:
        state["reason"] = d.reason
    return state
