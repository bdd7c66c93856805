"""The daemon's sync part: a round as soon as main moves here and every `sync.interval_s`, and,
on a timer of its own, the claims: renewing this machine's, taking over those of machines that
died, and running what it took over and the due times missed while offline.

The rounds are `sync.Syncer`'s; the claims are the daemon's (`DaemonHost.claims`, built once);
the jobs are the scheduler's (`DaemonHost.scheduler`), and a request whose claim it took over goes
to the inbox through `DaemonHost.take_request`. Figures behind the choices here are in the lab
note docs/benchmarks/notes/2026-12-03-sync-figures.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

from ..mind.jobs import CronJob
from ..store.claims import ClaimRecord, cron_key, parse_cron_key
from ..store.git import MAIN
from ..store.remote import Unreachable, mirror_of
from .host import DaemonHost
from .sync import Round, Syncer
from .watcher import written_events
from .work import INBOX_KEY, request_key, request_name, result_of

log = logging.getLogger("hermes_fs.sync")

RUN_AT_ONCE = 4
"""At most this many cron runs at once may a machine start from takeovers and catch-ups; the rest
wait in its queue, their claims held and renewed (SyncService._start_queued). Started all at once
after a partition, or after the other machines died holding many claims, they overload the
machine, and each run then outlasts the claims' expiry."""
PUSH_GAP_S = 1.0  # after a push of main, the next round waits this long even if main moved again


def watch_main(root: Path, poke: Callable[[], None]) -> Any:
    """A started watchdog Observer calling `poke` whenever main moves (git writes main.lock and
    renames it). Not when main is only read: every git command opens the ref, so a round (dozens
    of git calls) poked on reads would start the next at once, for ever, and an idle daemon
    would spin."""
    from watchdog.events import FileSystemEventHandler
    from watchdog.observers import Observer

    class MainMoved(FileSystemEventHandler):
        def on_any_event(self, event) -> None:
            if event.is_directory:
                return
            if PurePosixPath(str(getattr(event, "dest_path", "") or event.src_path)).name == MAIN:
                poke()

    observer = Observer()
    observer.schedule(MainMoved(), str(root / ".git" / "refs" / "heads"), recursive=False,
                      event_filter=written_events())  # reads are not even queued (watcher.py)
    observer.start()
    return observer


