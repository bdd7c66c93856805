"""`hermes-fs acp`: the agent for editors (Zed, JetBrains, VS Code) over the Agent Client Protocol
on stdio (the agent itself: service/acp.py, loaded only to serve)."""

from __future__ import annotations

import click

from .context import vault_for
from .options import vault_option


@click.command("acp", short_help="Serve the agent to an editor over the Agent Client Protocol (stdio).")
@vault_option
@click.pass_context
def acp_serve(ctx: click.Context):
    """Serve the agent to an editor over the Agent Client Protocol (stdio); each editor session is a
    session in sessions/, and every file edit or command is put to the editor first."""
    from .. import __version__
    from ..service.acp import serve_stdio

    serve_stdio(vault_for(ctx), __version__)
