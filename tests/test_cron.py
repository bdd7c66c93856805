"""Cron: the scheduler's logic with an injected clock, and real runs delivering through Apprise."""

import threading
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from conftest import git

from hermes_fs.mind import jobs as cron
from hermes_fs.mind.schedule import parse_schedule
from hermes_fs.service import cron_runner
from hermes_fs.service.scheduler import Scheduler, catch_up_runs, next_runs
from hermes_fs.store.claims import CronLedger
from hermes_fs.store.notify import Delivery
from hermes_fs.store.provenance import Act

UTC = ZoneInfo("UTC")
PARIS = ZoneInfo("Europe/Paris")


def job(name, schedule, tz=UTC, catch_up=True, enabled=True):
    return cron.CronJob(name=name, schedule=parse_schedule(schedule, tz), prompt="p", catch_up=catch_up, enabled=enabled)


class FakeClock:
    def __init__(self, start):
        self.t = start

    def now(self):
        return self.t

    def wait(self, event, seconds):
        return False


def scheduler(tmp_path, clock):
    fired = []
    s = Scheduler(CronLedger(tmp_path / "ledger.json"), lambda j, d: fired.append((j.name, d)), clock, start=inline)
    return s, fired


def inline(job, work):
    """Runs start in the calling thread: tests see them at once, no sleeping."""
    work()


def run_ticks(s, clock, until, step=timedelta(minutes=1)):
    while clock.t < until:
        clock.t += step
        s.tick(clock.t)


def test_fires_once_per_due_time(tmp_path):
    clock = FakeClock(datetime(2026, 11, 30, 6, 0, tzinfo=UTC))
    s, fired = scheduler(tmp_path, clock)
    s.jobs = {"brief": job("brief", "0 7 * * *")}
    s.tick(clock.t)  # first seen: only later times count
    run_ticks(s, clock, datetime(2026, 12, 2, 8, 0, tzinfo=UTC))
    assert [d.isoformat() for _n, d in fired] == ["2026-11-30T07:00:00+00:00", "2026-12-01T07:00:00+00:00",
                                                 "2026-12-02T07:00:00+00:00"]


def test_dst_spring_forward_and_fall_back(tmp_path):
    clock = FakeClock(datetime(2026, 3, 28, 12, 0, tzinfo=PARIS))
    s, fired = scheduler(tmp_path, clock)
    s.jobs = {"night": job("night", "30 2 * * *", PARIS)}
    s.tick(clock.t)
    run_ticks(s, clock, datetime(2026, 3, 30, 12, 0, tzinfo=PARIS), timedelta(minutes=5))
    days = [d.astimezone(PARIS).date().isoformat() for _n, d in fired]
    assert days == ["2026-03-29", "2026-03-30"]  # the nonexistent 02:30 still runs once
    clock.t = datetime(2026, 10, 24, 12, 0, tzinfo=PARIS)
    fired.clear()
    run_ticks(s, clock, datetime(2026, 10, 26, 12, 0, tzinfo=PARIS), timedelta(minutes=5))
    assert len([d for _n, d in fired if d.astimezone(PARIS).date().isoformat() == "2026-10-25"]) == 1  # 02:30 happens twice: one run


def test_month_ends(tmp_path):
    j = job("eom", "0 9 31 * *")
    due = j.next_run(datetime(2026, 11, 15, tzinfo=UTC), None)
    assert due == datetime(2026, 12, 31, 9, 0, tzinfo=UTC)  # November has no 31st
    j = job("feb", "0 0 29 2 *")
    assert j.next_run(datetime(2026, 3, 1, tzinfo=UTC), None).year == 2028


def test_catch_up_after_downtime_once_and_without_catch_up_waits(tmp_path):
    ledger = CronLedger(tmp_path / "ledger.json")
    a, b = job("a", "0 7 * * *"), job("b", "0 7 * * *", catch_up=False)
    for j in (a, b):
        ledger.mark(j.name, datetime(2026, 11, 27, 7, 0, tzinfo=UTC))
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)  # down for three days
    runs = catch_up_runs([a, b], ledger, now)
    assert [(d.job.name, d.due.isoformat()) for d in runs] == [("a", "2026-11-30T07:00:00+00:00")]
    assert ledger.last("b") == datetime(2026, 11, 30, 7, 0, tzinfo=UTC)  # skipped, waits for tomorrow
    assert b.schedule.previous_due(now, ledger.last("b")) is None


