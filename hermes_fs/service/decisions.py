"""A person's decision on a learned change: merge it, reject it, or revert it once merged. The one
path every front end takes (the CLI, the web page, chat commands, the library API), so none of
them can decide without the claim below.

In a synced vault the decision on that exact change (its branch and tip, or the merge commit a
revert undoes) is claimed on the remote first (store/claims.py): when two machines decide at once,
exactly one does and the other is told which machine did. The decision is then published at once
by a sync round. Offline, no decision is made: nobody could be asked whether another machine made
one. Without a remote, deciding is the change itself.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from ..errors import HermesError, InputError
from ..learning import changes
from ..store.claims import RefClaims, Take
from ..store.provenance import Act
from ..store.remote import Unreachable
from ..store.vault import Vault
from .work import open_claims, remote_url

log = logging.getLogger("hermes_fs.decisions")

Action = Literal["merge", "reject", "revert"]
ACTIONS: tuple[Action, ...] = ("merge", "reject", "revert")


class DecidedElsewhere(HermesError):
    """Another machine already decided this change (or is deciding it right now)."""

    def __init__(self, branch: str, host: str | None):
        self.branch = branch
        self.host = host
        who = f"machine {host}" if host else "another machine"
        super().__init__(f"{branch} was already decided on {who}; `hermes-fs sync` shows the result")


class Undecidable(HermesError):
    """The remote cannot be reached, so the change stays as it is: another machine may be deciding."""

    def __init__(self, branch: str):
        self.branch = branch
        super().__init__(f"the remote cannot be reached, so {branch} stays as it is: another machine may be "
                         "deciding on it; try again when the remote answers")


@dataclass
class Decision:
    """What a decision did: the commit of a merge or revert, the hidden ref of a reject."""

    action: Action
    branch: str
    sha: str | None = None  # the merge or revert commit on main
    kept_as: str | None = None  # a rejected change's ref (refs/hermes/rejected/...)
    rest_pending: bool = False  # a merge of part of a change: the rest stays pending, same name
    part: list[str] | None = None  # a revert of part of a change: the files undone (the rest stays merged)

    def line(self) -> str:
        if self.action == "reject":
            return f"rejected {self.branch} (kept as {self.kept_as})"
        if self.part:
            return (f"reverted part of {self.branch} ({(self.sha or '')[:10]}): {', '.join(self.part)}\n"
                    f"Next: the rest stays merged; `hermes-fs revert {self.branch}` undoes it too.")
        text = f"{'merged' if self.action == 'merge' else 'reverted'} {self.branch} ({(self.sha or '')[:10]})"
        return text + ("; the rest stays pending under the same name" if self.rest_pending else "")


def decide(vault: Vault, branch: str, action: Action, *, act: Act | None = None, only: list[str] | None = None,
           skip: list[str] | None = None, claims: RefClaims | None = None) -> Decision:
    """Merge, reject or revert the learned change `branch` (a full name, a unique prefix or slug).
    `act`: who decides (a person by default: it is their decision); `only`/`skip`: merge part of
    the change (merge), or undo part of it (revert); `claims`: the process's claims when it has them (the daemon's), else they are
    opened for this decision. Raises DecidedElsewhere, Undecidable, and what the change raises
    (ConflictError, InputError)."""
    if action not in ACTIONS:
        raise InputError(f"a decision is one of {', '.join(ACTIONS)}, not {action!r}")
    if (only or skip) and action == "reject":
        raise InputError("a reject takes the whole change (--only/--skip are for merge and revert)")
    store = vault.git
    name = _resolve(vault, branch, action)
    with claimed(vault, name, _claim_key(vault, name, action, only, skip), claims):
        if action == "merge":
            sha = changes.merge(store, name, act=act or Act.person(), only=only, skip=skip)
            return Decision(action, name, sha=sha, rest_pending=store.rev(f"refs/heads/{name}") is not None)
        if action == "reject":
            return Decision(action, name, kept_as=changes.reject(store, name))
        sha = changes.revert(store, name, act=act or Act.person(), only=only, skip=skip)
        part = changes.reverted_part(store, sha)
        return Decision(action, name, sha=sha, part=part)


def _resolve(vault: Vault, branch: str, action: Action) -> str:
    try:
        return changes.resolve_name(vault.git, branch, include_decided=action == "revert")
    except InputError:
        if action == "revert":
            return branch  # revert names the problem itself (never merged, already reverted)
        raise


def _claim_key(vault: Vault, name: str, action: Action, only: list[str] | None = None,
               skip: list[str] | None = None) -> str:
    """The claim on one decision about one state of a change: a branch's tip (merged or rejected),
    or the merge commit a revert undoes (and which part of it). A change made again later is
    another decision."""
    if action == "revert":
        key = f"revert/{name}/{changes.merge_commit_of(vault.git, name)[:12]}"
        if only or skip:
            import hashlib

            part = hashlib.sha256(repr((sorted(only or []), sorted(skip or []))).encode()).hexdigest()[:12]
            key += f"/part-{part}"
        return key
    tip = vault.git.rev(f"refs/heads/{name}") or "gone"
    return f"review/{name}/{tip[:12]}"


@contextmanager
def claimed(vault: Vault, name: str, key: str, claims: RefClaims | None = None) -> Iterator[None]:
    """Around a decision: claim `key` on the remote first (DecidedElsewhere if another machine holds
    it, Undecidable offline); on success the claim is done and published by a sync round at once,
    on failure it is given back. Nothing to claim when the vault does not sync."""
    if remote_url(vault) is None:
        yield
        return
    claims = claims or open_claims(vault)
    assert claims is not None  # a remote URL: open_claims built them
    outcome = claims.take(key)
    if outcome == Take.OFFLINE:
        raise Undecidable(name)
    if outcome == Take.TAKEN:
        try:
            rec = claims.holder(key)
        except Unreachable:  # cut off since the claim was refused: still decided elsewhere
            rec = None
        raise DecidedElsewhere(name, rec.host if rec else None)
    try:
        yield
    except BaseException:
        claims.release(key)
        raise
    claims.finish(key)
    _publish(vault, claims, name)


def _publish(vault: Vault, claims: RefClaims, name: str) -> None:
    from .sync import Syncer

    try:
        Syncer(vault, claims).round(work=False)
    except HermesError as exc:
        log.warning("sync after deciding %s: %s", name, exc)  # the daemon pushes it later

__all__ = ["ACTIONS", "Action", "DecidedElsewhere", "Decision", "Undecidable", "claimed", "decide"]
