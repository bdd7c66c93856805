"""Running one cron job: an agent run with the job's prompt and skills, delivery through Apprise,
and the output stored under outputs/cron/<job>/ and committed (`Hermes-Job: <job>`).

Deliveries are made before the output is written, so the file records them in the same commit.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ..errors import HermesError, InputError
from ..mind.jobs import CronJob, with_enabled
from ..store.docs import dump_doc, parse_doc
from ..store.edit import Edit, Staged, edit
from ..store.files import atomic_write
from ..store.notify import Delivery
from ..store.provenance import Act
from ..store.secrets import redact
from ..store.vault import Vault

log = logging.getLogger(__name__)

OUTPUTS_DIR = "outputs/cron"
SILENT = "[SILENT]"
DELIVERY_TRIES = 3


@dataclass
class CronRun:
    """One run of a job: what its output file's frontmatter records, and where that file is."""

    job: str
    due: str  # ISO 8601, as scheduled
    started: str
    rel: str = ""  # the output file, outputs/cron/<job>/<due>.md
    status: str = "ok"  # ok | error
    model: str | None = None
    tokens: int | None = None
    session: str | None = None
    error: str | None = None
    silent: bool = False  # the answer said [SILENT]: stored, not sent
    pdf_error: str | None = None  # notify_attach: pdf, and the PDF could not be made (the text went alone)
    delivered: list[Delivery] = field(default_factory=list)
    finished: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def meta(self) -> dict:
        """The output file's frontmatter (absent fields left out)."""
        meta: dict = {"status": self.status, "job": self.job, "due": self.due, "started": self.started}
        for key in ("model", "tokens", "session", "error", "pdf_error"):
            if getattr(self, key) is not None:
                meta[key] = getattr(self, key)
        if self.silent:
            meta["silent"] = True
        meta["delivered"] = [d.as_dict() for d in self.delivered]
        if self.finished:
            meta["finished"] = self.finished
        return meta

    @classmethod
    def from_meta(cls, meta: dict, rel: str) -> CronRun:
        """Read back an output file's frontmatter (a person may have edited it: tolerant)."""
        def text(key: str) -> str | None:
            value = meta.get(key)
            return None if value is None else str(value)

        delivered = [Delivery(str(d.get("target")), d.get("status") == "ok", d.get("error"))
                     for d in meta.get("delivered") or [] if isinstance(d, dict)]
        tokens = meta.get("tokens")
        return cls(job=text("job") or "", due=text("due") or "", started=text("started") or "", rel=rel,
                   status=text("status") or "ok", model=text("model"),
                   tokens=tokens if isinstance(tokens, int) else None, session=text("session"),
                   error=text("error"), silent=meta.get("silent") is True, delivered=delivered,
                   finished=text("finished"))


def output_rel(job: CronJob, due: datetime) -> str:
    return output_path(job.name, due)


def output_path(job_name: str, due: datetime) -> str:
    """Where the run of `job_name` due at `due` is stored: one file per due time, on every machine."""
    return f"{OUTPUTS_DIR}/{job_name}/{due.astimezone(UTC):%Y%m%d-%H%M%S}.md"


def run_job(vault: Vault, job: CronJob, due: datetime, retry_base_s: float = 1.0) -> CronRun:
    """One run: ask, deliver, store and commit the output.

    A failure is stored (status: error) and sent as cron_failure; an unexpected one (a bug) first
    logs its traceback. A delivery failure is retried a few times, then recorded in the output file.
    """
    from ..agent.conversation import Conversation, ConversationOptions  # the agent's weight only for a run

    run = CronRun(job.name, due.isoformat(), datetime.now(UTC).isoformat(timespec="seconds"), output_rel(job, due))
    body = ""
    paths: list[str] = []
    try:
        options = ConversationOptions(source="cron", task="cron", model=job.model, skills=job.skills,
                                      commit_on_end=False, mcp_servers=job.mcp)  # one commit per run: output and transcript together
        with Conversation(vault, options) as conv:
            paths.append(conv.transcript.rel)
            result = conv.ask(job.prompt)
        run.model, run.tokens, run.session = conv.model.name, result.usage.total_tokens, conv.id
        body = result.answer
    except Exception as exc:  # a failed run is stored and reported, never lost
        run.status, run.error = "error", str(exc)
        if not isinstance(exc, HermesError):  # a bug, not a refusal: keep the traceback where someone can read it
            log.error(f"cron {job.name}: unexpected error", exc_info=exc)
            run.error = f"unexpected {type(exc).__name__}: {exc} (traceback in daemon.log or .hermes/logs/errors.log)"
        body = f"The job failed: {run.error}"
    run.delivered = deliver(vault, job, run, body, retry_base_s)
    run.finished = datetime.now(UTC).isoformat(timespec="seconds")
    atomic_write(vault.root / run.rel, redact(dump_doc(run.meta(), f"\n{body.strip()}\n"))[0])  # outputs are committed
    paths.insert(0, run.rel)
    with vault.git.lock.hold():  # the disable and the commit: no other writer of ours in between
        done = disable_job(vault, job) if job.schedule.at is not None else None
        if done is not None:
            paths.append(job.path)
        try:
            vault.git.commit_paths(paths, f"cron: {job.name} ({run.status})", Act.job(job.name))
        finally:
            if done is not None:
                done.settle()  # text a person appended mid-swap stays, for the daemon to commit as theirs
    return run