class SyncService:
    """The daemon's continuous sync (a DaemonService): a round as soon as main moves here (so
    this machine's commits go up at once) and every `sync.interval_s` (one cheap ls-remote), so
    the interval, not git, sets the delay. On a timer of its own it renews this machine's claims
    and takes over those of machines that died; it runs what it took over, and the due times it
    missed while offline, at most RUN_AT_ONCE at a time."""

    name = "sync"

    def __init__(self, daemon: DaemonHost):
        self.daemon = daemon
        self.vault = daemon.vault
        self.syncer = Syncer(self.vault, daemon.claims)
        self.syncer.host_first = True
        self.syncer.claims.on_finish = self.poke
        self.syncer.room = self._room
        self.wake = threading.Event()
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None
        self.renewer: threading.Thread | None = None
        self.observer: Any = None  # watchdog's Observer, started with the service
        self.offline: str | None = None
        self.queue: dict[str, tuple[str, datetime, str]] = {}  # claim key -> (job, due, why): held, waiting for a slot
        self.queue_lock = threading.Lock()

    def poke(self) -> None:
        self.wake.set()

    def start(self) -> None:
        self.daemon.catch_up.hold(self.name)  # agent work starts after the first round (catch_up.py)
        self.observer = watch_main(self.vault.root, self.poke)
        self.thread = threading.Thread(target=self._loop, name="sync", daemon=True)
        self.thread.start()
        self.renewer = threading.Thread(target=self._renew_loop, name="sync-renew", daemon=True)
        self.renewer.start()

    def stop(self) -> None:
        self.stopped.set()
        self.syncer.stopping.set()
        self.wake.set()
        if self.observer is not None:
            self.observer.stop()
            self.observer.join(5)
        if self.thread is not None:
            self.thread.join(30)
        if self.renewer is not None:
            self.renewer.join(10)

    def _renew_loop(self) -> None:
        """Running claims are renewed on their own timer (every sixth of their time), never
        behind a slow round: a live, connected machine never loses a claim it is working on. The
        same timer looks at the remote's claims itself and takes over those of dead machines as
        soon as they expire, and starts the runs taken over as run slots free up. It looks at once
        at start (a restarted machine's own dead runs are taken over without waiting a turn) and
        whatever the last round said: a round that is still retrying its push of main has not
        said the remote answers again, and waiting for it kept takeovers back."""
        tick = self.vault.config.sync.claim_ttl_s * self.syncer.claims.RENEW_EVERY / 2
        self._wait_begun()  # which dead runs to take over depends on the jobs
        while not self.stopped.is_set():
            began = time.time()
            try:  # renewals first: a machine back from a partition may have a second before its claims expire
                for key in self.syncer.claims.renew():
                    self.daemon.error(f"sync: lost claim {key} (cut off past its expiry; another machine took it over)")
                renewed = time.time()
                self.syncer.claims.look()
                looked = time.time()
                self._take_over(self.syncer.claims.dead())
                log.debug("sync: renewer: renewed in %.2f s, looked in %.2f s, took over in %.2f s, %d queued",
                          renewed - began, looked - renewed, time.time() - looked, len(self.queue))
            except Unreachable:
                pass  # offline: the claims hold until their expiry
            except Exception:
                log.exception("sync: renewing claims failed")
            self._start_queued()
            self.stopped.wait(tick)

    def _loop(self) -> None:
        while not self.stopped.is_set():
            self.wake.clear()
            pushed = False
            try:
                r = self.syncer.round()
                self._wait_begun()
                self._after(r)
                pushed = r.pushed
            except Exception as exc:  # the sync thread never dies: report, wait, try again
                log.exception("sync: round failed")
                self.daemon.error(f"sync failed: {type(exc).__name__}: {exc}")
            self.daemon.catch_up.release(self.name)  # caught up, or tried: the work waits no longer
            if pushed:  # let the other machines in: back-to-back pushes from one machine make
                self.stopped.wait(PUSH_GAP_S)  # every other machine's merge lose the race for main
            self.wake.wait(self.vault.config.sync.interval_s)

    def _wait_begun(self) -> None:
        """Until the daemon has loaded its jobs and started its parts: this service starts before
        them (services.py), and what it runs or lets go depends on the jobs. A daemon stopping
        meanwhile opens it too (CatchUp.give_up)."""
        while not self.daemon.catch_up.begun.wait(0.5) and not self.stopped.is_set():
            pass

    def _after(self, r: Round) -> None:
        if r.offline:
            if self.offline is None:
                self.daemon.error(f"sync: remote unreachable ({r.offline}); due jobs wait until it answers")
            self.offline = r.offline
            return
        if self.offline is not None:
            self.daemon.note("sync: remote reachable again")
            self.offline = None
        for path in r.conflicts:
            self.daemon.note(f"sync: conflict, the other machine's version is kept beside: {path}")
        for path in r.withdrawn:
            self.daemon.error(f"sync: withdrew {path}: this machine's claim expired while it worked; the other result stands")
        for job, due in r.caught_up:
            self._queue(cron_key(job, due), job, due, "missed while offline, nobody ran it")
        self._start_queued()
        if r.pruned:
            self.daemon.note(f"sync: pruned {len(r.pruned)} done claim(s) older than a week from the remote")

    def _take_over(self, records: list[ClaimRecord]) -> None:
        """Take over the claims of dead holders (renewer thread only: never behind, nor in the way
        of, a round), in one push: every cron one this machine may run, its run queued (`_queue`),
        and every request whose file is here, handed to the daemon's inbox once its claim is won
        (`DaemonHost.take_request`; the inbox's claim step finds the claim held here). Taking over
        is not starting: a claim taken over is renewed while its run waits for a slot, so it never
        expires again meanwhile. All at once, whatever the free slots: taking over only as many as
        there were slots left the others to expire further, and one takeover after the other
        (three network calls each) came late."""
        cron, asked = [], {}
        for rec in records:
            if rec.key.startswith(INBOX_KEY):
                if (rel := self._asked_here(rec)) is not None:
                    asked[rec.key] = (rec, rel)
            elif self._may_take(rec):
                cron.append(rec)
            elif rec.host == self.syncer.host:
                self.syncer.claims.forget(rec.key)  # an orphan of a job gone or pinned elsewhere: it expires
        won = self.syncer.claims.take_over(cron + [rec for rec, _ in asked.values()])
        for key in won:
            if key in asked:
                rec, rel = asked[key]
                self.daemon.note(f"request {request_name(key)}: its claimant {rec.host} stopped answering; "
                                 "taking it here")
                self.daemon.take_request(rel)
        holders = {rec.key: rec.host for rec in cron}
        mirror, head = self.syncer.store.rev(mirror_of(self.syncer.branch_ref)), self.syncer.store.head()
        for key in (k for k in won if k in holders):
            rel = result_of(key)
            # published, the claim is only closed: on the remote's main (main here may hold a dead
            # machine's result merged from its host ref and not published yet), or here if this
            # machine made it (a process of it that died)
            where = (mirror, head) if holders[key] == self.syncer.host else (mirror,)
            if rel and any(self.syncer.store.read_file(c, rel) is not None for c in where if c):
                self.syncer.claims.finish(key, [rel])
                continue
            parsed = parse_cron_key(key)
            if parsed:
                why = "whose claim expired" if holders[key] != self.syncer.host else "a process of this machine that died"
                self._queue(key, *parsed, f"took over from {holders[key]}, {why}")

    def _queue(self, key: str, job: str, due: datetime, why: str) -> None:
        """A due time this machine holds the claim of (taken over, caught up): run when a slot is free."""
        with self.queue_lock:
            self.queue[key] = (job, due, why)

    def _start_queued(self) -> None:
        """Start queued runs, the oldest due first, while fewer than RUN_AT_ONCE run here. A claim
        lost meanwhile (cut off past its expiry) or already done is dropped; one of a job gone or
        now pinned elsewhere is let go (it expires); one whose job is running waits."""
        claims = self.syncer.claims
        with self.queue_lock:
            for key, (job, due, why) in sorted(self.queue.items(), key=lambda item: item[1][1]):
                if self._slots() <= 0:
                    break
                held = claims.held.get(key)
                if held is None or held.done:
                    del self.queue[key]
                    continue
                found = self._jobs().get(job)
                if found is None or (found.host or self.syncer.host) != self.syncer.host:
                    del self.queue[key]
                    claims.forget(key)
                    continue
                if self._run(job, due, why):
                    del self.queue[key]

    def _slots(self) -> int:
        """How many more cron runs this machine may start now (RUN_AT_ONCE)."""
        scheduler = self.daemon.scheduler
        return max(0, RUN_AT_ONCE - (len(scheduler.running) if scheduler is not None else 0))

    def _room(self) -> int:
        """How many due times missed offline a round may claim: the free slots the queue leaves."""
        return max(0, self._slots() - len(self.queue))

    def _may_take(self, rec: ClaimRecord) -> bool:
        parsed = parse_cron_key(rec.key)
        if parsed is None or parsed[0] not in self._jobs():
            return False
        if (self._jobs()[parsed[0]].host or self.syncer.host) != self.syncer.host:
            return False  # pinned to another machine now: not this one's to take
        scheduler = self.daemon.scheduler
        # this machine runs that job right now: not a dead machine's claim to take
        return scheduler is None or parsed[0] not in scheduler.running

    def _asked_here(self, rec: ClaimRecord) -> str | None:
        """The inbox path of a request claimed by a machine that died, if main still asks it and
        its file is here to be taken (not answered meanwhile, not already taken here)."""
        rel = f"inbox/{request_name(rec.key)}"
        if request_key(self.vault, rel) != rec.key:
            return None  # answered meanwhile (main no longer holds that request)
        return rel if (self.vault.root / rel).is_file() else None

    def _jobs(self) -> dict[str, CronJob]:
        scheduler = self.daemon.scheduler
        return scheduler.jobs if scheduler is not None else {}

    def _run(self, job_name: str, due: datetime, why: str) -> bool:
        """Start a claimed due time; False if its job is running here right now (it waits)."""
        job = self._jobs().get(job_name)
        scheduler = self.daemon.scheduler
        if job is None or scheduler is None:
            return False
        if not scheduler.run_claimed(job, due):
            return False
        self.daemon.note(f"cron {job_name} due {due.isoformat()}: {why}; running it here")
        return True
