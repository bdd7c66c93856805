"""`hermes-fs check`: run the person's checks (checks/<name>.md) against main or a pending change."""

from __future__ import annotations

import click

from .context import vault_for
from .options import vault_option
from .term import Spinner, echo, safe


@click.command()
@vault_option
@click.option("--branch", "branch", metavar="B", help="A pending change (name, unique prefix or slug): its memory "
              "and skills as merging it now would make them. Default: main.")
@click.pass_context
def check(ctx: click.Context, branch: str | None):
    """Ask the agent each check's question (checks/<name>.md); exit 1 if any fails."""
    from .. import checks

    v = vault_for(ctx)
    found = checks.main_checks(v.git)
    drafts = [p for p in v.git.changed_under("checks") if p.endswith(".md")]
    if drafts:  # checks run as main holds them: say so, or a saved but uncommitted check seems ignored
        echo(safe(f"not committed yet, so not run: {', '.join(drafts)} (commit it: `git add checks && git commit`, "
                  "or let the daemon commit your edits)"))
    if not found:
        echo("no checks to run: write one in checks/<name>.md (see checks/example.md) and commit it")
        return
    files, label = checks.tree_of(v, branch)
    with Spinner(f"asking {len(found)} check{'s' if len(found) != 1 else ''} against {label}"):
        run = checks.run(v, files, found)
    for r in run.results:
        echo(safe(f"{'PASS' if r.passed else 'FAIL'}  {r.name}" + ("" if r.passed else f": {r.why()}")))
        if not r.passed and r.answer:
            echo(safe("      answer: " + " ".join(r.answer.split())[:300]))
    echo(f"{label}: {run.trailer()}")
    if not run.passed:
        ctx.exit(1)
