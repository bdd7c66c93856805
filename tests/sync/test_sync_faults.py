"""Faults the full chaos bench (bench/sync.py) found, one test each, on real git and real
processes. Nothing is timed: each test shows the wrong behaviour itself, not its cost."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest
from gitserver import GitDaemon

from hermes_fs.service.sync import Syncer
from hermes_fs.service.sync_service import watch_main
from hermes_fs.store.claims import CronLedger, RefClaims, Take
from hermes_fs.store.provenance import Act
from hermes_fs.store.remote import RefUpdate, Remote
from hermes_fs.store.vault import Vault, init_vault

pytestmark = pytest.mark.gitdaemon


def test_reading_main_does_not_start_a_sync_round(tmp_path):
    """Every git command opens refs/heads/main; a round poked by those reads started the next
    round at once, for ever (a third of a core per idle daemon). Only a move of main pokes."""
    v = init_vault(tmp_path / "v").vault
    before = v.git.head()
    seen: list[str | None] = []  # main as it was at each poke
    woke = threading.Event()

    def poke() -> None:
        seen.append(v.git.head())
        woke.set()

    observer = watch_main(v.root, poke)
    try:
        for args in (["rev-parse", "main"], ["log", "-1", "main"], ["for-each-ref"], ["status", "--short"]):
            subprocess.run(["git", "-C", str(v.root), *args], check=True, capture_output=True)
        p = v.root / "memory" / "USER.md"
        p.write_text(p.read_text() + "- a line\n")
        assert v.git.commit_human_edits(["memory/USER.md"]).sha
        assert woke.wait(180), "a commit on main did not poke the sync loop"
    finally:
        observer.stop()
        observer.join(5)
    # one inotify queue, in order: a poke for a read would come before the one for the move
    assert seen[0] != before, "reading main poked the sync loop"


class CountingRemote(Remote):
    """A real Remote that counts its pushes (each one a network round trip to `git daemon`)."""

    pushes = 0

    def push(self, updates, atomic=True):
        self.pushes += 1
        return super().push(updates, atomic)


@pytest.fixture
def synced(tmp_path):
    server = GitDaemon(tmp_path / "srv")
    server.bare()
    v = init_vault(tmp_path / "a").vault
    cfg = v.root / "hermes.yaml"
    cfg.write_text(cfg.read_text() + f"\nremote:\n  url: {server.url()}\n  branch: main\n")
    v.git.commit_paths(["hermes.yaml"], "edit: hermes.yaml", Act.human_edit())
    v.reload_config()
    assert Syncer(v).round(work=False).pushed
    yield v, server
    server.close()


def claims(v: Vault, server: GitDaemon, host: str, ttl: float, state) -> RefClaims:
    return RefClaims(v.git, CountingRemote(v.root, server.url()), host, ttl, CronLedger(state.with_suffix(".ledger")),
                     state)


KEYS = [f"cron/job-{i}/20261201T0900{i:02d}Z" for i in range(6)]


def test_many_claims_are_renewed_and_taken_over_in_one_push(synced, tmp_path):
    """A machine holding many claims renewed them one push each, and took over a dead machine's
    one after the other (three network calls each): behind that the takeovers waited for minutes
    in the chaos run. Now one push renews them all, and one takes them all over."""
    v, server = synced
    holder = claims(v, server, "holder", 1.0, tmp_path / "h.json")
    for key in KEYS:
        assert holder.take(key) == Take.WON
    for held in holder.held.values():
        held.expires = 0  # all due for renewal
    holder.remote.pushes = 0
    assert holder.renew() == []
    assert holder.remote.pushes == 1
    taker = claims(v, server, "taker", 30.0, tmp_path / "t.json")
    taker.remote.fetch()
    time.sleep(1.1)  # the holder stops renewing (dies): its claims expire (ttl 1 s)
    dead = taker.dead()
    assert sorted(r.key for r in dead) == sorted(KEYS)
    taker.remote.pushes = 0
    assert sorted(taker.take_over(dead)) == sorted(KEYS)
    assert taker.remote.pushes == 1
    assert all(taker.holder(k).host == "taker" for k in KEYS)
    assert sorted(holder.renew()) == sorted(KEYS)  # the old holder learns it lost them all, in one push
    assert taker.take_over(dead) == []  # the same leases again: the values moved, nothing is taken twice


def test_a_restarted_machine_takes_its_own_dead_runs_over_at_once(synced, tmp_path):
    """A claim held by a previous process of this machine (killed mid-run) waited out its whole
    expiry before anyone, this machine included, ran the job again. The process holding the daemon
    lock now knows that one is gone: it takes the claim over at once, with a lease on the value it
    last pushed; a claim someone else took over meanwhile is not taken back."""
    v, server = synced
    first = claims(v, server, "me", 600.0, tmp_path / "me.json")
    assert first.take(KEYS[0]) == Take.WON and first.take(KEYS[1]) == Take.WON
    restarted = claims(v, server, "me", 600.0, tmp_path / "me.json")  # same state file: a new process
    assert all(h.orphan for h in restarted.held.values())
    assert restarted.expired() == []  # ten minutes before the expiry says so
    other = claims(v, server, "other", 600.0, tmp_path / "o.json")
    sha, _ = other._commit(KEYS[1], "running", "taken over", parent=first.held[KEYS[1]].sha)
    assert other.remote.push([RefUpdate("refs/hermes/claims/" + KEYS[1], sha, first.held[KEYS[1]].sha)]).ok
    dead = restarted.dead()
    assert sorted(r.key for r in dead) == sorted(KEYS[:2])
    assert restarted.take_over(dead) == [KEYS[0]]
    assert not restarted.held[KEYS[0]].orphan and KEYS[1] not in restarted.held
    assert restarted.holder(KEYS[0]).host == "me" and restarted.holder(KEYS[1]).host == "other"


def dead_claims(v: Vault, server: GitDaemon, tmp_path, jobs: list[str], due, seen: bool = True) -> None:
    """Claims of a machine that claimed these due times and died (expiry 0.5 s); with `seen`,
    this machine's scheduler saw them pass (not its to catch up), so only a takeover runs them."""
    from hermes_fs.store.claims import LEDGER_NAME, cron_key

    dead = claims(v, server, "dead", 0.5, tmp_path / "dead.json")
    for job in jobs:
        assert dead.take(cron_key(job, due)) == Take.WON
        if seen:
            CronLedger(v.state_dir / LEDGER_NAME).passed(job, due)


