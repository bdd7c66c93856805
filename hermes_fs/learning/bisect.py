"""`learn bisect CHECK`: the first learned change after which a person's check fails.

The walk is over main's first-parent history, at the merge commits of learned changes (`merge
refine/...`, `learn/...`, `curate/...`): a binary search like `git bisect run`, done here rather
than by git so that nothing is checked out (the working folder and the daemon are left alone) and
a person's edits between merges are never the suspect. Main must fail, and so must the state
after the last learned merge. The search starts from the last state where the check passed: the
commit that wrote the check as it is now (a person writes a check when the agent knows the thing),
or, when that fails too, a passing point found by stepping back over the learned merges (1, 2, 4,
... merges back, down to before any learned change) -- so knowledge that was itself learned, then
broken by a later learned change, is bisected from where it was learned. The change named is the
first merge after that point whose tree fails, with the command that reverts it. Each step asks the
check of the agent as that commit's memory and skills make it (learning/checks.py), so about
2·log2(n) model calls are made for n merges.
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
    seen: dict[str, bool] = {}

    def test(label: str, sha: str) -> bool:
        if sha not in seen:  # the same commit is asked once
            run = checks.run(vault, OverlayFiles(store, sha), [check], model)
            out.usage.add(run.usage)
            result = run.results[0]
            out.steps.append(Step(label, sha, result.passed, result.why()))
            seen[sha] = result.passed
        return seen[sha]

    def branch_of(i: int) -> str:
        c = merges[i]
        return c.trailers.get(BRANCH) or c.summary.removeprefix("merge ").split(": ", 1)[0]

    before = store.commit_info(merges[0].sha).parents[0]

    def state(i: int) -> tuple[str, str]:  # -1: before any learned change
        return ("before any learned change", before) if i < 0 else (branch_of(i), merges[i].sha)

    if test("main now", store.head()):
        out.note = "passes on main now: nothing to bisect"
        return out
    hi = len(merges) - 1  # state hi fails: the first failing merge after the passing point is at or before it
    if test(*state(hi)):
        out.note = "passes after the last learned change: a later edit on main broke it, not a learned change"
        return out
    bounds = _passing_point(store, check.path, merges, hi, test, state)
    if bounds is None:
        out.note = ("never passed: not where the check was written, not after any learned change, not before "
                    "them. No learned change broke it; the agent never knew what it asks (or its expect: "
                    "words are not what the agent says)")
        return out
    lo, hi = bounds
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if test(*state(mid)):
            lo = mid
        else:
            hi = mid
    out.culprit, out.culprit_sha = branch_of(hi), merges[hi].sha
    out.reverted = any(c.branch == out.culprit and c.state == "reverted" for c in learned_log(store))
    return out


def _passing_point(store, path: str, merges: list, hi: int, test, state) -> tuple[int, int] | None:
    """(lo, hi): state lo passes (-1: before any learned change) and merge hi > lo fails; None when no
    state passes. First the commit that wrote the check as it is now, then back over the merges."""
    written = store.path_history(None, [path])
    start = hi
    if written:
        sha = written[-1].sha
        after = _merges_before(store, merges, sha)  # merges at or before the check: merges[:after]
        if after - 1 < hi:
            if test("where the check was written", sha):
                return after - 1, hi
            start = after - 1  # it failed there too: look back from the merge before it
    step, i = 1, start
    while True:
        if i < hi and i >= -1 and test(*state(i)):
            return i, hi
        if i <= -1:
            return None
        if i < hi:
            hi = i
        i, step = max(i - step, -1), step * 2


def _merges_before(store, merges: list, sha: str) -> int:
    """How many of the (first-parent, oldest first) learned merges are ancestors of `sha`."""
    lo, hi = 0, len(merges)  # ancestry is monotone along the first-parent line: a binary search
    while lo < hi:
        mid = (lo + hi) // 2
        if store.is_ancestor(merges[mid].sha, sha):
            lo = mid + 1
        else:
            hi = mid
    return lo
