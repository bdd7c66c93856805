"""Cron job files, `cron/<job>.md`: frontmatter is the schedule and settings, the body is the prompt.

Running a job is the service layer's business (service/cron_runner.py); this module only reads files.

A bad file is reported with its name and reason and never stops the other jobs from loading.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from ..errors import InputError
from ..store.config import Config
from ..store.docs import decode, parse_doc
from ..store.files import FileStore
from .schedule import Schedule, parse_schedule, zone

CRON_DIR = "cron"
FIELDS = {"schedule", "timezone", "notify", "notify_attach", "enabled", "skills", "model", "catch_up", "mcp", "host"}
ATTACH_KINDS = ("pdf",)  # notify_attach: what a job's output is attached as, where a target takes attachments


@dataclass
class CronJob:
    name: str
    schedule: Schedule
    prompt: str
    enabled: bool = True
    notify: list[str] = field(default_factory=list)
    skills: list[str] = field(default_factory=list)
    model: str | None = None
    catch_up: bool = True
    mcp: list[str] | None = None  # the MCP servers (of hermes.yaml mcp.servers) this job uses; None: all
    host: str | None = None  # only the machine with this host id runs it (`Hermes-Host`, store/host.py)
    notify_attach: str | None = None  # "pdf": the output also goes as a PDF to targets that take attachments

    @property
    def path(self) -> str:
        return f"{CRON_DIR}/{self.name}.md"

    def next_run(self, now: datetime, last: datetime | None) -> datetime | None:
        """When it runs next, given the last due time that ran (the scheduler's ledger)."""
        return self.schedule.next_due(now, last) if self.enabled else None


def parse_job(name: str, text: str, config: Config) -> CronJob:
    path = f"{CRON_DIR}/{name}.md"
    doc = parse_doc(text, path, required=True)
    meta = doc.meta
    unknown = set(meta) - FIELDS
    if unknown:
        raise InputError(f"unknown field(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(FIELDS))})", path)
    tz = zone(meta.get("timezone") or config.cron.timezone, path)
    enabled = _typed(meta, "enabled", bool, True, path)
    catch_up = _typed(meta, "catch_up", bool, config.cron.catch_up, path)
    notify = _str_list(meta, "notify", path)
    for target in notify:
        if "://" in target:
            raise InputError("notify takes target names from hermes.yaml, never a raw URL", path)
        if target not in config.notify.targets:
            raise InputError(f"notify target {target!r} is not defined in hermes.yaml notify.targets", path)
    model = meta.get("model")
    if model is not None and not isinstance(model, str):
        raise InputError("'model' must be a string or null", path)
    if not doc.body.strip():
        raise InputError("the job has no prompt (the body after the frontmatter is empty)", path)
    return CronJob(
        name=name,
        schedule=parse_schedule(str(meta.get("schedule") or ""), tz, path),
        prompt=doc.body.strip(),
        enabled=enabled,
        notify=notify,
        skills=_str_list(meta, "skills", path),
        model=model,
        catch_up=catch_up,
        mcp=_mcp_servers(meta, config, path),
        host=_host(meta, path),
        notify_attach=_attach(meta, path),
    )


def _attach(meta: dict, path: str) -> str | None:
    value = meta.get("notify_attach")
    if value is None or value is False:
        return None
    if value not in ATTACH_KINDS:
        raise InputError(f"'notify_attach' must be {' or '.join(ATTACH_KINDS)} (or left out), got {value!r}", path)
    return str(value)


def _host(meta: dict, path: str) -> str | None:
    """`host: <id>`: the job is pinned to the machine with that host id (see store/host.py)."""
    from ..store.host import valid_host

    value = meta.get("host")
    if value is None:
        return None
    if not isinstance(value, str) or not valid_host(value):
        raise InputError(f"'host' must be a machine's host id (lowercase letters, digits, hyphens), got {value!r}", path)
    return value


def _mcp_servers(meta: dict, config: Config, path: str) -> list[str] | None:
    if "mcp" not in meta:
        return None
    names = _str_list(meta, "mcp", path)
    unknown = [n for n in names if n not in config.mcp.servers]
    if unknown:
        raise InputError(f"mcp server(s) {', '.join(unknown)} not defined in hermes.yaml mcp.servers", path)
    barred = [n for n in names if not config.mcp.servers[n].unattended]
    if barred:  # a job runs unattended: it gets only servers hermes.yaml lets run so
        raise InputError(f"mcp server(s) {', '.join(barred)} may not run unattended; a person allows it with "
                         f"`unattended: true` under mcp.servers.{barred[0]} in hermes.yaml", path)
    return names


def _typed(meta: dict, key: str, kind: type, default, path: str):
    value = meta.get(key, default)
    if value is None:
        return default
    if not isinstance(value, kind):
        raise InputError(f"'{key}' must be {kind.__name__}, got {value!r}", path)
    return value


def _str_list(meta: dict, key: str, path: str) -> list[str]:
    value = meta.get(key) or []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"'{key}' must be a list of names", path)
    return value


def load_jobs(files: FileStore, config: Config) -> tuple[list[CronJob], list[InputError]]:
    """All job files; each bad one becomes an error entry while the rest still load."""
    jobs, errors = [], []
    for rel in files.list(CRON_DIR):
        if not rel.endswith(".md") or rel.count("/") != 1:
            continue
        name = rel[len(CRON_DIR) + 1 : -3]
        try:
            jobs.append(parse_job(name, decode(files.read(rel) or b"", rel), config))
        except InputError as exc:
            errors.append(exc)
    return jobs, errors


_JOB_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_ENABLED_LINE = re.compile(r"^enabled:[ \t]*[^#\r\n]*?([ \t]+#[^\r\n]*)?$", re.M)


def check_job_name(name: str) -> str:
    """A job's name is its file name under cron/: lowercase letters, digits, `-` and `_`."""
    if not _JOB_NAME.fullmatch(name or ""):
        raise InputError(f"a job name is lowercase letters, digits, '-' and '_' (at most 64), got {name!r}")
    return name


def with_enabled(text: str, enabled: bool, path: str) -> str:
    """The job file with `enabled:` set, every other byte (comments, order, the prompt) kept."""
    doc = parse_doc(text, path, required=True)
    front_end = text.rfind("---", 0, doc.body_start)  # the closing delimiter
    front = text[:front_end]
    value = "true" if enabled else "false"
    if _ENABLED_LINE.search(front):
        front = _ENABLED_LINE.sub(lambda m: f"enabled: {value}{m.group(1) or ''}", front, count=1)
    else:
        nl = "\r\n" if "\r\n" in front else "\n"
        front = front + ("" if front.endswith(("\n", "\r\n")) else nl) + f"enabled: {value}{nl}"
    return front + text[front_end:]


def job_text(schedule: str, prompt: str, notify: list[str], enabled: bool = True) -> str:
    """A new job file: the fields a person sets most, then the prompt."""
    import yaml

    meta = {"schedule": schedule, "notify": list(notify), "enabled": enabled}
    front = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, default_flow_style=None)
    return f"---\n{front}---\n{prompt.strip()}\n"
