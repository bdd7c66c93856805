"""`hermes-fs notify`: notifications through Apprise."""

from __future__ import annotations

import click

from ..errors import HermesError
from .context import vault_for
from .options import vault_option
from .term import echo


@click.group()
def notify():
    """Notifications through Apprise."""


@notify.command("test", short_help="Send a test notification to a target of hermes.yaml or an Apprise URL.")
@vault_option
@click.argument("target", required=False)
@click.pass_context
def notify_test(ctx: click.Context, target: str | None):
    """Send a test notification to TARGET: a target name of hermes.yaml (default: every one), or an
    Apprise URL to try before adding it (e.g. `notify test 'ntfy://my-topic'`)."""

    v = vault_for(ctx)
    notifier = v.notifier
    if target and "://" in target:
        from ..store.secrets import redact

        shown = redact(target)[0]  # a URL may carry a token: never printed
        d = notifier.send_url(target, "hermes-fs test", f"Test notification from {v.root.name}", shown)
        echo(f"{d.target}: {'ok' if d.ok else 'error: ' + (d.error or '')}"
             + ("; add it under notify.targets in hermes.yaml (the token in .hermes/secrets.env as ${NAME})"
                if d.ok else ""))
        if not d.ok:
            ctx.exit(1)
        return
    targets = [target] if target else sorted(v.config.notify.targets)
    if not targets:
        raise HermesError("no notify targets in hermes.yaml (notify.targets)")
    if target:
        notifier.resolve(target)  # unknown name: exit 2 with the known names
    failed = 0
    for d in notifier.send(targets, "hermes-fs test", f"Test notification from {v.root.name}"):
        failed += not d.ok
        echo(f"{d.target}: {'ok' if d.ok else 'error: ' + (d.error or '')}")
    if failed:
        ctx.exit(1)
