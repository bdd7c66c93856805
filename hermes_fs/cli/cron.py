"""`hermes-fs cron`: the scheduled jobs of the vault."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from ..errors import InputError
from .context import vault_for
from .options import vault_option
from .term import columns, echo, emit_json


@click.group("cron")
def cron_group():
    """Scheduled jobs: list, run, enable, disable, new."""


@cron_group.command("list")
@vault_option
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def cron_list(ctx: click.Context, as_json: bool):
    """Each job: schedule in words, next run, last status."""

    from dataclasses import asdict

    from ..service.job_state import job_states

    v = vault_for(ctx)
    now = datetime.now(UTC)
    states = job_states(v, now)
    if as_json:
        emit_json([asdict(j) for j in states.jobs])
    else:
        table = [[j.job, j.schedule + (f", on {j.host}" if j.host else ""), j.next_words(states.here, now),
                  (j.last_status or "-") + (f" (missed {j.missed}: offline)" if j.missed else "")]
                 for j in states.jobs]
        for line in columns([["JOB", "SCHEDULE", "NEXT", "LAST"], *table] if table else []):
            echo(line)
    for e in states.errors:
        echo(f"error: {e}", err=True)
    if states.errors:
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


@cron_group.command("enable")
@vault_option
@click.argument("job")
@click.pass_context
def cron_enable(ctx: click.Context, job: str):
    """Turn a job on (`enabled: true` in cron/JOB.md, committed as your edit)."""
    _set_enabled(ctx, job, True)


@cron_group.command("disable")
@vault_option
@click.argument("job")
@click.pass_context
def cron_disable(ctx: click.Context, job: str):
    """Turn a job off; its file, prompt and history stay."""
    _set_enabled(ctx, job, False)


def _set_enabled(ctx: click.Context, job: str, enabled: bool) -> None:
    from ..service.person_edits import set_job_enabled

    saved = set_job_enabled(vault_for(ctx), job, enabled)
    word = "enabled" if enabled else "disabled"
    echo(f"{job}: {word}" + ("" if saved.sha else f" already ({saved.message})") + (f", {saved.message}" if saved.sha else ""))


@cron_group.command("new")
@vault_option
@click.argument("job")
@click.option("--schedule", required=True, help='When: "every day at 07:00", "every 30m", 5 cron fields, or "at 2026-12-24T09:00".')
@click.option("--prompt", help="What the agent is asked each run (default: typed in $EDITOR).")
@click.option("--notify", "notify", multiple=True, metavar="TARGET", help="A notify target of hermes.yaml to send the result to.")
@click.option("--disabled", is_flag=True, help="Create it turned off (`cron enable JOB` later).")
@click.pass_context
def cron_new(ctx: click.Context, job: str, schedule: str, prompt: str | None, notify: tuple[str, ...], disabled: bool):
    """Create cron/JOB.md from a schedule and a prompt, checked and committed as your edit."""
    from ..service.job_state import job_states
    from ..service.person_edits import new_job

    if prompt is None:
        prompt = click.edit("\n# What should the agent do on each run? Lines starting with # are dropped.\n",
                            extension=".md")
        prompt = "\n".join(ln for ln in (prompt or "").splitlines() if not ln.startswith("#")).strip()
        if not prompt:
            raise InputError("no prompt given: nothing was created (pass --prompt TEXT or write one in the editor)")
    v = vault_for(ctx)
    saved = new_job(v, job, schedule, prompt, list(notify), enabled=not disabled)
    now = datetime.now(UTC)
    states = job_states(v, now)
    when = next((j.next_words(states.here, now) for j in states.jobs if j.job == job), "?")
    echo(f"created cron/{job}.md ({saved.message}); next run: {when}")
