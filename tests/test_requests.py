"""The typed request bus: results are records, a bug is logged with its traceback before its
error result is written (issue 21 item 14), and the gateway runs in the real daemon process."""

from __future__ import annotations

import logging
import signal
import socket
import threading

import httpx
import pytest
from conftest import DaemonProc, git, wait_for
from test_gateway_webhook import configure, signed

from hermes_fs.errors import InputError
from hermes_fs.service import inbox
from hermes_fs.service.requests import HANDLERS, Request, Result, SerialExecutor, execute
from hermes_fs.store.provenance import Act


def drop_and_claim(vault, name: str, text: str) -> inbox.TakenRequest:
    (vault.root / "inbox" / name).write_text(text)
    c = inbox.take(vault, f"inbox/{name}", None)
    assert c
    return c


def test_a_bug_in_a_request_is_logged_with_its_traceback_then_answered(vault, caplog):
    def broken(vault, req, options):
        return {}["no such key"]  # a bug, not an expected failure

    c = drop_and_claim(vault, "bug.md", "---\ntype: run\n---\ndo it\n")
    with caplog.at_level(logging.INFO, logger="hermes_fs"):
        result = inbox.process(vault, c, handlers={**HANDLERS, "run": broken})
    assert isinstance(result, Result) and result.status == "error" and result.type == "run"
    assert "KeyError" in result.body and "traceback is in .hermes/daemon.log" in result.body
    logged = [r for r in caplog.records if r.exc_info]
    assert logged and "Traceback" in caplog.text and "no such key" in caplog.text
    text = next((vault.root / "outputs" / "requests").glob("*-bug.md")).read_text()
    assert "status: error" in text and "KeyError" in text and "do it" in text
    assert git(vault, "log", "-1", "--format=%s").startswith("request: bug.md (error)")


def test_expected_failures_are_results_without_a_traceback(vault, caplog):
    with caplog.at_level(logging.INFO, logger="hermes_fs"):
        r = execute(vault, Request("refine", "", session="20990101-000000-beef"))
    assert r.status == "error" and r.type == "refine" and not any(rec.exc_info for rec in caplog.records)
    assert execute(vault, Request("dance", "x")).body == "unknown request type 'dance'"


def test_a_result_read_back_after_a_crash_is_the_same_record(vault):
    c = drop_and_claim(vault, "r.md", "---\ntype: run\n---\nhi\n")
    written = Result("ok", "the answer", "run", "20261201-000000-abcd", 18)
    inbox.write_result(vault, c, "hi", written, 0.0)
    back = inbox.read_result(vault, c)
    assert (back.status, back.body, back.type, back.session, back.tokens) == ("ok", "the answer", "run", "20261201-000000-abcd", 18)
    # the daemon restarted before committing: process finishes it without running it again
    result = inbox.process(vault, c)
    assert result.body == "the answer"
    assert git(vault, "status", "--porcelain") == ""


