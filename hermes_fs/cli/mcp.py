"""`hermes-fs mcp`: this vault served over MCP (the server itself: mcp_server.py, loaded only to serve)."""

from __future__ import annotations

import click

from ..errors import InputError
from .context import vault_for
from .options import vault_option
from .term import echo


@click.command("mcp")
@vault_option
@click.option("--http", "http", metavar="HOST:PORT", help="Serve streamable HTTP (bearer token required) instead of stdio.")
@click.pass_context
def mcp_serve(ctx: click.Context, http: str | None):
    """Serve this vault over MCP: memory, skills, session search and refine for other agents."""
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
