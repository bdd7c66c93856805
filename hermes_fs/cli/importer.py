"""`hermes-fs import`: another agent's memory, skills and jobs into this vault."""

from __future__ import annotations

from pathlib import Path

import click

from .context import vault_for
from .options import vault_option
from .term import echo


@click.group("import")
def import_group():
    """Bring another agent's memory, skills and jobs into this vault."""


@import_group.command("hermes-agent", short_help="A Hermes Agent home into this vault, in one commit.")
@vault_option
@click.argument("home", required=False, default="~/.hermes", type=click.Path(file_okay=False))
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
@click.option("--take-model", is_flag=True, help="Replace the model hermes.yaml names (kept by default unless "
              "it is the template's).")
@click.pass_context
def import_hermes_agent(ctx: click.Context, home: str, dry_run: bool, take_model: bool):
    """A Hermes Agent home (default ~/.hermes) into this vault, in one commit; keys go to
    .hermes/secrets.env, never to git. Running it again changes nothing."""
    from ..learning.importer import plan_import, run_import
    from .term import Progress

    v = vault_for(ctx)
    progress = Progress()
    try:
        if dry_run:
            plan, sha = plan_import(v, Path(home).expanduser(), take_model, progress), None
        else:
            result = run_import(v, Path(home).expanduser(), take_model, progress)
            plan, sha = result.plan, result.sha
    finally:
        progress.done()
    for line in plan.lines:
        echo(("would write " if dry_run else "") + line)
    for note in plan.notes:
        echo(f"note: {note}")
    if plan.empty:
        echo("nothing to import: the vault already has all of it")
    elif dry_run:
        echo("(dry run: nothing written)")
    else:
        echo(f"imported in {sha[:10]} (import: hermes-agent)" if sha else "keys stored in .hermes/secrets.env")
