"""`hermes-fs memory`: the memory files of the vault."""

from __future__ import annotations

import click

from .context import vault_for
from .options import vault_option
from .term import echo, plural


@click.group()
def memory():
    """Inspect memory files."""


@memory.command("show")
@vault_option
@click.argument("file", required=False)
@click.pass_context
def memory_show(ctx: click.Context, file: str | None):
    """Print a memory file (USER.md, MEMORY.md, projects/<slug>.md), or list them all."""
    from ..mind import memory as mem

    v = vault_for(ctx)
    if file:
        m = mem.load(v.files, file, v.config)
        echo(m.doc.text, nl=False)
        return
    for name in mem.list_memory(v.files):
        m = mem.load(v.files, name, v.config)
        flag = "  over budget" if m.over_budget else ""
        echo(f"{m.path:<36} {plural(len(m.entries), 'entry', 'entries'):>11}  {m.size:>6}/{m.budget} chars{flag}")
