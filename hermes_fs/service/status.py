"""The vault at a glance, for `hermes-fs status` and the web page's status: a cheap overview. Reads
memory, skills and job files, one `for-each-ref`, the newest output of each job and the newest
request results; it never walks sessions/ or old outputs, so it stays flat as history grows."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from ..errors import HermesError, InputError
from ..learning.changes import LEARNED_PREFIXES
from ..mind import memory, skills
from ..store.files import atomic_write
from ..store.vault import Vault
from .job_state import JobState, job_states
from .request_results import RequestResult, recent_failures


@dataclass
class FailedRequest:
    """A request that failed, as `status` and the web Status page name it (its result file has the rest)."""

    name: str  # the result's name, for `/requests/<name>` and outputs/requests/<name>.md
    request: str
    source: str
    finished: str
    answer: str  # the start of the error

    @classmethod
    def of(cls, r: RequestResult) -> FailedRequest:
        return cls(r.name, r.request, r.source, r.finished, " ".join(r.answer.split())[:200])


@dataclass
class Status:
    vault: str
    model: str
    memory: list[dict] = field(default_factory=list)
    skills: dict = field(default_factory=dict)
    cron: list[JobState] = field(default_factory=list)  # the same reading as `cron list` and the web Jobs page
    host: str = ""  # this machine's host id (for jobs pinned with `host:`)
    pending_reviews: list[dict] = field(default_factory=list)
    daemon: dict = field(default_factory=dict)
    sync: dict | None = None  # only when hermes.yaml has `remote:`
    gateway: list[dict] = field(default_factory=list)  # each configured channel (gateway status)
    errors: list[str] = field(default_factory=list)
    failed_requests: list[FailedRequest] = field(default_factory=list)  # among the newest request results

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def collect(vault: Vault, now: datetime | None = None) -> Status:
    now = now or datetime.now(UTC)
    cfg = vault.config
    st = Status(vault=str(vault.root), model=cfg.model)
    rows, errors = memory_rows(vault)
    st.memory, st.errors = rows, st.errors + errors
    st.skills = skill_counts(vault)
    jobs = job_states(vault, now)
    st.cron, st.host = jobs.jobs, jobs.here
    st.errors += [str(e) for e in jobs.errors]
    st.failed_requests = [FailedRequest.of(r) for r in recent_failures(vault)]
    for prefix in LEARNED_PREFIXES:
        for b in vault.git.branches(prefix):
            st.pending_reviews.append({"branch": b.name, "age_s": int(time.time()) - b.timestamp, "summary": b.summary})
    from .daemon_state import status as daemon_status

    st.daemon = daemon_status(vault)  # daemon.json checked against the daemon's lock
    if vault.config.remote is not None:
        from .sync import sync_status

        st.sync = sync_status(vault)
    if vault.config.gateway.channels:  # the gateway's modules load only when it is configured
        from .gateway.status import collect as gateway_status

        st.gateway = gateway_status(vault)
    # files the daemon left uncommitted (a secret, too big): a person must act on them, while they still are
    st.errors += [e.split(" ", 1)[-1] for e in st.daemon.get("last_errors") or []
                  if " not committed: " in f" {e}" and _still_uncommitted(vault, e)]
    return st


def _still_uncommitted(vault: Vault, error: str) -> bool:
    """The daemon's "not committed: <path>:<line>: <why>" still holds: the file differs from main's
    (a warning whose secret was taken out, or that was committed another way, is not shown)."""
    path = error.split("not committed: ", 1)[1].split(":", 1)[0]
    try:
        return vault.files.read(path) != vault.git.read_file(vault.git.head(), path)
    except (HermesError, OSError):
        return True  # cannot tell: keep the warning


class StatCache:
    """Per-file results in .hermes/cache/<name>, valid while the file's (mtime, size) is unchanged.
    A cache in the DESIGN sense: delete it and it is rebuilt from the files."""

    def __init__(self, vault: Vault, name: str):
        self.path = vault.state_dir / "cache" / name
        self.root = vault.root
        try:
            self.old = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.old = {}
        self.fresh: dict[str, dict] = {}

    def get(self, rel: str, compute):
        """The cached value for `rel`, else `compute()` (kept); None when the file is gone.
        An exception from `compute` passes through and nothing is kept for that file."""
        try:
            stat = os.stat(self.root / rel)
        except OSError:
            return None
        key = [stat.st_mtime_ns, stat.st_size]
        hit = self.old.get(rel)
        value = hit["value"] if hit and hit.get("key") == key and "value" in hit else compute()
        self.fresh[rel] = {"key": key, "value": value}
        return value

    def save(self) -> None:
        if self.fresh != self.old:
            atomic_write(self.path, json.dumps(self.fresh))


def skill_counts(vault: Vault) -> dict:
    """How many skills, how many fail the reference validator, how many sit outside
    skills/<name>/SKILL.md. Validation results are cached by (mtime, size)."""
    cache = StatCache(vault, "skill-checks.json")
    names = skills.names(vault.files)
    invalid = 0
    for name in names:
        ok = cache.get(f"skills/{name}/SKILL.md",
                       lambda name=name: skills.valid_name(name) and not skills.validate(vault.files, name))
        invalid += ok is False
    cache.save()
    return {"count": len(names), "invalid": invalid, "misplaced": len(skills.misplaced(vault.files)),
            "stale": _stale(vault, names)}


def _stale(vault: Vault, names: list[str]) -> int:
    """Skills the curator would archive now (usage from the record, cached in .hermes/cache/)."""
    from ..errors import HermesError
    from ..mind import usage

    try:
        return len(usage.stale(usage.refresh(vault), names, vault.config.curate.stale_days))
    except HermesError:  # e.g. no commit yet: nothing is stale
        return 0


def memory_rows(vault: Vault) -> tuple[list[dict], list[str]]:
    """Size, entries and budget per memory file, parsed only when (mtime, size) changed."""
    cache = StatCache(vault, "memory-stats.json")
    rows, errors = [], []
    for name in memory.list_memory(vault.files):
        try:
            row = cache.get(f"{memory.MEMORY_DIR}/{name}", lambda name=name: _memory_row(vault, name))
        except InputError as exc:
            errors.append(str(exc))
            continue
        if row is None:
            continue
        budget = memory.budget_for(name, {"budget": row["own_budget"]}, vault.config)
        rows.append({"file": row["file"], "chars": row["chars"], "budget": budget,
                     "over_budget": row["chars"] > budget, "entries": row["entries"]})
    cache.save()
    return rows, errors


def _memory_row(vault: Vault, name: str) -> dict:
    m = memory.load(vault.files, name, vault.config)
    own = m.doc.meta.get("budget")
    return {"file": m.path, "chars": m.size, "entries": len(m.entries),
            "own_budget": own if isinstance(own, int) and not isinstance(own, bool) else None}
