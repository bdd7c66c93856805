"""Sync: one vault on several machines through a git remote. Orchestration only: the transport
is store/remote.py, the claims store/claims.py, the merge GitStore.integrate.

One round (`Syncer.round`, run by `hermes-fs sync` once and by the daemon continuously):

1. ask the remote what it has (`ls-remote`, cheap) and fetch only if that differs from the mirror;
2. withdraw a result whose claim another machine took over meanwhile (its result stands);
3. merge the remote's main into main: a fast-forward, or a merge commit with the entry-aware
   merge (memory by entry, skills by line with frontmatter by key). Never a rebase. A conflict
   never leaves markers: this machine's version stays, the other's is written beside it
   (`USER.conflict-<host>.md`), the person is notified once and `status` lists it. Uncommitted
   text of a person is never touched (the same CAS as every merge);
4. push main together with the claims marked `done` since, in one `--atomic` push whose lease is
   the remote main that was merged; a lost race (someone pushed first) goes back to 1;
5. publish and adopt learned branches (`refine/*`, `learn/*`) and rejected changes, three-way
   against what both sides had at the last round (.hermes/sync/refs.json);
6. renew this machine's running claims, claim due times it missed while offline, and list the
   expired claims of dead machines for the daemon to take over.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath

from ..errors import ConflictError, GitError, HermesError
from ..store.claims import LEDGER_NAME, ClaimRecord, Ledger, RefClaims, parse_cron_key
from ..store.files import atomic_write
from ..store.git import MAIN, GitStore, format_message
from ..store.host import host_id
from ..store.remote import MIRROR, RefUpdate, Remote, Unreachable, mirror_of
from ..store.vault import Vault

log = logging.getLogger("hermes_fs.sync")

CONFLICT_MARK = ".conflict-"
LEARNED_REFS = ("refs/heads/refine/", "refs/heads/learn/", "refs/hermes/rejected/")
PUSH_TRIES = 4  # a push that lost a race fetches, merges and tries again, this many times per round
SYNC_TRAILERS = {"Hermes-Change": "sync"}

_claims: dict[Path, RefClaims] = {}
_claims_lock = threading.Lock()


URL_KEY = "hermes.remoteUrl"  # git config of one clone: this machine reaches the remote by another URL


def remote_url(vault: Vault) -> str | None:
    """The remote's URL for this machine: `git config hermes.remoteUrl` (untracked, per clone),
    else `remote.url` of hermes.yaml; None when the vault does not sync."""
    if vault.config.remote is None:
        return None
    return vault.git.config_get(URL_KEY) or vault.config.remote.url or None


def remote_for(vault: Vault) -> Remote:
    url = remote_url(vault)
    if not url:
        raise HermesError("no remote configured: add `remote: {url: ..., branch: main}` to hermes.yaml "
                          "(see README, \"Several machines\")")
    return Remote(vault.root, url)


def clone_vault(url: str, path: Path, branch: str = MAIN) -> Vault:
    """A second machine's copy of a synced vault: `git clone`, main checked out, a local git
    identity if none is set (like `init`)."""
    import os
    import subprocess

    from ..store.vault import DEFAULT_IDENTITY

    path = Path(path).expanduser().resolve()
    if path.exists() and any(path.iterdir()):
        raise HermesError(f"{path} is not empty; clone into a new folder")
    proc = subprocess.run(["git", "clone", "-q", "--no-tags", "-b", branch, url, str(path)], capture_output=True,
                          text=True, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    if proc.returncode != 0:
        raise GitError(f"git clone failed: {proc.stderr.strip()}")
    store = GitStore(path, lock_dir=path / ".hermes" / "locks")
    if branch != MAIN:
        store._git("branch", "-m", branch, MAIN)
    for key, value in (("core.splitIndex", "true"), ("feature.manyFiles", "true")):
        store.config_set(key, value)
    if not (store.config_get("user.name") and store.config_get("user.email")):
        store.config_set("user.name", DEFAULT_IDENTITY[0])
        store.config_set("user.email", DEFAULT_IDENTITY[1])
    vault = Vault(path)
    vault.reload_config()
    if vault.config.remote is None:
        raise HermesError(f"{path}/hermes.yaml has no `remote:`; add it there so every machine syncs")
    return vault


def sync_dir(vault: Vault) -> Path:
    d = vault.state_dir / "sync"
    d.mkdir(exist_ok=True)
    return d


def claims_for(vault: Vault) -> RefClaims:
    """The vault's claim refs; one object per vault in a process (the scheduler, the sync service
    and the inbox share what this machine holds)."""
    root = vault.root.resolve()
    with _claims_lock:
        found = _claims.get(root)
        if found is None:
            found = RefClaims(vault.git, remote_for(vault), host_id(vault.state_dir), vault.config.sync.claim_ttl_s,
                              Ledger(vault.state_dir / LEDGER_NAME), sync_dir(vault) / "claims.json",
                              author=vault.config.git.author)
            _claims[root] = found
        return found


def beside(path: str, host: str) -> str:
    """Where the other machine's version of a conflicted file goes: `memory/USER.conflict-<host>.md`."""
    p = PurePosixPath(path)
    return str(p.with_name(f"{p.stem}{CONFLICT_MARK}{host}{p.suffix}"))


