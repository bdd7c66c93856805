"""Warm turns: `run` and `chat` served by the daemon's process over its Unix socket, and the same
cases run in-process (HERMES_NO_DAEMON=1) give the same output, exit codes, transcripts and commits.

A warm CLI process cannot import litellm (a poisoned `litellm` on its PYTHONPATH), so a turn
that succeeds can only have run in the daemon; it carries its own model key, as a cold one would."""

import os
import socket
import stat
import subprocess
import sys
import time

import pytest
from conftest import DaemonProc, git, wait_for

KEY = "HERMES_TEST_KEY"


POISON: dict = {}  # set by the autouse fixture below: a PYTHONPATH without a working litellm


@pytest.fixture(autouse=True)
def _poison(no_litellm):
    POISON.update(no_litellm)


def cli(vault, *args, input=None, warm=True, cwd=None):
    env = {**os.environ, KEY: "sk-test-not-a-real-key"}
    env.update(POISON if warm else {"HERMES_NO_DAEMON": "1"})
    return subprocess.run([sys.executable, "-m", "hermes_fs", "--vault", str(vault.root), *args], capture_output=True,
                          text=True, env=env, input=input, cwd=cwd, timeout=120)


@pytest.fixture
def warm(agent_vault):
    d = DaemonProc(agent_vault.root)
    assert wait_for(lambda: (agent_vault.root / ".hermes" / "daemon.sock").exists(), 10)
    yield d
    d.stop()


def shape(vault):
    """The last commit's subject and files: what a run leaves in history."""
    return git(vault, "log", "-1", "--format=%s%n%an", "--name-only").split()


@pytest.mark.parametrize("path", ["warm", "cold"])
@pytest.mark.slow
def test_run_is_the_same_either_way(agent_vault, model_server, tmp_path, path, request):
    if path == "warm":
        request.getfixturevalue("warm")
    model_server.add({"tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": "Prefers tabs."})]},
                     {"content": "The answer is 42."})
    r = cli(agent_vault, "run", "What is the answer?", warm=path == "warm", cwd=tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (0, "The answer is 42.\n", "")
    subjects = git(agent_vault, "log", "--format=%s", "-2").splitlines()
    assert subjects == ["session: What is the answer?", "memory: add in memory/USER.md"]
    assert model_server.requests[-1]["messages"][-1]["role"] == "tool"


@pytest.mark.parametrize("path", ["warm", "cold"])
@pytest.mark.slow
def test_errors_and_exit_codes_are_the_same_either_way(agent_vault, model_server, tmp_path, path, request):
    if path == "warm":
        request.getfixturevalue("warm")
    model_server.add({"status": 401, "body": {"error": {"message": "Incorrect API key", "type": "invalid_request_error"}}})
    n = git(agent_vault, "rev-list", "--count", "HEAD")
    r = cli(agent_vault, "run", "hello", warm=path == "warm", cwd=tmp_path)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("error: model openai/test-model: the API key was refused") and r.stderr.count("\n") == 1
    assert git(agent_vault, "rev-list", "--count", "HEAD") == n  # no commit for a failed session


@pytest.mark.slow
def test_warm_run_needs_no_litellm_in_the_cli_process(agent_vault, model_server, warm, tmp_path):
    """The CLI cannot import litellm; the daemon can: the turn ran there. Without a daemon it cannot."""
    model_server.add({"content": "warm hello"})
    assert cli(agent_vault, "run", "hi", cwd=tmp_path).stdout == "warm hello\n"
    warm.stop()
    r = cli(agent_vault, "run", "hi", cwd=tmp_path)  # the daemon is gone: in-process, and no litellm here
    assert r.returncode != 0 and "litellm imported in the CLI process" in r.stderr


@pytest.mark.slow
def test_piped_chat_through_the_daemon(agent_vault, model_server, warm, tmp_path):
    model_server.add({"content": "one"}, {"content": "two"})
    r = cli(agent_vault, "chat", input="first\nsecond\n", cwd=tmp_path)
    assert r.returncode == 0 and "one\n" in r.stdout and "two\n" in r.stdout and "saved" in r.stdout
    assert git(agent_vault, "log", "-1", "--format=%s").strip() == "session: first"


def test_the_socket_is_the_owners_only(agent_vault, warm):
    sock = agent_vault.root / ".hermes" / "daemon.sock"
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to act as a second user")
def test_a_second_user_is_refused(agent_vault, warm):
    sock = agent_vault.root / ".hermes" / "daemon.sock"
    probe = ("import socket,sys\ns=socket.socket(socket.AF_UNIX)\n"
             "try:\n s.connect(sys.argv[1])\n"
             " try: s.sendall(b'{\"op\":\"open\"}\\n')\n"
             " except BrokenPipeError: pass  # the daemon may refuse (and close) before we send\n"
             " print(s.recv(200).decode())\n"
             "except OSError as e: print('OSError', e.errno)\n")
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    opened = []
    for folder in [*sock.parents][:-1]:  # let the other user reach the socket's folder (test only)
        if folder.stat().st_mode & 0o001 == 0:
            opened.append((folder, folder.stat().st_mode))
            os.chmod(folder, folder.stat().st_mode | 0o001)
    try:
        r = subprocess.run([python, "-c", probe, str(sock)], capture_output=True, text=True, user=1234, group=1234, extra_groups=[], timeout=180, cwd="/")
        assert "OSError 13" in r.stdout, r  # 0600: the kernel refuses the connection
        os.chmod(sock, 0o666)  # even past the file mode, the daemon checks who is calling
        r = subprocess.run([python, "-c", probe, str(sock)], capture_output=True, text=True, user=1234, group=1234, extra_groups=[], timeout=180, cwd="/")
        assert "refused: this daemon serves only its own user" in r.stdout, [oct(f.stat().st_mode) for f in [sock, *sock.parents]]
    finally:
        for folder, mode in opened:
            os.chmod(folder, mode)


@pytest.mark.slow
def test_a_stale_socket_falls_back_silently(agent_vault, model_server, tmp_path):
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(agent_vault.root / ".hermes" / "daemon.sock"))  # nobody listens: what a kill -9 leaves
    s.close()
    model_server.add({"content": "local"})
    env_key = {KEY: "sk-test-not-a-real-key"}
    r = subprocess.run([sys.executable, "-m", "hermes_fs", "--vault", str(agent_vault.root), "run", "hi"],
                       capture_output=True, text=True, env={**os.environ, **env_key}, cwd=tmp_path, timeout=120)
    assert (r.returncode, r.stdout, r.stderr) == (0, "local\n", "")


