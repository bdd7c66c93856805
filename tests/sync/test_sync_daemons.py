"""Several machines for real: a bare remote served by `git daemon`, vaults each with its own
daemon process, edits carried between them, a one-shot cron job run exactly once, and a killed
machine's claim taken over by another."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta

import pytest
from conftest import DaemonProc, git, wait_for
from gitserver import GitDaemon

from hermes_fs.service.sync import Syncer, clone_vault
from hermes_fs.store.provenance import Act
from hermes_fs.store.vault import Vault, init_vault

pytestmark = pytest.mark.gitdaemon

SYNC = "remote:\n  url: {url}\n  branch: main\nsync:\n  interval_s: 0.5\n  claim_ttl_s: {ttl}\n"


@pytest.fixture
def server(tmp_path):
    d = GitDaemon(tmp_path / "srv")
    d.bare()
    yield d
    d.close()


@pytest.fixture
def machines(tmp_path, server, model_server):
    """Three clones of one vault (a, b, c), each with `remote:` pointing at the git daemon."""
    from model_server import configure_vault

    model_server.responder = lambda body: {"content": "the morning brief"}
    a = init_vault(tmp_path / "a").vault
    configure_vault(a.root, model_server, SYNC.format(url=server.url(), ttl=10))
    a.git.commit_paths(["hermes.yaml"], "test: model server and remote", Act.person())
    a.reload_config()
    assert Syncer(a).round(work=False).pushed
    vaults = [a] + [clone_vault(server.url(), tmp_path / n) for n in ("b", "c")]
    procs: list[DaemonProc] = []
    yield vaults, procs
    for d in procs:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()


def main_has(v: Vault, path: str, text: str | None = None) -> bool:
    data = v.git.read_file(v.git.head(), path)
    return data is not None and (text is None or text.encode() in data)


def outputs(v: Vault, job: str) -> list[str]:
    return [p for p in v.git.list_files(v.git.head(), f"outputs/cron/{job}/")]


@pytest.mark.slow
def test_an_edit_on_one_machine_reaches_every_other(machines):
    vaults, procs = machines
    procs += [DaemonProc(v.root) for v in vaults]
    a, b, c = vaults
    p = b.root / "memory/USER.md"
    p.write_text(p.read_text() + "- Written on B\n")
    assert wait_for(lambda: all(main_has(v, "memory/USER.md", "- Written on B") for v in vaults), 60)
    assert wait_for(lambda: "Written on B" in (a.root / "memory/USER.md").read_text(), 30)
    from hermes_fs.store.host import host_id

    [edit] = [c for c in a.git.log(first_parent=False, limit=20) if c.summary == "edit: memory/USER.md"]
    assert edit.trailers.get("Hermes-Host") == host_id(b.state_dir)  # every commit says which machine made it
    merges = [c for c in a.git.log(first_parent=False, limit=20) if c.summary.startswith("sync: merge")]
    assert all(c.trailers.get("Hermes-Host") for c in merges)


@pytest.mark.slow
def test_a_one_shot_job_runs_once_on_three_machines(machines, server):
    vaults, procs = machines
    a = vaults[0]
    cfg = a.root / "hermes.yaml"
    cfg.write_text(cfg.read_text().replace("claim_ttl_s: 10", "claim_ttl_s: 30"))  # a live claimant never loses
    a.git.commit_paths(["hermes.yaml"], "test: a realistic claim expiry", Act.human_edit())
    Syncer(a).round(work=False)
    for v in vaults[1:]:
        Syncer(v).round(work=False)
    procs += [DaemonProc(v.root) for v in vaults]
    due = (datetime.now(UTC) + timedelta(seconds=8)).replace(microsecond=0)
    (a.root / "cron/once.md").write_text(f"---\nschedule: \"at {due.isoformat()}\"\n---\nBrief me.\n")
    assert wait_for(lambda: all(main_has(v, "cron/once.md") for v in vaults), 60)
    assert wait_for(lambda: all(outputs(v, "once") for v in vaults), 90)
    assert wait_for(lambda: all(main_has(v, "cron/once.md", "enabled: false") for v in vaults), 60)
    for v in vaults:
        assert len(outputs(v, "once")) == 1
    url = a.config.remote.url

    def claim_message() -> str:
        claims = git(a, "ls-remote", url, "refs/hermes/claims/*").splitlines()
        assert len(claims) == 1  # one claim for the one due time
        git(a, "fetch", "-q", url, "+refs/hermes/claims/*:refs/hermes/check/*")
        return git(a, "show", "-s", "--format=%B", claims[0].split()[0])

    assert wait_for(lambda: "Claim-State: done" in claim_message(), 60), claim_message()
    for v in vaults:
        git(v, "fsck", "--no-progress")
    subprocess.run(["git", "fsck", "--no-progress"], cwd=server.base / "vault.git", check=True)


@pytest.mark.slow
def test_a_killed_machines_claim_is_taken_over(machines, model_server):
    """A machine that claimed a due time and died (kill -9) mid-run: after the claim's expiry
    another machine takes it over and the job runs there, once."""
    import threading

    vaults, procs = machines
    gate = threading.Event()
    calls: list[int] = []

    def respond(body):
        calls.append(1)
        if len(calls) == 1:
            return {"content": "never delivered", "wait": gate}  # the first machine hangs mid-run
        return {"content": "the brief, by the machine that took over"}

    model_server.responder = respond
    a, b, _c = vaults
    procs += [DaemonProc(a.root), DaemonProc(b.root)]
    due = (datetime.now(UTC) + timedelta(seconds=8)).replace(microsecond=0)
    (a.root / "cron/once.md").write_text(f"---\nschedule: \"at {due.isoformat()}\"\n---\nBrief me.\n")
    assert wait_for(lambda: all(main_has(v, "cron/once.md") for v in (a, b)), 60)
    assert wait_for(lambda: len(calls) == 1, 60)  # one machine claimed it and is running it
    runner = next(d for d in procs if "cron started: once" in d.output())
    runner.stop(9)
    survivor = next(d for d in procs if d is not runner)
    v = next(v for v in (a, b) if v.root == survivor.root)
    assert wait_for(lambda: outputs(v, "once"), 90), survivor.output()
    gate.set()
    assert "took over" in survivor.output()
    assert len(outputs(v, "once")) == 1
    assert b"the machine that took over" in v.git.read_file(v.git.head(), outputs(v, "once")[0])


def phone_push(tmp_path, url: str, rel: str, text: str) -> None:
    """A fourth writer that is only a git client (a phone app): clone, commit, push, retrying
    with a merge (never a force) when the remote moved."""
    phone = tmp_path / "phone"
    if not phone.exists():
        subprocess.run(["git", "clone", "-q", url, str(phone)], check=True)
        for k, val in (("user.name", "phone"), ("user.email", "phone@example.org")):
            subprocess.run(["git", "-C", str(phone), "config", k, val], check=True)
    (phone / rel).parent.mkdir(parents=True, exist_ok=True)
    (phone / rel).write_text(text)
    subprocess.run(["git", "-C", str(phone), "add", rel], check=True)
    subprocess.run(["git", "-C", str(phone), "commit", "-qm", f"phone: {rel}"], check=True)
    for _ in range(20):
        if subprocess.run(["git", "-C", str(phone), "push", "-q", "origin", "main"], capture_output=True).returncode == 0:
            return
        subprocess.run(["git", "-C", str(phone), "pull", "-q", "--no-rebase", "--no-edit", "origin", "main"],
                       capture_output=True)
    raise AssertionError("the phone could not push")


@pytest.mark.slow
def test_a_request_pushed_by_a_phone_is_answered_once(machines, tmp_path, server):
    vaults, procs = machines
    procs += [DaemonProc(v.root) for v in vaults]
    phone_push(tmp_path, server.url(), "inbox/ask.md", "---\ntype: run\n---\nWhat is on today?\n")
    assert wait_for(lambda: all(v.git.list_files(v.git.head(), "outputs/requests/") for v in vaults), 90), \
        [d.output()[-2000:] for d in procs]
    assert wait_for(lambda: all(not main_has(v, "inbox/ask.md") for v in vaults), 60)
    for v in vaults:
        assert len(v.git.list_files(v.git.head(), "outputs/requests/")) == 1
    assert sum("request taken: ask.md" in d.output() for d in procs) == 1


@pytest.mark.slow
def test_a_restarted_machine_works_after_it_has_caught_up_and_a_silent_remote_delays_it_little(
        machines, server, model_server):
    """Agent work waits for sync's first round (service/catch_up.py), so a machine back from a
    stop answers with what the others wrote meanwhile; a first round the remote never finishes
    holds the work back CATCH_UP_MAX_S at most."""
    import time

    from hermes_fs.service.catch_up import CATCH_UP_MAX_S

    vaults, procs = machines
    a, b, _ = vaults
    p = b.root / "memory/USER.md"
    p.write_text(p.read_text() + "- The staging database moved to pg-7\n")
    b.git.commit_human_edits(["memory/USER.md"])
    assert Syncer(b).round(work=False).pushed  # written on b while a was stopped
    q = a.root / "memory/MEMORY.md"
    q.write_text(q.read_text() + "- Written on a while its daemon was stopped\n")
    a.git.commit_human_edits(["memory/MEMORY.md"])  # so a's first round merges and pushes main
    hold, reached = server.base / "hold", server.base / "reached"
    hold.touch()  # the remote takes a's push of main, then never answers it
    hook = server.base / "vault.git" / "hooks" / "update"
    hook.write_text(f'#!/bin/sh\n[ "$1" = refs/heads/main ] || exit 0\ntouch {reached}\n'
                    f'while [ -e {hold} ]; do sleep 0.05; done\nexit 0\n')
    hook.chmod(0o755)
    (a.root / "inbox" / "ask.md").write_text("---\ntype: run\n---\nWhere is the staging database?\n")
    try:
        procs.append(DaemonProc(a.root))
        assert wait_for(reached.exists, 60), procs[0].output()[-3000:]  # the first round, merged, pushing
        time.sleep(1.0)
        assert model_server.requests == [], procs[0].output()[-3000:]
        assert wait_for(lambda: model_server.requests, CATCH_UP_MAX_S + 30), procs[0].output()[-3000:]
        assert reached.exists() and hold.exists()  # the round is still held: the limit let the work go
        prompt = str(model_server.requests[0]["messages"])
        assert "pg-7" in prompt  # b's entry, merged by that first round before its push
    finally:
        hold.unlink(missing_ok=True)
    assert wait_for(lambda: a.git.list_files(a.git.head(), "outputs/requests/"), 60), procs[0].output()[-3000:]
    said = (a.state_dir / "daemon.log").read_text()
    # sync starts first, before the watcher, the jobs and the scheduler (services.py): the others'
    # edits wait for a restarted machine's first round, which needs none of them
    assert said.index("sync started") < said.index("cron job(s)") < said.index("daemon started"), said
