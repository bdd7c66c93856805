"""The backends that need no engine: `none` (no shell at all) and `local` (this machine, only
when chosen explicitly)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from ...store.config import SandboxConfig
from ...store.private import person_umask
from .base import SandboxError, ShellResult


class NoSandbox:
    def run(self, command: str, timeout_s: float | None = None) -> ShellResult:
        raise SandboxError("the shell tool is disabled (sandbox.backend: none in hermes.yaml)")

    def interrupt(self) -> None:
        pass

    def close(self) -> None:
        pass


class LocalSandbox:
    """Runs on the host, in the workspace folder. Chosen explicitly with sandbox.backend: local."""

    def __init__(self, workspace: Path, config: SandboxConfig):
        self.workspace = Path(workspace)
        self.config = config
        self.proc: subprocess.Popen | None = None  # the command running now
        self.interrupted = False

    def interrupt(self) -> None:
        """Kill the running command's whole process group (it runs in a session of its own, so
        the terminal's Ctrl-C never reaches it)."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            self.interrupted = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def run(self, command: str, timeout_s: float | None = None) -> ShellResult:
        timeout = min(timeout_s or self.config.timeout_s, self.config.timeout_s)
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.interrupted = False
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command], cwd=self.workspace, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL, start_new_session=True, umask=_umask(),
        )
        self.proc = proc
        try:
            out, err = proc.communicate(timeout=timeout)
            return ShellResult(proc.returncode, _text(out), _text(err), cwd=str(self.workspace),
                               interrupted=self.interrupted)
        except KeyboardInterrupt:  # Ctrl-C in this process: the command must not outlive the turn
            self.interrupt()
            raise
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            try:
                out, err = proc.communicate(timeout=2)
            except subprocess.TimeoutExpired:  # a child in a session of its own still holds the pipes
                proc.kill()
                for pipe in (proc.stdout, proc.stderr):
                    if pipe:
                        pipe.close()
                proc.wait()
                out, err = b"", b""
            return ShellResult(None, _text(out), _text(err), timed_out=True, cwd=str(self.workspace))
        finally:
            self.proc = None

    def close(self) -> None:
        pass


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _umask() -> int:
    """The person's own umask for their commands (-1: this process's, when it was never tightened)."""
    found = person_umask()
    return -1 if found is None else found
