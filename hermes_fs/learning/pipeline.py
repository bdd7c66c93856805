"""One pipeline for every learned change: refine, learn, and whatever proposes changes next.

    propose (a model edits an overlay of the base commit)
    -> validate, and send what validation refuses back to the same model conversation (a few rounds)
    -> protect a person's entries: a change to one without their quoted words is taken out
    -> commit on `<kind>/<stamp>-<slug>` by plumbing (parent = the base commit)
    -> apply the policy (review | auto | additions)
    -> notify

A Proposer supplies the first step and the words of the commit; everything else is here, so every
kind of learned change is checked, committed, merged and reported the same way. A failure at any
step leaves main untouched (beyond a refine's snapshot), removes any partial branch and comes back
as a `failed` Outcome; unexpected errors (bugs) are logged with their traceback.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from ..agent.loop import Agent
from ..agent.model import Usage
from ..errors import ConflictError, GitError, HermesError
from ..store.config import Policy
from ..store.overlay import OverlayFiles
from ..store.provenance import CHECKS, Act, cost_trailers, format_message
from ..store.secrets import redact
from ..store.vault import Vault
from . import checks, spend
from .changes import format_resolver, merge_message
from .protection import Evidence, Guarded, guard
from .validate import check

log = logging.getLogger(__name__)


class LearningError(HermesError):
    """A learned change could not be produced (the model stopped, the checks kept failing, ...)."""


@dataclass
class Outcome:
    """What became of one learned change, in one line for the person (`line()`)."""

    status: str  # merged | pending | nothing | conflict | failed
    kind: str = "refine"  # refine | learn
    branch: str | None = None
    files: list[str] = field(default_factory=list)
    summary: str = ""
    reason: str = ""
    session: str | None = None
    snapshot: str | None = None
    conflicts: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)  # what the review cost (tokens, USD when known)

    @property
    def ok(self) -> bool:
        return self.status != "failed"

    def line(self) -> str:
        files = ", ".join(self.files) if self.files else "no files"
        if self.status == "nothing":
            return f"{self.kind}: nothing to change ({self.reason or 'the reviewer found nothing worth keeping'})"
        if self.status == "failed":
            return f"{self.kind} failed: {self.reason}"
        return f"{self.kind}: {self.branch} [{files}] {self.status}: {self.reason}"


@dataclass
class Description:
    """The words of the commit: a summary line, a line per change with its reason, trailers."""

    summary: str
    lines: list[str]
    trailers: dict[str, str]
    slug: str  # the text the branch name is made from


class Task(Protocol):
    """A proposer's model conversation: `ask` continues it (`fresh=True` starts over); `answer` is
    the last answer; `fix_hint` ends the message that sends the checks' refusals back."""

    answer: str
    fix_hint: str

    def ask(self, text: str, fresh: bool = False) -> str: ...


class ModelTask:
    """One model conversation with tools. Each `ask` continues it, so when the checks refuse
    something the model sees what it wrote and why; `fresh=True` starts over (keeps context small).
    (Structured mode's `structured.StructuredTask` is the same conversation without tools.)"""

    fix_hint = "Fix each problem (or undo that change) with your tools, then answer again as before."

    def __init__(self, agent: Agent, system: str):
        self.agent = agent
        self.system = system
        self.messages: list[dict] = [{"role": "system", "content": system}]
        self.answer = ""
        self.usage = Usage()

    def ask(self, text: str, fresh: bool = False) -> str:
        if fresh:
            self.messages = [{"role": "system", "content": self.system}]
        self.messages.append({"role": "user", "content": text})
        turn = self.agent.run(self.messages)
        self.usage.add(turn.usage)
        if turn.stopped:
            raise LearningError(f"the model did not finish within {self.agent.config.max_steps} steps")
        self.answer = turn.answer
        return turn.answer


class Proposer(Protocol):
    kind: str  # refine | learn: the branch prefix and the Outcome's kind
    @property
    def task(self) -> Task | None: ...  # the conversation the checks' refusals go back to (None: refusals are final)

    def base(self, vault: Vault) -> str:
        """The commit the change is made on (refine: the snapshot it commits first)."""
        ...

    def propose(self, overlay: OverlayFiles) -> None:
        """Let the model edit the overlay."""
        ...

    def describe(self, changes: dict[str, bytes | None]) -> Description: ...

    def context(self) -> dict:
        """Extra Outcome fields (refine: session, snapshot)."""
        ...

    # optional: `evidence() -> Evidence`, what the person said and the reasons given (refine); a
    # proposer without it has no conversation, so it can never change a person's entry


CHECK_ROUNDS = 2  # times the model is sent back to fix what the checks refused


