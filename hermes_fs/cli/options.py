"""Options shared by command modules (main and the command groups in their own files)."""

from __future__ import annotations

import click


def vault_option(f):
    """`--vault` after the subcommand too (`hermes-fs status --vault X`)."""

    def store(ctx: click.Context, _param, value):
        if value:
            ctx.find_root().obj["vault"] = value
        return value

    return click.option("--vault", type=click.Path(file_okay=False), expose_value=False, callback=store,
                        is_eager=True, help="Vault folder.")(f)
