"""`hermes-fs review`, `revert` and `log`: deciding on learned changes, undoing them, their history."""

from __future__ import annotations

import sys
from datetime import datetime

import click

from .context import vault_for
from .options import vault_option
from .term import colorize_diff, echo, emit_json, safe


@click.group(invoke_without_command=True)
@vault_option
@click.pass_context
def review(ctx: click.Context):
    """Pending learned changes: list, `show B`, `merge B`, `reject B`."""
    if ctx.invoked_subcommand:
        return
    from .. import review as learned

    rows = learned.pending(vault_for(ctx).git)
    if not rows:
        echo("no pending changes")
    for p in rows:
        checks = f"  checks: {p.checks}" if p.checks else ""
        echo(f"{p.branch}  {_age(p.age_s)}  [{', '.join(p.files)}]  {p.summary}{checks}")


def _age(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


@review.command("show")
@vault_option
@click.argument("branch")
@click.pass_context
def review_show(ctx: click.Context, branch: str):
    """What merging it would do to main now (or why it conflicts), and its message. Takes a
    unique prefix or slug; works for merged, reverted and rejected changes too."""
    from .. import review as learned

    store = vault_for(ctx).git
    text = safe(learned.show(store, learned.resolve_name(store, branch, include_decided=True)))
    click.echo(colorize_diff(text) if sys.stdout.isatty() else text, nl=False)


@review.command("merge", short_help="Accept: merge into main, entry by entry (all of it, or --only/--skip).")
@vault_option
@click.argument("branch")
@click.option("--only", "only", multiple=True, metavar="PATH", help="Accept only these files (the rest stays pending).")
@click.option("--skip", "skip", multiple=True, metavar="PATH", help="Accept all but these files (they stay pending).")
@click.pass_context
def review_merge(ctx: click.Context, branch: str, only: tuple[str, ...], skip: tuple[str, ...]):
    """Accept: merge into main, entry by entry for memory (your uncommitted edits are committed
    first, never overwritten). Takes a unique prefix or slug."""
    from .. import decide

    # authored by you: it is your decision; with a remote, exactly one machine decides
    echo(decide(vault_for(ctx), branch, "merge", only=list(only), skip=list(skip)).line())


@review.command("reject")
@vault_option
@click.argument("branch")
@click.pass_context
def review_reject(ctx: click.Context, branch: str):
    """Refuse: the branch is hidden under refs/hermes/rejected/ (recoverable)."""
    from .. import decide

    echo(decide(vault_for(ctx), branch, "reject").line())


@click.command()
@vault_option
@click.argument("branch")
@click.option("--only", "only", multiple=True, metavar="PATH", help="Undo only these files (the rest stays merged).")
@click.option("--skip", "skip", multiple=True, metavar="PATH", help="Undo all but these files (they stay merged).")
@click.pass_context
def revert(ctx: click.Context, branch: str, only: tuple[str, ...], skip: tuple[str, ...]):
    """Undo a merged learned change, entry by entry, or part of it (--only, --skip). Refuses only
    entries a person has changed since, and says how to undo the rest."""
    from .. import decide

    # authored by you: it is your decision; with a remote, exactly one machine decides
    echo(decide(vault_for(ctx), branch, "revert", only=list(only), skip=list(skip)).line())


@click.command()
@vault_option
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def log(ctx: click.Context, as_json: bool):
    """Learned changes (merged, pending, rejected), newest first."""
    from .. import review as learned

    v = vault_for(ctx)
    changes = learned.learned_log(v.git)
    if as_json:
        from dataclasses import asdict

        emit_json([asdict(c) for c in changes])
        return
    if not changes:
        echo("no learned changes yet")
    for c in changes:
        when = datetime.fromtimestamp(c.timestamp).strftime("%Y-%m-%d %H:%M")
        echo(f"{when}  {c.state:<8}  {c.branch}  {c.summary}")
    from .. import spend

    days = spend.per_day(v)
    if days:
        echo("\nLearning spend per day (UTC, reviews on this machine):")
        for d in days:
            echo(f"  {d.line()}")
