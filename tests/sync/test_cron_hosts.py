"""`host:` pins a cron job to one machine, and a machine that cannot reach the remote runs nothing
it cannot claim: it records the due time as missed and runs it once the remote is back, if no
machine ran it. Real git daemon remote, a cut-able loopback proxy, the real scheduler."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from gitserver import GitDaemon, Proxy
from test_cron import FakeClock as Clock
from test_sync import first_machine, machine

from hermes_fs.errors import InputError
from hermes_fs.mind import jobs as cron
from hermes_fs.service.scheduler import Scheduler, next_runs
from hermes_fs.service.sync import Syncer
from hermes_fs.service.work import open_claims
from hermes_fs.store.claims import CLAIMS, CronLedger, RefClaims, Take, cron_key
from hermes_fs.store.config import Config
from hermes_fs.store.remote import Remote

pytestmark = pytest.mark.gitdaemon
# Due times are recent: one older than claims.CLAIMABLE_S (six days) is never claimed, so a fixed
# date in these tests would stop meaning "missed while offline" six days after it was written.
RECENT = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(days=1)


@pytest.fixture
def server(tmp_path):
    d = GitDaemon(tmp_path / "srv")
    yield d
    d.close()


def every_minute(name: str, host: str | None = None) -> cron.CronJob:
    pin = f"host: {host}\n" if host else ""
    return cron.parse_job(name, f"---\nschedule: \"* * * * *\"\n{pin}---\nTick.\n", Config())


def run_minutes(s: Scheduler, clock: Clock, n: int) -> None:
    s.tick(clock.t)  # first seen: only later times count
    for _ in range(n):
        clock.t += timedelta(minutes=1)
        s.tick(clock.t)


def test_host_is_parsed_and_checked():
    assert every_minute("j", "laptop-1a2b").host == "laptop-1a2b"
    assert every_minute("j").host is None
    for bad in ("Laptop", "a b", "'../x'", "[a]", "-x"):
        with pytest.raises(InputError, match="host"):
            cron.parse_job("j", f"---\nschedule: every 5m\nhost: {bad}\n---\nTick.\n", Config())


def test_only_the_pinned_host_runs_the_job_and_others_record_nothing(tmp_path):
    start = RECENT
    fired: dict[str, list] = {"a": [], "b": []}
    for host in ("a", "b"):
        clock = Clock(start)
        s = Scheduler(CronLedger(tmp_path / f"{host}.json", host), lambda j, d, h=host: fired[h].append((j.name, d)),
                      clock, start=lambda job, work: work())
        s.jobs = {"pinned": every_minute("pinned", "a"), "free": every_minute("free")}
        run_minutes(s, clock, 3)
        assert [d.job.name for d in s.plan(clock.t)] == (["pinned", "free"] if host == "a" else ["free"])
    names = {h: [n for n, _ in f] for h, f in fired.items()}
    assert names["a"].count("pinned") == names["a"].count("free") == names["b"].count("free") >= 2
    assert "pinned" not in names["b"]
    assert "pinned" not in json.loads((tmp_path / "b.json").read_text())  # skipped without claiming or recording


def test_pinned_elsewhere_claims_nothing_on_the_remote_and_pinned_here_runs_offline(tmp_path, server):
    a = first_machine(tmp_path, server)
    proxy = Proxy(server.port)
    try:
        def claims(host: str) -> RefClaims:
            return RefClaims(a.git, Remote(a.root, server.url(port=proxy.port), timeout_s=5), host, 30,
                             CronLedger(tmp_path / f"{host}-ledger.json"), tmp_path / f"{host}-claims.json")

        start = RECENT
        ran: list[tuple[str, str]] = []
        for host in ("a", "b"):
            clock = Clock(start)
            s = Scheduler(claims(host), lambda j, d, h=host: ran.append((h, j.name)), clock,
                          start=lambda job, work: work())
            s.jobs = {"laptop-only": every_minute("laptop-only", "a")}
            run_minutes(s, clock, 3)
        assert ran and set(ran) == {("a", "laptop-only")}
        assert not Remote(a.root, server.url()).refs(CLAIMS)  # a pinned job needs nobody's claim

        proxy.cut()  # offline: the pinned job still runs on its host, an unpinned one does not
        clock = Clock(start + timedelta(hours=1))
        c = claims("a")
        s = Scheduler(c, lambda j, d: ran.append(("a-offline", j.name)), clock, start=lambda job, work: work())
        s.jobs = {"laptop-only": every_minute("laptop-only", "a"), "shared": every_minute("shared")}
        c.local.passed("shared", clock.t)  # a job this machine knows
        run_minutes(s, clock, 3)
        assert ran.count(("a-offline", "laptop-only")) >= 1
        assert ("a-offline", "shared") not in ran
        assert list(c.missed) == ["shared"] and datetime.fromisoformat(c.missed["shared"]) <= clock.t
    finally:
        proxy.close()


def test_offline_due_time_is_caught_up_only_if_nobody_ran_it(tmp_path, server):
    a = first_machine(tmp_path, server)
    proxy = Proxy(server.port)
    try:
        ca = RefClaims(a.git, Remote(a.root, server.url(port=proxy.port), timeout_s=5), "a", 30,
                       CronLedger(tmp_path / "la"), tmp_path / "ca.json")
        cb = RefClaims(a.git, Remote(a.root, server.url(), timeout_s=5), "b", 30, CronLedger(tmp_path / "lb"),
                       tmp_path / "cb.json")
        ran_by_b, missed_by_all = (RECENT + timedelta(hours=h) for h in (0, 1))
        proxy.cut()
        assert not ca.mark("brief", ran_by_b) and not ca.mark("report", missed_by_all)
        assert set(ca.missed) == {"brief", "report"}
        assert cb.mark("brief", ran_by_b)  # b was connected: it ran `brief`
        proxy.heal()
        assert ca.take_missed() == [("report", missed_by_all)]  # `brief` is dropped: b ran it
        assert ca.missed == {}
        assert cb.take(cron_key("report", missed_by_all)) == Take.TAKEN  # and `report` runs once, on a
    finally:
        proxy.close()


def test_cron_list_and_status_show_the_pin_and_the_missed_time(tmp_path, server, run_cli):
    a = first_machine(tmp_path, server)
    b = machine(tmp_path, server, "b")
    here = open_claims(a).host
    (a.root / "cron" / "mine.md").write_text(f"---\nschedule: every 30m\nhost: {here}\n---\nTick.\n")
    (a.root / "cron" / "elsewhere.md").write_text("---\nschedule: every 30m\nhost: phone-0000\n---\nTick.\n")
    a.git.commit_human_edits(["cron/mine.md", "cron/elsewhere.md"])
    Syncer(a).round(work=False)
    Syncer(b).round(work=False)
    cb = open_claims(b)
    cb.missed["mine"] = "2026-12-01T09:00:00+00:00"  # as a cut-off round leaves it
    cb._save()

    rows = {r["job"]: r for r in json.loads(run_cli("cron", "list", "--json", "--vault", str(a.root)).stdout)}
    assert rows["mine"]["host"] == here and rows["mine"]["next_run"]
    assert rows["elsewhere"]["host"] == "phone-0000" and rows["elsewhere"]["next_run"] is None
    text = run_cli("cron", "list", "--vault", str(b.root)).stdout
    assert f"every 30 minutes, on {here}" in text.replace("every 30m", "every 30 minutes") or f"on {here}" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("mine"))
    assert f"on {here} only" in line and "missed 2026-12-01T09:00:00+00:00" in line
    status = run_cli("status", "--vault", str(b.root)).stdout
    assert "missed while offline: mine" in status and f"next: on {here}" in status
    assert next_runs(b, cron.load_jobs(b.files, b.config)[0], datetime.now(UTC))["mine"] is None
