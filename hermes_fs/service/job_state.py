"""What each cron job is doing, read once for `cron list`, `status` and the web Jobs page, so the
three never disagree: its next run here, a one-shot running now, its last run's status, a due time
missed while offline. No network; one output file is read per job (the newest)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..errors import InputError
from ..mind import jobs as cron
from ..store.host import host_id
from ..store.vault import Vault


@dataclass
class JobState:
    job: str
    schedule: str  # in words
    enabled: bool
    next_run: str | None  # ISO 8601; None: no future run here (disabled, done, pinned elsewhere, running)
    last_status: str | None  # the newest output's status (ok | error); None: never ran
    host: str | None  # `host:` pin
    missed: str | None  # a due time missed while the remote could not be reached
    running: str | None  # a one-shot started here without an output yet: its due time (ISO 8601)
    notify: list[str]  # the notify targets its results go to

    def pinned_elsewhere(self, here: str) -> bool:
        return bool(self.host) and self.host != here and self.enabled

    def next_words(self, here: str, now: datetime) -> str:
        """What comes next for the job, as `cron list`, `status` and the web page say it."""
        if self.pinned_elsewhere(here):
            return f"on {self.host} only"
        if self.running:
            return f"running now (started for {self.running}; no output yet)"
        return next_run_words(self.next_run, self.enabled, now)


def next_run_words(next_run: str | None, enabled: bool, now: datetime) -> str:
    """A job's next run for people: its time, or why there is none; a time already passed (a
    one-shot not run yet) is due at once."""
    if not enabled:
        return "disabled"
    if not next_run:
        return "no future run"
    if datetime.fromisoformat(next_run) <= now:
        return f"{next_run} (due: runs at once while the daemon runs)"
    return next_run


@dataclass
class JobStates:
    jobs: list[JobState]
    errors: list[InputError]  # job files that do not load
    here: str  # this machine's host id, for `host:` pins


def job_states(vault: Vault, now: datetime) -> JobStates:
    from .cron_runner import last_runs
    from .scheduler import next_runs, started_unfinished

    jobs, errors = cron.load_jobs(vault.files, vault.config)
    last = last_runs(vault)
    upcoming = next_runs(vault, jobs, now)
    running = started_unfinished(vault, jobs, {name: run.due for name, run in last.items()})
    here, missed = _host_and_missed(vault)
    states = []
    for j in jobs:
        nxt = upcoming[j.name]
        states.append(JobState(
            job=j.name, schedule=j.schedule.describe(), enabled=j.enabled,
            next_run=nxt.isoformat(timespec="seconds") if nxt else None,
            last_status=last[j.name].status if j.name in last else None, host=j.host, missed=missed.get(j.name),
            running=running[j.name].isoformat(timespec="seconds") if j.name in running else None,
            notify=list(j.notify)))
    return JobStates(states, errors, here)


def _host_and_missed(vault: Vault) -> tuple[str, dict[str, str]]:
    """This machine's host id and job -> the due time it missed while the remote could not be
    reached (none without a remote)."""
    if vault.config.remote is None:
        return host_id(vault.state_dir), {}
    from .sync import sync_status

    st = sync_status(vault)
    return st["host"], dict(st["missed"])