def one_shot_jobs(v: Vault, jobs: list[str], due) -> None:
    for job in jobs:
        (v.root / "cron" / f"{job}.md").write_text(f"---\nschedule: \"at {due.isoformat()}\"\n---\nSay done.\n")
    v.git.commit_all("test: jobs", Act.human_edit())
    assert Syncer(v).round(work=False).pushed


def claim_hosts(server: GitDaemon, jobs: list[str], due) -> list[str | None]:
    """Who holds each job's claim, read in the remote's own repository (a fetch into the vault
    would show the daemon the claims, which is what a test may have to leave to the daemon)."""
    from hermes_fs.store.claims import CLAIMS, cron_key

    hosts = []
    for job in jobs:
        out = subprocess.run(["git", "log", "-1", "--format=%B", CLAIMS + cron_key(job, due), "--"],
                             cwd=server.base / "vault.git", capture_output=True, text=True).stdout
        found = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("Hermes-Host: ")]
        hosts.append(found[0] if found else None)
    return hosts


@pytest.mark.slow
def test_a_busy_machine_takes_over_every_dead_claim_and_runs_four_at_once(synced, tmp_path, model_server):
    """Taking every dead claim over and starting all their runs at once started 96 agent runs on
    one machine of the chaos run; then a machine took over only as many claims as it had free
    run slots (RUN_AT_ONCE), and the others expired further: with its slots busy it took none,
    and takeovers came a minute after the expiry. Now it takes over every dead claim it may run
    at once (renewed while queued, so none expires again) and runs RUN_AT_ONCE at a time."""
    from datetime import UTC, datetime, timedelta

    from conftest import DaemonProc, wait_for
    from model_server import configure_vault

    from hermes_fs.service.sync_service import RUN_AT_ONCE
    from hermes_fs.store.host import host_id

    v, server = synced
    gate = threading.Event()
    model_server.responder = lambda body: {"content": "done", "wait": gate}
    configure_vault(v.root, model_server, f"remote:\n  url: {server.url()}\n  branch: main\n"
                    "sync:\n  interval_s: 0.5\n  claim_ttl_s: 30\n")
    due = (datetime.now(UTC) - timedelta(minutes=1)).replace(microsecond=0)
    jobs = [f"job-{i}" for i in range(RUN_AT_ONCE + 2)]
    one_shot_jobs(v, jobs, due)
    dead_claims(v, server, tmp_path, jobs, due)
    time.sleep(0.6)  # past their expiry
    d = DaemonProc(v.root)

    def count(what: str) -> int:
        return (v.state_dir / "daemon.log").read_text().count(what)

    me = host_id(v.state_dir)
    try:
        assert wait_for(lambda: claim_hosts(server, jobs, due) == [me] * len(jobs), 60), d.output()
        assert wait_for(lambda: count("cron started") >= RUN_AT_ONCE, 60), d.output()
        time.sleep(6)  # two renewals of the queued claims (every 5 s with this expiry), all slots busy
        assert count("cron started") == RUN_AT_ONCE, d.output()
        assert claim_hosts(server, jobs, due) == [me] * len(jobs)  # the queued ones stay this machine's
        gate.set()
        assert wait_for(lambda: count("cron finished") == len(jobs), 90), d.output()
        assert wait_for(lambda: len(v.git.list_files(v.git.head(), "outputs/cron/")) == len(jobs), 60)
    finally:
        gate.set()
        d.stop()
    assert count("cron started") == len(jobs)  # each once
    assert count("took over from dead") == len(jobs)