def run(vault: Vault, proposer: Proposer, policy: str | None = None) -> Outcome:
    """All steps, for any proposer; never raises for a failed change (the Outcome says why)."""
    branch = None
    tested = checks.Run()
    try:
        base = proposer.base(vault)
        overlay = OverlayFiles(vault.git, base)
        proposer.propose(overlay)
        check_and_fix(overlay, vault, proposer.task)
        guarded = guard(vault, overlay, evidence_of(proposer))
        changes = overlay.effective_changes()
        if not changes:
            outcome = Outcome("nothing", proposer.kind, reason=nothing_reason(proposer, guarded))
        else:
            d = proposer.describe(changes)
            tested = checks.run(vault, overlay)
            lines = protected_lines(d.lines, guarded) + [r.line() for r in tested.results]
            trailers = {**d.trailers, **({CHECKS: tested.trailer()} if tested.results else {}),
                        **cost_trailers(spent(proposer, tested))}
            message = format_message(d.summary, lines)
            branch = commit_on_new_branch(vault, proposer.kind, d.slug, base, changes, message, Act.learned(trailers))
            outcome = apply_policy(vault, branch, d.summary, policy or vault.config.refine.policy,
                                   hold=hold_reason(guarded, tested))
            if guarded.kept:
                outcome.reason += f"; {kept_note(guarded)}"
            failed_parts = getattr(proposer, "failures", None)  # parts a proposer could not do (the curator's)
            if failed_parts:
                outcome.reason += "; not done: " + "; ".join(failed_parts)
    except Exception as exc:  # any failure: no partial branch, a clear report
        outcome = failure(vault, branch, exc, proposer.kind)
    for key, value in proposer.context().items():
        setattr(outcome, key, value)
    outcome.usage = spent(proposer, tested)
    spend.record(vault, proposer.kind, outcome.status, outcome.usage, outcome.branch)
    notify(vault, outcome)
    return outcome


def spent(proposer: Proposer, tested: checks.Run) -> Usage:
    """The review's tokens and cost so far: the proposer's model conversation and the checks."""
    total = Usage()
    for usage in (getattr(proposer, "model_usage", None), getattr(getattr(proposer, "task", None), "usage", None)):
        if isinstance(usage, Usage):
            total.add(usage)
            break
    total.add(tested.usage)
    return total


def hold_reason(guarded: Guarded, tested: checks.Run) -> str:
    """Why a change waits for review whatever the policy: it changes a person's entry (with their
    words: a person still decides), or one of the person's checks fails on it."""
    why = []
    if guarded.changed:
        why.append("it rewrites or removes entries a person wrote")
    why += [f"check {r.name} fails ({r.why()})" for r in tested.failed]
    return "; ".join(why) + ", so it waits for review" if why else ""


def evidence_of(proposer: Proposer) -> Evidence:
    evidence = getattr(proposer, "evidence", None)
    return evidence() if callable(evidence) else Evidence()


def nothing_reason(proposer: Proposer, guarded: Guarded | None = None) -> str:
    """Why a change ended empty: what the guards refused (a near-duplicate skill, a person's entry
    changed without their words), else the model's choice."""
    skill_guard = getattr(proposer, "guard", None)
    refused = list(dict.fromkeys(getattr(skill_guard, "refused", None) or []))
    if guarded and guarded.kept:
        refused.append(kept_note(guarded))
    unexplained = getattr(proposer, "unexplained", None)
    if unexplained:
        refused.append(f"the reviewer gave no reason for its change to {', '.join(unexplained)}, so it was not made")
    left_out = getattr(proposer, "left_out", "")  # lessons mode: what code did not keep, and why
    if left_out:
        refused.append(left_out)
    if refused:
        return "; ".join(refused) + " (patch that skill instead: `hermes-fs learn SOURCE --update SKILL`)" \
            if proposer.kind == "learn" else "; ".join(refused)
    return "the model found nothing worth keeping"


def kept_note(guarded: Guarded) -> str:
    n = len(guarded.kept)
    return (f"kept {n} entr{'ies' if n != 1 else 'y'} a person wrote that the change would have removed or rewritten "
            "without quoting the person (see `hermes-fs review show`)" if n else "")


def protected_lines(lines: list[str], guarded: Guarded) -> list[str]:
    """The change's lines as committed: lines about a change that was taken out are replaced by
    what became of it; a person's entry changed with their words says which words."""
    out = [line for line in lines if not any(_about(line, t.path, t.old) for t in guarded.kept)]
    out += [t.line() for t in guarded.kept]
    out += [f"- {t.path}: {'removes' if t.new is None else 'rewrites'} an entry a person wrote, "
            f"{' '.join(t.old.split())[:80]!r}, because the person said: \"{t.quote}\"" for t in guarded.changed]
    return out


def _about(line: str, path: str, entry: str) -> bool:
    """A change line naming `path` and quoting a part of `entry` (how removals are described)."""
    if path not in line and path.removeprefix("memory/") not in line:
        return False
    flat = " ".join(entry.split()).lower()
    return any(len(q) >= 8 and " ".join(q.split()).lower().rstrip(".") in flat
               for q in re.findall(r'"([^"]+)"', line))


def check_and_fix(overlay: OverlayFiles, vault: Vault, task: Task | None, rounds: int = CHECK_ROUNDS) -> None:
    """Run the checks; send what they refuse back to the model, up to `rounds` times."""
    for attempt in range(rounds + 1):
        problems = check(overlay, vault.config)
        if not problems:
            return
        if attempt == rounds or task is None:
            raise LearningError("checks still failing after retries: " + "; ".join(problems))
        task.ask("The checks refused your changes:\n" + "\n".join(f"- {p}" for p in problems) + "\n" + task.fix_hint)


