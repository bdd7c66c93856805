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

from hermes_fs.store.provenance import Act

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
@pytest.mark.slow
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


@pytest.mark.slow
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
    agent_vault.git.commit_paths(["hermes.yaml"], "test: key from FAKE_KEY", Act.person())
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
@pytest.mark.slow
def test_doctor_refine_and_learn_run_in_the_daemon_with_the_callers_key(agent_vault, model_server, warm_daemon,
                                                                          no_litellm, tmp_path):
    text = (agent_vault.root / "hermes.yaml").read_text().replace("backend: local", "backend: none")
    (agent_vault.root / "hermes.yaml").write_text(text)
    agent_vault.git.commit_paths(["hermes.yaml"], "test: no sandbox", Act.person())
    warm_daemon(**{KEY: "sk-the-daemons-own"})
    env = {KEY: "sk-the-callers", **no_litellm}
    model_server.add({"content": "ok"}, {"tool_calls": [("note", {"text": "ok"})]})  # the check, then the review-mode probe
    r = cli(agent_vault, "doctor", env=env, cwd=tmp_path)
    assert r.returncode == 0 and "ok  model: openai/test-model answered ('ok')" in r.stdout, r.stdout + r.stderr
    # a conversation to refine, then the review itself
    model_server.add({"content": "Noted."})
    assert cli(agent_vault, "run", "I prefer ISO dates", env=env, cwd=tmp_path).returncode == 0
    model_server.add({"tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": "Wants ISO 8601 dates."})]},
                     {"content": "Summary: ISO dates\n- memory/USER.md: ISO dates (because the person asked for them)"})
    r = cli(agent_vault, "refine", "--wait", env=env, cwd=tmp_path)
    assert r.returncode == 0 and "refine/" in r.stdout, r.stdout + r.stderr
    doc = tmp_path / "deploy.md"
    doc.write_text("# Deploying\n\nRun `fly deploy` from the project folder, then check `fly status`.\n")
    skill = "---\nname: fly-deploy\ndescription: Deploy with fly.io. Use when deploying.\n---\n# Deploy\n\n1. fly deploy\n"
    model_server.add({"tool_calls": [("skill_manage", {"action": "create", "name": "fly-deploy", "content": skill})]},
                     {"content": "Summary: fly-deploy skill\n- skills/fly-deploy/SKILL.md: new skill (because the document says how)"})
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