def a_late_job_and_slow_rounds(v: Vault, server: GitDaemon, model_server):
    """A one-shot job already due that this machine saw pass (not its to catch up), rounds only
    every two minutes: whatever runs it here is a takeover the renewer made on its own."""
    from datetime import UTC, datetime, timedelta

    from model_server import configure_vault

    from hermes_fs.store.claims import LEDGER_NAME

    model_server.responder = lambda body: {"content": "done"}
    configure_vault(v.root, model_server, f"remote:\n  url: {server.url()}\n  branch: main\n"
                    "sync:\n  interval_s: 120\n  claim_ttl_s: 10\n")
    due = (datetime.now(UTC) - timedelta(minutes=1)).replace(microsecond=0)
    one_shot_jobs(v, ["late"], due)
    CronLedger(v.state_dir / LEDGER_NAME).passed("late", due)
    return due


@pytest.mark.slow
def test_the_renewer_sees_a_dead_claim_without_waiting_for_a_round(synced, tmp_path, model_server):
    """Dead claims were found in the mirror of the last round's fetch only; a round is slow when
    machines race for main (it retries its push up to PUSH_TRIES times), so an expired claim
    stayed hidden for as long as the round took. The renewer now fetches the claim refs itself:
    here rounds run only every two minutes and nothing moves main, yet the claim that a machine
    left to expire after this daemon's last round is taken over."""
    from conftest import DaemonProc, wait_for

    from hermes_fs.store.host import host_id

    v, server = synced
    due = a_late_job_and_slow_rounds(v, server, model_server)
    d = DaemonProc(v.root)
    try:
        assert wait_for(lambda: "sync started" in d.output(), 30)
        time.sleep(3)  # its first round is over; the next is two minutes away
        dead_claims(v, server, tmp_path, ["late"], due, seen=False)
        assert wait_for(lambda: claim_hosts(server, ["late"], due) == [host_id(v.state_dir)], 60), d.output()
        assert wait_for(lambda: "cron finished: late" in d.output(), 60), d.output()
    finally:
        d.stop()


@pytest.mark.slow
def test_the_renewer_takes_over_while_the_last_round_said_offline(synced, tmp_path, model_server):
    """The renewer looked for dead claims only while the last finished round had reached the
    remote; a round that lost the race for main kept retrying for many seconds before it said
    so, and meanwhile nobody took over (a claim 6 s past its expiry in the chaos bench, on the
    one machine up and connected). The renewer now asks the remote itself: here the only round
    so far found it cut off, the next is two minutes away, and the claim left to expire once the
    network is back is taken over."""
    from conftest import DaemonProc, wait_for
    from gitserver import Proxy

    from hermes_fs.service.work import URL_KEY
    from hermes_fs.store.host import host_id

    v, server = synced
    due = a_late_job_and_slow_rounds(v, server, model_server)
    proxy = Proxy(server.port)
    v.git.config_set(URL_KEY, server.url(port=proxy.port))  # this machine reaches the remote through the proxy
    proxy.cut()
    d = DaemonProc(v.root)
    try:
        assert wait_for(lambda: "remote unreachable" in d.output(), 60), d.output()
        proxy.heal()
        dead_claims(v, server, tmp_path, ["late"], due, seen=False)
        assert wait_for(lambda: claim_hosts(server, ["late"], due) == [host_id(v.state_dir)], 60), d.output()
        assert wait_for(lambda: "cron finished: late" in d.output(), 60), d.output()
    finally:
        d.stop()
        proxy.close()


