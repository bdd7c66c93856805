"""`hermes-fs run` and `hermes-fs chat` as real processes against the scripted model server."""

import pytest
from conftest import git

from hermes_fs.mind.sessions import Transcript

pytestmark = pytest.mark.slow  # each test starts real CLI processes that import litellm


def test_run_prints_answer_and_commits_session(agent_vault, model_server, run_cli, tmp_path):
    model_server.add({"content": "The answer is 42."})
    r = run_cli("--vault", str(agent_vault.root), "run", "What", "is", "the", "answer?", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "The answer is 42."
    assert model_server.requests[0]["messages"][-1]["content"] == "What is the answer?"
    assert git(agent_vault, "log", "-1", "--format=%s").strip() == "session: What is the answer?"


def test_run_with_dead_server_exits_1_with_one_line_and_no_commit(agent_vault, model_server, run_cli, tmp_path):
    model_server.close()
    r = run_cli("--vault", str(agent_vault.root), "run", "hello?", cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.strip().startswith("error: model openai/test-model: cannot reach the model server")
    assert len(r.stderr.strip().splitlines()) == 1
    assert git(agent_vault, "log", "-1", "--format=%s").strip() == "test: point at the model server"


def test_chat_piped_reads_lines_and_slash_commands(agent_vault, model_server, run_cli, tmp_path):
    model_server.add({"content": "Hi!"}, {"content": "Second answer."}, {"content": "In a new session."})
    script = "hello\n/memory\n/skills\nand again\n/bogus\n/new\nfresh start\n/exit\nnever sent\n"
    r = run_cli("--vault", str(agent_vault.root), "chat", input=script, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "Hi!" in out and "Second answer." in out and "In a new session." in out
    assert "memory/USER.md:" in out and "writing-skills:" in out
    assert "unknown command /bogus" in out
    assert len(model_server.requests) == 3
    assert [m["content"] for m in model_server.requests[1]["messages"][1:]] == ["hello", "Hi!", "and again"]
    assert [m["content"] for m in model_server.requests[2]["messages"][1:]] == ["fresh start"]
    sessions = [line for line in git(agent_vault, "log", "--format=%s").splitlines() if line.startswith("session:")]
    assert sessions == ["session: fresh start", "session: hello"]


def test_chat_transcript_survives_a_killed_process(agent_vault, model_server, tmp_path):
    """The transcript is written as it goes: kill -9 mid-turn and what was said is on disk."""
    import os
    import signal
    import subprocess
    import sys
    import time

    model_server.add({"content": "first"}, {"content": "slow", "delay": 30})
    proc = subprocess.Popen([sys.executable, "-m", "hermes_fs", "--vault", str(agent_vault.root), "chat"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    proc.stdin.write("one\ntwo\n")
    proc.stdin.flush()
    deadline = time.time() + 60
    while len(model_server.requests) < 2 and time.time() < deadline:
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    files = list((agent_vault.root / "sessions").rglob("*.md"))
    assert len(files) == 1
    t = Transcript.load(agent_vault.root, files[0].stem)
    assert [m["content"] for m in t.messages] == ["one", "first", "two"]


def test_chat_refine_slash_command_and_automatic_review(agent_vault, model_server, run_cli, tmp_path):
    (agent_vault.root / "hermes.yaml").write_text(
        (agent_vault.root / "hermes.yaml").read_text() + "refine:\n  every_turns: 2\n  policy: review\n")

    def responder(body):
        system = body["messages"][0]["content"]
        if "You review one conversation" not in system:
            return {"content": f"answer {len([m for m in body['messages'] if m['role'] == 'user'])}"}
        if any(m["role"] == "tool" for m in body["messages"]):
            return {"content": "Summary: tabs\n- memory/USER.md: tabs (because said)"}
        focus = "manual" if "Focus: tabs please" in body["messages"][1]["content"] else "auto"
        return {"tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": f"Prefers tabs ({focus})."})]}

    model_server.responder = responder
    r = run_cli("--vault", str(agent_vault.root), "chat", input="I like tabs\n/refine tabs please\nsecond turn\n/exit\n", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "refine started in the background" in out
    assert "(automatic review after 2 turns)" in out
    assert out.count("refine: refine/") == 2 and "pending" in out
    branches = agent_vault.git.branches("refine/")
    assert len(branches) == 2
    texts = [agent_vault.git.read_file(b.sha, "memory/USER.md").decode() for b in branches]
    assert any("(manual)" in t for t in texts) and any("(auto)" in t for t in texts)