@pytest.mark.slow
def test_an_error_inside_litellm_is_not_reported_as_an_unreachable_server(agent_vault, model_server, tmp_path):
    set_model(agent_vault, "custom/test-model", model_server.api_base)  # litellm's custom-handler route
    model_server.add({"content": "the server answers"})
    r = cli(agent_vault, "run", "hello", env={"HERMES_NO_DAEMON": "1"}, cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "cannot reach" not in r.stderr and "litellm failed before getting an answer" in r.stderr
    assert "litellm said: litellm.APIConnectionError" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
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


# -- 21.3: a partial merge keeps the agent as author, and each commit's message names its own files --
def test_a_partial_merge_keeps_authorship_and_messages_true_to_each_part(vault, run_cli):
    store = vault.git
    user, lessons = "memory/USER.md", "memory/MEMORY.md"
    agent = "hermes-fs <agent@hermes-fs.invalid>"
    base = store.head()
    overlay = {user: store.read_file(base, user) + b"- Wants dates in ISO 8601.\n",
               lessons: store.read_file(base, lessons) + b"- Lesson: run make test first.\n"}
    branch = "refine/20261130-000000-two-things"
    store.commit_overlay(base, branch, overlay,
                         f"two things\n\n- {user}: asked for ISO dates\n- {lessons}: the tests caught a bug\n\n"
                         "Refine-Session: 20261130-000000-abcd\n", Act.learned())
    r = run_cli("review", "merge", branch, "--only", user, "--vault", str(vault.root))
    assert r.returncode == 0, r.stderr
    blame = git(vault, "blame", "--line-porcelain", user)
    block = blame[:blame.index("\t- Wants dates in ISO 8601.")].rsplit("\nfilename", 1)[0]
    assert "\nauthor hermes-fs\n" in block and "author-mail <agent@hermes-fs.invalid>" in block
    merged_part = store.commit_info("HEAD^2")
    part_message = store.message("HEAD^2")
    assert merged_part.author == agent and f"- {user}: asked" in part_message and f"- {lessons}:" not in part_message
    assert part_message.startswith(f"two things (part: {user})")
    assert merged_part.trailers["Refine-Session"] == "20261130-000000-abcd"
    assert lessons not in store.commit_info("HEAD").summary
    rest = store.message(f"refs/heads/{branch}")
    assert f"- {lessons}: the tests" in rest and f"- {user}:" not in rest and f"{user} merged on its own" in rest
    assert "Refine-Session: 20261130-000000-abcd" in rest
    assert store.commit_info(f"refs/heads/{branch}").author == agent
    r = run_cli("review", "--vault", str(vault.root))
    assert branch in r.stdout and f"[{lessons}]" in r.stdout


# -- 21.6: nested skills, the inbox README, a past one-shot job --------------------------------------
def test_fix_moves_a_skill_nested_inside_another_skills_folder(vault, run_cli):
    outer = vault.root / "skills" / "outer"
    (outer / "inner").mkdir(parents=True)
    (outer / "SKILL.md").write_text("---\nname: outer\ndescription: Outer things. Use when outer.\n---\n# Outer\n")
    (outer / "inner" / "SKILL.md").write_text("---\nname: inner\ndescription: Inner things. Use when inner.\n---\n# In\n")
    vault.git.commit_human_edits(["skills/outer/SKILL.md", "skills/outer/inner/SKILL.md"])
    r = run_cli("skills", "validate", "--vault", str(vault.root))
    assert "MISPLACED skills/outer/inner/SKILL.md" in r.stdout and "moves it to skills/inner/" in r.stdout
    r = run_cli("skills", "validate", "--fix", "--vault", str(vault.root))
    assert r.returncode == 0 and r.stdout.startswith("fixed 1 skill(s)"), r.stdout
    assert (vault.root / "skills/inner/SKILL.md").exists() and not (outer / "inner").exists()
    assert (outer / "SKILL.md").exists()


def test_the_inbox_readme_does_not_promise_absolute_learn_sources(vault):
    text = (vault.root / "inbox" / "README.md").read_text()
    assert "absolute path" not in text and "inside this vault" in text


@pytest.mark.slow
def test_a_past_one_shot_job_is_due_in_cron_list_and_the_daemon_runs_it(agent_vault, model_server, daemon, run_cli):
    """What `import hermes-agent` makes of a `once in 30m` job imported after its time."""
    import json

    (agent_vault.root / "cron" / "stretch.md").write_text(
        "---\nschedule: at 2026-11-30T19:56:54+00:00\n---\nTime to stretch.\n")
    agent_vault.git.commit_human_edits(["cron/stretch.md"])
    r = run_cli("cron", "list", "--json", "--vault", str(agent_vault.root))
    row = {x["job"]: x for x in json.loads(r.stdout)}["stretch"]
    assert row["next_run"] == "2026-11-30T19:56:54+00:00"
    r = run_cli("cron", "list", "--vault", str(agent_vault.root))
    assert "2026-11-30T19:56:54+00:00 (due: runs at once while the daemon runs)" in r.stdout
    model_server.add({"content": "Stretched."})
    daemon()
    out = wait_for(lambda: list((agent_vault.root / "outputs" / "cron" / "stretch").glob("*.md"))
                   if (agent_vault.root / "outputs" / "cron" / "stretch").exists() else None, 120)
    assert out and "Stretched." in out[0].read_text(), (agent_vault.root / ".hermes" / "daemon.log").read_text()
    assert wait_for(lambda: "enabled: false" in (agent_vault.root / "cron" / "stretch.md").read_text(), 60)
    assert "disabled" in run_cli("cron", "list", "--vault", str(agent_vault.root)).stdout


# -- 21.11: cron list keeps its columns and fails when a job file is bad -----------------------------
def test_cron_list_columns_hold_for_long_names_and_errors_exit_1(vault, run_cli):
    long = "a-job-with-a-really-quite-long-name-indeed"
    (vault.root / "cron" / f"{long}.md").write_text("---\nschedule: every day at 07:00\n---\nHello.\n")
    (vault.root / "cron" / "short.md").write_text("---\nschedule: every 30m\n---\nHello.\n")
    (vault.root / "cron" / "bad.md").write_text("---\nschedule: nope\n---\nx\n")
    r = run_cli("cron", "list", "--vault", str(vault.root))
    assert r.returncode == 1 and "cron/bad.md" in r.stderr
    lines = [x for x in r.stdout.splitlines() if x.split()[0] in (long, "short", "JOB")]
    starts = {line.find(" every") for line in lines[1:]}
    assert len(lines) == 3 and len(starts) == 1, r.stdout  # the schedule column starts at one place


# -- 21.8: say what was refused, never echo a key ------------------------------------------------------
@pytest.mark.slow
def test_learn_says_which_skill_was_refused_as_a_near_duplicate(agent_vault, model_server, tmp_path):
    src = tmp_path / "review.md"
    src.write_text("# Reviewing\n\nHow to review, merge, reject or revert learned changes.\n")
    dup = ("---\nname: reviewing-changes\ndescription: How to review, merge, reject or revert what hermes-fs "
           "learned (refine and learn branches).\n---\n# Review\n\n1. hermes-fs review\n")
    model_server.add({"tool_calls": [("skill_manage", {"action": "create", "name": "reviewing-changes", "content": dup})]},
                     {"content": "Summary: nothing"})
    r = cli(agent_vault, "learn", str(src), env={"HERMES_NO_DAEMON": "1"}, cwd=tmp_path)
    assert "found nothing worth keeping" not in r.stdout, r.stdout
    assert "'reviewing-changes' was refused as a near duplicate of the existing skill 'reviewing-learned-changes'" \
        in r.stdout and "--update" in r.stdout


def test_a_key_pasted_into_api_key_env_is_never_printed(agent_vault, tmp_path):
    key = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" * 2
    text = (agent_vault.root / "hermes.yaml").read_text().replace(f"api_key_env: {KEY}", f"api_key_env: {key}")
    (agent_vault.root / "hermes.yaml").write_text(text)
    for args in (["run", "hello"], ["doctor"], ["status"]):
        r = cli(agent_vault, *args, env={"HERMES_NO_DAEMON": "1"}, cwd=tmp_path)
        assert r.returncode != 0 and key not in r.stdout + r.stderr and key[:12] not in r.stdout + r.stderr
        assert "'api_key_env' must be the name of an environment variable" in r.stderr, r.stderr


# -- 21.10: the daemon's log says each thing once, and only what is true -----------------------------
def test_the_daemon_log_says_each_thing_once(agent_vault, model_server, no_litellm, tmp_path):
    d = DaemonProc(agent_vault.root, env=daemon_env(**{KEY: "sk-test-not-a-real-key"}))
    try:
        assert wait_for(lambda: (agent_vault.root / ".hermes" / "daemon.sock").exists(), 10)
        model_server.add({"content": "hi"})
        assert cli(agent_vault, "run", "hello", env={KEY: "sk-test-not-a-real-key", **no_litellm},
                   cwd=tmp_path).returncode == 0
        job = agent_vault.root / "cron" / "nightly.md"
        with open(job, "w") as f:  # written in three parts, as a slow editor or a sync tool does
            f.write("---\n")
            f.flush()
            time.sleep(0.05)
            f.write("schedule: every day at 02:00\n---\n")
            f.flush()
            time.sleep(0.05)
            f.write("Tidy up.\n")
        assert wait_for(lambda: any("loaded 2 cron job(s)" in e for e in d.state().get("last_events", [])), 30)
        time.sleep(1.0)
    finally:
        d.stop()
    out = d.console.read_text()
    log = (agent_vault.root / ".hermes" / "daemon.log").read_text()
    assert "LiteLLM" not in out and "HTTP Request" not in out, out  # no litellm/httpx INFO lines, not twice
    assert log.count("loaded 2 cron job(s)") == 1, log
    assert "frontmatter" not in log and "not loaded" not in log, log


# -- 21.11: small things that mislead ----------------------------------------------------------------
def test_a_second_daemon_says_nothing_but_that_it_is_refused(vault, daemon, run_cli):
    daemon()
    r = run_cli("--vault", str(vault.root), "daemon")
    assert r.returncode == 1 and "already running" in r.stderr and "watching" not in r.stdout + r.stderr


@pytest.mark.slow
def test_a_learned_change_is_notified_as_learn_not_refine(agent_vault, model_server, receiver, tmp_path):
    cfg = (agent_vault.root / "hermes.yaml").read_text() + f"notify:\n  targets: {{desk: '{receiver.url('desk')}'}}\n"
    (agent_vault.root / "hermes.yaml").write_text(cfg)
    agent_vault.git.commit_paths(["hermes.yaml"], "notify", Act.person())
    doc = tmp_path / "deploy.md"
    doc.write_text("# Deploying\n\nRun `fly deploy`.\n")
    skill = "---\nname: fly-deploy\ndescription: Deploy with fly.io. Use when deploying.\n---\n# Deploy\n\n1. fly deploy\n"
    model_server.add({"tool_calls": [("skill_manage", {"action": "create", "name": "fly-deploy", "content": skill})]},
                     {"content": "Summary: fly-deploy skill\n- skills/fly-deploy/SKILL.md: new skill (because the document says how)"})
    r = cli(agent_vault, "learn", str(doc), env={"HERMES_NO_DAEMON": "1"}, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    titles = [m["body"].get("title") for m in receiver.received]
    assert titles == ["hermes-fs: learn pending review"], receiver.received


def test_two_changes_with_the_same_slug_get_names_apart(agent_vault):
    from hermes_fs.learning import changes
    from hermes_fs.learning.pipeline import commit_on_new_branch

    store = agent_vault.git
    user = store.read_file(store.head(), "memory/USER.md")
    names = [commit_on_new_branch(agent_vault, "refine", "update memory/USER.md", store.head(),
                                  {"memory/USER.md": user + f"- Entry {i}.\n".encode()}, "update\n", Act.learned())
             for i in range(2)]
    assert len(set(names)) == 2 and names[1].endswith("-update-memory-user-md-2"), names
    assert changes.resolve_name(store, "update-memory-user-md") == names[0]  # no longer ambiguous
    assert changes.resolve_name(store, "update-memory-user-md-2") == names[1]


def test_one_entry_is_one_entry(vault, run_cli):
    text = "# About you\n\n- Only one thing.\n"
    (vault.root / "memory" / "USER.md").write_text(text)
    r = run_cli("memory", "show", "--vault", str(vault.root))
    row = next(x for x in r.stdout.splitlines() if x.startswith("memory/USER.md"))
    assert "1 entry " in row and "1 entries" not in r.stdout


# -- 21.12: `init` adopts an existing folder or repository ------------------------------------------
def snapshot_files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and ".git" not in p.relative_to(root).parts and ".hermes" not in p.relative_to(root).parts}


def test_init_adopts_an_obsidian_folder_without_touching_its_files(tmp_path, run_cli):
    notes = tmp_path / "Obsidian Notes"
    (notes / ".obsidian").mkdir(parents=True)
    (notes / ".obsidian" / "app.json").write_text('{"theme": "dark"}\n')
    (notes / "Daily").mkdir()
    (notes / "Daily" / "2026-11-30.md").write_text("# Monday\n\n- [ ] call the bank\n")
    (notes / "ideas.md").write_text("Ideas\n")
    before = snapshot_files(notes)
    r = run_cli("init", str(notes))
    assert r.returncode == 0 and "adopted" in r.stdout, r.stdout + r.stderr
    assert "3 file(s) are not in git yet" in r.stdout
    after = snapshot_files(notes)
    assert {k: v for k, v in after.items() if k in before} == before  # every file of theirs, byte for byte
    assert (notes / "hermes.yaml").is_file() and (notes / "memory" / "USER.md").is_file()
    committed = git(notes, "show", "--name-only", "--format=", "HEAD").split()
    assert "hermes.yaml" in committed and not any(p in committed for p in before)
    r = run_cli("status", "--vault", str(notes))
    assert r.returncode == 0, r.stderr


def test_init_adopts_a_git_repository_keeping_history_and_what_is_staged(tmp_path, run_cli):
    repo = tmp_path / "notes"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Ann")
    git(repo, "config", "user.email", "ann@example.org")
    (repo / ".gitignore").write_text("build/\n*.log")
    (repo / "todo.md").write_text("- one\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "my notes")
    old = git(repo, "rev-parse", "HEAD").strip()
    (repo / "draft.md").write_text("half done\n")
    git(repo, "add", "draft.md")  # staged, not committed: must stay so
    r = run_cli("init", str(repo))
    assert r.returncode == 0, r.stdout + r.stderr
    assert git(repo, "rev-parse", "HEAD^").strip() == old  # history as it was, one commit on top
    assert "draft.md" not in git(repo, "show", "--name-only", "--format=", "HEAD").split()
    assert git(repo, "diff", "--cached", "--name-only").split() == ["draft.md"]
    ignore = (repo / ".gitignore").read_text()
    assert ignore.startswith("build/\n*.log\n") and ".hermes/" in ignore
    assert git(repo, "log", "-1", "--format=%an").strip() == "Ann"


@pytest.mark.parametrize("layout", ["memory-files", "master-branch", "inside-a-repo"])
def test_init_refuses_a_colliding_layout_and_changes_nothing(tmp_path, run_cli, layout):
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "readme.md").write_text("mine\n")
    if layout == "memory-files":
        (folder / "memory").mkdir()
        (folder / "memory" / "notes.md").write_text("my own memory notes\n")
        expect = "memory/ already holds files"
    elif layout == "master-branch":
        git(folder, "init", "-q", "-b", "master")
        expect = "its checked-out branch is 'master'"
    else:
        git(tmp_path, "init", "-q", "-b", "main")
        expect = "inside the git repository"
    before = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))
    r = run_cli("init", str(folder))
    assert r.returncode == 2 and expect in r.stderr and "nothing was changed" in r.stderr, r.stderr
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == before