def test_the_scheduler_starts_without_waiting_for_the_remote(tmp_path):
    """With shared claims each due time missed while the daemon was down is claimed on the
    remote (a push or two); the scheduler did that before returning from start(), so a restarted
    daemon began to sync only 3-7 s later in the chaos run. The catch-up now runs on the
    scheduler's own thread."""
    from datetime import UTC, datetime, timedelta

    from hermes_fs.mind.jobs import CronJob
    from hermes_fs.mind.schedule import parse_schedule
    from hermes_fs.service.scheduler import Scheduler

    asked = threading.Event()
    answer = threading.Event()
    ran: list[str] = []

    class SlowRemoteClaims(CronLedger):
        def mark(self, job, due):  # the remote takes its time to answer
            asked.set()
            answer.wait(30)
            return super().mark(job, due)

    due = datetime.now(UTC) - timedelta(minutes=5)
    CronLedger(tmp_path / "ledger.json").passed("brief", due - timedelta(days=1))  # seen before: owed its run at `due`
    claims_ = SlowRemoteClaims(tmp_path / "ledger.json")
    brief = CronJob(name="brief", schedule=parse_schedule(f"at {due.isoformat()}", UTC), prompt="p")
    s = Scheduler(claims_, lambda j, d: ran.append(j.name))
    starting = threading.Thread(target=s.start, args=([brief],))
    starting.start()
    try:
        assert asked.wait(180)  # the catch-up is asking the remote ...
        starting.join(10)
        assert not starting.is_alive(), "start() waited for the remote"  # ... and start() has returned
    finally:
        answer.set()
        starting.join(30)
    assert wait_for_run(ran)
    s.stop()


def wait_for_run(ran: list[str]) -> bool:
    from conftest import wait_for

    return bool(wait_for(lambda: ran == ["brief"], 30))


def test_a_request_resumed_after_a_restart_keeps_its_claim(synced, tmp_path):
    """A request that came through git, claimed by this machine, which was then killed: the new
    daemon resumes it, but its claim was an orphan, dropped at the next round and never renewed,
    so after the expiry another machine took the request over and answered it too (found by
    reading the code). Resumed, the claim is adopted: renewed, kept, and still this machine's."""
    from hermes_fs.service import inbox
    from hermes_fs.service.work import adopt_request, open_claims, request_key

    v, server = synced
    for name in ("ask.md", "other.md"):
        (v.root / "inbox" / name).write_text(f"---\ntype: run\n---\n{name}\n")
    v.git.commit_paths(["inbox/ask.md", "inbox/other.md"], "edit: two requests from the phone", Act.human_edit())
    assert Syncer(v).round(work=False).pushed
    first = open_claims(v)
    assert inbox.take(v, "inbox/ask.md", first) is not None  # won its claim on the remote, moved to .hermes/inbox
    key = request_key(v, "inbox/ask.md")
    other = request_key(v, "inbox/other.md")
    assert key in first.held and first.take(other) == Take.WON  # other: claimed, but its file is gone here
    # the daemon is killed; a new process reads the same state file
    restarted = RefClaims(v.git, Remote(v.root, server.url()), first.host, 3.0, first.ledger, first.state_path)
    assert restarted.held[key].orphan and restarted.held[other].orphan
    for c in inbox.pending_taken(v):  # what the daemon resumes at start (inbox.resume)
        assert adopt_request(restarted, c.key)
    assert not restarted.held[key].orphan and restarted.held[other].orphan
    Syncer(v, restarted).round(work=False)  # a round forgets orphans of requests, not this one
    assert key in restarted.held and other not in restarted.held
    restarted.held[key].expires = 0  # due for renewal: renewed from its last value, still this machine's
    assert restarted.renew() == []
    assert restarted.holder(key).host == first.host and not restarted.holder(key).expired(time.time())


def ask_claimed_here(v: Vault, server: GitDaemon, model_server):
    """The phone's two requests, with `inbox/ask.md` claimed here (every answer: "answered here"):
    this machine's claims and the inbox claim."""
    from hermes_fs.service import inbox
    from hermes_fs.service.work import open_claims

    two_requests_from_the_phone(v, server, model_server, lambda body: {"content": "answered here"})
    claims = open_claims(v)
    c = inbox.take(v, "inbox/ask.md", claims)
    assert c is not None
    return claims, c


def two_requests_from_the_phone(v: Vault, server: GitDaemon, model_server, responder) -> None:
    from model_server import configure_vault

    model_server.responder = responder
    configure_vault(v.root, model_server, f"remote:\n  url: {server.url()}\n  branch: main\n")
    for name in ("ask.md", "late.md"):
        (v.root / "inbox" / name).write_text(f"---\ntype: run\n---\n{name}\n")
    v.git.commit_all("edit: two requests from the phone", Act.human_edit())
    v.reload_config()
    assert Syncer(v).round(work=False).pushed


