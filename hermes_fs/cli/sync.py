"""`hermes-fs sync`: one sync round with the vault's git remote (the daemon syncs continuously)."""

from __future__ import annotations

import click

from ..store.remote import redact_credentials
from .term import echo

_VAULT = click.option("--vault", type=click.Path(file_okay=False), help="Vault folder.")


@click.group("sync", invoke_without_command=True)
@_VAULT
@click.option("--json", "as_json", is_flag=True, help="Print the round as JSON.")
@click.pass_context
def sync(ctx: click.Context, vault: str | None, as_json: bool):
    """One round with the git remote of hermes.yaml: fetch, merge by entry, push.

    Never a rebase; a conflict keeps both versions (the other machine's beside yours). Exit 1 if
    the remote cannot be reached. Settings another machine changed are reported; those that widen
    what runs here are held until `hermes-fs sync approve`."""
    if ctx.invoked_subcommand is not None:
        return
    import json
    from dataclasses import asdict

    from .. import open_vault as find_vault
    from ..service.daemon import pending_edits
    from ..service.sync import Syncer

    v = find_vault(vault or ctx.find_root().obj.get("vault"))
    edited = pending_edits(v)
    if edited:  # what the daemon would commit: a sync carries every edit made here (hermes.yaml's remote: first)
        done = v.git.commit_human_edits(edited)
        if done.committed:
            echo(f"committed your edits: {', '.join(done.committed)}", err=as_json)
        for f in done.refused:
            echo(f"not committed: {f}", err=True)
    r = Syncer(v).round(work=False)  # due times: the daemon's
    if as_json:
        echo(json.dumps(asdict(r), indent=2, default=str))
    else:
        echo(f"sync: {r.line()}")
        for path in r.conflicts:
            echo(f"  kept the other machine's version beside yours: {path}")
        for path in r.withdrawn:
            echo(f"  withdrawn (another machine's result stands): {path}")
    if r.offline:
        ctx.exit(1)


@sync.command("approve", short_help="Let settings another machine changed take effect here.")
@click.argument("keys", nargs=-1)
@click.pass_context
def approve(ctx: click.Context, keys: tuple[str, ...]):
    """Let settings another machine changed take effect here: all held ones, or the KEYS named
    (as `hermes-fs status` lists them, e.g. mcp.servers.deploy or sandbox.backend)."""
    from .. import open_vault as find_vault
    from ..service.sync import approve_settings
    from ..store.held_settings import describe

    v = find_vault((ctx.parent.params.get("vault") if ctx.parent else None) or (ctx.find_root().obj or {}).get("vault"))
    done = approve_settings(v, list(keys) or None)
    if not done:
        echo("nothing is held")
    for h in done:
        echo(f"approved {h.key} = {describe(h.offered)} (from {h.host}); it takes effect now")


@click.command("clone")
@click.argument("url")
@click.argument("path", type=click.Path(file_okay=False))
@click.option("--branch", default="main", show_default=True, help="The remote branch that is the vault's main.")
def clone(url: str, path: str, branch: str):
    """Copy a synced vault to this machine (git clone); then run `hermes-fs daemon`."""
    from pathlib import Path

    from ..service.sync import clone_vault

    v = clone_vault(url, Path(path), branch)
    echo(f"cloned {redact_credentials(url)} into {v.root}; start syncing with `hermes-fs --vault {v.root} daemon`")
