"""First contact and daily use, through the CLI a new user types (and a real pseudo-terminal for
the chat screen): clear model errors, no empty commits, next steps, an honest daemon status."""

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pexpect
import pytest
from conftest import git, wait_for

from hermes_fs.agent.conversation import Conversation, ConversationOptions
from hermes_fs.agent.model import ModelError
from hermes_fs.store.provenance import Act


def commits(vault) -> int:
    return int(git(vault, "rev-list", "--count", "HEAD"))


def no_key_env():
    return {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}


def run_clean(vault, *args, input=None, cwd=None):
    """The CLI with no provider key in the environment (a new user's shell)."""
    import subprocess

    return subprocess.run([sys.executable, "-m", "hermes_fs", "--vault", str(vault.root), *args], capture_output=True,
                          text=True, env=no_key_env(), input=input, cwd=cwd, timeout=120)


# 1. a missing key -------------------------------------------------------------------------------
def test_missing_key_is_one_line_naming_the_variable_and_commits_nothing(vault):
    n = commits(vault)
    r = run_clean(vault, "run", "hello")
    assert r.returncode == 1
    assert "OPENAI_API_KEY" in r.stderr and ".hermes/secrets.env" in r.stderr and "hermes.yaml" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert commits(vault) == n and not list((vault.root / "sessions").rglob("*.md"))


def test_piped_chat_exits_1_when_a_turn_failed_and_commits_nothing(vault):
    n = commits(vault)
    r = run_clean(vault, "chat", input="hello\nare you there?\n")
    assert r.returncode == 1 and r.stdout.count("error: model openai/gpt-4o-mini: no API key") == 2
    assert commits(vault) == n


def test_model_key_from_secrets_env(agent_vault, model_server, tmp_path, monkeypatch):
    monkeypatch.delenv("HERMES_TEST_KEY")
    with Conversation(agent_vault, ConversationOptions(source="run", workspace=tmp_path)) as c:
        with pytest.raises(ModelError, match="HERMES_TEST_KEY"):
            c.ask("hi")
    assert model_server.requests == []
    (agent_vault.root / ".hermes" / "secrets.env").write_text("HERMES_TEST_KEY=sk-from-secrets-env\n")
    model_server.add({"content": "hello"})
    with Conversation(agent_vault, ConversationOptions(source="run", workspace=tmp_path)) as c:
        assert c.ask("hi").answer == "hello"


# 2. a server that is not a model server, or none at all ----------------------------------------------
class NotAnLLM:
    """A web server that answers every POST with plain `ok` (a wrong port, a wrong path)."""

    def __init__(self, status=200):
        owner = self
        self.hits = 0

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                owner.hits += 1
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.api_base = f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@pytest.mark.parametrize("status", [200, 501])
@pytest.mark.slow
def test_a_server_that_is_not_an_llm_is_named_and_not_retried(vault, run_cli, status):
    bad = NotAnLLM(status)
    (vault.root / "hermes.yaml").write_text(f"model: openai/m\napi_base: {bad.api_base}\napi_key_env: HERMES_TEST_KEY\n")
    r = run_cli("--vault", str(vault.root), "run", "hello")
    assert r.returncode == 1 and "api_base" in r.stderr and "not as an OpenAI-compatible model server" in r.stderr
    assert bad.hits == 1
    bad.server.shutdown()


@pytest.mark.slow
def test_an_unreachable_server_is_named_after_one_retry(vault, run_cli):
    (vault.root / "hermes.yaml").write_text("model: openai/m\napi_base: http://127.0.0.1:9/v1\napi_key_env: HERMES_TEST_KEY\n")
    r = run_cli("--vault", str(vault.root), "run", "hello")
    assert r.returncode == 1 and "cannot reach the model server at http://127.0.0.1:9/v1 (2 tries)" in r.stderr
    assert "api_base" in r.stderr


# 3. init says what to do next ---------------------------------------------------------------------
def test_init_prints_the_next_steps(tmp_path, run_cli):
    r = run_cli("init", str(tmp_path / "v"))
    assert r.returncode == 0
    for needle in ("Next steps", "model", "secrets.env", "ollama_chat/llama3.1", "chat", "PATH"):
        assert needle in r.stdout


