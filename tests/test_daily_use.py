"""Daily use, as a new user does it (issue 21): the ways people drop inbox files, a daemon that
serves turns with the caller's own environment, partial merges that keep authorship, model errors
named from what litellm raised, and the smaller rough edges. End to end through the CLI where the
issue asks for it: a real daemon process, real `mv`/`ln`, the scripted model server over HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from conftest import DaemonProc, git, wait_for

RESULTS = "outputs/requests"


def results(vault, pattern="*.md"):
    d = vault.root / RESULTS
    return sorted(d.glob(pattern)) if d.exists() else []


def cli(vault, *args, env=None, input=None, cwd=None, drop=()):
    full = {k: v for k, v in os.environ.items() if k not in drop}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "hermes_fs", "--vault", str(vault.root), *args], capture_output=True,
                          text=True, env=full, input=input, cwd=cwd, timeout=180)


# -- 21.1: every way of dropping a request is taken, once --------------------------------------------
def test_requests_moved_or_linked_in_from_outside_the_vault_run_once(agent_vault, model_server, daemon, tmp_path):
    vault = agent_vault
    model_server.add({"content": "answer one"}, {"content": "answer two"})
    daemon()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "moved.md").write_text("---\ntype: run\n---\nFirst question?\n")
    (outside / "linked.md").write_text("---\ntype: run\n---\nSecond question?\n")
    subprocess.run(["mv", str(outside / "moved.md"), str(vault.root / "inbox/")], check=True)
    subprocess.run(["ln", str(outside / "linked.md"), str(vault.root / "inbox/linked.md")], check=True)
    assert wait_for(lambda: len(results(vault)) == 2, 60), (vault.root / ".hermes/daemon.log").read_text()
    texts = {p.name.split("-", 3)[-1]: p.read_text() for p in results(vault)}
    assert "answer one" in texts["moved.md"] or "answer one" in texts["linked.md"]
    assert all("status: ok" in t for t in texts.values())
    assert wait_for(lambda: git(vault, "status", "--porcelain") == "", 20)
    time.sleep(1.0)  # nothing else arrives for either: each was answered once
    assert len(results(vault)) == 2 and len(model_server.requests) == 2


def test_a_file_created_and_held_open_is_not_taken_before_its_writer_is_done(agent_vault, model_server, daemon):
    vault = agent_vault
    model_server.add({"content": "done"})
    daemon()
    path = vault.root / "inbox" / "slow.md"
    with open(path, "w") as f:  # created (inotify: "created"), then nothing for a while
        time.sleep(1.0)
        f.write("---\ntype: run\n---\nA slowly written question?\n")
    result = wait_for(lambda: results(vault, "*-slow.md"), 60)
    assert result and "status: ok" in result[0].read_text() and "A slowly written question?" in result[0].read_text()


def test_a_non_markdown_file_in_the_inbox_gets_a_result_that_says_so(vault, daemon):
    daemon()
    (vault.root / "inbox" / "notes.txt").write_bytes(b"\x00\x01 binary-ish\n")
    result = wait_for(lambda: results(vault, "*-notes.txt.md"), 30)
    assert result, (vault.root / ".hermes/daemon.log").read_text()
    text = result[0].read_text()
    assert "status: error" in text and "only `.md` files" in text and "inbox-kept" in text
    kept = list((vault.root / ".hermes" / "inbox-kept").iterdir())
    assert [p.read_bytes() for p in kept] == [b"\x00\x01 binary-ish\n"]  # nothing lost
    assert not (vault.root / "inbox" / "notes.txt").exists()
    assert wait_for(lambda: git(vault, "status", "--porcelain") == "", 20)


# -- 21.2 and 22: a warm turn uses the caller's environment, and today's hermes.yaml -----------------
KEY = "HERMES_TEST_KEY"


def daemon_env(**values) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (KEY, "FAKE_KEY")}
    env.update(values)
    return env


@pytest.fixture
def warm_daemon(agent_vault):
    procs = []

    def start(**values):
        d = DaemonProc(agent_vault.root, env=daemon_env(**values))
        assert wait_for(lambda: (agent_vault.root / ".hermes" / "daemon.sock").exists(), 10)
        procs.append(d)
        return d

    yield start
    for d in procs:
        d.stop()


def test_a_key_exported_after_the_daemon_started_is_the_one_used(agent_vault, model_server, warm_daemon, no_litellm,
                                                                 tmp_path):
    """README order: `make run` in one terminal, `export OPENAI_API_KEY=...` in the second."""
    warm_daemon()  # knows no key at all
    model_server.add({"content": "warm with your key"})
    r = cli(agent_vault, "run", "hello", env={KEY: "sk-caller-exported-later", **no_litellm}, cwd=tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (0, "warm with your key\n", "")
    assert model_server.authorizations == ["Bearer sk-caller-exported-later"]


def test_the_callers_key_wins_over_the_daemons(agent_vault, model_server, warm_daemon, no_litellm, tmp_path):
    """Issue 22: `FAKE_KEY=other hermes-fs run` with a daemon running uses `other`."""
    text = (agent_vault.root / "hermes.yaml").read_text().replace(f"api_key_env: {KEY}", "api_key_env: FAKE_KEY")
    (agent_vault.root / "hermes.yaml").write_text(text)
    agent_vault.git.commit_paths(["hermes.yaml"], "test: key from FAKE_KEY")
    warm_daemon(FAKE_KEY="sk-the-daemons-own")
    model_server.add({"content": "one"}, {"content": "two"})
    r = cli(agent_vault, "run", "hello", env={"FAKE_KEY": "other", **no_litellm}, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = cli(agent_vault, "chat", env={"FAKE_KEY": "other", **no_litellm}, input="hi\n", cwd=tmp_path)
    assert r.returncode == 0 and "two" in r.stdout, r.stderr
    assert model_server.authorizations == ["Bearer other", "Bearer other"]


def test_no_key_in_the_caller_fails_warm_exactly_as_cold(agent_vault, model_server, warm_daemon, tmp_path):
    warm_daemon(**{KEY: "sk-only-the-daemon-has-it"})
    warm = cli(agent_vault, "run", "hello", drop=(KEY,), cwd=tmp_path)
    cold = cli(agent_vault, "run", "hello", drop=(KEY,), env={"HERMES_NO_DAEMON": "1"}, cwd=tmp_path)
    assert (warm.returncode, warm.stdout, warm.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    assert warm.returncode == 1 and f"{KEY} (api_key_env in hermes.yaml) is not set" in warm.stderr
    assert model_server.requests == []


def test_a_hermes_yaml_the_cold_path_refuses_never_runs_warm(agent_vault, model_server, warm_daemon, no_litellm,
                                                            tmp_path):
    d = warm_daemon(**{KEY: "sk-test-not-a-real-key"})
    model_server.add({"content": "should not be asked"})
    with open(agent_vault.root / "hermes.yaml", "a") as f:
        f.write("refine:\n  polcy: auto\n")  # a typo
    assert wait_for(lambda: any("keeping the last good settings" in e for e in d.state().get("last_errors", [])))
    warm = cli(agent_vault, "run", "hello", env={KEY: "sk-test-not-a-real-key", **no_litellm}, cwd=tmp_path)
    cold = cli(agent_vault, "run", "hello", env={KEY: "sk-test-not-a-real-key", "HERMES_NO_DAEMON": "1"}, cwd=tmp_path)
    assert (warm.returncode, warm.stderr) == (cold.returncode, cold.stderr) and warm.returncode == 2
    assert "polcy" in warm.stderr and model_server.requests == []


def test_the_daemon_rereads_a_changed_hermes_yaml_before_a_warm_turn(agent_vault, model_server, warm_daemon,
                                                                     no_litellm, tmp_path):
    """Settings changed a moment ago are the ones used, even before the daemon's watcher reloads."""
    warm_daemon()
    model_server.add({"content": "ok"})
    from model_server import configure_vault

    configure_vault(agent_vault.root, model_server, "models:\n  cron: openai/other\n")
    text = (agent_vault.root / "hermes.yaml").read_text().replace("openai/test-model", "openai/renamed-model")
    (agent_vault.root / "hermes.yaml").write_text(text)
    r = cli(agent_vault, "run", "hello", env={KEY: "sk-test-not-a-real-key", **no_litellm}, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert model_server.requests[0]["model"] == "renamed-model"


# -- 21.9: refine --wait, learn and doctor are served warm too ---------------------------------------
def test_doctor_refine_and_learn_run_in_the_daemon_with_the_callers_key(agent_vault, model_server, warm_daemon,
                                                                          no_litellm, tmp_path):
    text = (agent_vault.root / "hermes.yaml").read_text().replace("backend: local", "backend: none")
    (agent_vault.root / "hermes.yaml").write_text(text)
    agent_vault.git.commit_paths(["hermes.yaml"], "test: no sandbox")
    warm_daemon(**{KEY: "sk-the-daemons-own"})
    env = {KEY: "sk-the-callers", **no_litellm}
    model_server.add({"content": "ok"})
    r = cli(agent_vault, "doctor", env=env, cwd=tmp_path)
    assert r.returncode == 0 and "ok  model: openai/test-model answered ('ok')" in r.stdout, r.stdout + r.stderr
    # a conversation to refine, then the review itself
    model_server.add({"content": "Noted."})
    assert cli(agent_vault, "run", "I prefer ISO dates", env=env, cwd=tmp_path).returncode == 0
    model_server.add({"tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": "Wants ISO 8601 dates."})]},
                     {"content": "Summary: ISO dates\n- memory/USER.md: the person asked for ISO dates"})
    r = cli(agent_vault, "refine", "--wait", env=env, cwd=tmp_path)
    assert r.returncode == 0 and "refine/" in r.stdout, r.stdout + r.stderr
    doc = tmp_path / "deploy.md"
    doc.write_text("# Deploying\n\nRun `fly deploy` from the project folder, then check `fly status`.\n")
    skill = "---\nname: fly-deploy\ndescription: Deploy with fly.io. Use when deploying.\n---\n# Deploy\n\n1. fly deploy\n"
    model_server.add({"tool_calls": [("skill_manage", {"action": "create", "name": "fly-deploy", "content": skill})]},
                     {"content": "Summary: fly-deploy skill"})
    r = cli(agent_vault, "learn", str(doc), env=env, cwd=tmp_path)
    assert r.returncode == 0 and "learn/" in r.stdout, r.stdout + r.stderr
    assert set(model_server.authorizations) == {"Bearer sk-the-callers"}


