"""The gateway as `gateway status`, `status` and `doctor` show it: each configured channel's state
(from the running daemon's .hermes/gateway/state.json, checked against the daemon's lock), its
last message and its replies by delivery state (from the ledger). Cheap: no network, no import of
a channel's library."""

from __future__ import annotations

import json

from ...store.vault import Vault
from .core import state_path
from .ledger import GatewayLedger, ledger_path
from .registry import configured


def collect(vault: Vault) -> list[dict]:
    from ..daemon_state import is_running

    names = configured(vault)
    if not names:
        return []
    running = is_running(vault)
    try:
        state = json.loads(state_path(vault).read_text())
    except (OSError, ValueError):
        state = {}
    channels = state.get("channels", {}) if running and state.get("running") else {}
    path = ledger_path(vault.state_dir)
    ledger = GatewayLedger(path) if path.exists() else None
    rows = []
    for name in names:
        s = channels.get(name) or {}
        row = {"channel": name, "state": s.get("state") or ("not started" if running else "daemon not running"),
               "detail": s.get("detail") or "", "since": s.get("since"),
               "last_message": ledger.last_message(name) if ledger else None,
               "deliveries": ledger.delivery_counts(name) if ledger else {}}
        rows.append(row)
    if ledger:
        ledger.close()
    return rows