CONFLICTS_FILE = "conflicts.json"


def is_conflict_copy(path: str) -> bool:
    return CONFLICT_MARK in PurePosixPath(path).name


def conflict_files(vault: Vault) -> list[str]:
    """Versions kept beside a file after a sync conflict (made here or arriving from another
    machine) that are still in the vault: what `status` lists until a person deletes them.
    Read from .hermes/sync/conflicts.json, which each merge updates: no walk of the vault."""
    try:
        known = json.loads((vault.state_dir / "sync" / CONFLICTS_FILE).read_text())
    except (OSError, ValueError):
        return []
    return sorted(p for p in known if isinstance(p, str) and (vault.root / p).is_file())


def _remember_conflicts(vault: Vault, paths: list[str]) -> None:
    found = set(conflict_files(vault)) | {p for p in paths if is_conflict_copy(p)}
    atomic_write(sync_dir(vault) / CONFLICTS_FILE, json.dumps(sorted(found), indent=1))


def sync_status(vault: Vault) -> dict:
    """For `status`: the remote, this machine's host id, conflicts kept, due times missed offline.
    No network: what the last round left in .hermes/sync/."""
    try:
        missed = json.loads((vault.state_dir / "sync" / "claims.json").read_text()).get("missed", {})
    except (OSError, ValueError, AttributeError):
        missed = {}
    return {"remote": remote_url(vault), "host": host_id(vault.state_dir), "conflicts": conflict_files(vault),
            "missed": missed}


@dataclass
class Round:
    offline: str | None = None  # why the remote could not be reached
    fetched: bool = False
    merged: str | None = None  # the new main, when the remote brought something
    pushed: bool = False
    conflicts: list[str] = field(default_factory=list)  # files written beside, this round
    withdrawn: list[str] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)  # learned refs published or adopted
    caught_up: list[tuple[str, datetime]] = field(default_factory=list)  # missed due times now claimed here
    expired: list[ClaimRecord] = field(default_factory=list)  # claims of dead machines
    lost: list[str] = field(default_factory=list)  # running claims this machine lost

    def line(self) -> str:
        if self.offline:
            return f"offline: {self.offline}"
        parts = [("fetched" if self.fetched else "up to date"), ("merged" if self.merged else ""),
                 ("pushed" if self.pushed else ""), (f"{len(self.refs)} learned ref(s)" if self.refs else ""),
                 (f"{len(self.conflicts)} conflict(s) kept beside: {', '.join(self.conflicts)}" if self.conflicts else "")]
        return ", ".join(p for p in parts if p)