def take_over_from(mine: RefClaims, v: Vault, server: GitDaemon, key: str, tmp_path) -> None:
    """Another machine takes this machine's claim over (as if its expiry had passed unseen here)."""
    other = claims(v, server, "other", 30.0, tmp_path / "other.json")
    sha, _ = other._commit(key, "running", "taken over", parent=mine.held[key].sha)
    assert other.remote.push([RefUpdate("refs/hermes/claims/" + key, sha, mine.held[key].sha)]).ok


def remote_main_has(server: GitDaemon, pattern: str) -> list[str]:
    out = subprocess.run(["git", "ls-tree", "-r", "--name-only", "main"], cwd=server.base / "vault.git",
                         capture_output=True, text=True, check=True).stdout
    return [p for p in out.splitlines() if p.endswith(pattern)]


def test_a_request_answered_here_after_its_claim_was_taken_over_is_withdrawn(synced, tmp_path, model_server):
    """The chaos bench with requests pushed by the phone (claimed by ref) answered 21 of 200 twice
    or three times: a machine whose claim had been taken over (killed or starved past its expiry)
    still published its answer beside the taker's, since a request's answer, unlike a cron
    output, was never withdrawn. Now it is, and the request goes back on main for the taker."""
    from hermes_fs.service import inbox
    from hermes_fs.service.work import request_key

    v, server = synced
    mine, c = ask_claimed_here(v, server, model_server)
    key = request_key(v, "inbox/ask.md")
    inbox.process(v, c, claims=mine)  # answered and committed here, not pushed yet ...
    assert v.git.list_files(v.git.head(), "outputs/requests/")
    take_over_from(mine, v, server, key, tmp_path)  # ... when another machine takes the claim over
    theirs = "outputs/requests/20261201-000000-000000-ask.md"  # the taker's answer, merged from its host ref
    (v.root / theirs).write_text("---\nstatus: ok\n---\nanswered there\n")
    v.git.commit_paths([theirs], "request: ask.md (ok)", Act.sync("other"))
    r = Syncer(v, mine).round(work=False)
    assert r.withdrawn and r.pushed
    assert remote_main_has(server, "-ask.md") == [theirs]  # no answer of this machine's beside the taker's
    assert remote_main_has(server, "inbox/ask.md") == ["inbox/ask.md"]  # still asked, for the taker
    assert (v.root / "inbox" / "ask.md").is_file()


def test_a_request_whose_claim_is_lost_while_it_runs_is_not_answered_here(synced, tmp_path, model_server):
    """The other way a request was answered twice in the chaos bench: the claim was lost (found at
    a renewal) while the request ran, or before a restarted daemon resumed it, and the answer was
    committed and pushed all the same. An answer is now committed only under a claim still held."""
    from hermes_fs.service import inbox
    from hermes_fs.service.work import open_claims, request_key

    v, server = synced
    lost: list[str] = []

    def respond(body):  # while the model answers, the claim is taken over, and a renewal finds out
        key = request_key(v, "inbox/late.md")
        take_over_from(mine, v, server, key, tmp_path)
        mine.held[key].expires = 0
        lost.extend(mine.renew())
        return {"content": "answered here"}

    two_requests_from_the_phone(v, server, model_server, respond)
    mine = open_claims(v)
    c = inbox.take(v, "inbox/late.md", mine)
    assert c is not None
    result = inbox.process(v, c, claims=mine)
    assert lost == [request_key(v, "inbox/late.md")]
    assert not result.ok and "another machine" in result.body
    assert v.git.list_files(v.git.head(), "outputs/requests/") == []  # nothing committed
    assert not list((v.root / "outputs" / "requests").glob("*late.md"))  # nor left behind
    assert "inbox/late.md" in v.git.list_files(v.git.head(), "inbox/")  # main still asks, for the taker
    Syncer(v, mine).round(work=False)
    assert remote_main_has(server, "-late.md") == []


