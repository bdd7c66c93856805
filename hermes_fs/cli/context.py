"""The vault a command works on, opened once per command with the CLI's side effects.

Every command that opens a vault goes through `vault_for`: unexpected errors are logged to the
vault's errors.log and a secrets.env readable by others is warned about, the same for all commands.
"""

from __future__ import annotations

import click

from .term import echo


def vault_for(ctx: click.Context):
    from .. import open_vault as find_vault
    from ..store.vault import secrets_env_warning

    vault = find_vault(ctx.find_root().obj.get("vault"))
    from ..store import log_redaction

    log_redaction.install(vault.secrets_env)  # no configured secret in any log line (-v, errors.log, daemon.log)
    _log_errors_to(vault.state_dir / "logs" / "errors.log")
    warning = secrets_env_warning(vault.root)
    if warning:
        echo(warning, err=True)
    return vault


def _log_errors_to(path) -> None:
    """Unexpected errors (bugs) keep their traceback in .hermes/logs/errors.log; `-v` also prints them."""
    import logging

    log = logging.getLogger("hermes_fs")
    if any(getattr(h, "hermes_errors", False) for h in log.handlers):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setLevel(logging.ERROR)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    handler.hermes_errors = True  # type: ignore[attr-defined]
    log.addHandler(handler)