def test_no_double_run_after_restart(tmp_path):
    clock = FakeClock(datetime(2026, 11, 30, 6, 59, tzinfo=UTC))
    s, fired = scheduler(tmp_path, clock)
    s.jobs = {"brief": job("brief", "0 7 * * *")}
    s.tick(clock.t)
    clock.t = datetime(2026, 11, 30, 7, 0, 1, tzinfo=UTC)
    s.tick(clock.t)
    assert len(fired) == 1
    # a restart (a new scheduler on the same ledger), even mid-run: the same due time never fires again
    s2, fired2 = scheduler(tmp_path, clock)
    s2.jobs = dict(s.jobs)
    assert catch_up_runs(list(s2.jobs.values()), s2.ledger, clock.t) == []
    s2.tick(clock.t)
    assert fired2 == []


def test_interval_and_one_shot(tmp_path):
    clock = FakeClock(datetime(2026, 11, 30, 6, 0, tzinfo=UTC))
    s, fired = scheduler(tmp_path, clock)
    s.jobs = {"every": job("every", "every 30m"), "once": job("once", "at 2026-11-30T06:45:00+00:00")}
    s.tick(clock.t)
    run_ticks(s, clock, datetime(2026, 11, 30, 7, 40, tzinfo=UTC))
    names = [n for n, _d in fired]
    assert names.count("every") == 3 and names.count("once") == 1


def test_scheduler_thread_sleeps_until_due_and_wakes_on_update(tmp_path):
    fired = threading.Event()
    s = Scheduler(CronLedger(tmp_path / "ledger.json"), lambda j, d: fired.set())
    s.start([])
    soon = datetime.now(UTC) + timedelta(seconds=1.5)
    s.update([job("soon", f"at {soon.isoformat()}")])  # wakes the sleeping thread
    assert fired.wait(10)
    s.stop()


def test_a_schedule_that_never_fires_does_not_stop_the_others(tmp_path):
    """`0 0 30 2 *` is valid cron but February has no 30th: no next run, and the other jobs go on."""
    clock = FakeClock(datetime(2026, 11, 30, 6, 0, tzinfo=UTC))
    s, fired = scheduler(tmp_path, clock)
    never, brief = job("never", "0 0 30 2 *"), job("brief", "0 7 * * *")
    assert never.next_run(clock.t, None) is None
    s.jobs = {"never": never, "brief": brief}
    s.tick(clock.t)
    run_ticks(s, clock, datetime(2026, 11, 30, 7, 30, tzinfo=UTC))
    assert [n for n, _d in fired] == ["brief"]
    assert [d.job.name for d in s.plan(clock.t)] == ["brief"]


def test_a_job_still_running_is_not_started_again(tmp_path):
    clock = FakeClock(datetime(2026, 11, 30, 6, 0, tzinfo=UTC))
    started, errors = [], []
    s = Scheduler(CronLedger(tmp_path / "ledger.json"), lambda j, d: None, clock,
                  start=lambda j, work: started.append(work), on_error=errors.append)  # runs never finish
    s.jobs = {"slow": job("slow", "every 1m")}
    s.tick(clock.t)
    run_ticks(s, clock, datetime(2026, 11, 30, 6, 5, tzinfo=UTC))
    assert len(started) == 1 and any("still going" in e for e in errors)
    started[0]()  # the run ends: the next due time starts a new one
    run_ticks(s, clock, datetime(2026, 11, 30, 6, 7, tzinfo=UTC))
    assert len(started) == 2


def test_a_job_that_raises_in_the_scheduler_does_not_stop_the_others(tmp_path):
    clock = FakeClock(datetime(2026, 11, 30, 6, 0, tzinfo=UTC))
    errors = []
    s, fired = scheduler(tmp_path, clock)
    s.on_error = errors.append
    broken = job("broken", "every 1m")
    object.__setattr__(broken.schedule, "interval", "not a timedelta")  # a bug, as a bad file might cause
    s.jobs = {"broken": broken, "brief": job("brief", "0 7 * * *")}
    s.tick(clock.t)
    run_ticks(s, clock, datetime(2026, 11, 30, 7, 1, tzinfo=UTC))
    assert [n for n, _d in fired] == ["brief"] and errors


