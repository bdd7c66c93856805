"""`hermes-fs sandbox`: the Docker sandbox of the `shell` tool."""

from __future__ import annotations

import click

from .term import Spinner, echo


@click.group()
def sandbox():
    """The Docker sandbox of the `shell` tool."""


@sandbox.command("build-image")
@click.option("--tag", default="hermes-fs-sandbox:busybox", show_default=True)
def sandbox_build_image(tag: str):
    """Build a small local image from this machine's busybox-static (offline: no registry)."""
    from ..agent.sandbox.docker import build_local_image

    with Spinner("importing a busybox root filesystem"):
        built = build_local_image(tag)
    echo(f"built {built}; use it with `sandbox: {{image: {built}}}` in hermes.yaml")