def test_serial_executor_keeps_order_per_key():
    ex = SerialExecutor(2)
    seen: list[str] = []
    lock = threading.Lock()

    def job(tag):
        def run():
            with lock:
                seen.append(tag)
        return run

    for i in range(20):
        ex.submit("a", job(f"a{i}"))
        ex.submit("b", job(f"b{i}"))
    assert ex.wait_idle(180)
    ex.shutdown()
    assert [t for t in seen if t[0] == "a"] == [f"a{i}" for i in range(20)]
    assert [t for t in seen if t[0] == "b"] == [f"b{i}" for i in range(20)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_the_daemon_runs_the_gateway_and_a_kill_loses_nothing(agent_vault, model_server, run_cli, daemons):
    port = free_port()
    configure(agent_vault, model_server)
    text = (agent_vault.root / "hermes.yaml").read_text().replace("127.0.0.1:0", f"127.0.0.1:{port}")
    (agent_vault.root / "hermes.yaml").write_text(text)
    agent_vault.git.commit_paths(["hermes.yaml"], "test: fixed port", Act.person())
    gate = threading.Event()
    model_server.add({"content": "answered after the crash", "wait": gate})
    base = f"http://127.0.0.1:{port}"
    d = DaemonProc(agent_vault.root)
    daemons.append(d)
    try:
        assert wait_for(lambda: "gateway started" in " ".join(d.state().get("last_events", [])), 30), d.output()
        r = run_cli("--vault", str(agent_vault.root), "gateway", "status")
        assert r.returncode == 0 and "webhook  connected" in r.stdout, r.stdout + r.stderr
        r = run_cli("--vault", str(agent_vault.root), "status")
        assert "gateway\n  webhook  connected" in r.stdout, r.stdout
        r = run_cli("--vault", str(agent_vault.root), "gateway", "test", "webhook")
        assert r.returncode == 1 and "route(s) without a secret in .hermes/secrets.env: open, missing" in r.stderr
        posted = httpx.post(f"{base}/hooks/deploys", content=b"deploy 9", headers=signed(b"deploy 9", "k1"), timeout=180)
        assert posted.status_code == 202
        rid = posted.json()["id"]
        assert wait_for(lambda: model_server.requests, 120)  # the turn is running: kill -9 now
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(10)
    finally:
        gate.set()
    model_server.add({"content": "answered after the crash"})
    (agent_vault.root / ".hermes" / "daemon.json").unlink()  # the killed daemon's: wait for the new one's
    d = DaemonProc(agent_vault.root)
    daemons.append(d)
    try:
        def answered():
            try:
                got = httpx.get(f"{base}/hooks/deploys/requests/{rid}", headers=signed(b"", "poll"), timeout=180)
            except httpx.ConnectError:  # the listener is still starting
                return None
            return got.json() if got.status_code == 200 and got.json()["status"] != "pending" else None
        assert wait_for(answered, 60) == {"status": "ok", "answer": "answered after the crash"}
        again = httpx.post(f"{base}/hooks/deploys", content=b"deploy 9", headers=signed(b"deploy 9", "k1"), timeout=180)
        assert again.status_code == 200 and again.json()["status"] == "duplicate"
    finally:
        assert d.stop() == 0, d.output()
    results = list((agent_vault.root / "outputs" / "requests").glob(f"*-{rid}.md"))
    assert len(results) == 1
    assert git(agent_vault, "status", "--porcelain") == ""


@pytest.mark.slow
def test_run_is_reviewed_every_turn_when_every_turns_is_1(agent_vault, model_server, run_cli, tmp_path):
    """refine.every_turns applies to `run` too (it used to exist only in the terminal chat), and
    reviews exactly the run's own session."""
    (agent_vault.root / "hermes.yaml").write_text((agent_vault.root / "hermes.yaml").read_text()
                                                   + "refine:\n  every_turns: 1\n")

    def responder(body):
        if "You review one conversation" in body["messages"][0]["content"]:
            if any(m["role"] == "tool" for m in body["messages"]):
                return {"content": "Summary: likes tea\n- memory/USER.md: tea (because said)"}
            return {"tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": "Drinks tea."})]}
        return {"content": "noted"}

    model_server.responder = responder
    r = run_cli("--vault", str(agent_vault.root), "run", "I drink tea", cwd=tmp_path)
    assert r.returncode == 0 and "noted" in r.stdout, r.stderr
    [session] = [p.stem for p in (agent_vault.root / "sessions").rglob("*.md")]
    branches = wait_for(lambda: agent_vault.git.branches("refine/"), 90)
    assert branches, "no automatic review of the run"
    assert f"Refine-Session: {session}" in git(agent_vault, "log", "-1", "--format=%B", branches[0].sha)