# 4. the template suggests real tool calls for Ollama ------------------------------------------------
def test_template_suggests_ollama_chat(vault):
    text = (vault.root / "hermes.yaml").read_text()
    assert "ollama_chat/" in text and "ollama/llama3.1," not in text


# 5. daemon status right after --detach ---------------------------------------------------------------
@pytest.mark.slow
def test_daemon_status_right_after_detach_names_this_daemon(vault, run_cli):
    v = ["--vault", str(vault.root)]
    try:
        for _ in range(2):  # the second start must not show the first one's pid
            r = run_cli(*v, "daemon", "--detach")
            assert r.returncode == 0, r.stderr
            pid = int(r.stdout.split("pid ")[1].split(")")[0])
            st = json.loads(run_cli(*v, "daemon", "status", "--json").stdout)
            assert st["running"] and st["pid"] == pid and st["uptime_s"] is not None
            out = run_cli(*v, "daemon", "status").stdout
            assert f"pid {pid}" in out and "None" not in out
            assert run_cli(*v, "daemon", "stop").returncode == 0
    finally:
        run_cli(*v, "daemon", "stop")


# 6. the chat screen --------------------------------------------------------------------------------
@pytest.mark.slow
def test_chat_screen_shows_tool_calls_and_redraws_the_prompt(agent_vault, model_server, tmp_path):
    model_server.add({"tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": "Prefers tabs."})]},
                     {"content": "Noted: tabs."},
                     {"content": "Summary: nothing to change"})
    child = pexpect.spawn(sys.executable, ["-m", "hermes_fs", "--vault", str(agent_vault.root), "chat"],
                          cwd=str(tmp_path), encoding="utf-8", timeout=180, env=dict(os.environ, TERM="dumb"))
    try:
        child.expect("you> ")
        child.sendline("remember that I prefer tabs")
        child.expect(r"· memory\(action=add, file=USER.md\)")
        child.expect("Noted: tabs.")
        child.expect("you> ")
        child.sendline("/refine")
        child.expect("refine: nothing to change")
        child.expect("you> ")  # drawn again after the background result
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert "- Prefers tabs." in (agent_vault.root / "memory/USER.md").read_text()


# 9. smaller things ------------------------------------------------------------------------------------
def test_status_reads_well(vault, run_cli):
    (vault.root / "cron" / "brief.md").write_text("---\nschedule: every day at 07:00\n---\nBrief me.\n")
    out = run_cli("--vault", str(vault.root), "status").stdout
    assert "every day at 07:00 (UTC)" in out
    st = json.loads(run_cli("--vault", str(vault.root), "status", "--json").stdout)
    nxt = {j["job"]: j["next_run"] for j in st["cron"]}["brief"]
    assert nxt.endswith("+00:00") and "." not in nxt  # no microseconds


def test_skills_list_cuts_at_a_word_with_an_ellipsis(vault, run_cli):
    d = vault.root / "skills" / "long-one"
    d.mkdir()
    (d / "SKILL.md").write_text("---\nname: long-one\ndescription: |\n  " + "word " * 60 + "\n---\nbody\n")
    line = [ln for ln in run_cli("--vault", str(vault.root), "skills", "list").stdout.splitlines() if "long-one" in ln][0]
    assert line.endswith("…") and "wor …" not in line


def test_a_file_left_uncommitted_for_a_secret_shows_in_status(vault, daemon, run_cli):
    d = daemon()
    (vault.root / "memory" / "MEMORY.md").write_text("- key sk-ant-api03-" + "k" * 30 + "\n")
    assert wait_for(lambda: d.state().get("last_errors"))
    out = run_cli("--vault", str(vault.root), "status").stdout
    assert "not committed: memory/MEMORY.md" in out and "sk-ant" not in out