def test_a_claim_this_machine_took_over_itself_is_not_lost_to_a_takeover(synced, tmp_path):
    """The renewer took over a run of this machine whose claim had expired (its renewals stuck
    behind a slow round); the round's fetch saw that push before the renewer recorded it, called
    the claim lost to another machine and withdrew the result, and the renewer then closed the
    claim as done on that result: a due time without output (the chaos bench: 5 of 100)."""
    v, server = synced
    me = claims(v, server, "me", 1.0, tmp_path / "me.json")
    assert me.take(KEYS[0]) == Take.WON
    time.sleep(1.1)  # the claim expires
    me.remote.fetch()
    rec = next(r for r in me.records() if r.key == KEYS[0])
    sha, _ = me._commit(KEYS[0], "running", "taken over from me, whose claim expired", parent=rec.sha)
    assert me.remote.push([RefUpdate("refs/hermes/claims/" + KEYS[0], sha, rec.sha)]).ok  # the renewer's push
    me.remote.fetch()  # the round's fetch, before the renewer records what it pushed
    assert me.lost_to_takeover() == []
    assert KEYS[0] in me.held


def cron_run_committed(v: Vault, server: GitDaemon, tmp_path) -> tuple[RefClaims, str, str]:
    """A due time claimed by this machine ("me"), its run's output committed on main here."""
    from datetime import UTC, datetime

    from hermes_fs.service.work import result_of
    from hermes_fs.store.claims import cron_key

    mine = claims(v, server, "me", 30.0, tmp_path / "me.json")
    key = cron_key("brief", datetime(2026, 12, 1, 9, tzinfo=UTC))
    assert mine.take(key) == Take.WON
    rel = result_of(key)
    assert rel
    (v.root / rel).parent.mkdir(parents=True, exist_ok=True)
    (v.root / rel).write_text("---\nstatus: ok\n---\nthe brief\n")
    v.git.commit_paths([rel], "cron: brief (ok)", Act.sync("me"))
    return mine, key, rel


def test_a_cron_run_whose_claim_was_lost_at_a_renewal_is_not_withdrawn(synced, tmp_path):
    """Requests' answers of a claim lost at a renewal are withdrawn at the next round; cron runs
    were too, for a while, and that left 13 of 100 due times without output in a chaos run: the
    machine that took the claim over had merged the run from the loser's host ref and closed the
    claim on it, then the loser withdrew it. A cron run's output has one path per due time, so it
    never doubles an answer: it stays, and the taker's own run (if any) merges over it."""
    v, server = synced
    mine, key, rel = cron_run_committed(v, server, tmp_path)
    take_over_from(mine, v, server, key, tmp_path)
    mine.held[key].expires = 0
    assert mine.renew() == [key]  # the renewal finds the claim lost
    r = Syncer(v, mine).round(work=False)
    assert r.withdrawn == [] and r.pushed
    assert remote_main_has(server, rel) == [rel]


def test_a_cron_run_already_on_the_remotes_main_is_not_withdrawn_when_its_claim_is_taken_over(synced, tmp_path):
    """With host refs a run reaches the remote's main through another machine, before its own
    machine publishes the claim `done`; the machine taking the claim over then closes it on that
    output (it closes on a result the remote's main has). The loser, seeing its claim taken
    over, withdrew the output all the same: a due time without output."""
    v, server = synced
    mine, key, rel = cron_run_committed(v, server, tmp_path)
    # another machine merged it from this one's host ref and won the race for main with it
    subprocess.run(["git", "push", "-q", server.url(), "main:refs/heads/main"], cwd=v.root, check=True)
    take_over_from(mine, v, server, key, tmp_path)
    r = Syncer(v, mine).round(work=False)
    assert r.withdrawn == []
    assert (v.root / rel).is_file() and remote_main_has(server, rel) == [rel]


def test_a_request_answered_before_a_restart_keeps_its_claim_until_it_is_published(synced, tmp_path, model_server):
    """A request answered and committed by a process killed before its round marked the claim
    done: the next process finds the answer on main and marks it done, but the claim stayed an
    orphan, never renewed, so while main kept losing the race it expired, free for another
    machine to answer again (found reading the code). Marked done here, it is this process's and
    renewed until pushed."""
    from test_sync import refuse_main

    from hermes_fs.service import inbox
    from hermes_fs.service.work import request_key

    v, server = synced
    first, c = ask_claimed_here(v, server, model_server)
    key = request_key(v, "inbox/ask.md")
    inbox.process(v, c, claims=first)  # answered and committed; the process dies before a round marks the claim done
    restarted = RefClaims(v.git, Remote(v.root, server.url()), first.host, 30.0, first.ledger, first.state_path)
    assert restarted.held[key].orphan
    refuse_main(server, True)  # main loses the race every time: the `done` cannot go up with it
    assert not Syncer(v, restarted).round(work=False).pushed
    assert restarted.held[key].done
    before = restarted.holder(key).expires
    restarted.held[key].expires = 0  # due for renewal
    assert restarted.renew() == []
    now = restarted.holder(key)
    assert now.host == first.host and now.expires > before


