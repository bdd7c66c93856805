"""Deciding on learned changes: list, show, merge, reject, revert, and the history (`log`).

A learned change is one commit on `refine/...` or `learn/...`; merged ones are `merge <branch>:`
commits on main's first-parent line; rejected ones live under refs/hermes/rejected/.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from ..errors import GitError, InputError
from ..store.git import GitStore

LEARNED_PREFIXES = ("refine/", "learn/")
MERGE_GREP = r"^merge (refine|learn)/"


@dataclass
class LearnedChange:
    branch: str
    state: str  # merged | pending | rejected
    timestamp: int
    summary: str
    sha: str


@dataclass
class Pending:
    branch: str
    age_s: int
    files: list[str]
    summary: str


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


def _check_branch(store: GitStore, branch: str) -> str:
    if not branch.startswith(LEARNED_PREFIXES):
        raise InputError(f"{branch!r} is not a learned change (refine/... or learn/...); see `hermes-fs review`")
    sha = store.rev(f"refs/heads/{branch}")
    if not sha:
        raise InputError(f"no pending change {branch!r}; see `hermes-fs review` or `hermes-fs log`")
    return sha


def pending(store: GitStore) -> list[Pending]:
    now = int(time.time())
    rows = []
    for prefix in LEARNED_PREFIXES:
        for b in store.branches(prefix):
            parent = store.commit_info(b.sha).parents[0]
            rows.append(Pending(b.name, now - b.timestamp, store.changed_paths(parent, b.sha), b.summary))
    return sorted(rows, key=lambda p: p.age_s)


def show(store: GitStore, branch: str, color: bool = False) -> str:
    sha = _check_branch(store, branch)
    info = store.commit_info(sha)
    header = f"{branch}\n{info.summary}\n\n{info.body}\n\n"
    return header + store.diff(info.parents[0], sha, color=color)


def merge(store: GitStore, branch: str, author: str | None = None) -> str:
    """Accept a pending change (three-way --no-ff merge; conflicts raise ConflictError, nothing changed)."""
    sha = _check_branch(store, branch)
    return store.merge(branch, f"merge {branch}: {store.commit_info(sha).summary}", author=author)


def reject(store: GitStore, branch: str) -> str:
    _check_branch(store, branch)
    return store.reject(branch)


def merge_commit_of(store: GitStore, branch: str) -> str:
    hits = store.log(grep=f"^merge {re.escape(branch)}: ")
    if not hits:
        raise InputError(f"{branch!r} was never merged into main; see `hermes-fs log`")
    return hits[0].sha


def revert(store: GitStore, branch: str, author: str | None = None) -> str:
    """Undo a merged change; refuses (ConflictError naming files) where people edited those lines since."""
    sha = merge_commit_of(store, branch)
    if any(c.summary == f"revert {branch}" for c in store.log(limit=500)):
        raise GitError(f"{branch} was already reverted")
    return store.revert_merge(sha, f"revert {branch}\n\nThis reverts merge {sha}.", author=author)
