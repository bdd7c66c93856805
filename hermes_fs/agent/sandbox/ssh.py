"""`sandbox.backend: ssh`: the shell tool and workspace files on a remote host (sandbox.ssh).

The host is trusted only by its key: it must already be in `known_hosts` (an unknown key is
refused, a changed one is an error naming the likely cause), and we authenticate with a key file
or the ssh agent, never a password. Each command runs on the remote side under `timeout`, which
makes it a process group of its own; a timeout there, or our own deadline, or the person's Ctrl-C
kills that whole group (`kill -- -PGID` over a second channel), so nothing outlives the turn.
Files are read and written over SFTP, only under `workdir` (after the server resolves symlinks).
"""

from __future__ import annotations

import posixpath
import select
import shlex
import time
from pathlib import Path
from typing import Any

from ...store.config import SshConfig
from .base import SandboxError, ShellResult

CAPTURE_LIMIT = 4_000_000  # bytes of stdout and of stderr kept in memory (the model sees OUTPUT_LIMIT)
PID_MARK = b"HERMES-PGID "  # the first stderr line of a command: its remote process group
GRACE_S = 5  # past the remote timeout, our own deadline


class SshSandbox:
    """One SSH connection per session, opened on first use."""

    def __init__(self, config: SshConfig, timeout_s: int):
        self.config = config
        self.timeout_s = timeout_s
        self.client: Any = None  # paramiko.SSHClient, once connected
        self.pgid: str | None = None  # the remote process group of the command running now
        self.interrupted = False
        self._workdir: str | None = None

    @property
    def workdir(self) -> str:
        """`sandbox.ssh.workdir`, a leading `~` being the remote user's home (asked once)."""
        if self._workdir is None:
            wd = self.config.workdir
            if wd == "~" or wd.startswith("~/"):
                with self.connect().open_sftp() as sftp:
                    wd = sftp.normalize(".") + wd[1:]
            self._workdir = posixpath.normpath(wd)
        return self._workdir

    # -- the connection --------------------------------------------------------------------------
    def connect(self):
        if self.client is not None and self.client.get_transport() and self.client.get_transport().is_active():
            return self.client
        import paramiko

        c = self.config
        known = Path(c.known_hosts).expanduser()
        if not known.is_file():
            raise SandboxError(f"sandbox.ssh.known_hosts {known} does not exist: add the host's key to it first "
                               f"(check its fingerprint, then `ssh-keyscan -p {c.port} {c.host} >> {known}`)")
        client = paramiko.SSHClient()
        client.load_host_keys(str(known))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())  # never accept a key on first sight
        identity = Path(c.identity_file).expanduser() if c.identity_file else None
        try:
            client.connect(c.host, port=c.port, username=c.user,
                           key_filename=str(identity) if identity and identity.is_file() else None,
                           allow_agent=True, look_for_keys=False, timeout=c.connect_timeout_s,
                           banner_timeout=c.connect_timeout_s, auth_timeout=c.connect_timeout_s)
        except paramiko.BadHostKeyException as exc:
            raise SandboxError(f"the host key of {c.host}:{c.port} CHANGED ({exc.key.get_name()} "
                               f"{exc.key.get_base64()[:16]}..., known_hosts has another): someone may be in "
                               "between, or the server was reinstalled. Check with its owner; if it was "
                               f"reinstalled, `ssh-keygen -R '[{c.host}]:{c.port}' -f {known}` and add the new key") from None
        except paramiko.PasswordRequiredException:
            raise SandboxError(f"{identity} is protected by a passphrase: load it into the ssh agent "
                               "(`ssh-add`) instead") from None
        except paramiko.AuthenticationException:
            raise SandboxError(f"{c.user}@{c.host}:{c.port} refused our key (identity_file {identity}, "
                               "or the ssh agent's keys)") from None
        except paramiko.SSHException as exc:
            text = str(exc)
            if "not found in known_hosts" in text:
                text = (f"{c.host}:{c.port} is not in {known}: host keys are never accepted on first sight; "
                        "check its fingerprint and add it (`ssh-keyscan`)")
            raise SandboxError(f"ssh to {c.host}:{c.port}: {text}") from None
        except OSError as exc:
            raise SandboxError(f"cannot reach {c.host}:{c.port}: {exc.strerror or exc}") from None
        self.client = client
        return client

    # -- commands ----------------------------------------------------------------------------------
    def run(self, command: str, timeout_s: float | None = None) -> ShellResult:
        timeout = min(timeout_s or self.timeout_s, self.timeout_s)
        client = self.connect()
        wd = shlex.quote(self.workdir)
        remote = (f"mkdir -p -- {wd} && cd -- {wd} && printf '{PID_MARK.decode()}%s\\n' $$ >&2 && "
                  f"exec timeout --kill-after=2 {max(1, int(timeout))} sh -c {shlex.quote(command)}")
        channel = client.get_transport().open_session()
        self.interrupted = False
        channel.exec_command(remote)
        out, err = _Capture(), _Capture()
        deadline = time.monotonic() + timeout + GRACE_S
        started = time.monotonic()
        timed_out = False
        try:
            while not (channel.exit_status_ready() and not channel.recv_ready() and not channel.recv_stderr_ready()):
                select.select([channel], [], [], 0.2)
                while channel.recv_ready():
                    out.add(channel.recv(65536))
                while channel.recv_stderr_ready():
                    err.add(channel.recv_stderr(65536))
                    self._take_pgid(err)
                if time.monotonic() > deadline:
                    timed_out = True
                    self.interrupt(mark=False)
                    break
        except KeyboardInterrupt:  # Ctrl-C here: the remote command must not outlive the turn
            self.interrupt()
            raise
        finally:
            self._take_pgid(err)
            self.pgid = None
        code = channel.recv_exit_status() if channel.exit_status_ready() else None
        channel.close()
        if code == 124 and time.monotonic() - started >= timeout - 1:  # `timeout` stopped it
            timed_out, code = True, None
        stderr = err.text()
        return ShellResult(None if timed_out or self.interrupted else code, out.text(), stderr, timed_out=timed_out,
                           cwd=f"{self.config.user}@{self.config.host}:{self.workdir}", interrupted=self.interrupted)

    def _take_pgid(self, err: _Capture) -> None:
        if self.pgid is None and err.pgid:
            self.pgid = err.pgid

    def interrupt(self, mark: bool = True) -> None:
        """Kill the running command's whole remote process group (from any thread); the run
        loop then sees the command end and reports it interrupted."""
        pgid = self.pgid
        if mark:
            self.interrupted = True
        if pgid and self.client is not None:
            try:
                _stdin, stdout, _stderr = self.client.exec_command(f"kill -KILL -{int(pgid)} 2>/dev/null; true",
                                                                   timeout=10)
                stdout.channel.recv_exit_status()
            except Exception:  # the connection is gone: the server ends the session's processes itself
                pass

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    # -- files under workdir -------------------------------------------------------------------
    def owns(self, path: str) -> bool:
        """Whether an absolute path names a file under workdir (so the tools read it here)."""
        norm = posixpath.normpath(path)
        return norm.startswith(self.workdir.rstrip("/") + "/")

    def _inside(self, sftp, path: str, parent: bool = False) -> str:
        """The path as the server resolves it (symlinks followed), refused outside workdir."""
        target = posixpath.dirname(path) if parent else path
        try:
            real = sftp.normalize(target)
        except OSError:
            raise SandboxError(f"no such file on {self.config.host}: {path}") from None
        root = sftp.normalize(self.workdir)
        if real != root and not real.startswith(root.rstrip("/") + "/"):
            raise SandboxError(f"{path} leads outside {self.workdir} on {self.config.host}")
        return posixpath.join(real, posixpath.basename(path)) if parent else real

    def read_file(self, path: str, limit: int) -> bytes:
        with self.connect().open_sftp() as sftp:
            real = self._inside(sftp, path)
            with sftp.open(real, "rb") as f:
                return f.read(limit + 1)

    def write_file(self, path: str, data: bytes) -> None:
        with self.connect().open_sftp() as sftp:
            try:
                sftp.stat(self.workdir)
            except OSError:
                sftp.mkdir(self.workdir)
            self._mkdirs(sftp, posixpath.dirname(posixpath.normpath(path)))
            real = self._inside(sftp, path, parent=True)
            with sftp.open(real, "wb") as f:
                f.write(data)

    def _mkdirs(self, sftp, folder: str) -> None:
        """Create `folder` level by level from workdir, each level checked to stay inside it."""
        rel = posixpath.relpath(folder, self.workdir)
        d = self.workdir
        for part in [] if rel == "." else rel.split("/"):
            d = posixpath.join(d, part)
            try:
                sftp.stat(d)
            except OSError:
                sftp.mkdir(d)
            self._inside(sftp, d)