def deliver(vault: Vault, job: CronJob, run: CronRun, body: str, retry_base_s: float) -> list[Delivery]:
    """Send the result to the job's targets (unless [SILENT]); each target's outcome, for the file."""
    event = "cron_output" if run.ok else "cron_failure"
    if run.ok and SILENT in body:
        run.silent = True
        return []
    if not job.notify or event not in vault.config.notify.events:
        return []
    title = f"hermes-fs: {job.name}" + (" failed" if event == "cron_failure" else "")
    with output_pdf(vault, job, run, body) as attach:
        deliveries = []
        for target in job.notify:
            for attempt in range(DELIVERY_TRIES):
                [d] = vault.notifier.send([target], title, body, attach)
                if d.ok or attempt == DELIVERY_TRIES - 1:
                    break
                time.sleep(retry_base_s * 2**attempt)
            deliveries.append(d)
    return deliveries


@contextmanager
def output_pdf(vault: Vault, job: CronJob, run: CronRun, body: str) -> Iterator[list[Path] | None]:
    """The run's output as a PDF, for `notify_attach: pdf` (a successful run only), in a folder
    of its own under .hermes/outbox/ that is removed once sent; None when there is none to attach
    (a PDF that cannot be made is recorded in `run.error`'s place: `pdf_error`, and the text goes)."""
    if job.notify_attach != "pdf" or not run.ok:
        yield None
        return
    from ..agent.outgoing import OUTBOX_DIR
    from ..agent.pdf import markdown_to_pdf

    folder = Path(tempfile.mkdtemp(prefix=f"cron-{job.name}-", dir=_outbox(vault.state_dir / OUTBOX_DIR)))
    try:
        try:
            report = markdown_to_pdf(redact(body)[0], title=f"{job.name} {run.due}")
        except HermesError as exc:
            run.pdf_error = str(exc)
            yield None
            return
        path = folder / f"{job.name}-{_stamp(run.due)}.pdf"
        path.write_bytes(report.data)
        yield [path]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _outbox(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _stamp(due: str) -> str:
    return "".join(c for c in due if c.isdigit())[:14] or "run"


def disable_job(vault: Vault, job: CronJob) -> Edit[None] | None:
    """A one-shot job turns itself off after it ran: `enabled: false` in its frontmatter.

    A person may have the file open: their pending edit is committed first (it keeps its author),
    and the change goes through the vault's locked swap-in (`store.edit`), so a save made while we
    write is redone on, never overwritten. None when the file is gone or holds a person's secret
    (then it is theirs to fix; the scheduler reads `enabled:` from disk, so nothing runs twice)."""
    pending = vault.git.commit_human_edits([job.path])
    if pending.refused:
        log.warning(f"cron {job.name}: {job.path} holds a person's uncommitted edit that cannot be "
                    "committed (a secret?); not disabling the one-shot job in the file")
        return None

    def change(files: Staged) -> None:
        data = files.read(job.path)
        if data is not None:
            files.write(job.path, disabled(data.decode("utf-8"), job.path).encode("utf-8"))

    return edit(vault.files, vault.git.lock, change)


def disabled(text: str, rel: str) -> str:
    """The job file's text with `enabled: false` in its frontmatter, every other byte kept."""
    return with_enabled(text, False, rel)


def last_runs(vault: Vault) -> dict[str, CronRun]:
    """job -> its newest committed or written run, read from the output file (for `cron list`)."""
    out: dict[str, CronRun] = {}
    base = vault.root / OUTPUTS_DIR
    if not base.is_dir():
        return out
    for d in base.iterdir():
        files = sorted(d.glob("*.md"))
        if files:
            try:
                meta = parse_doc(files[-1].read_text(encoding="utf-8"), str(files[-1])).meta
            except (InputError, OSError, UnicodeDecodeError):
                continue
            out[d.name] = CronRun.from_meta(meta, files[-1].relative_to(vault.root).as_posix())
    return out
