"""Starting hermes-fs itself as a detached process (`daemon --detach`, a background refine)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def spawn(vault_root: Path, args: list[str], log: Path) -> int:
    """Run `hermes-fs --vault ROOT ARGS...` detached from this terminal; output appended to `log`.

    Returns the pid. The child is its own session leader, so Ctrl-C here never reaches it.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as out:
        proc = subprocess.Popen([sys.executable, "-m", "hermes_fs", "--vault", str(vault_root), *args],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    return proc.pid
