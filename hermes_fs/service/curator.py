"""The curator in the daemon: a curate run every `curate.every` (default weekly; `false` turns it off).

`every` is `weekly`, `daily`, or a schedule as in cron jobs (`every 3d`, `0 4 * * 0`, ...). The last
run's time is kept in `.hermes/curate.json`, so a restart neither repeats a run nor skips one; a run
that finds nothing leaves no branch. Runs take `curate.policy` (review by default: the branch waits
for `hermes-fs review`). One thread that sleeps until the next due time; stop() wakes it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import UTC, datetime

from ..errors import InputError
from ..mind.schedule import Schedule, parse_schedule
from ..store.files import atomic_write
from .host import DaemonHost

log = logging.getLogger(__name__)
STATE = "curate.json"
WORDS = {"weekly": "every 7d", "daily": "every 1d", "monthly": "every 30d"}


def schedule_of(every: str | bool, timezone: str = "UTC") -> Schedule | None:
    """The schedule `curate.every` names (in cron.timezone); None when curation is off."""
    from zoneinfo import ZoneInfo

    if every is False or every is None:
        return None
    if every is True:
        every = "weekly"
    text = WORDS.get(str(every).strip().lower(), str(every))
    try:
        return parse_schedule(text, ZoneInfo(timezone), "hermes.yaml: curate.every")
    except (InputError, KeyError, ValueError) as exc:
        raise InputError(f"curate.every: {exc}") from None


class CuratorService:
    name = "curator"

    def __init__(self, daemon: DaemonHost):
        self.daemon = daemon
        self.vault = daemon.vault
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def state_path(self):
        return self.vault.state_dir / STATE

    def last_run(self) -> datetime | None:
        try:
            return datetime.fromisoformat(json.loads(self.state_path.read_text())["last_run"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def next_due(self, now: datetime) -> datetime | None:
        """When the next run is due (it may be in the past: then it runs now); None: off."""
        cfg = self.vault.config
        sched = schedule_of(cfg.curate.every, cfg.cron.timezone)
        if sched is None:
            return None
        last = self.last_run()
        if last is None:  # never ran: the first run waits one period from the daemon's first start
            last = now
            self._mark(now)
        return sched.next_due(last, last)  # the first due time after the last run

    def start(self) -> None:
        schedule_of(self.vault.config.curate.every, self.vault.config.cron.timezone)  # a bad setting fails the start
        self._thread = threading.Thread(target=self._loop, name="curator", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            now = datetime.now(UTC)
            try:
                due = self.next_due(now)
            except InputError as exc:
                self.daemon.error(str(exc))
                return
            if due is None:
                self._stop.wait(3600)  # off (settings may change): look again later
                continue
            if due > now:
                self._stop.wait(min((due - now).total_seconds(), 3600))
                continue
            self.run_once(now)

    def run_once(self, now: datetime | None = None) -> None:
        from ..learning.curate import curate

        now = now or datetime.now(UTC)
        self._mark(now)  # before the run: a crash mid-run waits a period instead of retrying at once
        self.daemon.note("curate started")
        started = time.monotonic()
        try:
            outcome = curate(self.vault)
        except Exception as exc:  # pipeline.run reports failures itself; this is a bug
            log.exception("curate: unexpected error")
            self.daemon.error(f"curate failed: {type(exc).__name__}: {exc}")
            return
        self.daemon.note(f"{outcome.line()} ({time.monotonic() - started:.1f}s)")
        if not outcome.ok:
            self.daemon.error(outcome.line())

    def _mark(self, when: datetime) -> None:
        atomic_write(self.state_path, json.dumps({"last_run": when.isoformat()}))
