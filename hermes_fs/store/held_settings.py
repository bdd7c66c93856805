"""Settings from another machine that widen what runs on this one: held until approved here.

hermes.yaml travels with the vault, so whoever can push to the remote (or another machine of the
person's, compromised) could add an MCP server command, switch the sandbox to `local`, give the
gateway the host's shell or add a notify target, and it would take effect here on the next run.
A sync merge that brings such a change records it here (`.hermes/sync/held-settings.json`); until
`hermes-fs sync approve` on this machine, the settings loaded here keep the value this machine had
(`apply`). Changes that do not widen anything take effect, and are reported (status, log, a notice).
A person's own edit of hermes.yaml on this machine is never held: it is not a merge.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .files import atomic_write

HELD_FILE = "held-settings.json"
_ABSENT = {"absent": True}  # a value that was not there (JSON keeps it; None may be a real value)


@dataclass
class HeldSetting:
    key: str  # dotted: mcp.servers.<name>, sandbox.backend, gateway.allow_local_shell, notify.targets.<name>
    approved: Any  # the value in force here (_ABSENT: none)
    offered: Any  # what arrived from the other machine (_ABSENT: removed)
    host: str  # the machine whose merge brought it
    at: float


def _get(data: Any, key: str) -> Any:
    for part in key.split("."):
        if not isinstance(data, dict) or part not in data:
            return _ABSENT
        data = data[part]
    return data


def _set(data: dict, key: str, value: Any) -> None:
    *parents, last = key.split(".")
    for part in parents:
        if not isinstance(data.get(part), dict):
            data[part] = {}
        data = data[part]
    if value == _ABSENT:
        data.pop(last, None)
    else:
        data[last] = copy.deepcopy(value)


def _names(data: Any, key: str) -> set[str]:
    found = _get(data, key)
    return set(found) if isinstance(found, dict) else set()


def widening(old: dict, new: dict) -> list[tuple[str, Any, Any]]:
    """(key, old value, new value) of each change that lets more run or reach out from here."""
    found = []
    for group in ("mcp.servers", "notify.targets"):  # a server added or changed, a target added or changed
        for name in sorted(_names(new, group)):
            key = f"{group}.{name}"
            if _get(old, key) != _get(new, key):
                found.append((key, _get(old, key), _get(new, key)))
    backend_old, backend_new = _get(old, "sandbox.backend"), _get(new, "sandbox.backend")
    if backend_new != backend_old and backend_new in ("local", "none", "ssh"):
        found.append(("sandbox.backend", backend_old, backend_new))
    for key in ("sandbox.ssh", "sandbox.network"):
        if _get(old, key) != _get(new, key) and _get(new, key) not in (_ABSENT, False):
            found.append((key, _get(old, key), _get(new, key)))
    if _get(new, "gateway.allow_local_shell") is True and _get(old, "gateway.allow_local_shell") is not True:
        found.append(("gateway.allow_local_shell", _get(old, "gateway.allow_local_shell"), True))
    return found


def changed_keys(old: dict, new: dict) -> list[str]:
    """The top-level settings (and their direct keys) that differ: what a notice names."""
    keys = []
    for top in sorted(set(old) | set(new)):
        a, b = old.get(top, _ABSENT), new.get(top, _ABSENT)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            keys += [f"{top}.{k}" for k in sorted(set(a) | set(b)) if a.get(k, _ABSENT) != b.get(k, _ABSENT)]
        else:
            keys.append(top)
    return keys


def load(state_dir: Path) -> list[HeldSetting]:
    try:
        rows = json.loads((Path(state_dir) / "sync" / HELD_FILE).read_text())
        return [HeldSetting(**row) for row in rows]
    except (OSError, ValueError, TypeError):
        return []


def save(state_dir: Path, held: list[HeldSetting]) -> None:
    path = Path(state_dir) / "sync" / HELD_FILE
    if not held:
        path.unlink(missing_ok=True)
        return
    atomic_write(path, json.dumps([asdict(h) for h in held], indent=2), mode=0o600)


def hold(state_dir: Path, old: dict, new: dict, host: str) -> list[HeldSetting]:
    """Record the widening changes of a merge (a key held already keeps the value approved here);
    returns what is held now."""
    held = {h.key: h for h in load(state_dir)}
    for key, before, after in widening(old, new):
        approved = held[key].approved if key in held else before
        if after == approved:
            held.pop(key, None)  # back to what this machine had: nothing to hold
        else:
            held[key] = HeldSetting(key, approved, after, host, time.time())
    save(state_dir, list(held.values()))
    return list(held.values())


def apply(data: dict, held: list[HeldSetting]) -> dict:
    """The raw settings with every held change replaced by the value approved here (while the
    file still says what arrived: a later edit of that key on this machine is the person's)."""
    if not held:
        return data
    data = copy.deepcopy(data)
    for h in held:
        if _get(data, h.key) == h.offered:
            _set(data, h.key, h.approved)
    return data


def approve(state_dir: Path, keys: list[str] | None = None) -> list[HeldSetting]:
    """Let held changes take effect here (all, or those named); returns the ones approved."""
    held = load(state_dir)
    chosen = [h for h in held if not keys or h.key in keys]
    save(state_dir, [h for h in held if h not in chosen])
    return chosen


def describe(value: Any) -> str:
    return "(absent)" if value == _ABSENT else json.dumps(value, default=str)
