"""Running one cron job: an agent run with the job's prompt and skills, delivery through Apprise,
and the output stored under outputs/cron/<job>/ and committed (`Hermes-Job: <job>`).

Deliveries are made before the output is written, so the file records them in the same commit.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

from ..agent.conversation import Conversation, ConversationOptions
from ..errors import InputError
from ..mind.jobs import CronJob
from ..store.docs import dump_doc, parse_doc
from ..store.files import atomic_write
from ..store.secrets import redact
from ..store.vault import Vault

OUTPUTS_DIR = "outputs/cron"
SILENT = "[SILENT]"
DELIVERY_TRIES = 3


def output_rel(job: CronJob, due: datetime) -> str:
    return output_path(job.name, due)


def output_path(job_name: str, due: datetime) -> str:
    """Where the run of `job_name` due at `due` is stored: one file per due time, on every machine."""
    return f"{OUTPUTS_DIR}/{job_name}/{due.astimezone(UTC):%Y%m%d-%H%M%S}.md"


def run_job(vault: Vault, job: CronJob, due: datetime, retry_base_s: float = 1.0) -> dict:
    """One run: ask, deliver, store and commit the output. Returns the output's frontmatter.

    A failure is stored (status: error) and sent as cron_failure; a delivery failure is retried a
    few times, then recorded in the output file.
    """
    started = datetime.now(UTC)
    meta: dict = {"status": "ok", "job": job.name, "due": due.isoformat(),
                  "started": started.isoformat(timespec="seconds")}
    body = ""
    paths: list[str] = []
    try:
        options = ConversationOptions(source="cron", task="cron", model=job.model, skills=job.skills,
                                      commit_on_end=False, mcp_servers=job.mcp)  # one commit per run: output and transcript together
        with Conversation(vault, options) as conv:
            paths.append(conv.transcript.rel)
            result = conv.ask(job.prompt)
        meta.update(model=conv.model.name, tokens=result.usage.total_tokens, session=conv.id)
        body = result.answer
    except Exception as exc:  # a failed run is stored and reported, never lost
        meta["status"] = "error"
        meta["error"] = str(exc)
        body = f"The job failed: {exc}"
    meta["delivered"] = deliver(vault, job, meta, body, retry_base_s)
    meta["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    rel = output_rel(job, due)
    atomic_write(vault.root / rel, redact(dump_doc(meta, f"\n{body.strip()}\n"))[0])  # outputs are committed
    paths.insert(0, rel)
    if job.schedule.at is not None:
        paths.append(disable_job(vault, job))
    vault.git.commit_paths(paths, f"cron: {job.name} ({meta['status']})", {"Hermes-Job": job.name},
                           author=vault.config.git.author)
    return meta


def deliver(vault: Vault, job: CronJob, meta: dict, body: str, retry_base_s: float) -> list[dict]:
    """Send the result to the job's targets (unless [SILENT]); each target's outcome, for the file."""
    event = "cron_failure" if meta["status"] == "error" else "cron_output"
    if meta["status"] == "ok" and SILENT in body:
        meta["silent"] = True
        return []
    if not job.notify or event not in vault.config.notify.events:
        return []
    title = f"hermes-fs: {job.name}" + (" failed" if event == "cron_failure" else "")
    deliveries = []
    for target in job.notify:
        for attempt in range(DELIVERY_TRIES):
            [d] = vault.notifier.send([target], title, body)
            if d.ok or attempt == DELIVERY_TRIES - 1:
                break
            time.sleep(retry_base_s * 2**attempt)
        deliveries.append(d.as_dict())
    return deliveries


def disable_job(vault: Vault, job: CronJob) -> str:
    """A one-shot job turns itself off after it ran: `enabled: false` in its frontmatter."""
    p = vault.root / job.path
    text = p.read_text(encoding="utf-8")
    doc = parse_doc(text, job.path, required=True)
    head, body = text[: doc.body_start], text[doc.body_start :]
    if re.search(r"^enabled:.*$", head, re.M):
        head = re.sub(r"^enabled:.*$", "enabled: false", head, count=1, flags=re.M)
    else:
        close = head.rfind("---")  # the closing fence of the frontmatter
        head = head[:close] + "enabled: false\n" + head[close:]
    atomic_write(p, head + body)
    return job.path


def last_runs(vault: Vault) -> dict[str, dict]:
    """job -> the frontmatter of its newest committed or written output (for `cron list`)."""
    out: dict[str, dict] = {}
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
