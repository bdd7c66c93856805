"""Where the `shell` tool runs commands. Backends: `docker` (sandbox.docker), `local` (this
machine, only when chosen explicitly) and `none` (no shell at all)."""

from __future__ import annotations

from pathlib import Path

from ...store.config import SandboxConfig
from .base import OUTPUT_LIMIT, Sandbox, SandboxError, ShellResult, truncate
from .local import LocalSandbox, NoSandbox

__all__ = ["OUTPUT_LIMIT", "LocalSandbox", "NoSandbox", "Sandbox", "SandboxError", "ShellResult", "make_sandbox",
           "truncate"]


def make_sandbox(config: SandboxConfig, workspace: Path, session_id: str) -> Sandbox:
    if config.backend == "none":
        return NoSandbox()
    if config.backend == "local":
        return LocalSandbox(workspace, config)
    from .docker import DockerSandbox

    return DockerSandbox(config, workspace, session_id)
