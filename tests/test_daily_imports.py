"""The commands a person runs every day never import litellm or torch (seconds of CPU each): each
runs in a real CLI process with an import hook that records any attempt to import them, even one
that a `try` would swallow. A `run` served by a running daemon is on that path too: the model
layer is imported in the daemon, never in the CLI process."""

from __future__ import annotations

import pytest
from conftest import DaemonProc, wait_for
from import_watch import heavy, watched


def test_everyday_commands_import_neither_litellm_nor_torch(vault):
    for args in (["--help"], ["status"], ["status", "--json"], ["review"], ["log"], ["sessions"],
                 ["sessions", "list"], ["memory", "add", "MEMORY.md", "A fact worth keeping."], ["memory", "show"],
                 ["skills", "list"], ["cron", "list"], ["daemon", "status"]):
        r = watched(vault, *args)
        assert r.returncode == 0, (args, r.stderr)
        assert heavy(r) == "HEAVY-IMPORTS []", args


@pytest.mark.slow
def test_the_hook_sees_a_heavy_import(agent_vault, model_server, tmp_path):
    """The check can fail: a cold `run` (no daemon) imports litellm, and the hook says so."""
    model_server.add({"content": "cold hello"})
    r = watched(agent_vault, "run", "hi", env={"HERMES_NO_DAEMON": "1"}, cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, "cold hello\n"), r.stderr
    assert "'litellm'" in heavy(r)


@pytest.mark.slow
def test_a_run_through_the_daemon_imports_no_model_layer_in_the_cli(agent_vault, model_server, daemons, tmp_path):
    d = DaemonProc(agent_vault.root)
    daemons.append(d)
    assert wait_for(lambda: (agent_vault.root / ".hermes" / "daemon.sock").exists(), 10)
    model_server.add({"content": "warm hello"}, {"content": "warm again"})
    for text, answer in (("hi", "warm hello"), ("again", "warm again")):
        r = watched(agent_vault, "run", text, cwd=tmp_path)
        assert (r.returncode, r.stdout) == (0, f"{answer}\n"), r.stderr
        assert heavy(r) == "HEAVY-IMPORTS []"
    r = watched(agent_vault, "sessions", "list")
    assert r.returncode == 0 and heavy(r) == "HEAVY-IMPORTS []"
