"""The cron scheduler: sleeps until the next due job (no minute ticker) and wakes on job changes.

At most one run per job and due time, across restarts and crashes: a due time is claimed before
its run starts (`store/claims.py`: the local ledger .hermes/cron-ledger.json, fsynced, or a claim
ref on the shared remote when several machines sync one vault), and committed outputs record
`due` too. With `catch_up`, a due time missed while the daemon was down runs once on start;
without it, the job waits for its next time. A claim may go over the network, so it is never made
while `running_lock` is held.

A job pinned with `host: <id>` runs only on the machine with that host id: others skip it without
claiming anything, and its own host decides alone (the local ledger), so it runs even while the
remote cannot be reached. An unpinned job on a machine that cannot reach the remote runs nothing:
its due time is recorded as missed (status, `cron list`, daemon log) and run once the remote
answers, if no machine ran it meanwhile (store/claims.py, service/sync_service.py). The claims are
the daemon's, built once and passed in (service/work.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from ..mind.jobs import CronJob
from ..store.claims import Claims


class Clock(Protocol):
    def now(self) -> datetime: ...
    def wait(self, event: threading.Event, seconds: float) -> bool: ...


class RealClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(max(0.0, seconds))




def claims_of(ledger: Claims, job: CronJob) -> Claims | None:
    """Who decides whether this machine runs `job`: the shared claims; for a job pinned with
    `host:` to this machine, this machine alone (nobody else runs it, so no claim is asked and it
    runs offline too); None for a job pinned to another machine (skipped, nothing claimed)."""
    if not job.host:
        return ledger
    return ledger.local if job.host == ledger.host else None


def next_runs(vault, jobs: list[CronJob], now: datetime) -> dict[str, datetime | None]:
    """job -> its next run here, from the claims as this machine last saw them (no network): what
    `status`, `cron list` and the web page show (None for a job pinned to another machine)."""
    from .work import cron_claims, open_claims

    ledger = cron_claims(vault, open_claims(vault))
    out: dict[str, datetime | None] = {}
    for j in jobs:
        claims = claims_of(ledger, j)
        out[j.name] = j.next_run(now, claims.last(j.name)) if claims is not None else None
    return out


def started_unfinished(vault, jobs: list[CronJob], finished: dict[str, str]) -> dict[str, datetime]:
    """One-shot job -> its due time, when its run was started here (the ledger is marked before a
    run) and has no output yet (`finished`: job -> the due time of its newest output): running now,
    or cut short by a crash. A one-shot has no next run from the moment it starts: this says why.
    (A recurring job's ledger also holds due times passed without a run, so it is not read so.)"""
    from .work import cron_claims, open_claims

    ledger = cron_claims(vault, open_claims(vault))
    out: dict[str, datetime] = {}
    for j in (j for j in jobs if j.schedule.at is not None):
        claims = claims_of(ledger, j)
        last = claims.last(j.name) if claims is not None else None
        done = finished.get(j.name)
        try:
            done_at = datetime.fromisoformat(done) if done else None
        except ValueError:
            done_at = None
        if last is not None and (done_at is None or done_at < last):
            out[j.name] = last
    return out


@dataclass
class Due:
    job: CronJob
    due: datetime


def catch_up_runs(jobs: list[CronJob], ledger: Claims, now: datetime) -> list[Due]:
    """At start: the latest due time each known job missed while the daemon was down. With
    catch_up it runs once; without, it is marked as passed and the job waits for its next time.
    A one-shot that never ran runs once either way, as `cron list` says (Schedule.next_due)."""
    out = []
    for job in jobs:
        claims = claims_of(ledger, job)
        if claims is None:
            continue  # pinned to another machine
        last = claims.last(job.name)
        if not job.enabled or (last is None and job.schedule.at is None):
            continue  # a job never seen before starts counting now (see Scheduler.tick)
        missed = job.schedule.previous_due(now, last)
        if missed is None:
            continue
        if job.catch_up or job.schedule.at is not None:  # a one-shot not run yet is owed (see next_due)
            out.append(Due(job, missed))
        else:
            claims.passed(job.name, missed)
    return out


def start_thread(job: CronJob, work: Callable[[], None]) -> None:
    threading.Thread(target=work, name=f"cron-{job.name}", daemon=True).start()


class Scheduler:
    def __init__(self, ledger: Claims, run: Callable[[CronJob, datetime], None], clock: Clock | None = None,
                 start: Callable[[CronJob, Callable[[], None]], None] = start_thread,
                 on_error: Callable[[str], None] = lambda message: None):
        self.ledger = ledger
        self.run = run  # one job run; must not raise
        self.clock = clock or RealClock()
        self.start_run = start  # how a run is started (a thread; tests pass one that records or runs inline)
        self.on_error = on_error
        self.running: set[str] = set()  # jobs with a run in progress: never started twice at once
        self.running_lock = threading.Lock()
        self.jobs: dict[str, CronJob] = {}
        self.wake = threading.Event()
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None
        self.started_once = False

    def update(self, jobs: list[CronJob]) -> None:
        """New job set (a file changed): recompute the next wake-up at once."""
        self.jobs = {j.name: j for j in jobs}
        self.wake.set()

    def start(self, jobs: list[CronJob]) -> None:
        """Start the scheduler's thread; it first fires what was missed while the daemon was down.
        There, not here: with shared claims each catch-up asks the remote (a push or two), and the
        daemon's start would wait for them before its sync even began."""
        self.jobs = {j.name: j for j in jobs}
        now = self.clock.now()
        self.thread = threading.Thread(target=self._loop, args=(now,), name="scheduler", daemon=True)
        self.thread.start()

    def _catch_up(self, now: datetime) -> None:
        for d in catch_up_runs(list(self.jobs.values()), self.ledger, now):
            try:
                self._fire(d.job, d.due)
            except Exception as exc:  # one bad job never stops the others (nor the scheduler)
                self.on_error(f"cron {d.job.name}: {type(exc).__name__}: {exc}")

    def stop(self) -> None:
        self.stopped.set()
        self.wake.set()
        if self.thread:
            self.thread.join(5)

    def plan(self, now: datetime) -> list[Due]:
        """Next due time per enabled job, soonest first."""
        out = []
        for job in self.jobs.values():
            claims = claims_of(self.ledger, job)
            if claims is None:
                continue  # pinned to another machine
            try:
                due = job.next_run(now, claims.last(job.name))
            except Exception:
                continue  # reported by tick
            if due is not None:
                out.append(Due(job, due))
        return sorted(out, key=lambda d: d.due)

    def tick(self, now: datetime) -> list[Due]:
        """Fire every job whose due time has come (at most once each); returns what fired."""
        fired = []
        for job in list(self.jobs.values()):
            try:
                if self._tick_job(job, now):
                    fired.append(Due(job, self._claims(job).last(job.name) or now))
            except Exception as exc:  # one bad job never stops the others (nor the scheduler)
                self.on_error(f"cron {job.name}: {type(exc).__name__}: {exc}")
        return fired

    def _claims(self, job: CronJob) -> Claims:
        """The claims deciding `job` here (never called for a job pinned elsewhere)."""
        return claims_of(self.ledger, job) or self.ledger.local

    def _tick_job(self, job: CronJob, now: datetime) -> bool:
        if not job.enabled or claims_of(self.ledger, job) is None:
            return False  # off, or pinned to another machine: nothing claimed, nothing recorded
        last = self._claims(job).last(job.name)
        if last is None and job.schedule.at is None:
            self._claims(job).passed(job.name, now)  # first seen: only times after now are due
            return False
        due = job.schedule.previous_due(now, last)
        return due is not None and self._fire(job, due)

    def _fire(self, job: CronJob, due: datetime) -> bool:
        with self.running_lock:
            busy = job.name in self.running
            if not busy:
                self.running.add(job.name)  # reserved: a second tick cannot fire it meanwhile
        if busy:
            self.on_error(f"cron {job.name}: the run due {due.isoformat()} is skipped, the previous run is still going")
            self._claims(job).passed(job.name, due)  # that time is passed, not owed
            return False
        try:
            claimed = self._claims(job).mark(job.name, due)  # may ask the remote: outside running_lock
        except BaseException:
            self._release(job)
            raise
        if not claimed:
            self._release(job)
            return False
        self._start(job, due)
        return True

    def run_claimed(self, job: CronJob, due: datetime) -> bool:
        """Run a due time this machine has already claimed (a takeover, a catch-up after being
        offline); False if the job is running right now (the claim then expires for someone else)."""
        with self.running_lock:
            if job.name in self.running:
                return False
            self.running.add(job.name)
        self._start(job, due)
        return True

    def _release(self, job: CronJob) -> None:
        with self.running_lock:
            self.running.discard(job.name)

    def _start(self, job: CronJob, due: datetime) -> None:
        def work() -> None:
            try:
                self.run(job, due)
                self._claims(job).done(job.name, due)  # a shared claim becomes `done` with the next push
            finally:
                self._release(job)

        self.start_run(job, work)

    def _loop(self, started: datetime | None = None) -> None:
        if started is not None:
            self._catch_up(started)
        while not self.stopped.is_set():
            try:
                self.tick(self.clock.now())
                upcoming = self.plan(self.clock.now())
                delay = (upcoming[0].due - self.clock.now()).total_seconds() if upcoming else 3600.0
            except Exception as exc:  # the scheduler thread never dies: report, wait, try again
                self.on_error(f"scheduler: {type(exc).__name__}: {exc}")
                delay = 60.0
            self.wake.clear()
            self.clock.wait(self.wake, min(delay, 3600.0))
