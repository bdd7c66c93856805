"""Where the `shell` tool runs commands. Backends: `docker` (hermes_fs.docker_sandbox), `local`
(this machine, only when chosen explicitly) and `none` (no shell at all)."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ...errors import HermesError
from ...store.config import SandboxConfig

OUTPUT_LIMIT = 16_000  # characters of stdout and of stderr handed back to the model


class SandboxError(HermesError):
    """The sandbox cannot run commands (no engine, no image, disabled)."""


@dataclass
class ShellResult:
    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    cwd: str = ""

    def render(self) -> str:
        parts = [f"exit code: {self.exit_code}" if not self.timed_out else "timed out: the command was killed"]
        if self.cwd:
            parts.append(f"cwd: {self.cwd}")
        parts.append(f"stdout:\n{truncate(self.stdout)}")
        if self.stderr:
            parts.append(f"stderr:\n{truncate(self.stderr)}")
        return "\n".join(parts)


def truncate(text: str, limit: int = OUTPUT_LIMIT) -> str:
    if len(text) <= limit:
        return text
    head, tail = text[: limit // 2], text[-limit // 2 :]
    return f"{head}\n[... {len(text) - limit} characters truncated ...]\n{tail}"


class Sandbox(Protocol):
    def run(self, command: str, timeout_s: float | None = None) -> ShellResult: ...
    def close(self) -> None: ...


class NoSandbox:
    def run(self, command: str, timeout_s: float | None = None) -> ShellResult:
        raise SandboxError("the shell tool is disabled (sandbox.backend: none in hermes.yaml)")

    def close(self) -> None:
        pass


class LocalSandbox:
    """Runs on the host, in the workspace folder. Chosen explicitly with sandbox.backend: local."""

    def __init__(self, workspace: Path, config: SandboxConfig):
        self.workspace = Path(workspace)
        self.config = config

    def run(self, command: str, timeout_s: float | None = None) -> ShellResult:
        timeout = min(timeout_s or self.config.timeout_s, self.config.timeout_s)
        self.workspace.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command], cwd=self.workspace, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout)
            return ShellResult(proc.returncode, _text(out), _text(err), cwd=str(self.workspace))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            return ShellResult(None, _text(out), _text(err), timed_out=True, cwd=str(self.workspace))

    def close(self) -> None:
        pass


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def make_sandbox(config: SandboxConfig, workspace: Path, session_id: str) -> Sandbox:
    if config.backend == "none":
        return NoSandbox()
    if config.backend == "local":
        return LocalSandbox(workspace, config)
    from .docker import DockerSandbox

    return DockerSandbox(config, workspace, session_id)
