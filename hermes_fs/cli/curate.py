"""`hermes-fs curate`, `skills restore NAME` and `skills list --usage`: the curator from the shell."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click

from ..store.policies import Policy
from .term import echo


@click.command()
@click.option("--policy", type=click.Choice([Policy.REVIEW.value, Policy.AUTO.value]),
              help="review: leave the curate/ branch for `hermes-fs review` (default: curate.policy); auto: merge it.")
@click.option("--stale-days", type=click.IntRange(min=1), help="Unused this many days = stale (default: curate.stale_days).")
@click.option("--dry-run", is_flag=True, help="Show what the model-free part found; change nothing, call no model.")
@click.option("--vault", type=click.Path(file_okay=False), help="Vault folder.")
@click.pass_context
def curate(ctx: click.Context, policy: str | None, stale_days: int | None, dry_run: bool, vault: str | None):
    """Archive stale skills, merge duplicates, consolidate memory (a curate/ branch).

    Near-duplicate skills are merged by the model, memory over budget consolidated entry by entry
    and contradictions resolved (newest kept); the branch is reviewed like a refine."""
    from .. import CurateOptions, open_vault
    from .. import curate as run_curate
    from ..learning.curate import plan

    v = open_vault(vault or ctx.find_root().obj.get("vault"))
    if dry_run:
        found = plan(v, stale_days)
        for name, why in sorted(found.stale.items()):
            echo(f"stale      skills/{name}: {why}")
        for d in found.duplicates:
            echo(f"duplicate  skills/{d.keep} ~ skills/{d.other} (similarity {d.similarity}; keeps {d.keep})")
        for rel in found.over_budget:
            echo(f"over budget {rel}")
        for note in found.notes:
            echo(note.removeprefix("- "))
        if not (found.stale or found.duplicates or found.over_budget):
            echo("nothing to curate")
        return
    outcome = run_curate(v, CurateOptions(policy=policy, stale_days=stale_days))
    echo(outcome.line())
    if not outcome.ok:
        ctx.exit(1)


@click.command("restore")
@click.argument("name")
@click.option("--vault", type=click.Path(file_okay=False), help="Vault folder.")
@click.pass_context
def skills_restore(ctx: click.Context, name: str, vault: str | None):
    """Bring an archived skill (skills/.archive/NAME/) back into the library, as your commit."""
    from .. import open_vault
    from ..learning.curate import restore

    v = open_vault(vault or ctx.find_root().obj.get("vault"))
    sha = restore(v, name)
    echo(f"restored skills/{name}/ ({sha[:10]})")


def print_usage(vault, as_json: bool) -> list[dict]:
    """`skills list --usage`: uses, last used, created by, age per skill (from the record)."""
    import time

    from ..mind import skills, usage

    figures = usage.refresh(vault)
    names = skills.names(vault.files)
    stale = usage.stale(figures, names, vault.config.curate.stale_days)
    now = time.time()
    rows: list[dict[str, Any]] = []
    for name, s in usage.current(figures, names).items():
        rows.append({"name": name, "uses": s.uses, "last_used": _date(s.last_used), "created_by": s.created_by,
                     "age_days": int((now - s.created) // 86400) if s.created else None, "stale": name in stale})
    if not as_json:
        echo(f"{'skill':<32} {'uses':>5}  {'last used':<10}  {'created by':<12} {'age':>5}")
        for r in rows:
            age = f"{r['age_days']}d" if r["age_days"] is not None else "new"
            echo(f"{r['name'][:32]:<32} {r['uses']:>5}  {r['last_used'] or 'never':<10}  {r['created_by'][:12]:<12} "
                 f"{age:>5}" + ("  stale" if r["stale"] else ""))
    for path, why in sorted(figures.unreadable.items()):
        echo(f"warning: {path} not counted: {why}", err=True)
    return rows


def _date(ts: int | None) -> str | None:
    return datetime.fromtimestamp(ts, UTC).date().isoformat() if ts else None
