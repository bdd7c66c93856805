"""Learned changes as git sees them: pending branches, merged changes on main, rejected refs."""

from __future__ import annotations

from dataclasses import dataclass

from .gitstore import GitStore

LEARNED_PREFIXES = ("refine/", "learn/")
MERGE_GREP = r"^merge (refine|learn)/"


@dataclass
class LearnedChange:
    branch: str
    state: str  # merged | pending | rejected
    timestamp: int
    summary: str
    sha: str


def learned_log(store: GitStore) -> list[LearnedChange]:
    """Merged, pending and rejected learned changes, newest first."""
    changes = []
    for c in store.log(grep=MERGE_GREP):
        branch, _, summary = c.summary.removeprefix("merge ").partition(": ")
        changes.append(LearnedChange(branch, "merged", c.timestamp, summary, c.sha))
    for prefix in LEARNED_PREFIXES:
        changes += [LearnedChange(b.name, "pending", b.timestamp, b.summary, b.sha) for b in store.branches(prefix)]
    changes += [LearnedChange(b.name, "rejected", b.timestamp, b.summary, b.sha) for b in store.rejected()]
    return sorted(changes, key=lambda c: c.timestamp, reverse=True)