def test_status_cron_list_and_scheduler_agree_on_the_next_run(vault, run_cli):
    """An `every 30m` job last run at 11:50: at 12:00 every view says 12:20."""
    (vault.root / "cron" / "half.md").write_text("---\nschedule: every 30m\n---\nTick.\n")
    jobs, errors = cron.load_jobs(vault.files, vault.config)
    assert not errors
    ledger = CronLedger(vault.state_dir / "cron-ledger.json")
    now = datetime.now(UTC).replace(microsecond=0)
    ledger.mark("half", now - timedelta(minutes=10))
    expected = now + timedelta(minutes=20)
    assert next_runs(vault, jobs, now)["half"] == expected
    s = Scheduler(ledger, lambda j, d: None)
    s.jobs = {j.name: j for j in jobs}
    assert [d.due for d in s.plan(now) if d.job.name == "half"] == [expected]
    import json

    listed = {r["job"]: r for r in json.loads(run_cli("cron", "list", "--json", "--vault", str(vault.root)).stdout)}
    status = {r["job"]: r for r in json.loads(run_cli("status", "--json", "--vault", str(vault.root)).stdout)["cron"]}
    assert listed["half"]["next_run"] == status["half"]["next_run"] == expected.isoformat()


@pytest.fixture
def cron_vault(agent_vault, receiver):
    cfg = (agent_vault.root / "hermes.yaml").read_text()
    cfg += f"notify:\n  targets: {{desk: '{receiver.url('desk')}', dead: 'json://127.0.0.1:9/x'}}\n"
    (agent_vault.root / "hermes.yaml").write_text(cfg)
    agent_vault.git.commit_paths(["hermes.yaml"], "notify", Act.person())
    agent_vault._config = None
    return agent_vault


def write_job(vault, name, schedule, notify="[desk]", extra=""):
    (vault.root / "cron" / f"{name}.md").write_text(
        f"---\nschedule: \"{schedule}\"\nnotify: {notify}\n{extra}---\nSay something useful.\n")
    jobs, errors = cron.load_jobs(vault.files, vault.config)
    assert not errors, errors
    return {j.name: j for j in jobs}[name]


def test_run_job_stores_commits_and_delivers(cron_vault, model_server, receiver):
    model_server.add({"content": "Three things to do today."})
    j = write_job(cron_vault, "brief", "every day at 07:00")
    run = cron_runner.run_job(cron_vault, j, datetime(2026, 11, 30, 7, tzinfo=UTC))
    assert run.status == "ok" and run.delivered == [Delivery("desk", True)]
    assert run.rel == "outputs/cron/brief/20261130-070000.md" and run.session and run.tokens
    [got] = receiver.received
    assert got["body"]["message"] == "Three things to do today." and "brief" in got["body"]["title"]
    out = cron_vault.root / "outputs/cron/brief/20261130-070000.md"
    assert "Three things to do today." in out.read_text() and "tokens:" in out.read_text()
    info = cron_vault.git.commit_info("HEAD")
    assert info.summary == "cron: brief (ok)" and info.trailers == {"Hermes-Job": "brief"}


def test_silent_result_is_stored_not_sent(cron_vault, model_server, receiver):
    model_server.add({"content": "Nothing today. [SILENT]"})
    j = write_job(cron_vault, "quiet", "every 2h")
    run = cron_runner.run_job(cron_vault, j, datetime(2026, 11, 30, 8, tzinfo=UTC))
    assert run.silent is True and receiver.received == []
    assert "[SILENT]" in (cron_vault.root / "outputs/cron/quiet/20261130-080000.md").read_text()


def test_failing_model_is_stored_and_sent_as_failure(cron_vault, model_server, receiver):
    model_server.add({"status": 400, "body": {"error": {"message": "model exploded", "type": "invalid_request_error"}}})
    j = write_job(cron_vault, "broken", "every 2h")
    run = cron_runner.run_job(cron_vault, j, datetime(2026, 11, 30, 9, tzinfo=UTC))
    assert run.status == "error" and "model exploded" in run.error
    assert "failed" in receiver.received[0]["body"]["title"] and "model exploded" in receiver.received[0]["body"]["message"]
    assert cron_vault.git.commit_info("HEAD").summary == "cron: broken (error)"


