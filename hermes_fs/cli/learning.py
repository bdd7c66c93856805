"""`hermes-fs refine` and `hermes-fs learn`: proposals of memory and skill changes on a branch."""

from __future__ import annotations

import click

from ..store.policies import Policy
from .context import vault_for
from .options import vault_option
from .term import Spinner, echo, safe

POLICIES = [p.value for p in Policy]


@click.command()
@vault_option
@click.argument("focus", nargs=-1)
@click.option("--session", "session", metavar="ID", help="Session to review (default: the latest).")
@click.option("--wait", is_flag=True, help="Run in the foreground and print the result.")
@click.option("--policy", type=click.Choice(POLICIES), help="Override refine.policy.")
@click.pass_context
def refine(ctx: click.Context, focus: tuple[str, ...], session: str | None, wait: bool, policy: str | None):
    """Review a conversation and propose memory/skill changes on a refine/ branch."""
    from .. import RefineOptions
    from .. import refine as run_refine
    from .remote import warm_task

    v = vault_for(ctx)
    options = RefineOptions(session=session, focus=" ".join(focus) or None, policy=policy)
    if not wait:
        from ..service.background import refine_in_background

        pid, log_path = refine_in_background(v, options)
        echo(f"refine running in the background (pid {pid}); log: {log_path}; see `hermes-fs review`")
        return
    args = {"session": options.session, "focus": options.focus, "policy": options.policy}
    with Spinner("reviewing the conversation"):
        done = warm_task(v, "refine", args)
        line, ok = (done["line"], done["ok"]) if done else _line_ok(run_refine(v, options))
    echo(line)
    if not ok:
        ctx.exit(1)


def _line_ok(result) -> tuple[str, bool]:
    return result.line(), result.ok



class LearnGroup(click.Group):
    """`learn SOURCES...` drafts skills; `learn bisect CHECK` is its one subcommand. Anything that
    is not a subcommand's name is a source (the hidden `documents` command)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["documents", *args]
        return super().parse_args(ctx, args)


@click.group(cls=LearnGroup)
def learn():
    """Learn from documents, or find the learned change that broke a check.

    \b
    hermes-fs learn SOURCES... [--focus F] [--update SKILL] [--policy P]
        Turn documents (Markdown, text, HTML, PDF, folders) into skills on a learn/ branch.
    hermes-fs learn bisect CHECK
        Name the first learned change merged into main after which checks/CHECK.md fails.
    """


@learn.command("bisect")
@vault_option
@click.argument("check_name", metavar="CHECK")
@click.pass_context
def learn_bisect(ctx: click.Context, check_name: str):
    """Name the first learned merge on main after which check CHECK fails (ready for `revert`)."""
    from .. import bisect

    v = vault_for(ctx)
    with Spinner(f"bisecting the learned changes with check {check_name}"):
        found = bisect(v, check_name.removesuffix(".md"))
    echo(safe(found.text()))
    if not found.culprit:
        ctx.exit(1)


@learn.command("documents", hidden=True)
@vault_option
@click.argument("sources", nargs=-1, required=True, type=click.Path())
@click.option("--focus", help="What to capture from the documents.")
@click.option("--update", "update", metavar="SKILL", help="Only patch this existing skill.")
@click.option("--policy", type=click.Choice(POLICIES), help="Override refine.policy.")
@click.pass_context
def learn_documents(ctx: click.Context, sources: tuple[str, ...], focus: str | None, update: str | None,
                    policy: str | None):
    """Turn documents (Markdown, text, HTML, PDF, folders) into skills on a learn/ branch."""
    from pathlib import Path

    from .. import LearnOptions
    from .. import learn as run_learn
    from .remote import warm_task

    options = LearnOptions([Path(p).expanduser().resolve() for p in sources], focus=focus, update=update, policy=policy)
    v = vault_for(ctx)
    args = {"sources": [str(p) for p in options.sources], "focus": focus, "update": update, "policy": policy}
    with Spinner("reading and drafting skills"):
        done = warm_task(v, "learn", args)
        line, ok = (done["line"], done["ok"]) if done else _line_ok(run_learn(v, options))
    echo(line)
    if not ok:
        ctx.exit(1)