def test_a_secret_taken_out_again_clears_the_warning_in_status(vault, daemon, run_cli):
    """The person removes the key they pasted: the file is as committed again, nothing is left to
    commit, and the "not committed" warning goes from `status` and the daemon's errors."""
    d = daemon()
    memory_file = vault.root / "memory" / "MEMORY.md"
    before = memory_file.read_bytes()
    memory_file.write_text("- key sk-ant-api03-" + "k" * 30 + "\n")
    assert wait_for(lambda: d.state().get("last_errors"))
    assert "not committed: memory/MEMORY.md" in run_cli("--vault", str(vault.root), "status").stdout
    memory_file.write_bytes(before)
    assert wait_for(lambda: not d.state().get("last_errors")), d.state()
    assert "not committed" not in run_cli("--vault", str(vault.root), "status").stdout


def test_daemon_status_lines_stay_short_and_fixed_errors_go(vault, daemon, run_cli):
    d = daemon()
    (vault.root / "hermes.yaml").write_text("model: [broken\n")
    assert wait_for(lambda: any("hermes.yaml is invalid" in e for e in d.state().get("last_errors", [])))
    (vault.root / "hermes.yaml").write_text("model: openai/gpt-4o-mini\n")
    assert wait_for(lambda: not any("hermes.yaml is invalid" in e for e in d.state().get("last_errors", [])))
    for i in range(300):
        (vault.root / f"note-{i:03d}-with-a-rather-long-file-name.md").write_text("x\n")
    assert wait_for(lambda: any("committed human edit" in e for e in d.state().get("last_events", [])))
    assert all(len(e) < 400 for e in d.state()["last_events"])


def test_a_cron_run_is_one_commit(agent_vault, model_server):
    from datetime import UTC, datetime

    from hermes_fs.mind.jobs import load_jobs
    from hermes_fs.service.cron_runner import run_job

    (agent_vault.root / "cron" / "tick.md").write_text("---\nschedule: every 1m\n---\nSay ok.\n")
    jobs, _ = load_jobs(agent_vault.files, agent_vault.config)
    agent_vault.git.commit_paths(["cron/tick.md"], "job", Act.person())
    n = commits(agent_vault)
    model_server.add({"content": "ok"})
    meta = run_job(agent_vault, {j.name: j for j in jobs}["tick"], datetime.now(UTC))
    assert commits(agent_vault) == n + 1
    files = git(agent_vault, "show", "--name-only", "--format=", "HEAD").split()
    assert any(f.startswith("outputs/cron/tick/") for f in files) and any(f.startswith("sessions/") for f in files)
    assert meta.status == "ok"


@pytest.mark.slow
def test_doctor_checks_the_model_with_one_tiny_call(agent_vault, model_server, run_cli):
    (agent_vault.root / "hermes.yaml").write_text((agent_vault.root / "hermes.yaml").read_text().replace(
        "backend: local", "backend: none"))
    model_server.add({"content": "ok"}, {"tool_calls": [("note", {"text": "ok"})]})
    r = run_cli("--vault", str(agent_vault.root), "doctor")
    assert r.returncode == 0 and "ok  model: openai/test-model answered ('ok')" in r.stdout
    assert "ok  review mode: tools suits openai/test-model: it called a tool when asked" in r.stdout
    assert len(model_server.requests) == 2 and model_server.requests[0]["messages"][-1]["content"].endswith("ok")
    model_server.close()
    r = run_cli("--vault", str(agent_vault.root), "doctor")
    assert r.returncode == 1 and "BAD model" in r.stdout and "api_base" in r.stdout


def test_every_command_has_help_and_no_line_is_cut(run_cli):
    top = run_cli("--help").stdout
    commands = [ln.split()[0] for ln in top.split("Commands:")[1].splitlines() if ln.strip()]
    assert not any(ln.rstrip().endswith("...") for ln in top.split("Commands:")[1].splitlines())
    for group in ("daemon", "review", "cron", "skills", "memory", "notify", "sandbox", "import"):
        out = run_cli(group, "--help").stdout
        rows = [ln for ln in out.split("Commands:")[1].splitlines() if ln.strip()] if "Commands:" in out else []
        assert all(len(ln.split()) > 1 for ln in rows), (group, rows)  # a name and its help
    assert {"chat", "run", "mcp", "import", "review"} <= set(commands)
