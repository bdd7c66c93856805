"""`run` and `chat` start a daemon themselves when none runs (service/autostart.py): the first call
starts a turns-only daemon and is served by it, later calls are served warm, a stale socket or
state file is no obstacle, two first calls at once start one daemon, `daemon stop` stops it, it
stops by itself when idle, and a person's full daemon takes its place. Every CLI process here
records whether it imported litellm (tests/import_watch.py): a turn that succeeds without it ran in
the daemon."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from conftest import DaemonProc, git, wait_for
from import_watch import WATCHED, heavy, watched

from hermes_fs.service.daemon_state import daemon_lock, status
from hermes_fs.store.vault import Vault

ON = {"HERMES_NO_AUTOSTART": ""}  # the suite turns autostart off (conftest.py); these tests turn it on
STARTED = "hermes-fs: started a daemon for this vault"

pytestmark = pytest.mark.slow


@pytest.fixture
def autostarted(agent_vault):
    """Whatever daemon a test's CLI calls started is stopped (and if need be killed) afterwards."""
    yield agent_vault
    pid = daemon_lock(agent_vault).holder() if daemon_lock(agent_vault).is_held() else None
    if pid:
        os.kill(pid, signal.SIGTERM)
        if not wait_for(lambda: not daemon_lock(agent_vault).is_held(), 60):
            os.kill(pid, signal.SIGKILL)


def state(vault: Vault) -> dict:
    return status(vault)


def test_the_first_call_starts_a_daemon_and_later_calls_are_served_by_it(autostarted, model_server, tmp_path):
    vault = autostarted
    model_server.add({"content": "first"}, {"content": "second"})
    r = watched(vault, "run", "one", env=ON, cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, "first\n"), r.stderr
    assert STARTED in r.stderr and heavy(r) == "HEAVY-IMPORTS []"  # served by the daemon it started
    st = state(vault)
    assert st["running"] and st["turns_only"] and st["idle_stop_s"] == 1800
    r = watched(vault, "run", "two", env=ON, cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, "second\n") and STARTED not in r.stderr
    assert heavy(r) == "HEAVY-IMPORTS []" and state(vault)["pid"] == st["pid"]
    assert git(vault, "log", "-1", "--format=%s").strip() == "session: two"
    events = " ".join(state(vault)["last_events"])
    assert "turns only" in events and "cron job" not in events  # no watcher, cron, gateway or sync
    out = subprocess.run([sys.executable, "-m", "hermes_fs", "--vault", str(vault.root), "daemon", "status"],
                         capture_output=True, text=True, timeout=180).stdout
    assert "turns only" in out
    r = subprocess.run([sys.executable, "-m", "hermes_fs", "--vault", str(vault.root), "daemon", "stop"],
                       capture_output=True, text=True, timeout=90)
    assert r.stdout == "daemon stopped\n" and not state(vault)["running"]
    assert not (vault.root / ".hermes" / "daemon.sock").exists()


def test_a_stale_socket_and_state_file_are_no_obstacle(autostarted, model_server, tmp_path):
    vault = autostarted
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(vault.root / ".hermes" / "daemon.sock"))  # nobody listens: what a kill -9 leaves
    s.close()
    (vault.root / ".hermes" / "daemon.json").write_text(json.dumps(
        {"pid": 999999, "running": True, "turns_only": True, "last_events": ["daemon started"]}))
    model_server.add({"content": "fine"})
    r = watched(vault, "run", "hi", env=ON, cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, "fine\n"), r.stderr
    assert STARTED in r.stderr and heavy(r) == "HEAVY-IMPORTS []"
    assert state(vault)["pid"] != 999999 and state(vault)["running"]


def test_two_first_calls_at_once_start_one_daemon(autostarted, model_server, tmp_path):
    vault = autostarted
    model_server.add({"content": "same answer"}, {"content": "same answer"})
    env = {**os.environ, **ON}
    calls = [subprocess.Popen([sys.executable, "-c", WATCHED, "--vault", str(vault.root), "run", f"call {i}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
             for i in range(2)]
    results = [c.communicate(timeout=180) for c in calls]
    assert [c.returncode for c in calls] == [0, 0], results
    assert all(out == "same answer\n" and "IMPORT-WATCH-ON" in err and "HEAVY-IMPORT " not in err
               for out, err in results), results
    assert sum(STARTED in err for _out, err in results) == 1
    log = (vault.root / ".hermes" / "daemon.log").read_text()
    assert log.count("daemon started") == 1, log


def test_it_stops_by_itself_when_idle(autostarted, model_server, tmp_path):
    vault = autostarted
    (vault.root / "hermes.yaml").write_text((vault.root / "hermes.yaml").read_text()
                                            + "daemon:\n  idle_stop_min: 0.03\n")
    git(vault, "commit", "-qam", "test: a daemon that stops after 2 s idle")
    model_server.add({"content": "bye soon"})
    r = watched(vault, "run", "hi", env=ON, cwd=tmp_path)
    assert r.returncode == 0 and STARTED in r.stderr, r.stderr
    assert wait_for(lambda: not state(vault)["running"], 60)
    assert "min: stopping" in (vault.root / ".hermes" / "daemon.log").read_text()


def test_autostart_off_runs_in_this_process(autostarted, model_server, tmp_path):
    vault = autostarted
    (vault.root / "hermes.yaml").write_text((vault.root / "hermes.yaml").read_text() + "daemon:\n  autostart: false\n")
    git(vault, "commit", "-qam", "test: no autostart")
    model_server.add({"content": "here"})
    r = watched(vault, "run", "hi", env=ON, cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, "here\n") and STARTED not in r.stderr
    assert "'litellm'" in heavy(r) and not state(vault)["running"]


def test_a_full_daemon_takes_the_place_of_an_autostarted_one(autostarted, model_server, daemons, tmp_path):
    vault = autostarted
    model_server.add({"content": "warm"})
    assert watched(vault, "run", "hi", env=ON, cwd=tmp_path).returncode == 0
    first = state(vault)["pid"]
    d = DaemonProc(vault.root)  # `hermes-fs daemon`: stops the turns-only one, then runs in full
    daemons.append(d)
    st = state(vault)
    assert st["pid"] == d.proc.pid != first and not st["turns_only"]
    assert wait_for(lambda: not _alive(first), 30)
    time.sleep(0.1)
    assert "loaded" in " ".join(st["last_events"])  # the full daemon's parts (cron jobs loaded)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (our own child, not yet reaped) is gone too
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return True


def test_the_daemon_run_starts_still_makes_older_state_files_private(autostarted, model_server, tmp_path):
    """It does so after it has started serving (not before the first turn): the job still happens."""
    vault = autostarted
    old = vault.root / ".hermes" / "logs" / "old.log"
    old.parent.mkdir(parents=True, exist_ok=True)
    old.write_text("a line a person may not want others to read\n")
    old.chmod(0o644)
    model_server.add({"content": "private"})
    r = watched(vault, "run", "hi", env=ON, cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, "private\n") and STARTED in r.stderr, r.stderr
    assert wait_for(lambda: old.stat().st_mode & 0o777 == 0o600, 30)
    assert (vault.root / ".hermes").stat().st_mode & 0o777 == 0o700
