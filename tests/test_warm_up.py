"""A daemon warms the model layer at start, so the first turn it serves does not import it."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import DaemonProc, wait_for
from model_server import configure_vault


def test_the_daemon_imports_the_model_layer_at_start_and_the_first_turn_is_served_warm(vault, model_server, daemons):
    configure_vault(vault.root, model_server)
    env = {k: v for k, v in os.environ.items() if k != "HERMES_NO_WARM_UP"}
    d = DaemonProc(vault.root, env=env)
    daemons.append(d)
    assert wait_for(lambda: any("model layer warm" in e for e in d.state().get("last_events", [])), 300), d.output()
    assert model_server.requests == []  # warmed without asking the model anything
    model_server.add({"content": "hello from the model"})
    out = subprocess.run([sys.executable, "-m", "hermes_fs", "--vault", str(vault.root), "run", "hi"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "hello from the model" in out.stdout
    assert len(model_server.requests) == 1