@pytest.mark.slow
def test_daemon_restart_mid_chat_keeps_the_session(agent_vault, model_server, tmp_path):
    import threading

    d = DaemonProc(agent_vault.root)
    hold = threading.Event()
    model_server.add({"content": "first answer"}, {"content": "never sent", "wait": hold}, {"content": "third answer"})
    proc = subprocess.Popen([sys.executable, "-m", "hermes_fs", "--vault", str(agent_vault.root), "chat"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ), cwd=tmp_path)  # with the key: it may go on in-process
    proc.stdin.write("one\ntwo\n")
    proc.stdin.flush()
    assert wait_for(lambda: len(model_server.requests) >= 2, 30)
    d.stop()  # restarted while the second turn waits on the model
    hold.set()
    d2 = DaemonProc(agent_vault.root)
    try:
        out, err = proc.communicate("three\n", timeout=180)
    finally:
        d2.stop()
    assert "first answer" in out and "third answer" in out and "daemon went away" in out
    assert proc.returncode == 1  # one turn failed
    sessions = list((agent_vault.root / "sessions").rglob("*.md"))
    assert len(sessions) == 1  # the same session went on
    text = sessions[0].read_text()
    assert "one" in text and "three" in text and "third answer" in text


@pytest.mark.slow
def test_ctrl_c_in_a_warm_chat_stops_the_turn_in_the_daemon(agent_vault, model_server, warm, tmp_path):
    import pexpect

    hold = __import__("threading").Event()
    model_server.add({"tool_calls": [("skill_search", {"query": "deploy"})], "wait": hold},
                     {"content": "after the interrupt"})
    child = pexpect.spawn(sys.executable, ["-m", "hermes_fs", "--vault", str(agent_vault.root), "chat"],
                          cwd=str(tmp_path), encoding="utf-8", timeout=180,
                          env={**os.environ, KEY: "sk-test-not-a-real-key", **POISON, "TERM": "dumb"})
    try:
        child.expect("you> ")
        child.sendline("search the skills")
        assert wait_for(lambda: len(model_server.requests) == 1, 30)
        child.sendintr()  # Ctrl-C while the daemon waits on the model
        hold.set()
        child.expect(r"turn interrupted; the session goes on")
        time.sleep(1.0)
        assert len(model_server.requests) == 1  # the turn stopped before its next model call
        child.expect("you> ")
        child.sendline("and now?")
        child.expect("after the interrupt")
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


@pytest.mark.slow
def test_doctor_probes_the_review_mode_through_the_daemon(agent_vault, model_server, warm):
    """The daemon `make run` starts answers doctor's model check, and probes the review mode too:
    the advice a small model's user needs appears without HERMES_NO_DAEMON (the CLI cannot import
    litellm here, so the probe can only have run in the daemon)."""
    config = agent_vault.root / "hermes.yaml"
    config.write_text(config.read_text().replace("backend: local", "backend: none"))
    model_server.add({"content": "ok"}, {"content": "I have noted 'ok'."})  # asked to call a tool: words
    r = cli(agent_vault, "doctor")
    assert "ok  model: openai/test-model answered ('ok')" in r.stdout, r.stdout + r.stderr
    assert ("BAD review mode: structured suits openai/test-model: asked to call a tool, it answered in words; "
            "set refine.mode: structured and learn.mode: structured in hermes.yaml") in r.stdout
    assert r.returncode == 1 and len(model_server.requests) == 2
    assert [t["function"]["name"] for t in model_server.requests[1]["tools"]] == ["note"]