class Syncer:
    def __init__(self, vault: Vault, claims: RefClaims | None = None, notify: Callable[[str, str], None] | None = None):
        self.vault = vault
        self.store = vault.git
        self.remote = remote_for(vault)
        self.claims = claims or claims_for(vault)
        self.host = host_id(vault.state_dir)
        self.branch_ref = "refs/heads/" + (vault.config.remote.branch if vault.config.remote else MAIN)
        self.notify = notify or self._notify
        self.refs_path = sync_dir(vault) / "refs.json"
        self.lock = threading.Lock()  # one round at a time (the daemon's timer and a push at once)

    # -- one round -------------------------------------------------------------------------------
    def round(self, work: bool = True) -> Round:
        """One round; with `work` (the daemon), also claim missed due times and list dead
        machines' claims, for the caller to run."""
        with self.lock:
            r = Round()
            try:
                for _attempt in range(PUSH_TRIES):
                    self._fetch(r)
                    self._withdraw_lost(r, self.claims.lost_to_takeover())
                    self._integrate(r)
                    if self._push_main(r):
                        break
                self._sync_learned(r)
                r.lost = self.claims.renew()
                if work:
                    r.caught_up = self.claims.take_missed()
                    r.expired = self.claims.expired()
            except Unreachable as exc:
                r.offline = str(exc)
            return r

    def _fetch(self, r: Round) -> None:
        there = self.remote.refs()
        here = {self._unmirror(ref): sha for ref, sha in self._refs(MIRROR).items()}
        if there != here:
            self.remote.fetch()
            self.claims.refresh()
            r.fetched = True

    @staticmethod
    def _unmirror(ref: str) -> str:
        return "refs/" + ref.removeprefix(MIRROR)

    def _refs(self, prefix: str) -> dict[str, str]:
        out = self.store._git("for-each-ref", "--format=%(objectname) %(refname)", prefix)
        found = {}
        for line in out.splitlines():
            sha, _, ref = line.partition(" ")
            found[ref] = sha
        return found

    def _integrate(self, r: Round) -> None:
        theirs = self.store.rev(mirror_of(self.branch_ref))
        if theirs is None:
            return
        who = self._host_of(theirs)
        before = self.store.head()
        try:
            message = format_message(f"sync: merge {who}'s main", "", {**SYNC_TRAILERS, "Hermes-Host": self.host})
            new = self.store.integrate(theirs, message, self.vault.config.git.author,
                                       resolve=_format_resolver(self.store), keep_both=self._keep_both(r, theirs))
        except ConflictError as exc:  # a person is typing in those files: their text wins, try next round
            log.info("sync: not merging now: %s", exc)
            return
        except GitError as exc:
            if "in progress" in str(exc) or "checked out" in str(exc) or "moved while merging" in str(exc):
                log.info("sync: not merging now: %s", exc)
                return
            raise
        if new:
            r.merged = new
            _remember_conflicts(self.vault, self.store.changed_paths(before, new))
        if r.conflicts:
            self.notify("hermes-fs: sync kept both versions",
                        "Another machine changed the same text. Its version is kept beside yours:\n"
                        + "\n".join(f"- {p}" for p in r.conflicts)
                        + "\nMerge what you want to keep into the original file, then delete the copy.")

    def _host_of(self, sha: str) -> str:
        return self.store.commit_info(sha).trailers.get("Hermes-Host") or "remote"

    def _keep_both(self, r: Round, theirs: str):
        def keep(path: str, base: bytes | None, ours: bytes | None, other: bytes | None) -> dict[str, bytes | None]:
            if ours is None or other is None:  # deleted on one side, changed on the other: keep the change
                return {path: ours if ours is not None else other}
            host = self._last_host(theirs, path)
            copy = beside(path, host)
            r.conflicts.append(copy)
            return {path: ours, copy: other}

        return keep

    def _last_host(self, sha: str, path: str) -> str:
        out = self.store._git("log", "-1", "--format=%B", sha, "--", path)
        from ..store.git import parse_trailers

        return parse_trailers(out).get("Hermes-Host") or "remote"

    def _push_main(self, r: Round) -> bool:
        """Push main with the pending `done` claims, atomically. False: lost a race, go again."""
        ours = self.store.head()
        theirs = self.store.rev(mirror_of(self.branch_ref))
        updates = self.claims.pending()
        if ours != theirs:
            updates = [RefUpdate(self.branch_ref, ours, theirs), *updates]
        if not updates:
            return True
        result = self.remote.push(updates)
        lost = self.claims.settle(result.accepted, [ref for ref, why in result.rejected.items() if "stale" in why])
        if result.ok:
            r.pushed = r.pushed or self.branch_ref in result.accepted
            return True
        self._withdraw_lost(r, lost)
        return False

    def _withdraw_lost(self, r: Round, lost: list[tuple[str, list[str]]]) -> None:
        """A cron run whose claim expired and was taken over: the other machine's output stands,
        this one's is removed from main (where it still holds exactly what was committed)."""
        from .cron_runner import OUTPUTS_DIR

        paths = []
        for key, kept in lost:
            parsed = parse_cron_key(key)
            if parsed:
                job, due = parsed
                paths.append(f"{OUTPUTS_DIR}/{job}/{due:%Y%m%d-%H%M%S}.md")
            paths += kept
        head = self.store.head()
        gone = [p for p in paths if self.store.read_file(head, p) is not None
                and (self.vault.root / p).is_file() and (self.vault.root / p).read_bytes() == self.store.read_file(head, p)]
        if not gone:
            return
        for p in gone:
            (self.vault.root / p).unlink()
        self.store.commit_paths(gone, "sync: withdraw a result another machine also made",
                                {**SYNC_TRAILERS, "Hermes-Host": self.host}, author=self.vault.config.git.author,
                                body="This machine's claim expired while it worked; the machine that took the claim over "
                                     "published the result that stands.")
        r.withdrawn += gone

    # -- learned branches and rejected changes ---------------------------------------------------
    def _sync_learned(self, r: Round) -> None:
        base = self._load_base()
        local: dict[str, str] = {}
        mirror: dict[str, str] = {}
        for prefix in LEARNED_REFS:
            local.update(self._refs(prefix))
            mirror.update({self._unmirror(k): v for k, v in self._refs(mirror_of(prefix)).items()})
        updates = []
        for ref in sorted(set(local) | set(mirror) | set(base)):
            here, there, was = local.get(ref), mirror.get(ref), base.get(ref)
            if here == there:
                continue
            if here == was:  # changed on the remote only: adopt it
                self._set_local(ref, there, here)
                r.refs.append(ref)
            elif there == was:  # changed here only: publish it
                updates.append(RefUpdate(ref, here, there))
            else:  # both: the remote's stands (a branch name made on two machines, never by hermes-fs)
                log.warning("sync: %s changed here and on the remote; keeping the remote's", ref)
                self._set_local(ref, there, here)
        if updates:
            result = self.remote.push(updates, atomic=False)
            r.refs += result.accepted
            if result.accepted:
                self.remote.fetch(*LEARNED_REFS)
        agreed = {}
        for prefix in LEARNED_REFS:
            agreed.update({self._unmirror(k): v for k, v in self._refs(mirror_of(prefix)).items()})
        atomic_write(self.refs_path, json.dumps(agreed, indent=1))

    def _load_base(self) -> dict[str, str]:
        try:
            return json.loads(self.refs_path.read_text())
        except (OSError, ValueError):
            return {}

    def _set_local(self, ref: str, new: str | None, old: str | None) -> None:
        if new is None:
            if old:
                self.store._git("update-ref", "-d", ref, old)
        else:
            self.store._git("update-ref", ref, new, old or "0" * 40)

    def _notify(self, title: str, body: str) -> None:
        try:
            self.vault.notifier.event("sync_conflict", title, body)
        except Exception:
            log.exception("sync: notification failed")


def _format_resolver(store: GitStore):
    from ..learning.changes import format_resolver

    return format_resolver(store)


__all__ = ["Round", "Syncer", "beside", "claims_for", "conflict_files", "format_message", "remote_for"]
