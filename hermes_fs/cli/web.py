"""`hermes-fs web`: the review page in a browser (DESIGN §15: web.listen, HERMES_WEB_TOKEN).

Nothing here imports litellm: the page starts in well under a second.
"""

from __future__ import annotations

import click

from .term import echo


@click.command("web")
@click.option("--listen", metavar="HOST:PORT", help="Where to listen (default: web.listen, 127.0.0.1:9120).")
@click.option("--url", "print_url", is_flag=True, help="Print the sign-in URL (with the token) and exit, e.g. "
                                                        "for the page the daemon serves.")
@click.option("--vault", type=click.Path(file_okay=False), help="Vault folder.")
@click.pass_context
def web(ctx: click.Context, listen: str | None, print_url: bool, vault: str | None):
    """Review learned changes, memory, skills, jobs and sessions in a browser (loopback by default)."""
    from .. import open_vault as find_vault

    v = find_vault(vault or ctx.find_root().obj.get("vault"))
    listen = listen or v.config.web.listen
    if print_url:
        from ..service.web.security import load_token, parse_listen

        host, port = parse_listen(listen)
        shown = f"[{host}]" if ":" in host else host
        echo(f"http://{shown}:{port}/?token={load_token(v.secrets_env, host)}")
        return
    from ..service.web.server import WebServer

    server = WebServer(v, listen)
    echo(f"hermes-fs web: {v.root}\nopen {server.signin_url()}\n(the token signs this browser in once; "
         "Ctrl-C to stop)", err=True)
    try:
        server.run()
    except KeyboardInterrupt:  # uvicorn shut down cleanly, then passed Ctrl-C on
        echo("hermes-fs web stopped", err=True)