def pushes_logged(server: GitDaemon):
    """The remote writes the refs each push updated, one line per push (a `post-receive` hook)."""
    log = server.base / "pushes.log"
    hook = server.base / "vault.git" / "hooks" / "post-receive"
    hook.write_text(f"#!/bin/sh\nawk '{{printf \"%s \", $3}} END {{print \"\"}}' >> {log}\n")
    hook.chmod(0o755)
    return lambda: log.read_text().splitlines() if log.exists() else []


@pytest.mark.slow
def test_a_dead_machines_requests_are_taken_over_in_one_push(synced, tmp_path, model_server):
    """The renewer took a dead machine's cron claims over in one push, but its requests only
    through the inbox: written again, each claim then taken over on its own, three network calls
    one after the other (in the chaos bench with requests pushed by the phone, 10 of 17 came 10
    to 58 s after their expiry). Now the renewer takes them over in its push too, and the inbox
    finds them held here."""
    from conftest import DaemonProc, wait_for
    from model_server import configure_vault

    from hermes_fs.service.work import request_key
    from hermes_fs.store.claims import CLAIMS

    v, server = synced
    model_server.responder = lambda body: {"content": "answered"}
    configure_vault(v.root, model_server, f"remote:\n  url: {server.url()}\n  branch: main\n"
                    "sync:\n  interval_s: 0.5\n  claim_ttl_s: 30\n")
    names = [f"ask-{i}.md" for i in range(3)]
    for name in names:
        (v.root / "inbox" / name).write_text(f"---\ntype: run\n---\n{name}\n")
    v.git.commit_all("edit: requests from the phone", Act.human_edit())
    keys = [request_key(v, f"inbox/{name}") for name in names]
    dead = claims(v, server, "dead", 20.0, tmp_path / "dead.json")  # claimed them at once, then died
    # one expiry for all three (made one by one, the last could expire a renewer's tick later)
    made = {key: sha for key, (sha, _) in dead._commits({key: ("running", "", None, None) for key in keys}).items()}
    assert dead.remote.push([RefUpdate(CLAIMS + key, sha, None) for key, sha in made.items()]).ok
    v.reload_config()
    assert Syncer(v).round(work=False).pushed
    pushes = pushes_logged(server)
    d = DaemonProc(v.root)  # its inbox finds the claims held (not expired yet) and leaves the requests
    try:
        assert wait_for(lambda: len(remote_main_has(server, "-ask-2.md")) == 1, 90), d.output()
        assert wait_for(lambda: all(len(remote_main_has(server, f"-{n}")) == 1 for n in names), 60), d.output()
    finally:
        d.stop()
    touching = [line.split() for line in pushes() if any(CLAIMS + key in line.split() for key in keys)]
    assert all(CLAIMS + key in touching[0] for key in keys), touching  # the takeover, before the `done`s
    assert all(len(remote_main_has(server, f"-{n}")) == 1 for n in names)


def test_a_request_answered_elsewhere_before_it_resumes_here_is_not_answered_again(synced, tmp_path, model_server):
    """The one request of 200 answered twice in a chaos run with requests pushed by the phone: a
    machine took a request, was killed, and its resumed request waited for a free slot; meanwhile
    its claim was taken over and the taker's answer reached main. Whether the claim was lost was
    asked of the claim key computed from main, and main no longer held the request, so the
    request read as one dropped here, and it was answered and committed a second time. The key
    is now kept with the claimed request."""
    from hermes_fs.service import inbox

    v, server = synced
    mine, c = ask_claimed_here(v, server, model_server)
    assert c.key in mine.held
    take_over_from(mine, v, server, c.key, tmp_path)  # the taker answers; its answer reaches main here
    theirs = "outputs/requests/20261201-000000-000000-ask.md"
    (v.root / theirs).parent.mkdir(parents=True, exist_ok=True)
    (v.root / theirs).write_text("---\nstatus: ok\n---\nanswered there\n")
    v.git.commit_paths([theirs, "inbox/ask.md"], "request: ask.md (ok)", Act.sync("other"))
    assert Syncer(v, mine).round(work=False).pushed  # and the remote's: main asks it no longer anywhere
    Syncer(v, mine).round(work=False)  # the mirror of the remote's main too
    assert c.key not in mine.held  # the round saw the claim in the taker's hands
    resumed = inbox.pending_taken(v)  # the daemon, restarted, resumes what it had taken
    assert [r.key for r in resumed] == [c.key]
    result = inbox.process(v, resumed[0], claims=mine)
    assert not result.ok and "another machine" in result.body
    assert v.git.list_files(v.git.head(), "outputs/requests/") == [theirs]
    assert inbox.pending_taken(v) == [] and not list(inbox.taken_dir(v).iterdir())  # let go, key and all