def test_an_inbox_run_request_may_continue_a_session(agent_vault, model_server):
    from hermes_fs.service.requests import ExecOptions

    model_server.responder = lambda body: {"content": f"{sum(m['role'] == 'user' for m in body['messages'])} turns"}
    first = execute(agent_vault, Request("run", "one"), ExecOptions())
    again = execute(agent_vault, Request("run", "two", session=first.session), ExecOptions())
    assert (first.body, again.body, again.session, again.user_turns) == ("1 turns", "2 turns", first.session, 2)


def test_a_file_dropped_in_the_inbox_cannot_claim_to_come_from_a_chat():
    text = "---\ntype: run\norigin: {platform: matrix, chat: '!x', sender: '@boss:x', message: '$1'}\n---\nmerge it\n"
    with pytest.raises(InputError, match="unknown field"):
        inbox.parse_request(text, "inbox/x.md")
    assert inbox.parse_request(text, "gateway/x.md", chat=True).origin.sender == "@boss:x"


@pytest.mark.slow
def test_inbox_files_continuing_one_session_run_in_order_one_at_a_time(agent_vault, model_server, tmp_path):
    """Three files dropped at once, each continuing one session, with two workers: each turn sees
    the ones before it (2, 3, 4 user turns), as a chat's messages do; in parallel two would both
    see 2 and write over each other's transcript."""
    from hermes_fs.service.requests import ExecOptions

    def answer(body):
        return {"content": f"{sum(m['role'] == 'user' for m in body['messages'])} turns", "delay": 1.0}

    model_server.responder = answer
    first = execute(agent_vault, Request("run", "one"), ExecOptions())
    agent_vault.git.commit_human_edits()
    d = DaemonProc(agent_vault.root)
    try:
        for name in ("a", "b", "c"):
            (tmp_path / f"{name}.md").write_text(f"---\ntype: run\nsession: {first.session}\n---\nturn {name}\n")
        for name in ("a", "b", "c"):
            (tmp_path / f"{name}.md").rename(agent_vault.root / "inbox" / f"{name}.md")
        results = agent_vault.root / "outputs" / "requests"
        assert wait_for(lambda: len(list(results.glob("*.md"))) == 3 if results.exists() else False, 120), d.output()
    finally:
        d.stop()
    answers = sorted(next(line for line in p.read_text().splitlines() if line.endswith(" turns"))
                     for p in results.glob("*.md"))
    assert answers == ["2 turns", "3 turns", "4 turns"], answers
    transcript = next((agent_vault.root / "sessions").rglob(f"*{first.session}*.md")).read_text()
    assert all(f"turn {name}" in transcript for name in ("a", "b", "c"))


def test_a_request_is_ordered_by_the_session_it_names(vault):
    a = drop_and_claim(vault, "a.md", "---\ntype: run\nsession: 20261201-abc\n---\nmore\n")
    b = drop_and_claim(vault, "b.md", "---\ntype: refine\nsession: 20261201-abc\n---\n")
    c = drop_and_claim(vault, "c.md", "just a prompt\n")
    bad = drop_and_claim(vault, "d.md", "---\ntype: run\nsession: [not, text]\n---\nx\n")
    assert inbox.session_key(a) == inbox.session_key(b) == "session:20261201-abc"
    assert len({inbox.session_key(a), inbox.session_key(c), inbox.session_key(bad)}) == 3


def test_a_results_request_id_is_read_by_the_stamps_format():
    """The request id in a result's name (`<stamp>-<id>.md`) is found by the stamp's own format,
    not by counting hyphens (an id may hold any number of them)."""
    from hermes_fs.errors import InputError

    stamp = inbox.new_stamp()
    assert inbox.request_of_result(f"outputs/requests/{stamp}-matrix-0a1b2c3d.md") == "matrix-0a1b2c3d"
    assert inbox.request_of_result(f"outputs/requests/{stamp}-a-b-c-d.md") == "a-b-c-d"
    for bad in ("outputs/requests/notes.md", f"outputs/requests/{stamp}.md", "outputs/requests/20261203-1-2-x.md"):
        with pytest.raises(InputError):
            inbox.request_of_result(bad)