def test_unreachable_target_is_recorded(cron_vault, model_server, receiver):
    model_server.add({"content": "hello"})
    j = write_job(cron_vault, "both", "every 2h", notify="[desk, dead]")
    run = cron_runner.run_job(cron_vault, j, datetime(2026, 11, 30, 10, tzinfo=UTC), retry_base_s=0.01)
    assert {d.target: d.ok for d in run.delivered} == {"desk": True, "dead": False}
    assert "target: dead" in (cron_vault.root / "outputs/cron/both/20261130-100000.md").read_text()
    # read back from the file, as `cron list` does: the same record
    again = cron_runner.last_runs(cron_vault)["both"]
    assert (again.status, again.rel, [d.target for d in again.delivered]) == ("ok", run.rel, ["desk", "dead"])
    assert again.delivered[1].error and not again.delivered[1].ok


def test_an_unexpected_error_keeps_its_traceback_then_writes_the_error_result(cron_vault, model_server, receiver,
                                                                               caplog):
    """A bug (here: sessions/<year> is a file, so the transcript cannot be created) is logged with
    its traceback before the error result is stored, committed and sent."""
    (cron_vault.root / "sessions").mkdir(exist_ok=True)
    (cron_vault.root / "sessions" / f"{datetime.now(UTC):%Y}").write_text("not a folder\n")
    j = write_job(cron_vault, "buggy", "every 2h")
    with caplog.at_level("ERROR", logger="hermes_fs"):
        run = cron_runner.run_job(cron_vault, j, datetime(2026, 11, 30, 11, tzinfo=UTC))
    [record] = [r for r in caplog.records if r.name == "hermes_fs.service.cron_runner"]
    assert record.exc_info and "cron buggy: unexpected error" in record.getMessage()
    assert "mkdir" in caplog.text and "Traceback" in caplog.text
    assert run.status == "error" and run.error.startswith("unexpected ") and "traceback in" in run.error
    out = (cron_vault.root / run.rel).read_text()
    assert "status: error" in out and "unexpected" in out
    assert cron_vault.git.commit_info("HEAD").summary == "cron: buggy (error)"
    assert "failed" in receiver.received[0]["body"]["title"]


@pytest.mark.slow
def test_one_shot_in_the_real_daemon_delivers_and_disables_itself(cron_vault, model_server, receiver):
    from conftest import DaemonProc, wait_for

    model_server.add({"content": "Reminder: stand up and stretch."})
    due = (datetime.now(UTC) + timedelta(seconds=4)).replace(microsecond=0)
    d = DaemonProc(cron_vault.root)
    try:
        (cron_vault.root / "cron" / "stretch.md").write_text(
            f"---\nschedule: \"at {due.isoformat()}\"\nnotify: [desk]\n---\nRemind me to stretch.\n")
        assert wait_for(lambda: receiver.received, 40)
        assert receiver.received[0]["body"]["message"] == "Reminder: stand up and stretch."
        assert wait_for(lambda: git(cron_vault, "log", "-1", "--format=%s").strip() == "cron: stretch (ok)", 20)
        assert "enabled: false" in (cron_vault.root / "cron/stretch.md").read_text()
        assert f"outputs/cron/stretch/{due:%Y%m%d-%H%M%S}.md" in git(cron_vault, "ls-files", "outputs")
    finally:
        d.stop()
    assert len(receiver.received) == 1


@pytest.mark.slow
def test_cli_cron_list_and_run(cron_vault, model_server, receiver, run_cli):
    write_job(cron_vault, "brief", "0 7 * * 1-5")
    (cron_vault.root / "cron" / "bad.md").write_text("---\nschedule: nope\n---\nx\n")
    r = run_cli("--vault", str(cron_vault.root), "cron", "list")
    row = next(line for line in r.stdout.splitlines() if line.startswith("brief "))
    assert "cron '0 7 * * 1-5'" in row and "  20" in row
    assert "cron/bad.md" in r.stderr and "bad schedule" in r.stderr and r.returncode == 1  # errors: not a success
    model_server.add({"content": "manual run"})
    r = run_cli("--vault", str(cron_vault.root), "cron", "run", "brief")
    assert r.returncode == 0 and "brief: ok" in r.stdout
    assert receiver.received[0]["body"]["message"] == "manual run"
    assert run_cli("--vault", str(cron_vault.root), "cron", "run", "nope").returncode == 2


