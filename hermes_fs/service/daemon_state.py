"""Whether a vault's daemon runs, and what it last said: read from its lock and .hermes/daemon.json.

Apart from the daemon itself so that readers (`status`, the web page the daemon may serve) do not
import the daemon.
"""

from __future__ import annotations

import json
import time

from ..store.lock import VaultLock
from ..store.vault import Vault


def daemon_lock(vault: Vault) -> VaultLock:
    return VaultLock(vault.state_dir / "daemon.lock")


def is_running(vault: Vault) -> bool:
    return daemon_lock(vault).is_held()


def status(vault: Vault) -> dict:
    try:
        state = json.loads((vault.state_dir / "daemon.json").read_text())
    except (OSError, ValueError):
        state = {}
    running = is_running(vault)
    state["running"] = running
    if running:
        holder = daemon_lock(vault).holder()
        if holder and state.get("pid") != holder:  # the file is a previous daemon's: this one is starting
            state = {"running": True, "pid": holder, "starting": True, "queue": [], "last_events": [], "last_errors": []}
        elif state.get("started"):
            state["uptime_s"] = round(time.time() - state["started"], 1)
    return state