# -- 22: `daemon install` quotes the vault path and names each vault's unit apart -------------------
def test_daemon_install_quotes_the_path_and_gives_same_named_vaults_their_own_units(tmp_path, run_cli):
    import shlex
    import shutil

    from hermes_fs.store.vault import init_vault

    home = tmp_path / "home"
    roots = [init_vault(tmp_path / "a" / "my notes").vault.root, init_vault(tmp_path / "b" / "my notes").vault.root]
    for root in roots:
        r = run_cli("--vault", str(root), "daemon", "install", env={"HOME": str(home)})
        assert r.returncode == 0, r.stderr
    units = sorted((home / ".config" / "systemd" / "user").glob("*.service"))
    assert len(units) == 2  # not one shared (and overwritten) unit
    commands = []
    for unit in units:
        line = next(x for x in unit.read_text().splitlines() if x.startswith("ExecStart="))
        commands.append(shlex.split(line.removeprefix("ExecStart=")))
        if shutil.which("systemd-analyze"):  # systemd's own parser accepts the unit
            check = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
            assert check.returncode == 0, check.stderr
    assert sorted(c[2] for c in commands) == sorted(str(r) for r in roots)
    assert all(c[1] == "--vault" and c[3] == "daemon" and len(c) == 4 for c in commands)


