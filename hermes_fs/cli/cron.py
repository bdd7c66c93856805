"""`hermes-fs cron`: the scheduled jobs of the vault."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click

from ..errors import InputError
from .context import vault_for
from .options import vault_option
from .sync import cron_host_and_missed
from .term import columns, echo, emit_json, next_run_words


@click.group("cron")
def cron_group():
    """Scheduled jobs: `cron list`, `cron run JOB`."""


@cron_group.command("list")
@vault_option
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def cron_list(ctx: click.Context, as_json: bool):
    """Each job: schedule in words, next run, last status."""

    from ..mind import jobs as cron
    from ..service.cron_runner import last_runs
    from ..service.scheduler import next_runs

    v = vault_for(ctx)
    jobs, errors = cron.load_jobs(v.files, v.config)
    last = last_runs(v)
    now = datetime.now(UTC)
    upcoming = next_runs(v, jobs, now)
    here, missed = cron_host_and_missed(v)
    rows: list[dict[str, Any]] = []
    for j in jobs:
        nxt = upcoming[j.name]
        rows.append({"job": j.name, "schedule": j.schedule.describe(), "enabled": j.enabled,
                     "next_run": nxt.isoformat(timespec="seconds") if nxt else None, "last_status": last[j.name].status if j.name in last else None,
                     "host": j.host, "missed": missed.get(j.name)})
    if as_json:
        emit_json(rows)
    else:
        table = [[str(r["job"]), str(r["schedule"]) + (f", on {r['host']}" if r["host"] else ""),
                  f"on {r['host']} only" if r["host"] and r["host"] != here and r["enabled"]
                  else next_run_words(r["next_run"], bool(r["enabled"]), now),
                  str(r["last_status"] or "-") + (f" (missed {r['missed']}: offline)" if r["missed"] else "")]
                 for r in rows]
        for line in columns([["JOB", "SCHEDULE", "NEXT", "LAST"], *table] if table else []):
            echo(line)
    for e in errors:
        echo(f"error: {e}", err=True)
    if errors:
        ctx.exit(1)


@cron_group.command("run")
@vault_option
@click.argument("job")
@click.pass_context
def cron_run(ctx: click.Context, job: str):
    """Run a job now (its output is stored, committed and delivered as on schedule)."""

    from .. import run_job
    from ..mind import jobs as cron

    v = vault_for(ctx)
    jobs, _errors = cron.load_jobs(v.files, v.config)
    found = {j.name: j for j in jobs}.get(job)
    if not found:
        raise InputError(f"no valid job {job!r} in cron/ (see `hermes-fs cron list`)")
    run = run_job(v, found, datetime.now(UTC))
    echo(f"{job}: {run.status} -> {run.rel}")
    if not run.ok:
        ctx.exit(1)
