"""The cron scheduler: sleeps until the next due job (no minute ticker) and wakes on job changes.

At most one run per job and due time, across restarts and crashes: a due time is written to the
ledger (.hermes/cron-ledger.json, fsynced) before its run starts, and committed outputs record
`due` too, so the ledger can be rebuilt from history. With `catch_up`, a due time missed while the
daemon was down runs once on start; without it, the job waits for its next time.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Protocol

from ..mind.jobs import CronJob


class Clock(Protocol):
    def now(self) -> datetime: ...
    def wait(self, event: threading.Event, seconds: float) -> bool: ...


class RealClock:
    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(max(0.0, seconds))


class Ledger:
    """job -> the latest due time started (ISO). Written atomically and fsynced before a run."""

    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()
        try:
            self.data: dict[str, str] = json.loads(path.read_text())
        except (OSError, ValueError):
            self.data = {}

    def last(self, job: str) -> datetime | None:
        value = self.data.get(job)
        return datetime.fromisoformat(value) if value else None

    def mark(self, job: str, due: datetime) -> bool:
        """Claim (job, due); False if it was already claimed (never run twice)."""
        with self.lock:
            last = self.last(job)
            if last is not None and due <= last:
                return False
            self.data[job] = due.isoformat()
            tmp = self.path.with_suffix(".tmp")
            with open(tmp, "w") as f:
                f.write(json.dumps(self.data, indent=2))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            return True


def previous_due(job: CronJob, now: datetime, last: datetime | None) -> datetime | None:
    """The latest due time <= now that has not run yet (None if none)."""
    s = job.schedule
    if s.at is not None:
        return s.at if s.at <= now and (last is None or last < s.at) else None
    if s.interval is not None:
        if last is None:
            return None  # first start: the interval counts from now
        due = last + s.interval
        return due if due <= now else None
    from croniter import croniter

    prev = croniter(s.cron, now.astimezone(s.tz)).get_prev(datetime)
    if last is None or prev <= last:
        return None if last is not None else prev
    if _wall(prev, s.tz) == _wall(last, s.tz):
        return None  # the repeated hour when clocks fall back: 02:30 happens twice, the job runs once
    return prev


def _wall(t: datetime, tz) -> datetime:
    return t.astimezone(tz).replace(tzinfo=None, fold=0)


def next_due(job: CronJob, now: datetime, last: datetime | None) -> datetime | None:
    """The next due time strictly after `now` for an enabled job."""
    if not job.enabled:
        return None
    s = job.schedule
    if s.interval is not None:
        base = last or now
        due = base + s.interval
        while due <= now:
            due += s.interval
        return due
    return s.next_after(now)


@dataclass
class Due:
    job: CronJob
    due: datetime


def catch_up_runs(jobs: list[CronJob], ledger: Ledger, now: datetime) -> list[Due]:
    """At start: the latest due time each known job missed while the daemon was down. With
    catch_up it runs once; without, it is marked as passed and the job waits for its next time."""
    out = []
    for job in jobs:
        last = ledger.last(job.name)
        if not job.enabled or (last is None and job.schedule.at is None):
            continue  # a job never seen before starts counting now (see Scheduler.tick)
        missed = previous_due(job, now, last)
        if missed is None:
            continue
        if job.catch_up:
            out.append(Due(job, missed))
        else:
            ledger.mark(job.name, missed)
    return out


class Scheduler:
    def __init__(self, ledger: Ledger, run: Callable[[CronJob, datetime], None], clock: Clock | None = None):
        self.ledger = ledger
        self.run = run  # called in the scheduler thread's executor; must not raise
        self.clock = clock or RealClock()
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
        self.jobs = {j.name: j for j in jobs}
        now = self.clock.now()
        for d in catch_up_runs(list(self.jobs.values()), self.ledger, now):
            self._fire(d.job, d.due)
        self.thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        self.wake.set()
        if self.thread:
            self.thread.join(5)

    def plan(self, now: datetime) -> list[Due]:
        """Next due time per enabled job, soonest first."""
        out = []
        for job in self.jobs.values():
            due = next_due(job, now, self.ledger.last(job.name))
            if due is not None:
                out.append(Due(job, due))
        return sorted(out, key=lambda d: d.due)

    def tick(self, now: datetime) -> list[Due]:
        """Fire every job whose due time has come (at most once each); returns what fired."""
        fired = []
        for job in list(self.jobs.values()):
            if not job.enabled:
                continue
            last = self.ledger.last(job.name)
            if last is None and job.schedule.at is None:
                self.ledger.mark(job.name, now)  # first seen: only times after now are due
                continue
            due = previous_due(job, now, last)
            if due is not None and self._fire(job, due):
                fired.append(Due(job, due))
        return fired

    def _fire(self, job: CronJob, due: datetime) -> bool:
        if not self.ledger.mark(job.name, due):
            return False
        threading.Thread(target=self.run, args=(job, due), name=f"cron-{job.name}", daemon=True).start()
        return True

    def _loop(self) -> None:
        while not self.stopped.is_set():
            now = self.clock.now()
            self.tick(now)
            upcoming = self.plan(self.clock.now())
            delay = (upcoming[0].due - self.clock.now()).total_seconds() if upcoming else 3600.0
            self.wake.clear()
            self.clock.wait(self.wake, min(delay, 3600.0))
