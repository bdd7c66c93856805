"""Schedules for cron jobs: 5-field cron, `every 30m|2h|1d`, `every day at 07:00`,
`every monday at 09:00`, and one-shot `at <ISO time>`. Times are timezone-aware; croniter does
the calendar arithmetic (DST, month ends)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..errors import InputError

DAYS = ["sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"]
_EVERY = re.compile(r"^every\s+(\d+)\s*(m|min|mins|minutes?|h|hours?|d|days?)$")
_EVERY_AT = re.compile(r"^every\s+(day|weekday|" + "|".join(DAYS) + r")\s+at\s+(\d{1,2}):(\d{2})$")
_UNIT_SECONDS = {"m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Schedule:
    text: str
    tz: ZoneInfo
    cron: str | None = None  # a 5-field expression
    interval: timedelta | None = None  # every N units, anchored to the last run
    at: datetime | None = None  # one-shot

    def next_due(self, now: datetime, last: datetime | None) -> datetime | None:
        """The next due time after `now`, given the last due time that ran (or None); a one-shot
        that has not run yet is owed, so its time is returned even when it has passed (the
        scheduler runs it at once, on start too).

        The one computation behind the scheduler, `status` and `cron list`, so they always agree.
        Intervals are anchored to the last run; a job never seen starts counting from now.
        """
        if self.at is not None:
            return self.at if last is None or last < self.at else None
        if self.interval is not None:
            due = (last or now) + self.interval
            while due <= now:
                due += self.interval
            return due
        return self._cron_next(now)

    def previous_due(self, now: datetime, last: datetime | None) -> datetime | None:
        """The latest due time <= now that has not run yet (None if none)."""
        if self.at is not None:
            return self.at if self.at <= now and (last is None or last < self.at) else None
        if self.interval is not None:
            if last is None:
                return None  # first start: the interval counts from now
            due = last + self.interval
            return due if due <= now else None
        from croniter import CroniterBadDateError, croniter

        try:
            prev = croniter(self.cron, now.astimezone(self.tz)).get_prev(datetime)
        except CroniterBadDateError:
            return None
        if last is None or prev <= last:
            return None if last is not None else prev
        if _wall(prev, self.tz) == _wall(last, self.tz):
            return None  # the repeated hour when clocks fall back: 02:30 happens twice, the job runs once
        return prev

    def _cron_next(self, after: datetime) -> datetime | None:
        from croniter import CroniterBadDateError, croniter

        try:
            return croniter(self.cron, after.astimezone(self.tz)).get_next(datetime)
        except CroniterBadDateError:  # a valid expression that never fires (e.g. 30 February)
            return None

    def describe(self) -> str:
        """In words: `every day at 07:00 (Europe/Paris)`, `every 30 minutes`,
        `at 07:00, Monday through Friday (UTC; cron '0 7 * * 1-5')`."""
        if self.at is not None:
            return f"once at {self.at.isoformat(timespec='minutes')}"
        if self.interval is not None:
            return f"every {_human(self.interval)}"
        written = " ".join(self.text.strip().lower().split())
        if written.startswith("every "):
            return f"{written} ({self.tz.key})"
        return f"{_cron_words(self.cron)}({self.tz.key}; cron '{self.cron}')"


def _cron_words(expr: str | None) -> str:
    """`0 7 * * 1-5` -> `at 07:00, Monday through Friday ` (cron-descriptor); empty when it cannot say."""
    try:
        from cron_descriptor import Options, get_description

        options = Options()
        options.use_24hour_time_format = True
        words = get_description(expr or "", options)
    except Exception:  # an expression croniter takes but the describer does not: the expression says it
        return ""
    return words[:1].lower() + words[1:] + " "


def _wall(t: datetime, tz) -> datetime:
    return t.astimezone(tz).replace(tzinfo=None, fold=0)


def _human(delta: timedelta) -> str:
    s = int(delta.total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if s % size == 0:
            n = s // size
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{s} seconds"


def zone(name: str, where: str | None = None) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise InputError(f"unknown timezone {name!r} (use an IANA name like Europe/Paris)", where) from None


def parse_schedule(text: str, tz: ZoneInfo, where: str | None = None) -> Schedule:
    if not isinstance(text, str) or not text.strip():
        raise InputError("schedule is missing or empty", where)
    s = " ".join(text.strip().lower().split())
    if s.startswith("at "):
        try:
            when = datetime.fromisoformat(text.strip()[3:].strip())
        except ValueError:
            raise InputError(f"bad one-shot time in {text!r}: use 'at 2026-12-01T09:00'", where) from None
        return Schedule(text, tz, at=when if when.tzinfo else when.replace(tzinfo=tz))
    if m := _EVERY.match(s):
        n = int(m.group(1))
        if n <= 0:
            raise InputError(f"interval must be positive in {text!r}", where)
        return Schedule(text, tz, interval=timedelta(seconds=n * _UNIT_SECONDS[m.group(2)[0]]))
    if m := _EVERY_AT.match(s):
        day, hour, minute = m.group(1), int(m.group(2)), int(m.group(3))
        if hour > 23 or minute > 59:
            raise InputError(f"bad time of day in {text!r}", where)
        dow = {"day": "*", "weekday": "1-5"}.get(day, str(DAYS.index(day)) if day in DAYS else "*")
        return Schedule(text, tz, cron=f"{minute} {hour} * * {dow}")
    from croniter import croniter

    if len(s.split()) == 5 and croniter.is_valid(s):
        return Schedule(text, tz, cron=s)
    raise InputError(
        f"bad schedule {text!r}: use 5 cron fields ('0 7 * * 1-5'), 'every 30m', 'every day at 07:00', "
        "'every monday at 09:00' or 'at 2026-12-01T09:00'",
        where,
    )