class _Capture:
    """One stream's bytes, kept up to CAPTURE_LIMIT (the rest counted, not kept); the stderr one
    also takes the process-group line the wrapper prints first."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.size = 0
        self.dropped = 0
        self.pgid: str | None = None
        self._head = b""

    def add(self, data: bytes) -> None:
        if self.pgid is None and (self._head or data.startswith(PID_MARK[: len(data)])):
            self._head += data
            if b"\n" not in self._head:
                return
            line, _, data = self._head.partition(b"\n")
            self.pgid = line[len(PID_MARK):].decode(errors="replace").strip() if line.startswith(PID_MARK) else ""
            self._head = b""
        room = CAPTURE_LIMIT - self.size
        self.chunks.append(data[:room])
        self.size += min(len(data), max(room, 0))
        self.dropped += max(0, len(data) - max(room, 0))

    def text(self) -> str:
        text = (b"".join(self.chunks) + self._head).decode("utf-8", errors="replace")
        return text + (f"\n[... {self.dropped} more bytes not kept]" if self.dropped else "")


def doctor(config: SshConfig) -> list[tuple[str, bool, str]]:
    """(check, ok, detail): the connection, the host key, the login and the workdir."""
    box = SshSandbox(config, timeout_s=20)
    try:
        result = box.run("uname -sr && pwd")
    except SandboxError as exc:
        return [("ssh sandbox", False, str(exc))]
    finally:
        box.close()
    if result.exit_code != 0:
        return [("ssh sandbox", False, f"connected, but a test command failed: {result.stderr.strip()[:300]}")]
    system = result.stdout.strip().splitlines()[0] if result.stdout.strip() else "?"
    return [("ssh sandbox", True, f"{config.user}@{config.host}:{config.port} (host key verified), {system}, "
                                  f"workdir {box.workdir}")]
