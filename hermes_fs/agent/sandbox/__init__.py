"""Where the `shell` tool runs commands. Backends: `docker` (sandbox.docker), `ssh` (a remote
host, sandbox.ssh: its workdir's files too), `local` (this machine, only when chosen explicitly)
and `none` (no shell at all)."""

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
    if config.backend == "ssh":
        from .ssh import SshSandbox

        return SshSandbox(config.ssh, config.timeout_s)
    from .docker import DockerSandbox

    return DockerSandbox(config, workspace, session_id)
