"""The hermes-fs command line: the root group and the registration of every command group.

Each command group lives in its own module named for it (cron.py, review.py, ...). Imports of
anything heavy happen inside the commands, so `--help` and `status` start fast (DESIGN principle 7):
a command module imports only click and other light command modules at its top. Exit codes: 0 ok,
1 failed operation, 2 bad usage or bad input.
"""

from __future__ import annotations

import sys

import click

from ..errors import HermesError
from .acp import acp_serve
from .check import check
from .cron import cron_group
from .curate import curate as curate_command
from .daemon import daemon
from .doctor import doctor
from .gateway import gateway as gateway_command
from .importer import import_group
from .init import init
from .learning import learn, refine
from .mcp import mcp_serve
from .memory import memory
from .notify import notify
from .review import log, revert, review
from .run import chat, run
from .sandbox import sandbox
from .sessions import sessions
from .skills import skills
from .status import status
from .sync import clone as clone_command
from .sync import sync as sync_command
from .term import echo
from .web import web as web_command


class HermesGroup(click.Group):
    """Turns library errors into one-line messages with the right exit code."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except HermesError as exc:
            echo(f"error: {exc}", err=True)
            ctx.exit(getattr(exc, "exit_code", 1))


@click.group(cls=HermesGroup, context_settings={"help_option_names": ["-h", "--help"], "terminal_width": 110,
                                               "max_content_width": 110})  # help lines are not cut
@click.option("--vault", type=click.Path(file_okay=False), envvar=None, help="Vault folder (default: $HERMES_VAULT, or the nearest ancestor with hermes.yaml).")
@click.option("-v", "--verbose", is_flag=True, help="Log what happens (and tracebacks of unexpected errors) to stderr.")
@click.version_option(package_name="hermes-fs")
@click.pass_context
def main(ctx: click.Context, vault: str | None, verbose: bool):
    """hermes-fs: a self-improving agent whose mind is a git repository of Markdown files."""
    ctx.ensure_object(dict)
    ctx.obj["vault"] = vault
    if verbose:
        import logging

        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger("hermes_fs").addHandler(handler)
        logging.getLogger("hermes_fs").setLevel(logging.DEBUG)


for command in (init, status, sessions, memory, skills, sandbox, mcp_serve, import_group, notify, refine, learn, review,
                revert, daemon, cron_group, log, doctor, run, chat, web_command, sync_command, clone_command,
                curate_command, gateway_command, check, acp_serve):
    main.add_command(command)

if __name__ == "__main__":
    main(sys.argv[1:])
