"""`hermes-fs mcp`: this vault served over MCP (the server itself: mcp_server.py, loaded only to
serve), and `mcp add RECIPE`: another server for the agent, set up in one command."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import InputError
from .context import vault_for
from .options import vault_option
from .term import echo

RECIPES = ("browser",)


@click.group("mcp", invoke_without_command=True,
             short_help="Serve this vault over MCP: memory, skills, session search and refine for other agents.")
@vault_option
@click.option("--http", "http", metavar="HOST:PORT", help="Serve streamable HTTP (bearer token required) instead of stdio.")
@click.pass_context
def mcp_serve(ctx: click.Context, http: str | None):
    """Serve this vault over MCP: memory, skills, session search and refine for other agents.
    `mcp add browser` gives the agent a browser instead."""
    if ctx.invoked_subcommand is not None:
        return
    from .mcp_server import serve_http, serve_stdio

    v = vault_for(ctx)
    if not http:
        serve_stdio(v)
        return
    host, _, port = http.rpartition(":")
    if not host or not port.isdigit():
        raise InputError(f"--http takes HOST:PORT, e.g. 127.0.0.1:8765; got {http!r}")
    echo(f"serving {v.root} over MCP at http://{host}:{port}/mcp", err=True)
    serve_http(v, host, int(port))


@mcp_serve.command("add", short_help="Add a ready-made MCP server for the agent: `add browser` (headless Chromium).")
@vault_option
@click.argument("recipe", type=click.Choice(RECIPES))
@click.option("--name", default=None, help="The server's name in hermes.yaml (default: the recipe's); tools appear as NAME__tool.")
@click.option("--chromium", metavar="PATH", help="The browser to drive (default: /usr/bin/chromium, or chromium on PATH).")
@click.option("--prefix", metavar="DIR", type=click.Path(file_okay=False, path_type=Path),
              help="Where npm installs the server (default: a folder of its own under ~/.local/share/hermes-fs).")
@click.pass_context
def mcp_add(ctx: click.Context, recipe: str, name: str | None, chromium: str | None, prefix: Path | None):
    """Add a ready-made MCP server to hermes.yaml. browser: the Playwright MCP server (npm, pinned
    version) driving this machine's Chromium headless; interactive sessions get it, unattended ones
    (gateway, cron, inbox, webhooks) only once you set `unattended: true` on it."""
    from hermes_fs import add_browser

    v = vault_for(ctx)
    echo(f"setting up the {recipe} (npm may take a minute the first time)...", err=True)
    echo(add_browser(v, name or recipe, prefix, chromium).line())