# -- 21.5: model errors are named from what litellm raised, not guessed from its text ---------------
def set_model(vault, model: str, api_base: str) -> None:
    text = (vault.root / "hermes.yaml").read_text()
    lines = [f"model: {model}" if x.startswith("model:") else f"api_base: {api_base}" if x.startswith("api_base:") else x
             for x in text.splitlines()]
    (vault.root / "hermes.yaml").write_text("\n".join(lines) + "\n")


def test_an_error_inside_litellm_is_not_reported_as_an_unreachable_server(agent_vault, model_server, tmp_path):
    set_model(agent_vault, "custom/test-model", model_server.api_base)  # litellm's custom-handler route
    model_server.add({"content": "the server answers"})
    r = cli(agent_vault, "run", "hello", env={"HERMES_NO_DAEMON": "1"}, cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "cannot reach" not in r.stderr and "litellm failed before getting an answer" in r.stderr
    assert "litellm said: litellm.APIConnectionError" in r.stderr and "Traceback" not in r.stderr


def test_a_refused_connection_is_unreachable_and_an_answering_server_is_not(agent_vault, model_server, tmp_path):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    closed = s.getsockname()[1]
    s.close()
    set_model(agent_vault, "openai/test-model", f"http://127.0.0.1:{closed}/v1")
    r = cli(agent_vault, "run", "hello", env={"HERMES_NO_DAEMON": "1"}, cwd=tmp_path)
    assert r.returncode == 1 and "cannot reach the model server" in r.stderr, r.stderr
    set_model(agent_vault, "openai/test-model", model_server.api_base)
    model_server.add(*[{"status": 503, "body": {"error": {"message": "overloaded, try later"}}}] * 5)
    r = cli(agent_vault, "run", "hello", env={"HERMES_NO_DAEMON": "1"}, cwd=tmp_path)
    assert r.returncode == 1 and "cannot reach" not in r.stderr and "still failing after 5 tries" in r.stderr, r.stderr
    assert "overloaded, try later" in r.stderr
