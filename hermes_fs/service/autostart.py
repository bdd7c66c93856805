"""A daemon started by `run` and `chat` themselves when none is running, as build tools do, so that
every later call is a warm turn (litellm is imported once, in the daemon, not in each CLI process).

What starts is a turns-only daemon (service/daemon.py, DaemonOptions.turns_only): the warm-turn
server and nothing else. No watcher commits edits, no inbox request, cron job, gateway channel or
sync round runs: starting it changes nothing a person sees but speed, and it stops by itself
after `daemon.idle_stop_min` without a turn. A person's own `hermes-fs daemon` replaces it.

Two first calls at once start one daemon: the starter holds .hermes/locks/autostart.lock while it
spawns and waits, and the daemon's own lock (daemon.lock) admits one daemon per vault anyway. A
stale socket file (a killed daemon) is found by connecting, not by its existence.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import HermesError
from ..store.lock import VaultLock
from ..store.vault import Vault
from .daemon_state import is_running, status
from .warm import socket_path

START_TIMEOUT_S = 60.0  # a daemon that is not answering by then is not waited for (the turn runs here)
POLL_S = 0.05


@dataclass
class Started:
    """What `ensure_daemon` did: `pid` of the daemon it started (None: one was already running);
    `fresh`: the daemon has only just come up (its first turn may take a while to open)."""

    pid: int | None = None
    log: Path | None = None
    fresh: bool = False


def wanted(vault: Vault) -> bool:
    """hermes.yaml's daemon.autostart, unless the environment says no daemon (HERMES_NO_DAEMON) or
    no autostart (HERMES_NO_AUTOSTART: the test suite, scripts that manage daemons themselves)."""
    if os.environ.get("HERMES_NO_DAEMON") or os.environ.get("HERMES_NO_AUTOSTART"):
        return False
    return vault.config.daemon.autostart


def answering(vault: Vault) -> bool:
    """A daemon accepts connections on the vault's socket now (a stale socket file does not)."""
    path = socket_path(vault)
    if not path.exists():
        return False
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(2.0)
    try:
        sock.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        sock.close()


def ensure_daemon(vault: Vault, timeout: float = START_TIMEOUT_S) -> Started | None:
    """A daemon answering on the vault's socket, started here if need be; None when there is none
    to use (autostart off, a full daemon without warm turns, one that did not come up in time)."""
    if not wanted(vault):
        return None
    if answering(vault):
        return Started()
    lock = VaultLock(vault.state_dir / "locks" / "autostart.lock")
    try:
        lock.acquire(timeout)
    except HermesError:
        return None
    try:
        if answering(vault):  # another first call started it while this one waited
            return Started(fresh=True)
        if is_running(vault):  # a daemon still starting (its socket comes late), or one without warm turns
            return Started(fresh=True) if not _has_started(vault) and _wait(vault, None, timeout) else None
        return _start(vault, timeout)
    finally:
        lock.release()


def _start(vault: Vault, timeout: float) -> Started | None:
    from .background import spawn

    log = vault.state_dir / "daemon.out"
    idle_s = max(0.0, vault.config.daemon.idle_stop_min) * 60
    pid = spawn(vault.root, ["daemon", "--turns-only", "--idle-stop", f"{idle_s:g}"], log)
    return Started(pid, log, fresh=True) if _wait(vault, pid, timeout) else None


def _has_started(vault: Vault) -> bool:
    """The running daemon has said "daemon started" (everything it serves is up)."""
    st = status(vault)
    return not st.get("starting") and any("daemon started" in e for e in st.get("last_events") or [])


def _wait(vault: Vault, pid: int | None, timeout: float) -> bool:
    """Until the socket answers; False at the timeout or when the started process is gone."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if answering(vault):
            return True
        if pid is not None and _exited(pid):
            return answering(vault)  # it lost the race to another daemon, which may answer now
        time.sleep(POLL_S)
    return False


def _exited(pid: int) -> bool:
    """The child we spawned has ended (reaped here: it is our child until it is)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done == pid
