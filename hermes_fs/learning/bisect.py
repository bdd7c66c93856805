"""`learn bisect CHECK`: the first learned change after which a person's check fails.

The walk is over main's first-parent history, at the merge commits of learned changes (`merge
refine/...`, `learn/...`, `curate/...`): a binary search like `git bisect run`, done here rather
than by git so that nothing is checked out (the working folder and the daemon are left alone) and
a person's edits between merges are never the suspect. The state before the first learned merge
must pass and main must fail; the change named is the first merge whose tree fails, with the
command that reverts it. Each step asks the check of the agent as that commit's memory and skills
make it (learning/checks.py), so about log2(n) model calls are made for n merges.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..agent.model import Model, Usage
from ..errors import InputError
from ..store.overlay import OverlayFiles
from ..store.provenance import BRANCH
from ..store.vault import Vault
from . import checks
from .changes import MERGE_GREP, learned_log


@dataclass
class Step:
    label: str  # the merge's branch, or "before any learned change" / "main now"
    sha: str
    passed: bool
    why: str = ""


@dataclass
class Bisection:
    check: str
    culprit: str | None = None  # the branch of the first learned change after which it fails
    culprit_sha: str | None = None
    reverted: bool = False  # the culprit was reverted already
    steps: list[Step] = field(default_factory=list)
    note: str = ""  # when there is nothing to name, why
    usage: Usage = field(default_factory=Usage)

    def text(self) -> str:
        lines = [f"  {s.label} ({s.sha[:10]}): {'passes' if s.passed else 'FAILS: ' + s.why}" for s in self.steps]
        if self.culprit:
            head = f"check {self.check} first fails after {self.culprit}"
            tail = ("it was reverted since" if self.reverted
                    else f"to undo it: hermes-fs revert {self.culprit}")
            return "\n".join([head, *lines, tail])
        return "\n".join([f"check {self.check}: {self.note}", *lines])


def bisect(vault: Vault, name: str, model: Model | None = None) -> Bisection:
    """Name the first learned merge on main after which check `name` fails (see the module doc)."""
    store = vault.git
    found = {c.name: c for c in checks.main_checks(store)}
    if name not in found:
        known = ", ".join(sorted(found)) or "none: write one in checks/<name>.md and commit it"
        raise InputError(f"no check {name!r} on main (checks: {known})")
    check = found[name]
    out = Bisection(name)
    merges = list(reversed([c for c in store.log(grep=MERGE_GREP, first_parent=True, limit=0)
                            if c.trailers.get(BRANCH) or c.summary.startswith("merge ")]))
    if not merges:
        out.note = "no learned change was ever merged into main: nothing to bisect"
        return out

    def test(label: str, sha: str) -> bool:
        run = checks.run(vault, OverlayFiles(store, sha), [check], model)
        out.usage.add(run.usage)
        result = run.results[0]
        out.steps.append(Step(label, sha, result.passed, result.why()))
        return result.passed

    def branch_of(i: int) -> str:
        c = merges[i]
        return c.trailers.get(BRANCH) or c.summary.removeprefix("merge ").split(": ", 1)[0]

    if test("main now", store.head()):
        out.note = "passes on main now: nothing to bisect"
        return out
    before = store.commit_info(merges[0].sha).parents[0]
    if not test("before any learned change", before):
        out.note = "fails before any learned change was merged: no learned change broke it"
        return out
    lo, hi = -1, len(merges) - 1  # state lo passes; state hi is to be found failing
    if test(branch_of(hi), merges[hi].sha):
        out.note = "passes after the last learned change: a later edit on main broke it, not a learned change"
        return out
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if test(branch_of(mid), merges[mid].sha):
            lo = mid
        else:
            hi = mid
    out.culprit, out.culprit_sha = branch_of(hi), merges[hi].sha
    out.reverted = any(c.branch == out.culprit and c.state == "reverted" for c in learned_log(store))
    return out
