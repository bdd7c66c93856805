"""`hermes-fs memory`: the memory files of the vault."""

from __future__ import annotations

import click

from .context import vault_for
from .options import vault_option
from .term import echo, plural


@click.group()
def memory():
    """Show, add to and edit memory files."""


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


@memory.command("add")
@vault_option
@click.argument("file")
@click.argument("text", nargs=-1, required=True)
@click.option("--section", metavar="HEADING", help="Add it under this `## HEADING` (made if missing).")
@click.pass_context
def memory_add(ctx: click.Context, file: str, text: tuple[str, ...], section: str | None):
    """Add an entry to FILE (USER.md, MEMORY.md or projects/<slug>.md), committed as your edit."""
    from ..service.person_edits import add_memory_entry, memory_rel

    saved = add_memory_entry(vault_for(ctx), file, " ".join(text), section)
    echo(f"{memory_rel(file)}: entry added, {saved.message}")


@memory.command("edit")
@vault_option
@click.argument("file")
@click.pass_context
def memory_edit(ctx: click.Context, file: str):
    """Open FILE in $EDITOR; on save it is committed as your edit. A file changed meanwhile is never overwritten."""
    from ..service.person_edits import memory_rel, save_edited
    from ..store.docs import decode

    v = vault_for(ctx)
    rel = memory_rel(file)
    loaded = v.files.read(rel)
    before = decode(loaded, rel) if loaded is not None else f"---\ntitle: {rel.rsplit('/', 1)[-1][:-3]}\n---\n"
    after = click.edit(before, extension=".md", require_save=True)
    if after is None or after == before:
        echo(f"{rel}: not changed")
        return
    saved = save_edited(v, rel, after, loaded)
    if saved.ok:
        echo(f"{rel}: {saved.message}")
        return
    kept = v.state_dir / "edits" / rel.replace("/", "--")
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(after, encoding="utf-8")
    echo(f"{rel} changed while you edited it; nothing was saved. Your text is in {kept}: "
         f"run `hermes-fs memory edit {file}` again and copy what you need.", err=True)
    ctx.exit(1)
