"""`hermes-fs sandbox`: the Docker sandbox of the `shell` tool."""

from __future__ import annotations

import click

from .options import vault_option
from .term import Spinner, echo


@click.group()
def sandbox():
    """The Docker sandbox of the `shell` tool."""


@sandbox.command("build-image")
@vault_option
@click.option("--tag", default="hermes-fs-sandbox:busybox", show_default=True)
@click.pass_context
def sandbox_build_image(ctx: click.Context, tag: str):
    """Build a small local image from this machine's busybox-static (offline: no registry)."""
    from ..agent.sandbox.docker import build_local_image

    with Spinner("importing a busybox root filesystem"):
        built = build_local_image(tag)
    echo(f"built {built}\n{_use_image_advice(ctx, built)}")


def _use_image_advice(ctx: click.Context, built: str) -> str:
    """Where to put the image: the `image:` line of the `sandbox:` section hermes.yaml already
    has (pasting a second `sandbox:` key would be invalid YAML)."""
    from .. import open_vault
    from ..errors import HermesError

    try:
        v = open_vault(ctx.find_root().obj.get("vault"))
    except HermesError:
        return (f"To use it: under `sandbox:` in hermes.yaml, set `image: {built}` (change the `image:` line "
                "that is there; do not add a second `sandbox:` section).")
    current = v.config.sandbox.image
    if current == built:
        return f"{v.root / 'hermes.yaml'} already uses it."
    return f"To use it: in {v.root / 'hermes.yaml'}, under `sandbox:`, change `image: {current}` to `image: {built}`."
