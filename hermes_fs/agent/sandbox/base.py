"""What every sandbox backend shares: the result of a command, its error type, the protocol."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ...errors import HermesError

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
    interrupted: bool = False  # the person stopped the turn (Ctrl-C): the command was killed

    def render(self) -> str:
        parts = ["interrupted: the person stopped the turn and the command was killed" if self.interrupted else
                 f"exit code: {self.exit_code}" if not self.timed_out else "timed out: the command was killed"]
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
    def interrupt(self) -> None: ...  # from another thread: kill the command now running, if any
    def close(self) -> None: ...