def test_a_one_shot_job_disabling_itself_keeps_a_persons_pending_edit_as_theirs(cron_vault, model_server, receiver):
    """The person edits the job file while it runs: their text is committed as their edit first,
    the job's commit holds only `enabled: false` (issue 22: no read-modify-write outside the lock)."""
    model_server.add({"content": "Stretched."})
    j = write_job(cron_vault, "stretch", "at 2026-11-30T19:56:54+00:00")
    cron_vault.git.commit_human_edits(["cron/stretch.md"])
    p = cron_vault.root / "cron/stretch.md"
    p.write_text(p.read_text() + "Also drink some water.\n")  # saved by the person, not committed
    run = cron_runner.run_job(cron_vault, j, datetime(2026, 11, 30, 19, 56, 54, tzinfo=UTC))
    assert run.status == "ok"
    text = p.read_text()
    assert "Also drink some water.\n" in text and "enabled: false" in text
    log = git(cron_vault, "log", "-2", "--format=%s|%an", "--", "cron/stretch.md").splitlines()
    assert log[0].startswith("cron: stretch (ok)|") and log[1].startswith("edit: cron/stretch.md|"), log
    job_diff = git(cron_vault, "show", "HEAD", "--format=", "--", "cron/stretch.md")
    assert "+enabled: false" in job_diff and "+Also drink" not in job_diff
    person = git(cron_vault, "show", "HEAD~1", "--format=", "--", "cron/stretch.md")
    assert "+Also drink some water." in person
    assert git(cron_vault, "status", "--porcelain", "--", "cron").strip() == ""


def test_notify_attach_pdf_goes_where_a_target_takes_attachments_and_text_elsewhere(cron_vault, model_server, receiver):
    import base64
    import io

    from pypdf import PdfReader

    cfg = (cron_vault.root / "hermes.yaml").read_text().replace(
        "dead: 'json://127.0.0.1:9/x'", f"nofiles: 'gotify://127.0.0.1:{receiver.port}/AbCdEfGhIjKlMnO'")
    (cron_vault.root / "hermes.yaml").write_text(cfg)
    cron_vault.git.commit_paths(["hermes.yaml"], "notify", Act.person())
    cron_vault._config = None
    model_server.add({"content": "# Weekly report\n\n- builds: **green**\n- <script>x</script>"})
    j = write_job(cron_vault, "weekly", "every day at 07:00", notify="[desk, nofiles]", extra="notify_attach: pdf\n")
    run = cron_runner.run_job(cron_vault, j, datetime(2026, 11, 30, 7, tzinfo=UTC))
    assert run.ok and [(d.target, d.ok, d.attached) for d in run.delivered] == [("desk", True, True),
                                                                                ("nofiles", True, False)]
    desk = next(r for r in receiver.received if r["path"] == "/desk")["body"]
    [pdf] = desk["attachments"]  # Apprise's json:// carries the file, base64
    assert pdf["filename"] == "weekly-20261130070000.pdf" and pdf["mimetype"] == "application/pdf"
    data = base64.b64decode(pdf["base64"])
    text = PdfReader(io.BytesIO(data)).pages[0].extract_text()
    assert "Weekly report" in text and "green" in text and "<script>x</script>" in text
    assert desk["message"].startswith("# Weekly report")  # the text goes too
    plain = next(r for r in receiver.received if r["path"].startswith("/message"))["body"]  # gotify: text only
    assert "Weekly report" in plain["message"] and "attachments" not in plain
    out = (cron_vault.root / run.rel).read_text()
    assert "attached: true" in out and "attached: false" in out
    assert not any((cron_vault.state_dir / "outbox").rglob("*.pdf"))  # the PDF is not kept, nor committed
    assert not any(p.endswith(".pdf") for p in cron_vault.git.changed_under("outputs"))


def test_notify_attach_takes_only_pdf_and_a_failed_run_sends_text(cron_vault, model_server, receiver):
    (cron_vault.root / "cron" / "bad.md").write_text("---\nschedule: every 2h\nnotify_attach: docx\n---\nHi\n")
    _, errors = cron.load_jobs(cron_vault.files, cron_vault.config)
    assert any("'notify_attach' must be pdf" in str(e) for e in errors)
    (cron_vault.root / "cron" / "bad.md").unlink()
    model_server.add({"status": 400, "body": {"error": {"message": "model exploded", "type": "invalid_request_error"}}})
    j = write_job(cron_vault, "broken", "every 2h", extra="notify_attach: pdf\n")
    run = cron_runner.run_job(cron_vault, j, datetime(2026, 11, 30, 9, tzinfo=UTC))
    assert run.status == "error" and run.delivered[0].attached is None
    assert "attachments" not in receiver.received[0]["body"] or not receiver.received[0]["body"]["attachments"]
