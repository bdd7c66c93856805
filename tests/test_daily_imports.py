"""The commands a person runs every day never import litellm or torch (seconds of CPU each): each
runs in a real CLI process with an import hook that records any attempt to import them, even one
that a `try` would swallow. A `run` served by a running daemon is on that path too: the model
layer is imported in the daemon, never in the CLI process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import DaemonProc, wait_for

HEAVY = ("litellm", "torch", "sentence_transformers")

# Runs the real entry point with a meta path finder that notes every heavy import it is asked for.
WATCHED = f"""
import sys
asked = []

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {HEAVY!r}:
            asked.append(name)
        return None

sys.meta_path.insert(0, Watch())
from hermes_fs.cli.main import main
try:
    main(sys.argv[1:], prog_name="hermes-fs")
except SystemExit as exc:
    code = exc.code
else:
    code = 0
print("HEAVY-IMPORTS", sorted(set(asked)), file=sys.stderr)
sys.exit(code)
"""


def watched(vault, *args: str, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WATCHED, "--vault", str(vault.root), *args], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, cwd=cwd, timeout=120)


def heavy(r: subprocess.CompletedProcess) -> str:
    line = [x for x in r.stderr.splitlines() if x.startswith("HEAVY-IMPORTS")]
    assert line, r.stderr
    return line[-1]


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
