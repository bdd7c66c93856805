"""One gateway consumer per channel account across machines (a vault with `remote:`).

Each channel account (an IMAP mailbox, a Matrix user, the webhook listener) has a lease on the
remote (`store/lease.py`, `refs/hermes/leases/<channel>/<account>`). Only its holder runs the
channel's inbound side; the others stand by and take the lease over once it has not been renewed
for `sync.lease_s` (the holder renews it every third of that; a holder that cannot renew stops
consuming a sixth of the lease before it runs out, so two machines never consume at once as long
as their clocks agree within that). A daemon stopping cleanly hands the lease over at once.

The lease carries the holder's *journal*, so the next holder neither skips nor repeats:
- the channel's cursor (an IMAP UIDVALIDITY:UID, a Matrix since-token), as a low watermark: the
  cursor from before the oldest message still being worked on, else the channel's cursor now;
- every message from that watermark on (and the last KEEP_SETTLED before it), by request id:
  `taken` (published before anything can answer it), `sending` (published before its reply is
  sent) or `done`, with the host that did it;
- the channel's `shared` state (ledger.py: which session each chat continues, approved senders,
  pending pairing codes), so conversations and approvals go on on the next holder.
A new holder sets the channel's cursor to the watermark and reads on from there: a message the
journal lists as `sending` or `done` is recorded as answered elsewhere and not run; one listed as
`taken` was interrupted on the old holder and runs here. A reply is sent only after its `sending`
is on the remote, and never for a message another host is sending or has answered; a reply cut
short by a crash is therefore not sent again by another machine (as on one machine, e-mail
marks it failed; Matrix resends it only from the same device, where the transaction id makes the
resend the same event).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...errors import HermesError
from ...store.lease import LeaseRecord, RefLease
from ...store.remote import Unreachable

log = logging.getLogger(__name__)

TAKEN, SENDING, DONE = "taken", "sending", "done"
KEEP_SETTLED = 200  # settled entries kept before the watermark (a cursor saved a little late)
MAX_ENTRIES = 2000  # beyond this, the oldest settled entries go even after the watermark
RETRY_S = 0.5  # between writes while the remote does not answer


class NotHeld(HermesError):
    """This machine does not hold the channel's lease (now): it must not take or answer messages."""


@dataclass
class Entry:
    state: str
    cursor: str | None  # the channel's cursor before this message was read
    host: str


class LeaseJournal:
    """The shared record of a channel's holder (see the module docstring), in take order."""

    def __init__(self, data: dict[str, Any] | None = None):
        data = data or {}
        self.cursor: str | None = data.get("cursor") if isinstance(data.get("cursor"), str) else None
        self.shared: dict[str, Any] = data["shared"] if isinstance(data.get("shared"), dict) else {}
        self.entries: dict[str, Entry] = {}
        for row in data.get("entries") or []:
            if isinstance(row, list) and len(row) == 4 and row[1] in (TAKEN, SENDING, DONE):
                rid, state, cursor, host = row
                self.entries[str(rid)] = Entry(state, cursor if isinstance(cursor, str) else None, str(host))

    def watermark(self, current: str | None) -> str | None:
        for e in self.entries.values():
            if e.state == TAKEN:
                return e.cursor
        return current if current is not None else self.cursor

    def data(self, current: str | None, shared: dict[str, Any] | None = None) -> dict[str, Any]:
        self.cursor = self.watermark(current)
        if shared is not None:
            self.shared = shared
        self._prune()
        return {"v": 1, "cursor": self.cursor, "shared": self.shared,
                "entries": [[rid, e.state, e.cursor, e.host] for rid, e in self.entries.items()]}

    def _prune(self) -> None:
        rids = list(self.entries)
        first = next((i for i, r in enumerate(rids) if self.entries[r].state == TAKEN), len(rids))
        drop = rids[: max(0, first - KEEP_SETTLED)]
        extra = len(rids) - len(drop) - MAX_ENTRIES
        if extra > 0:
            drop += [r for r in rids[len(drop):] if self.entries[r].state != TAKEN][:extra]
        for r in drop:
            del self.entries[r]


