"""`chat` and `run` in a real terminal (a pty, driven by pexpect) against a streaming model server:
the answer appears while the model writes it, Ctrl-C closes the model request at once and the
chat goes on (a second turn and /refine work after it), and a second Ctrl-C at the prompt leaves.
Piped output stays exactly as it was (the whole answer, plain)."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest
from conftest import DaemonProc, wait_for

pexpect = pytest.importorskip("pexpect")

KEY = "HERMES_TEST_KEY"
STORY = " ".join(f"w{i}" for i in range(300)) + " THE-END"
REFINE = [{"tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": "Likes short stories."})]},
          {"content": "Summary: story length\n- memory/USER.md: added that the person likes short stories "
                       "(because they said \"keep it short\")"}]


def spawn(vault, tmp_path, *args: str, env: dict | None = None):
    """The CLI in a pty; `child.screen` holds everything it wrote."""
    child = pexpect.spawn(sys.executable, ["-m", "hermes_fs", "--vault", str(vault.root), *args],
                          cwd=str(tmp_path), encoding="utf-8", timeout=180, dimensions=(40, 160),
                          env={**os.environ, KEY: "sk-test-not-a-real-key", "TERM": "xterm-256color", **(env or {})})
    child.screen = child.logfile_read = io.StringIO()
    return child


@pytest.mark.parametrize("path", ["cold", "warm"])
@pytest.mark.slow
def test_streamed_answer_then_ctrl_c_closes_the_request_and_the_chat_goes_on(agent_vault, model_server, tmp_path,
                                                                               path):
    model_server.stream_delay = 0.02
    model_server.add({"content": "First answer with **bold** words."}, *REFINE,
                     {"content": STORY, "chunk_delay": 0.1},  # 30 s of streaming unless interrupted
                     {"content": "Second answer."}, *REFINE)
    daemon, env = None, {"HERMES_NO_DAEMON": "1"}
    if path == "warm":
        daemon, env = DaemonProc(agent_vault.root), {}
        assert wait_for(lambda: (agent_vault.root / ".hermes" / "daemon.sock").exists(), 10)
    child = spawn(agent_vault, tmp_path, "chat", env=env)
    try:
        child.expect("you> ")
        child.sendline("hello")
        child.expect("First answer with")
        child.expect("you> ")
        assert "**" not in child.screen.getvalue()  # Markdown drawn (bold), not printed as asterisks
        assert model_server.requests[0]["stream"] is True
        child.sendline("/refine")  # starts git's cat-file in the chat process, before the Ctrl-C below
        child.expect(r"refine: refine/\S+ \[memory/USER.md\]")
        child.sendline("tell me a story")
        child.expect(r"w5\b")  # words on the screen while the model is still writing
        assert not model_server.closed_early and "THE-END" not in child.screen.getvalue()
        child.sendintr()
        child.expect("turn interrupted; the session goes on")
        assert model_server.client_gone.wait(10)  # the model request's connection was closed
        assert model_server.closed_early == [3]
        child.expect("you> ")
        child.sendline("and now?")
        child.expect("Second answer")
        child.expect("you> ")
        child.sendline("/refine")  # git's cat-file did not get the Ctrl-C: no BrokenPipeError
        index = child.expect([r"refine: refine/\S+ \[memory/USER.md\]", r"refine failed.*"])
        assert index == 0, child.after
        child.sendintr()  # Ctrl-C at the prompt, right after the interrupted turn's successor: says how to leave
        child.expect("Ctrl-C again")
        child.sendintr()  # a second one leaves
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
        if daemon:
            daemon.stop()
    assert "THE-END" not in child.screen.getvalue()
    second = model_server.requests[4]["messages"]
    assert second[-1] == {"role": "user", "content": "and now?"}
    assert len(model_server.requests) == 7  # the interrupted turn made no further model call


@pytest.mark.slow
def test_run_on_a_terminal_streams_and_piped_run_prints_the_answer_plain(agent_vault, model_server, tmp_path):
    model_server.stream_delay = 0.05
    model_server.add({"content": "Use `git log` — **twice**."}, {"content": "Use `git log` — **twice**."})
    child = spawn(agent_vault, tmp_path, "run", "how do I see history", env={"HERMES_NO_DAEMON": "1"})
    try:
        child.expect("Use ")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert model_server.requests[0]["stream"] is True
    assert "**" not in child.screen.getvalue() and "twice" in child.screen.getvalue()
    piped = subprocess.run([sys.executable, "-m", "hermes_fs", "--vault", str(agent_vault.root), "run", "again"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=120,
                           env={**os.environ, KEY: "sk-test-not-a-real-key", "HERMES_NO_DAEMON": "1"})
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout == "Use `git log` — **twice**.\n"  # unchanged: the answer as written, no streaming
    assert not model_server.requests[1].get("stream")


@pytest.mark.slow
def test_a_text_call_streamed_is_run_not_shown(agent_vault, model_server, tmp_path):
    call = '<tool_call>\n{"name": "memory", "arguments": {"action": "add", "file": "USER.md", "text": "Uses vim."}}\n</tool_call>'
    model_server.add({"content": f"I'll remember that.\n{call}"}, {"content": "Remembered: you use vim."})
    child = spawn(agent_vault, tmp_path, "chat", env={"HERMES_NO_DAEMON": "1"})
    try:
        child.expect("you> ")
        child.sendline("I use vim")
        child.expect("Remembered: you use vim")
        child.expect("you> ")
        screen = child.screen.getvalue()
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert "tool_call" not in screen and '"name"' not in screen
    assert "memory(action=add, file=USER.md)" in screen
    assert "Uses vim." in (agent_vault.root / "memory/USER.md").read_text()


def test_a_background_refine_reports_after_the_turn_not_inside_it(agent_vault, model_server, tmp_path):
    import threading

    streaming = threading.Event()
    refine = list(REFINE)
    short_story = " ".join(f"s{i}" for i in range(60)) + " THE-END"

    def respond(body: dict) -> dict:
        if body.get("stream"):  # the chat's turns
            streaming.set()
            return {"content": short_story, "chunk_delay": 0.05}
        streaming.wait(60)  # the refine answers while the turn is being written
        return refine.pop(0)

    model_server.responder = respond
    child = spawn(agent_vault, tmp_path, "chat", env={"HERMES_NO_DAEMON": "1"})
    try:
        child.expect("you> ")
        child.sendline("hello")
        child.expect("THE-END")
        child.expect("you> ")
        child.sendline("/refine")
        child.expect("refine started in the background")
        child.sendline("another story")
        child.expect(r"refine: refine/\S+ \[memory/USER.md\]")
        child.expect("you> ")
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    screen = child.screen.getvalue()
    turn = screen.index("another story")
    result = screen.index("refine: refine/", turn)
    assert screen.index("THE-END", turn) < result  # the turn's answer was complete before the line came
    assert "you> " not in screen[turn:result]  # and no prompt was drawn into the answer


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_ctrl_c_stops_an_mcp_call_and_the_mcp_server_lives_on_until_the_chat_dies(agent_vault, model_server, tmp_path):
    """The terminal's SIGINT is for the turn: the MCP server (in a session of its own) keeps running,
    the tool call it is stuck in is abandoned at once, and the next turn uses the same server. When the
    chat process is killed outright, the server sees its stdin close and exits with it."""
    import re
    import signal

    from conftest import wait_for
    from test_mcp import MISBEHAVING, configure_mcp

    configure_mcp(agent_vault, f"    odd: {{command: {sys.executable}, args: [{MISBEHAVING}], timeout_s: 600}}\n")
    model_server.add({"tool_calls": [("odd__pid", {})]}, {"content": "Server is up."},
                     {"tool_calls": [("odd__hang", {})]},  # held for 600 s unless the Ctrl-C abandons it
                     {"tool_calls": [("odd__pid", {}), ("odd__echo", {"text": "still here"})]},
                     {"content": "Second turn done."})
    child = spawn(agent_vault, tmp_path, "chat", env={"HERMES_NO_DAEMON": "1"})
    try:
        child.expect("you> ")
        child.sendline("start the server")
        child.expect("Server is up")
        child.expect("you> ")
        first = [m["content"] for m in model_server.requests[1]["messages"] if m["role"] == "tool"]
        pid = int(re.fullmatch(r"pid: (\d+)", first[0]).group(1))
        assert os.getsid(pid) != os.getsid(child.pid)  # outside the terminal's session: its SIGINT is not for it
        child.sendline("wait for ever")
        assert wait_for(lambda: len(model_server.requests) == 3, 30)  # the hang call is under way
        child.expect(r"odd__hang")
        os.killpg(os.getpgid(child.pid), signal.SIGINT)  # what the terminal does on Ctrl-C
        child.expect("turn interrupted; the session goes on")
        child.expect("you> ")
        assert _alive(pid)
        child.sendline("again")
        child.expect("Second turn done")
        child.expect("you> ")
        results = [m["content"] for m in model_server.requests[4]["messages"] if m["role"] == "tool"]
        assert results[-3:] == ["error: interrupted by the user", f"pid: {pid}", "echo: still here"]  # same server
        os.kill(child.pid, signal.SIGKILL)  # no clean exit: the server learns of it from its stdin
        assert wait_for(lambda: not _alive(pid), 30)
    finally:
        child.close(force=True)