# -- 21.13: notify test takes a URL; secrets.env is private ------------------------------------------
def test_notify_test_tries_an_apprise_url_before_it_is_a_target(vault, receiver, run_cli):
    r = run_cli("notify", "test", receiver.url("try"), "--vault", str(vault.root))
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr
    assert receiver.received and receiver.received[0]["path"] == "/try"
    r = run_cli("notify", "test", "nonsense://", "--vault", str(vault.root))
    assert r.returncode == 1 and "not a valid Apprise URL" in r.stdout


def test_secrets_env_is_born_private_and_a_readable_one_is_warned_about(vault, run_cli):
    import stat

    path = vault.root / ".hermes" / "secrets.env"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    subprocess.run(["sh", "-c", f"umask 022; echo 'OPENAI_API_KEY=sk-x' >> '{path}'"], check=True)  # the README's way
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    r = run_cli("status", "--vault", str(vault.root))
    assert "readable by other users" not in r.stderr
    path.chmod(0o644)
    r = run_cli("status", "--vault", str(vault.root))
    assert "secrets.env is readable by other users (mode 0644)" in r.stderr and "chmod 600" in r.stderr


# -- 21.7: Ctrl-C during a long tool call stops the command, at once -----------------------------------
def sleeping(tag: str) -> bool:
    """Is a `sleep 300.<tag>` (the test's long command) still running anywhere on this machine?"""
    for proc in os.listdir("/proc"):
        if proc.isdigit():
            try:
                with open(f"/proc/{proc}/cmdline", "rb") as f:
                    if f"300.{tag}".encode() in f.read():
                        return True
            except OSError:
                continue
    return False


