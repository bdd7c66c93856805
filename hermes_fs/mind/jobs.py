"""Cron job files, `cron/<job>.md`: frontmatter is the schedule and settings, the body is the prompt.

A bad file is reported with its name and reason and never stops the other jobs from loading.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

from ..store.config import Config
from ..store.docs import decode, parse_doc
from ..errors import InputError
from ..store.files import FileStore
from .schedule import Schedule, parse_schedule, zone

CRON_DIR = "cron"
FIELDS = {"schedule", "timezone", "notify", "enabled", "skills", "model", "catch_up"}


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

    @property
    def path(self) -> str:
        return f"{CRON_DIR}/{self.name}.md"

    def next_run(self, now: datetime, last_run: datetime | None = None) -> datetime | None:
        return self.schedule.next_after(now, last_run) if self.enabled else None


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
    )


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


# -- running a job ------------------------------------------------------------------------------
OUTPUTS_DIR = "outputs/cron"
SILENT = "[SILENT]"
DELIVERY_TRIES = 3


def output_rel(job: CronJob, due: datetime) -> str:
    return f"{OUTPUTS_DIR}/{job.name}/{due.astimezone(timezone.utc):%Y%m%d-%H%M%S}.md"


def run_job(vault, job: CronJob, due: datetime, retry_base_s: float = 1.0) -> dict:
    """One run: an agent run with the job's prompt and skills; deliver; store and commit the output.

    Returns the output's frontmatter. A failure is stored (status: error) and sent as cron_failure;
    a delivery failure is retried a few times, then recorded in the output file.
    """
    import time as _time

    from ..agent.conversation import Conversation, ConversationOptions
    from ..store.docs import dump_doc
    from ..store.notify import Notifier

    started = datetime.now(timezone.utc)
    meta = {"status": "ok", "job": job.name, "due": due.isoformat(), "started": started.isoformat(timespec="seconds")}
    body = ""
    try:
        options = ConversationOptions(source="cron", task="cron", model=job.model, skills=job.skills)
        with Conversation(vault, options) as conv:
            result = conv.ask(job.prompt)
        meta.update(model=conv.model.name, tokens=result.usage.total_tokens, session=conv.id)
        body = result.answer
    except Exception as exc:  # a failed run is stored and reported, never lost
        meta["status"] = "error"
        meta["error"] = str(exc)
        body = f"The job failed: {exc}"
    notifier = Notifier(vault.config, vault.state_dir / "secrets.env")
    event = "cron_failure" if meta["status"] == "error" else "cron_output"
    deliveries = []
    if meta["status"] == "ok" and SILENT in body:
        meta["silent"] = True
    elif job.notify and event in vault.config.notify.events:
        for target in job.notify:
            for attempt in range(DELIVERY_TRIES):
                [d] = notifier.send([target], f"hermes-fs: {job.name}" + (" failed" if event == "cron_failure" else ""), body)
                if d.ok or attempt == DELIVERY_TRIES - 1:
                    break
                _time.sleep(retry_base_s * 2 ** attempt)
            deliveries.append(d.as_dict())
    meta["delivered"] = deliveries
    meta["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    rel = output_rel(job, due)
    target = vault.root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    from ..store.secrets import redact

    target.write_text(redact(dump_doc(meta, f"\n{body.strip()}\n"))[0], encoding="utf-8")  # outputs are committed
    paths = [rel]
    if job.schedule.at is not None:
        paths.append(disable_job(vault, job))
    vault.git.commit_paths(paths, f"cron: {job.name} ({meta['status']})", {"Hermes-Job": job.name})
    return meta


def disable_job(vault, job: CronJob) -> str:
    """A one-shot job turns itself off after it ran: `enabled: false` in its frontmatter."""
    import re

    p = vault.root / job.path
    text = p.read_text(encoding="utf-8")
    doc = parse_doc(text, job.path, required=True)
    head, body = text[: doc.body_start], text[doc.body_start :]
    if re.search(r"^enabled:.*$", head, re.M):
        head = re.sub(r"^enabled:.*$", "enabled: false", head, count=1, flags=re.M)
    else:
        close = head.rfind("---")  # the closing fence of the frontmatter
        head = head[:close] + "enabled: false\n" + head[close:]
    p.write_text(head + body, encoding="utf-8")
    return job.path


def last_runs(vault) -> dict[str, dict]:
    """job -> the frontmatter of its newest committed or written output (for `cron list`)."""
    out = {}
    base = vault.root / OUTPUTS_DIR
    if not base.is_dir():
        return out
    for d in base.iterdir():
        files = sorted(d.glob("*.md"))
        if files:
            try:
                out[d.name] = parse_doc(files[-1].read_text(encoding="utf-8"), str(files[-1])).meta
            except InputError:
                continue
    return out