class ChannelHolder:
    """Holds (or waits for) one channel's lease on a thread of its own; `on_acquire(journal)`
    starts the channel where the journal says, `on_release(why)` stops it. `progress()` is the
    channel's cursor now, `shared()` the state the next holder takes in (published with each write)."""

    def __init__(self, lease: RefLease, lease_s: float, progress: Callable[[], str | None],
                 on_acquire: Callable[[LeaseJournal], None], on_release: Callable[[str], None],
                 shared: Callable[[], dict[str, Any] | None] = lambda: None):
        self.lease = lease
        self.host = lease.host
        self.lease_s = lease_s
        self.progress = progress
        self.shared = shared
        self.on_acquire = on_acquire
        self.on_release = on_release
        self.lock = threading.RLock()  # one write of the lease at a time (a push may take a while)
        self.flags = threading.Lock()  # held/active: a release never waits for a hanging push
        # a release (stopping the channel, which may take a while) and the next acquire never overlap:
        # an acquire during a slow stop was undone by the stop's end, leaving the lease renewed here
        # with the channel stopped, so no machine consumed
        self.transition = threading.Lock()
        self.journal = LeaseJournal()
        self.held = False
        self.sha: str | None = None
        self.expires = 0.0
        self.written = 0.0  # when the lease was last written (renewed) by this machine
        self.seen: LeaseRecord | None = None  # the other machine's lease, as last read
        self.lost: str | None = None  # set when a write found the lease gone: the thread stops the channel
        self.active = False  # the channel was started for this hold (so a release stops it)
        self.wake = threading.Event()
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None
        self.starter: threading.Thread | None = None
        self.guard: threading.Thread | None = None

    @property
    def margin(self) -> float:
        return self.lease_s / 6

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        self.thread = threading.Thread(target=self._loop, name=f"lease-{self.lease.name}", daemon=True)
        self.thread.start()
        self.guard = threading.Thread(target=self._guard_loop, name=f"lease-guard-{self.lease.name}", daemon=True)
        self.guard.start()

    def _guard_loop(self) -> None:
        """Stop consuming a margin before the lease runs out unless it was renewed: on a thread of
        its own, so a push hanging on a dead network never keeps the channel running past it."""
        while not self.stopped.is_set():
            deadline = self.expires - self.margin
            if self.active and self.held and time.time() >= deadline:
                why = self.lost = "cut off from the remote past the lease"
                self.held = False
                self.wake.set()
                self._release(why)
                continue
            self.stopped.wait(min(0.2, max(0.02, deadline - time.time())) if self.held else 0.2)

    def stop(self) -> None:
        """Stop the lease's thread: no more renewals nor takeovers (a held lease stays held until
        `hand_over` or until it runs out)."""
        self.stopped.set()
        self.wake.set()
        if self.thread:
            self.thread.join(30)
        if self.guard:
            self.guard.join(5)
        if self.starter:
            self.starter.join(90)

    def hand_over(self) -> None:
        """Write the lease as expired now, journal kept, so another machine takes it over at once
        instead of after `lease_s` (a daemon stopping cleanly)."""
        with self.lock:
            if self.held:
                try:
                    self._write(expires=time.time() - 1)
                except (Unreachable, NotHeld):
                    pass  # it runs out by itself
            self.held = False

    def holder(self) -> str | None:
        """Who holds the lease, as far as this machine knows."""
        if self.held:
            return self.host
        return self.seen.host if self.seen is not None else None

    def _loop(self) -> None:
        while not self.stopped.is_set():
            try:
                delay = self._renew() if self.held else self._try_acquire()
            except Exception:  # the lease thread never dies: report, wait, try again
                log.exception("lease %s: unexpected error", self.lease.name)
                delay = 1.0
            lost = self.lost
            if lost is not None:
                self._release(lost)
                continue
            self.wake.clear()
            self.wake.wait(delay)

    def _try_acquire(self) -> float:
        try:
            rec = self.lease.read()
        except Unreachable:
            return 1.0
        now = time.time()
        if rec is not None and rec.host != self.host and not rec.expired(now):
            self.seen = rec  # held elsewhere: look again just after it would run out
            return min(self.lease_s / 3, max(0.1, rec.expires - now + 0.1))
        journal = LeaseJournal(rec.journal if rec is not None else None)
        with self.transition, self.lock:
            expires = time.time() + self.lease_s
            try:
                sha = self.lease.write(rec.sha if rec else None, expires, journal.data(journal.cursor))
            except Unreachable:
                return 1.0
            if sha is None:
                return 0.1  # another machine was quicker: read again
            with self.flags:
                self.held, self.sha, self.expires, self.written, self.lost = True, sha, expires, time.time(), None
                self.journal = journal
                self.active = True
        # the channel starts on a thread of its own (a Matrix login may take a while): the lease is
        # renewed meanwhile
        self.starter = threading.Thread(target=self._start_channel, args=(journal,), name=f"lease-start-{self.lease.name}",
                                        daemon=True)
        self.starter.start()
        return self.lease_s / 3

    def _start_channel(self, journal: LeaseJournal) -> None:
        try:
            self.on_acquire(journal)
        except Exception as exc:
            log.exception("lease %s: starting the channel failed", self.lease.name)
            self.lost = f"the channel did not start here: {exc}"
            self.wake.set()

    def _renew(self) -> float:
        due = self.written + self.lease_s / 3
        if time.time() < due:
            return due - time.time()
        with self.lock:
            if not self.held:
                return 0.1
            try:
                self._write()
            except NotHeld:
                pass  # self.lost is set: the loop stops the channel
            except Unreachable:
                return RETRY_S  # the guard stops the channel if this lasts past the margin
        return self.lease_s / 3

    def _release(self, why: str) -> None:
        if self.starter is not None and self.starter is not threading.current_thread():
            self.starter.join(90)  # a channel still starting is stopped once it has started
        with self.transition:
            with self.flags:
                was = self.active
                self.held, self.active = False, False
                if self.lost == why:
                    self.lost = None
            if was:
                try:
                    self.on_release(why)
                except Exception:
                    log.exception("lease %s: stopping the channel failed", self.lease.name)

    # -- writing ----------------------------------------------------------------------------------
    def _write(self, expires: float | None = None) -> None:
        """Publish the journal with a fresh expiry (under self.lock). NotHeld if the remote's lease
        is no longer this machine's; Unreachable passes through."""
        expires = time.time() + self.lease_s if expires is None else expires
        sha = self.lease.write(self.sha, expires, self.journal.data(self.progress(), self.shared()))
        if sha is None:
            rec = self.lease.read()  # a write whose answer was lost may have gone through
            if rec is not None and rec.host == self.host and not rec.expired():
                self.sha = rec.sha
                sha = self.lease.write(self.sha, expires, self.journal.data(self.progress(), self.shared()))
        if sha is None:
            self.lost = "another machine took the lease over"
            self.held = False
            self.wake.set()
            raise NotHeld(f"{self.lease.name}: {self.lost}")
        self.sha, self.expires, self.written = sha, expires, time.time()

    def _publish(self) -> None:
        """Write now, retrying while the remote does not answer and the lease still holds."""
        while True:
            try:
                self._write()
                if not self.held:  # the guard gave the channel up meanwhile: the write came too late
                    raise NotHeld(f"{self.lease.name}: {self.lost or 'the lease ran out'}")
                return
            except Unreachable:
                if time.time() > self.expires - self.margin or self.stopped.is_set():
                    self.lost = "cut off from the remote past the lease"
                    self.held = False
                    self.wake.set()
                    raise NotHeld(f"{self.lease.name}: {self.lost}") from None
                time.sleep(RETRY_S)

    # -- the gateway's questions --------------------------------------------------------------------
    def state(self, rid: str) -> Entry | None:
        with self.lock:
            e = self.journal.entries.get(rid)
            return Entry(e.state, e.cursor, e.host) if e else None

    def take(self, rid: str) -> None:
        """Publish that this machine takes message `rid`, before anything can answer it. NotHeld:
        it must not be taken here (the channel does not move its cursor past it)."""
        with self.lock:
            if not self.held:
                raise NotHeld(f"{self.lease.name} is held by {self.holder() or 'another machine'}")
            e = self.journal.entries.get(rid)
            if e is None:
                self.journal.entries[rid] = Entry(TAKEN, self.progress(), self.host)
            elif e.state == TAKEN:
                e.host = self.host  # interrupted on the last holder: this machine runs it now
            self._publish()

    def sending(self, rid: str) -> str:
        """May the reply to `rid` be sent now? "go" (its `sending` is published), "wait" (this
        machine does not hold the channel now) or "answered" (another machine sends or sent one)."""
        with self.lock:
            if not self.held:
                return "wait"
            e = self.journal.entries.get(rid)
            if e is None:
                return "go"  # not a channel message (a note): nobody else knows it
            if e.state == DONE or (e.state == SENDING and e.host != self.host):
                return "answered"
            e.state, e.host = SENDING, self.host
            try:
                self._publish()
            except NotHeld:
                return "wait"
            return "go"

    def settled(self, rid: str) -> None:
        """The message is answered (or needs no answer); published with the next renewal."""
        with self.lock:
            e = self.journal.entries.get(rid)
            if e is not None:
                e.state, e.host = DONE, self.host


def lease_for(vault, account: str) -> RefLease | None:
    """The lease of a channel account on the vault's remote; None without a remote (one machine:
    nothing to share, the channel just runs)."""
    from ...store.host import host_id
    from ..work import remote_for, remote_url

    if remote_url(vault) is None:
        return None
    remote = remote_for(vault)
    remote.timeout_s = max(2.0, vault.config.sync.lease_s / 2)  # a lease write slower than that is too late anyway
    return RefLease(vault.git, remote, account, host_id(vault.state_dir))


__all__ = ["DONE", "SENDING", "TAKEN", "ChannelHolder", "Entry", "LeaseJournal", "NotHeld"]