@pytest.mark.parametrize("path", ["warm", "cold"])
@pytest.mark.slow
def test_ctrl_c_during_a_long_shell_command_kills_it_and_the_chat_goes_on(agent_vault, model_server, no_litellm,
                                                                           tmp_path, path):
    import random

    import pexpect

    tag = str(random.randrange(10**6, 10**7))
    model_server.add({"tool_calls": [("shell", {"command": f"sleep 300.{tag}"})]}, {"content": "after the interrupt"})
    env = {**os.environ, KEY: "sk-test-not-a-real-key", "TERM": "dumb"}
    d = None
    if path == "warm":
        d = DaemonProc(agent_vault.root, env=daemon_env())
        assert wait_for(lambda: (agent_vault.root / ".hermes" / "daemon.sock").exists(), 10)
        env.update(no_litellm)
    else:
        env["HERMES_NO_DAEMON"] = "1"
    child = pexpect.spawn(sys.executable, ["-m", "hermes_fs", "--vault", str(agent_vault.root), "chat"],
                          cwd=str(tmp_path), encoding="utf-8", timeout=180, env=env)
    try:
        child.expect("you> ")
        child.sendline("wait a long time")
        assert wait_for(lambda: sleeping(tag), 60)
        child.sendintr()
        child.expect(r"turn interrupted; the session goes on")  # long before the command's 300 s
        assert wait_for(lambda: not sleeping(tag), 20)  # the command itself was killed
        child.expect("you> ")
        child.sendline("and now?")
        child.expect("after the interrupt")
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
        if d:
            d.stop()
    assert len(model_server.requests) == 2  # the interrupted turn made no further model call
    assert model_server.requests[1]["messages"][-1]["content"] == "and now?"