def failure(vault: Vault, branch: str | None, exc: Exception, kind: str) -> Outcome:
    """The report of a failed change, after removing the branch it may have left."""
    try:
        if branch and vault.git.rev(f"refs/heads/{branch}"):
            vault.git.delete_branch(branch)
    except HermesError:
        log.exception(f"{kind}: could not remove the partial branch {branch}")
    if isinstance(exc, HermesError):
        reason = str(exc)
    else:  # a bug, not a refusal: keep the traceback where someone can read it
        log.error(f"{kind} failed with an unexpected error", exc_info=exc)
        reason = f"unexpected {type(exc).__name__}: {exc} (traceback in .hermes/logs/errors.log or daemon.log)"
    return Outcome("failed", kind, reason=reason)


def slugify(text: str, limit: int = 40) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", (text or "").lower()).strip("-")
    return slug[:limit].rstrip("-") or "change"


def unique_branch(vault: Vault, kind: str, text: str, skip: int = 0) -> str:
    """`<kind>/<stamp>-<slug>` (`<kind>/<stamp>-<host>-<slug>` when the vault syncs, so two
    machines never mint one name), with the slug suffixed (`-2`, `-3`, ...) while a pending or
    rejected change has that slug, or a merged one that name: `review merge SLUG` must name one
    change. `skip` passes over that many more (a name another process took a moment ago).
    (Slugs and host ids hold only [a-z0-9-], so the name is safe inside the grep pattern.)"""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    host = ""
    if vault.config.remote is not None:
        from ..store.host import host_id

        host = f"{host_id(vault.state_dir)}-"
    slug = slugify(redact(text, context=True)[0])  # a focus may hold a key: never in a branch name
    taken = {re.sub(r"^\d{8}-\d{6}-", "", b.name.split("/", 1)[-1])
             for b in [*vault.git.branches("refine/", "learn/", "install/"), *vault.git.rejected()]}
    n = 1
    while True:
        rest = host + slug + (f"-{n}" if n > 1 else "")
        name = f"{kind}/{stamp}-{rest}"
        free = rest not in taken and not vault.git.log(grep=f"^merge {name}: ", limit=1, first_parent=False)
        if free and skip == 0:
            return name
        skip -= free
        n += 1


def commit_on_new_branch(vault: Vault, kind: str, slug: str, base: str, changes: dict[str, bytes | None],
                         message: str, act: Act) -> str:
    """Commit the change on a fresh branch; two refines finishing in the same second with the same
    slug each get their own (creating a branch fails if it exists, then the next name is taken)."""
    for attempt in range(20):
        branch = unique_branch(vault, kind, slug, skip=attempt)
        try:
            vault.git.commit_overlay(base, branch, changes, message, act)
            return branch
        except GitError:
            if not vault.git.rev(f"refs/heads/{branch}"):
                raise  # not a name taken in the meantime: a real failure
    raise LearningError(f"could not find a free branch name for {kind}/{slug}")


def apply_policy(vault: Vault, branch: str, summary: str, policy: str, hold: str = "") -> Outcome:
    """Leave for review, merge now, or merge only pure additions; `hold` (why) keeps it for review
    under any policy."""
    store = vault.git
    tip = store.rev(f"refs/heads/{branch}")
    assert tip, branch
    parent = store.commit_info(tip).parents[0]
    stat = store.numstat(parent, tip)
    files = [p for _a, _d, p in stat]
    outcome = Outcome("pending", branch.split("/", 1)[0], branch, files, summary)
    if policy == Policy.REVIEW:
        outcome.reason = "policy review: waiting for `hermes-fs review merge`"
        return outcome
    if hold:
        outcome.reason = f"policy {policy}: {hold}"
        return outcome
    if policy == Policy.ADDITIONS and any(deleted for _a, deleted, _p in stat):
        outcome.reason = "policy additions: it edits or removes lines, so it waits for review"
        return outcome
    try:
        # a merge by policy is the agent's act, so the agent authors it; entry-aware like any merge
        store.merge(branch, merge_message(branch, summary), Act.policy_merge(), resolve=format_resolver(store))
    except ConflictError as exc:
        outcome.status, outcome.conflicts = "conflict", exc.files
        outcome.reason = f"conflicts with edits in {', '.join(exc.files)}; left for review"
        return outcome
    outcome.status, outcome.reason = "merged", f"policy {policy}"
    return outcome


def notify(vault: Vault, outcome: Outcome) -> None:
    """refine_pending / refine_failed events (learn too); a delivery problem never fails the change."""
    event = {"pending": "refine_pending", "conflict": "refine_pending", "failed": "refine_failed"}.get(outcome.status)
    if not event or not vault.config.notify.targets:
        return
    title = f"hermes-fs: {outcome.kind} " + ("failed" if outcome.status == "failed" else "pending review")
    try:
        vault.notifier.event(event, title, outcome.line())
    except Exception:
        log.exception("notification of a learned change failed")