def test_a_cron_run_is_not_withdrawn_on_a_stale_mirror_of_main(synced, tmp_path):
    """A run whose `done` push is refused because its claim was taken over was withdrawn unless
    the mirror of the remote's main showed its output; but the mirror is as old as this machine's
    last fetch, and meanwhile another machine can publish the output from this one's host ref,
    and the taker close the claim on it: withdrawn, the due time had no output (found reading the
    code). A cron run is no longer withdrawn at all: its output has one path per due time."""
    from hermes_fs.service.sync import Round

    v, server = synced
    mine, key, rel = cron_run_committed(v, server, tmp_path)
    # published from this machine's host ref by another machine, after this machine's last fetch
    subprocess.run(["git", "push", "-q", server.url(), "main:refs/heads/main"], cwd=v.root, check=True)
    take_over_from(mine, v, server, key, tmp_path)
    mine.finish(key, [rel])
    r = Round()
    assert Syncer(v, mine)._push_main(r) is False  # refused: main's lease and the claim's are stale
    assert r.withdrawn == [] and key not in mine.held
    assert (v.root / rel).is_file() and v.git.read_file(v.git.head(), rel) is not None


def test_many_claim_commits_are_made_in_one_git_call(synced, tmp_path):
    """Each renewal and takeover commit was its own `git commit-tree`: a daemon holding 80-110
    claims (the chaos bench with requests pushed by the phone) spent 3-8 s making them before
    each renewal push and 5 s before one takeover push, and its takeovers waited behind that.
    Now one `git hash-object` writes them all; the claims are the same commits."""
    from hermes_fs.store.git import GitStore

    calls: list[str] = []

    class CountingStore(GitStore):
        def _git(self, *args, **kw):
            calls.append(args[0])
            return super()._git(*args, **kw)

    v, server = synced
    store = CountingStore(v.root, lock_dir=v.root / ".hermes" / "locks")
    holder = RefClaims(store, CountingRemote(v.root, server.url()), "holder", 1.0, CronLedger(tmp_path / "h.ledger"),
                       tmp_path / "h.json")
    for key in KEYS:
        assert holder.take(key) == Take.WON
    for held in holder.held.values():
        held.expires = 0
    calls.clear()
    assert holder.renew() == []
    assert calls.count("commit-tree") == 0 and calls.count("hash-object") == 1
    time.sleep(1.1)  # expired: another machine takes them all over
    taker = RefClaims(store, CountingRemote(v.root, server.url()), "taker", 30.0, CronLedger(tmp_path / "t.ledger"),
                      tmp_path / "t.json")
    taker.remote.fetch()
    calls.clear()
    assert sorted(taker.take_over(taker.dead())) == sorted(KEYS)
    assert calls.count("commit-tree") == 0 and calls.count("hash-object") == 1
    for key in KEYS:
        rec = taker.holder(key)
        assert rec.host == "taker" and rec.state == "running" and rec.expires > time.time()
        assert store.is_ancestor(holder.held[key].sha, rec.sha)  # built on the renewal, as a lease needs
    subprocess.run(["git", "fsck", "--no-progress"], cwd=v.root, check=True, capture_output=True)


def test_a_cut_of_the_test_proxy_ends_a_connection_that_is_open_and_idle():
    """The chaos figures rely on `Proxy.cut()` resetting open connections. A close alone did not
    end one whose pipe threads were blocked reading, and a sync round waited its whole 30 s
    timeout on it."""
    import socket
    import threading

    from gitserver import Proxy

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(server.accept()[0]), daemon=True).start()
    proxy = Proxy(server.getsockname()[1])
    try:
        client = socket.create_connection(("127.0.0.1", proxy.port))
        client.settimeout(20)
        deadline = time.time() + 10
        while not (accepted and len(proxy.conns) == 2) and time.time() < deadline:
            time.sleep(0.02)  # both pipe threads now wait in recv
        assert accepted and len(proxy.conns) == 2
        proxy.cut()
        try:
            assert client.recv(10) == b""  # ended: end of stream or a reset, never a wait
        except ConnectionResetError:
            pass
    finally:
        proxy.close()
        server.close()
