"""`hermes-fs sessions`: list, show and search the conversations in sessions/ (ids for
`chat --resume` and `refine --session`)."""

from __future__ import annotations

import click

from .context import vault_for
from .options import vault_option
from .term import columns, echo, emit_json, shorten


@click.group(invoke_without_command=True)
@vault_option
@click.pass_context
def sessions(ctx: click.Context):
    """Past conversations: `sessions list`, `show ID`, `search TEXT`."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(sessions_list)


@sessions.command("list")
@vault_option
@click.option("-n", "--limit", default=20, show_default=True, type=click.IntRange(min=1), help="How many, newest first.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def sessions_list(ctx: click.Context, limit: int = 20, as_json: bool = False):
    """The newest sessions: id, when, where from, title."""
    from ..mind.sessions import recent_sessions

    _print(recent_sessions(vault_for(ctx).root, limit), as_json, "no sessions yet")


@sessions.command("search")
@vault_option
@click.argument("text", nargs=-1, required=True)
@click.option("-n", "--limit", default=20, show_default=True, type=click.IntRange(min=1), help="How many, best first.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def sessions_search(ctx: click.Context, text: tuple[str, ...], limit: int, as_json: bool):
    """Sessions whose transcript mentions TEXT (full-text), best first, with the matching words."""
    from ..mind.sessions import search_sessions

    _print(search_sessions(vault_for(ctx).root, " ".join(text), limit), as_json, "no session matches")


@sessions.command("show")
@vault_option
@click.argument("session_id", metavar="ID")
@click.pass_context
def sessions_show(ctx: click.Context, session_id: str):
    """Print a session as a conversation: each turn, the tools called and what they returned."""
    from ..mind.sessions import Transcript

    t = Transcript.load(vault_for(ctx).root, session_id)
    echo(f"{t.id}  {t.meta.get('title', '')}\nstarted {t.meta.get('started', '?')} from {t.meta.get('source', '?')}, "
         f"model {t.meta.get('model', '?')}")
    for m in t.messages:
        echo("")
        if m["role"] == "tool":
            echo(f"  [{m.get('name') or 'tool'} returned] {shorten(' '.join(str(m['content']).split()), 300)}")
            continue
        echo(f"{m['role'].capitalize()}:")
        if m.get("content"):
            echo(str(m["content"]))
        for call in m.get("tool_calls") or []:
            echo(f"  [calls {call['function']['name']}] {shorten(call['function']['arguments'], 300)}")
    echo(f"\nContinue it: hermes-fs chat --resume {t.id}   Review it: hermes-fs refine --session {t.id}")


def _print(found, as_json: bool, empty: str) -> None:
    if as_json:
        from dataclasses import asdict

        emit_json([asdict(s) for s in found])
        return
    if not found:
        echo(empty)
        return
    lines = columns([[s.id, s.started[:16].replace("T", " "), s.source, shorten(s.title or "untitled", 70)]
                     for s in found])
    for s, line in zip(found, lines, strict=True):
        echo(line)
        if s.snippet:
            echo(f"    {shorten(' '.join(s.snippet.split()), 100)}")
