from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from hermes_fs.errors import InputError
from hermes_fs.mind import jobs as cron
from hermes_fs.mind.schedule import parse_schedule
from hermes_fs.store.config import parse_config

UTC = ZoneInfo("UTC")
PARIS = ZoneInfo("Europe/Paris")


def test_schedule_forms():
    now = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
    assert parse_schedule("0 7 * * 1-5", UTC).next_due(now, None) == datetime(2026, 11, 30, 7, 0, tzinfo=UTC)
    assert parse_schedule("every day at 07:00", UTC).cron == "0 7 * * *"
    assert parse_schedule("every monday at 09:00", UTC).cron == "0 9 * * 1"
    s = parse_schedule("every 30m", UTC)
    assert s.interval == timedelta(minutes=30)
    assert s.next_due(now, now - timedelta(minutes=10)) == now + timedelta(minutes=20)
    assert parse_schedule("every 2h", UTC).describe() == "every 2 hours"
    once = parse_schedule("at 2026-12-01T09:00", PARIS)
    assert once.next_due(now, None) == datetime(2026, 12, 1, 9, 0, tzinfo=PARIS)
    late = datetime(2026, 12, 2, tzinfo=UTC)  # past, never run: owed, due at its time (runs at once)
    assert once.next_due(late, None) == datetime(2026, 12, 1, 9, 0, tzinfo=PARIS)
    assert once.next_due(late, datetime(2026, 12, 1, 9, 0, tzinfo=PARIS)) is None  # ran: no next


def test_dst_spring_forward_is_handled_by_croniter():
    s = parse_schedule("30 2 * * *", PARIS)  # 02:30 does not exist on 2026-03-29 in Paris
    first = s.next_due(datetime(2026, 3, 28, 12, 0, tzinfo=PARIS), None)
    second = s.next_due(first, None)
    assert first.date().isoformat() == "2026-03-29" and second.date().isoformat() == "2026-03-30"


@pytest.mark.parametrize("bad", ["", "61 * * * *", "* * * *", "0 0 * * * *", "every 0m", "every day at 25:00",
                                 "at tomorrow", "whenever"])
def test_bad_schedules(bad):
    with pytest.raises(InputError):
        parse_schedule(bad, UTC, "cron/x.md")


def test_invalid_job_among_valid_ones(vault):
    cfg = parse_config("notify:\n  targets: {phone: '${PHONE}'}\n")
    (vault.root / "cron" / "good.md").write_text("---\nschedule: every 2h\nnotify: [phone]\n---\nSay hi.\n")
    (vault.root / "cron" / "bad-cron.md").write_text("---\nschedule: '99 * * * *'\n---\nHi\n")
    (vault.root / "cron" / "unknown-field.md").write_text("---\nschedule: every 2h\nfrequency: often\n---\nHi\n")
    (vault.root / "cron" / "raw-url.md").write_text("---\nschedule: every 2h\nnotify: ['tgram://x/y']\n---\nHi\n")
    (vault.root / "cron" / "no-frontmatter.md").write_text("just text\n")
    (vault.root / "cron" / "bad-tz.md").write_text("---\nschedule: every 2h\ntimezone: Mars/Olympus\n---\nHi\n")
    jobs, errors = cron.load_jobs(vault.files, cfg)
    assert sorted(j.name for j in jobs) == ["good", "morning-brief"]
    text = "\n".join(str(e) for e in errors)
    assert len(errors) == 5
    for name, reason in [("bad-cron", "bad schedule"), ("unknown-field", "frequency"), ("raw-url", "never a raw URL"),
                         ("no-frontmatter", "missing YAML frontmatter"), ("bad-tz", "unknown timezone")]:
        assert f"cron/{name}.md" in text and reason in text


def test_disabled_job_has_no_next_run(vault):
    jobs, errors = cron.load_jobs(vault.files, vault.config)
    assert not errors
    (brief,) = jobs
    assert brief.enabled is False and brief.next_run(datetime.now(UTC), None) is None
