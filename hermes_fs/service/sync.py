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
   the remote main that was merged; a lost race (someone pushed first) goes back to 1 — and the
   first loss of a round also pushes this machine's main to its own ref on the remote,
   `refs/hermes/hosts/<host>/main`, which only this machine writes, so that push never races.
   Every round merges the other machines' host refs too (after the remote main). So an edit
   reaches the others within a round or two even while its machine keeps losing the race for main
   (three machines and a phone committing every second, each attempt taking 0.5-4 s on a loaded
   machine, lose it most of the time, and a machine back from a partition, with the most to merge,
   lost it longest); main itself still converges through the race. The daemon's first round
   after a start or an outage pushes the host ref before step 1, so what was written meanwhile
   goes up before the fetch and merge of what the others wrote;
5. publish and adopt learned branches (`refine/*`, `learn/*`) and rejected changes, three-way
   against what both sides had at the last round (.hermes/sync/refs.json);
6. claim due times it missed while offline (one push); once an hour, prune the done claims past
   their retention (store/claims.py, `prunable`). The daemon renews its running claims and takes
   over those of dead holders on a timer of its own (SyncService), never inside a round.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote, unquote

from ..errors import ConflictError, GitError, HermesError, Overtaken
from ..store.claims import LEDGER_NAME, ClaimRecord, Ledger, RefClaims, cron_key, parse_cron_key
from ..store.files import atomic_write
from ..store.git import MAIN, GitStore, format_message
from ..store.host import host_id
from ..store.provenance import HOST, Act
from ..store.remote import HOSTS, MIRROR, RefUpdate, Remote, Unreachable, mirror_of
from ..store.vault import Vault
from .host import DaemonHost
from .watcher import written_events

log = logging.getLogger("hermes_fs.sync")

CONFLICT_MARK = ".conflict-"
CRON_OUTPUTS = "outputs/cron/"
LEARNED_REFS = ("refs/heads/refine/", "refs/heads/learn/", "refs/heads/curate/", "refs/hermes/rejected/")
PUSH_TRIES = 8  # a push that lost a race fetches main, merges and tries again, this many times per round
RUN_AT_ONCE = 4
"""At most this many cron runs at once may a machine start from takeovers and catch-ups; the rest
wait in its queue, their claims held and renewed (SyncService._start_queued). After a partition,
or when the other machines died holding many claims, starting all at once started 96 agent runs
at once on one 2-core machine (the chaos bench), each slower than the claims' expiry."""
PUSH_GAP_S = 1.0  # after a push of main, the next round waits this long even if main moved again
MERGE_TRIES = 4
"""A merge overtaken by a person's keystroke (or a commit of it) is tried again at once, this many
times in all, before it waits for the next round: with a person typing in the file every second
and a merge taking most of a second on a loaded machine, waiting for a round in which nobody types
kept the other machines' edits out for tens of seconds (the sync chaos bench)."""


RETRY_PAUSE_MAX_S = 2.0


def host_ref(host: str) -> str:
    """The remote ref only machine `host` writes: its main, as it last pushed it."""
    return f"{HOSTS}{host}/main"


def retry_pause(attempt: int, last_s: float) -> float:
    """How long a machine that lost the race for main waits before its next attempt: at random
    within the time its last attempt took (fetch, merge, push), twice that from the third on,
    never more than RETRY_PAUSE_MAX_S. The machines that collided were all inside that window at
    once; spread over it, they seldom collide again, and the loser's merge does not take the CPU
    the winner's push needs. (A fixed 0.15 s pause was far shorter than an attempt on a loaded
    machine, 0.5-2 s: the losers collided again and again, up to 8 attempts and 15 s a round.
    Uncapped, one attempt slowed to a minute by a busy machine was followed by a minute's pause.)"""
    return random.uniform(0, min(max(last_s, 0.05) * min(attempt, 2), RETRY_PAUSE_MAX_S))

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
        raise HermesError(f"the vault cloned into {path} has no `remote:` in its hermes.yaml: on the machine where "
                          "you added it, commit hermes.yaml (`hermes-fs sync` does, and so does a running daemon), "
                          f"then remove {path} and clone again")
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
                              Ledger(vault.state_dir / LEDGER_NAME), sync_dir(vault) / "claims.json")
            _claims[root] = found
        return found


@contextmanager
def deciding(vault: Vault, branch: str) -> Iterator[None]:
    """Around a person's merge or reject of a learned change in a synced vault: the decision on
    that exact change (branch and tip) is claimed on the remote first, so when two machines decide
    at once exactly one does and the other is told who did. The decision is published at once.
    Offline, no decision is made (nobody could be asked whether another machine made one)."""
    from ..store.claims import Take

    if remote_url(vault) is None:
        yield
        return
    tip = vault.git.rev(f"refs/heads/{branch}") or "gone"
    key = f"review/{branch}/{tip[:12]}"
    claims = claims_for(vault)
    outcome = claims.take(key)
    if outcome == Take.OFFLINE:
        raise HermesError(f"the remote cannot be reached, so {branch} stays pending: another machine may be "
                          "deciding on it; try again when the remote answers")
    if outcome == Take.TAKEN:
        rec = claims.holder(key)
        who = f"machine {rec.host}" if rec else "another machine"
        raise HermesError(f"{branch} was already decided on {who}; `hermes-fs sync` shows the result")
    try:
        yield
    except BaseException:
        claims.release(key)
        raise
    claims.finish(key)
    try:
        Syncer(vault, claims).round(work=False)
    except HermesError as exc:
        log.warning("sync after deciding %s: %s", branch, exc)  # the daemon pushes it later


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


class Beside:
    """A call run on a thread of its own while the caller goes on; `join` waits for it and raises
    what it raised (record, then re-raise: a failure is never lost on a thread)."""

    def __init__(self, call: Callable[..., Any], *args: Any):
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(call, *args), name="sync-beside", daemon=True)
        self.thread.start()

    def _run(self, call: Callable[..., Any], *args: Any) -> None:
        try:
            call(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller in join()
            self.error = exc

    def join(self, quiet: bool = False) -> None:
        """Wait for the call; raise what it raised unless `quiet` (the caller has its own error)."""
        self.thread.join()
        if self.error is not None and not quiet:
            raise self.error


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
    pruned: list[str] = field(default_factory=list)  # done claims past their retention, deleted
    hosted: bool = False  # main lost the race; this machine's main went up to its host ref instead

    def line(self) -> str:
        if self.offline:
            return f"offline: {self.offline}"
        parts = [("fetched" if self.fetched else "up to date"), ("merged" if self.merged else ""),
                 ("pushed" if self.pushed else "pushed to its host ref" if self.hosted else ""),
                 (f"{len(self.refs)} learned ref(s)" if self.refs else ""),
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
        self.room: Callable[[], int | None] = lambda: None  # how many missed due times a round may claim
        self.stopping = threading.Event()  # set when the daemon stops: a round stops retrying at once
        self.host_first = False  # the daemon's rounds: after a start or an outage, the host ref goes up first
        self.away = True  # no round of this process has reached the remote yet, or the last could not

    # -- one round -------------------------------------------------------------------------------
    def round(self, work: bool = True) -> Round:
        """One round; with `work` (the daemon), also claim due times missed while offline (at
        most `room()` of them), for the caller to run. Dead machines' claims are the renewer's."""
        with self.lock:
            r = Round()
            began = time.time()
            try:
                took = 0.0  # how long the last attempt took: the window in which machines collide
                for attempt in range(PUSH_TRIES):
                    started = time.time()
                    if attempt == 0:
                        self._first_attempt(r)
                    else:  # lost a race for main: a pause, then main and the machines' own refs again
                        if self.stopping.wait(retry_pause(attempt, took)):
                            break
                        started = time.time()
                        self.remote.fetch(self.branch_ref, HOSTS)
                        self._integrate(r)
                        self._integrate_hosts(r)
                    pushed = self._push_main(r)
                    if not pushed and self._unhosted():
                        self._push_host(r)
                    took = time.time() - started
                    log.debug("sync: attempt %d took %.2f s, pushed: %s", attempt, took, pushed)
                    if pushed:
                        break
                self.away = False
                self._sync_learned(r)
                if work:
                    r.caught_up = self.claims.take_missed(self.room())
                    if self.claims.prune_due():
                        r.pruned = self.claims.prune()
            except Unreachable as exc:
                r.offline = str(exc)
                self.away = True
            log.debug("sync: round of %.2f s: %s", time.time() - began, r.line())
            return r

    def _first_attempt(self, r: Round) -> None:
        """The start of a round: what the remote and the other machines have, merged into main
        (the push follows). Each step's time goes to the debug log: after a restart this is what
        the other machines' edits wait for (chaos bench: about 0.6 s in all, half fetch, half merge).

        After a start or an outage (`host_first`), this machine's main as it is goes up on its
        host ref while the fetch and merge run: what was written meanwhile is on the remote at
        once (see _push_host), and what the others wrote no longer waits for that push (0.10-0.13
        s of a restarted daemon's first round in the chaos bench, when it went first). The remote's
        refs are not listed first then: after a start or an outage they have moved, nearly always."""
        steps = [time.time()]
        hosting = None
        if self.host_first and self.away and self._unhosted():
            hosting = Beside(self._push_host, r, self.store.head())  # main as it is before the merge
        try:
            self._fetch(r, listed=not self.away)
            steps.append(time.time())
            self._withdraw_lost(r, self.claims.lost_to_takeover())
            self._integrate(r)
            steps.append(time.time())
            self._integrate_hosts(r)
            steps.append(time.time())
        except BaseException:
            if hosting is not None:
                hosting.join(quiet=True)  # what failed here is the error to report
            raise
        if hosting is not None:
            hosting.join()  # the push's own failure (unreachable) is raised here
        steps.append(time.time())
        log.debug("sync: fetch %.2f s, merge main %.2f s, merge hosts %.2f s, host ref after that %.2f s",
                  *(b - a for a, b in zip(steps, steps[1:], strict=False)))

    def _fetch(self, r: Round, listed: bool = True) -> None:
        """Fetch if the remote's refs moved; `listed`: find out with one cheap ls-remote first."""
        if listed:
            there = self.remote.refs()
            here = {self._unmirror(ref): sha for ref, sha in self._refs(MIRROR).items()}
            if there == here:
                return
        self.remote.fetch()
        self.claims.refresh()
        r.fetched = True

    @staticmethod
    def _unmirror(ref: str) -> str:
        return "refs/" + ref.removeprefix(MIRROR)

    def _refs(self, *prefixes: str) -> dict[str, str]:
        out = self.store._git("for-each-ref", "--format=%(objectname) %(refname)", *prefixes)
        found = {}
        for line in out.splitlines():
            sha, _, ref = line.partition(" ")
            found[ref] = sha
        return found

    def _integrate(self, r: Round) -> None:
        theirs = self.store.rev(mirror_of(self.branch_ref))
        if theirs is not None:
            self._merge(r, theirs, f"sync: merge {self._host_of(theirs)}'s main", published=True)

    def _integrate_hosts(self, r: Round) -> None:
        """Merge what the other machines have and the remote main may not yet (their host refs)."""
        own = mirror_of(host_ref(self.host))
        head = self.store.head()
        for ref, sha in sorted(self._refs(mirror_of(HOSTS)).items()):
            if ref == own or self.store.is_ancestor(sha, head):
                continue
            host = ref.removeprefix(mirror_of(HOSTS)).split("/", 1)[0]
            self._merge(r, sha, f"sync: merge {host}'s main (not yet on the remote's main)", published=False)
            head = self.store.head()

    def _unhosted(self) -> bool:
        """Has main here a commit of its own that neither the remote's main nor any machine's
        host ref holds (as last fetched)? Then it goes up on this machine's host ref at once: a
        round can retry main for many seconds, and an edit made meanwhile waited for its end."""
        out = self.store._git("rev-list", "-n1", "--no-merges", "HEAD", "--not", "--glob=" + mirror_of(HOSTS),
                              *([m] if (m := self.store.rev(mirror_of(self.branch_ref))) else []))
        return bool(out.strip())

    def _push_host(self, r: Round, ours: str | None = None) -> None:
        """Put this machine's main on its own ref on the remote (only this machine writes it, so
        no race to lose; compare-and-swap all the same, against the value it last pushed).

        Besides after a lost race, the daemon's first round after a start or an outage does this
        at once, beside its fetch and merge (`host_first`, _first_attempt), with main as it was
        before that merge: what was written meanwhile is then on the remote at once, where the
        other machines merge it, instead of after this round's fetch and merge of everything the
        others wrote meanwhile: after a partition healed in the chaos bench such an edit reached
        the remote 2.2-2.8 s later (median; p95 5.1-6.7 s), then 0.6-1.0 s."""
        ref = host_ref(self.host)
        ours = ours or self.store.head()
        for _ in range(2):
            was = self.store.rev(mirror_of(ref))
            if was == ours:
                return
            result = self.remote.push([RefUpdate(ref, ours, was)])
            if result.ok:  # only this machine writes that ref: the remote has `ours` now, whatever
                self.store._git("update-ref", mirror_of(ref), ours)  # a fetch beside it mirrored
                r.hosted = True
                return
            self.remote.fetch_ref(ref)  # its last push went through unseen (a crash, a lost answer)

    def _merge(self, r: Round, theirs: str, summary: str, published: bool) -> None:
        before, mark = self.store.head(), len(r.conflicts)
        for attempt in range(MERGE_TRIES):
            del r.conflicts[mark:]  # the copies an overtaken attempt would have kept are not kept
            try:
                message = format_message(summary)
                new = self.store.integrate(theirs, message, Act.sync(self.host), resolve=_format_resolver(self.store),
                                           keep_both=self._keep_both(r, theirs, published), recheck=_merges_by_entry)
                break
            except Overtaken as exc:  # a person typed (or main moved) meanwhile: their text stays, again
                if attempt + 1 < MERGE_TRIES and not self.stopping.is_set():
                    log.debug("sync: merging again at once: %s", exc)
                    continue
                self._not_now(r, mark, exc)
                return
            except ConflictError as exc:  # a person's text that cannot be committed is in the way
                self._not_now(r, mark, exc)
                return
            except GitError as exc:
                if "in progress" in str(exc) or "checked out" in str(exc):  # a person's git operation
                    self._not_now(r, mark, exc)
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

    @staticmethod
    def _not_now(r: Round, mark: int, exc: Exception) -> None:
        del r.conflicts[mark:]
        log.info("sync: not merging now: %s", exc)

    def _host_of(self, sha: str) -> str:
        return self.store.commit_info(sha).trailers.get(HOST) or "remote"

    def _keep_both(self, r: Round, theirs: str, published: bool = True):
        def keep(path: str, base: bytes | None, ours: bytes | None, other: bytes | None) -> dict[str, bytes | None]:
            if ours is None or other is None:  # deleted on one side, changed on the other: keep the change
                return {path: ours if ours is not None else other}
            if path.startswith(CRON_OUTPUTS):  # one due time run on two machines (a claim lost while
                # cut off): the published run stands, so there is one output; between two runs not
                # yet published, this machine's stays until the remote's main says which stands
                return {path: other if published else ours}
            host = self._last_host(theirs, path)
            copy = beside(path, host)
            r.conflicts.append(copy)
            return {path: ours, copy: other}

        return keep

    def _last_host(self, sha: str, path: str) -> str:
        out = self.store._git("log", "-1", "--format=%B", sha, "--", path)
        from ..store.git import parse_trailers

        return parse_trailers(out).get(HOST) or "remote"

    def _finish_committed(self) -> None:
        """A claim is done exactly when its result is on main: so the `done` claim always goes up
        in the same atomic push as the result, even if the process died between the two."""
        head = self.store.head()
        for key in self.claims.running():
            rel = result_of(key)
            if rel and self.store.read_file(head, rel) is not None:
                self.claims.finish(key, [rel])
            elif key.startswith(INBOX_KEY) and _request_done(self.vault, key, head):
                self.claims.finish(key)
            elif self.claims.held[key].orphan and parse_cron_key(key) is None:
                self.claims.forget(key)  # a cron run's is taken over at once by the renewer (`dead`)

    def _push_main(self, r: Round) -> bool:
        """Push main with the pending `done` claims, atomically. False: lost a race, go again."""
        self._finish_committed()
        ours = self.store.head()
        theirs = self.store.rev(mirror_of(self.branch_ref))
        if theirs is not None and not self.store.is_ancestor(theirs, ours):
            return False  # not merged yet (a person was typing there): never push over published history
        with self.claims.push_lock:  # the renewer never moves a claim between `pending` and the push
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
        """A request whose claim expired and was taken over: the other machine's answer stands,
        this one's is removed from main (where it still holds exactly what was committed), and the
        request's file is put back as the remote's main has it, so main goes on asking until the
        winner answers (were that one to die too, the next takeover finds it).

        A cron run is never withdrawn: its output has one path per due time, so two runs never
        make two outputs (the merge keeps the published one), while a withdrawal can leave none —
        the machine that took the claim over closes it on an output it finds on the remote's main,
        which may have got there from this machine's host ref after this machine last fetched, so
        a mirror of main cannot say it is safe (runs withdrawn when a renewal found the claim lost
        left 13 of 100 due times of a chaos run without output)."""
        paths, asked = [], []
        mirror = self.store.rev(mirror_of(self.branch_ref))
        for key, kept in lost:
            if key.startswith(INBOX_KEY):
                answers = self._unpublished_answers(key)
                paths += kept + answers
                asked += [f"inbox/{_request_name(key)}"] if answers else []
        head = self.store.head()
        gone = [p for p in paths if self.store.read_file(head, p) is not None
                and (self.vault.root / p).is_file() and (self.vault.root / p).read_bytes() == self.store.read_file(head, p)]
        if not gone:
            return
        back = [(rel, data) for rel in asked if self.store.read_file(head, rel) is None
                and not (self.vault.root / rel).exists()
                and (data := self.store.read_file(mirror, rel) if mirror else None) is not None]
        for p in gone:
            (self.vault.root / p).unlink()
        for rel, data in back:
            atomic_write(self.vault.root / rel, data)
        self.store.commit_paths(gone + [rel for rel, _ in back], "sync: withdraw a result another machine also made",
                                Act.sync(self.host),
                                body="This machine's claim expired while it worked; the machine that took the claim over "
                                     "publishes the result that stands.")
        r.withdrawn += gone

    def _unpublished_answers(self, key: str) -> list[str]:
        """The results of the request claimed as `key` that this machine committed (its Hermes-Host)
        and the remote's main does not have yet; a request's answer names no claim, so it is found
        by its file name. Another machine's answer merged from its host ref is never one of them."""
        mirror = self.store.rev(mirror_of(self.branch_ref))
        if mirror is None:
            return []
        name = _request_name(key)
        out = self.store._git("log", "--no-merges", "--diff-filter=A", "--no-renames", "--name-only",
                              f"--format=%x00%(trailers:key={HOST},valueonly,separator=)", f"{mirror}..HEAD",
                              "--", "outputs/requests/")
        found = []
        for commit in out.split("\0")[1:]:
            host, *paths = [line.strip() for line in commit.strip().splitlines()]
            if host == self.host:
                found += [p for p in paths if p and p.endswith((f"-{name}", f"-{name}.md"))]
        return found

    # -- learned branches and rejected changes ---------------------------------------------------
    def _sync_learned(self, r: Round) -> None:
        base = self._load_base()
        local, mirror = self._learned_refs()
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
        agreed = self._learned_refs()[1] if updates else mirror
        if agreed != base:
            atomic_write(self.refs_path, json.dumps(agreed, indent=1))

    def _learned_refs(self) -> tuple[dict[str, str], dict[str, str]]:
        """(local, mirrored) learned refs, both by their name on the remote, in one git call: a
        round runs every second or so on each machine, and each git call counts."""
        local, mirror = {}, {}
        for ref, sha in self._refs(*LEARNED_REFS, *map(mirror_of, LEARNED_REFS)).items():
            if ref.startswith(MIRROR):
                mirror[self._unmirror(ref)] = sha
            else:
                local[ref] = sha
        return local, mirror

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


INBOX_KEY = "inbox/"


def request_key(vault: Vault, rel: str) -> str | None:
    """The claim key of an inbox request that arrived through git (tracked on main, so every
    machine sees it); None for one dropped on this machine (only this machine can take it)."""
    blob = ""
    # main, or the fetched remote main: a merge writes the file before main moves, and the watcher
    # may see it in between; it is still a request that every machine sees
    for commit in (MAIN, mirror_of("refs/heads/" + (vault.config.remote.branch if vault.config.remote else MAIN))):
        blob = vault.git._git("rev-parse", "-q", "--verify", f"{commit}:{rel}", ok=(0, 1, 128)).strip()
        if blob:
            break
    if not blob:
        return None
    return f"{INBOX_KEY}{blob[:20]}-{quote(PurePosixPath(rel).name, safe='-_')}"


def claim_request(vault: Vault, rel: str) -> tuple[bool, str | None]:
    """May this machine take the inbox request `rel`, and under which claim key? Yes for a request
    dropped here (no key); for one that came through git, only if this machine wins its claim on
    the remote (offline: not now — it is taken when the remote answers again, or by a machine that
    can reach it). The key goes with the request (inbox.Claim): once answered anywhere, main no
    longer holds the request, so it can no longer be computed from main."""
    if remote_url(vault) is None:
        return True, None
    key = request_key(vault, rel)
    if key is None:
        return True, None
    from ..store.claims import Take

    claims = claims_for(vault)
    if not _held_here(claims, key) and claims.take(key) != Take.WON:
        return False, key
    if _still_asked(vault, claims, rel, key):
        return True, key
    claims.release(key)
    return False, key


def _held_here(claims: RefClaims, key: str) -> bool:
    """Is a request's claim already this machine's, its work not done? The renewer took it over
    from a dead machine and wrote the request again for the inbox; or a previous process of this
    machine claimed it and died before taking the file (it is adopted: renewed again from its
    last value, and a takeover meanwhile shows at the next renewal)."""
    held = claims.held.get(key)
    return held is not None and not held.done and (not held.orphan or claims.adopt(key))


def adopt_request(vault: Vault, key: str | None, claims: RefClaims | None = None) -> bool:
    """This machine answers again, after a restart, a request it had claimed as `key` (its daemon
    resumes every claimed request at start): its claim goes on being renewed. Left an orphan, it
    was dropped at the next round and never renewed: once expired another machine took the
    request over and answered it as well, and this machine's answer went up without its claim.
    Adopted, it is renewed until the answer is on main, and a claim lost anyway withdraws this
    machine's answer (`_withdraw_lost`). False: no key or no remote, or no such claim held here."""
    if key is None or remote_url(vault) is None:
        return False
    return (claims or claims_for(vault)).adopt(key)


def claim_lost(vault: Vault, key: str | None) -> bool:
    """Has this machine lost the claim `key` of a request that came through git (this process does
    not hold it: taken over while this machine was cut off or too slow to renew it)? Then the
    machine that took it over answers it, and this one must not: its answer, committed anyway, went
    up beside the other one (twice-answered requests in the chaos bench). No network."""
    if key is None or remote_url(vault) is None:
        return False
    held = claims_for(vault).held.get(key)
    return held is None or held.orphan


def _still_asked(vault: Vault, claims: RefClaims, rel: str, key: str) -> bool:
    """Does the remote's main still hold this request? A machine far behind (offline for longer
    than claims are kept) can hold a request that was answered long ago and whose claim has been
    pruned; winning the claim then proves nothing, the remote's main does (an answer removes the
    request in the same atomic push that marks its claim done). Unknown (offline): not now."""
    branch = "refs/heads/" + (vault.config.remote.branch if vault.config.remote else MAIN)
    try:
        main = claims.remote.fetch_ref(branch)
    except Unreachable:
        return False
    if main is None:
        return False
    blob = vault.git._git("rev-parse", "-q", "--verify", f"{main}:{rel}", ok=(0, 1, 128)).strip()
    return bool(blob) and key.removeprefix(INBOX_KEY).startswith(blob[:20] + "-")


def _request_name(key: str) -> str:
    """The file name in inbox/ of the request claimed as `key` (`inbox/<blob>-<name>`)."""
    return unquote(key.removeprefix(INBOX_KEY).split("-", 1)[1])


def _request_done(vault: Vault, key: str, head: str) -> bool:
    """A claimed request is done once main no longer holds it (its removal is committed with its result)."""
    name = _request_name(key)
    blob = key.removeprefix(INBOX_KEY).split("-", 1)[0]
    data = vault.git._git("rev-parse", "-q", "--verify", f"{head}:inbox/{name}", ok=(0, 1, 128)).strip()
    return not data.startswith(blob)


def result_of(key: str) -> str | None:
    """The file that holds the result of a claimed piece of work (a cron run's output)."""
    parsed = parse_cron_key(key)
    if parsed is None:
        return None
    from .cron_runner import output_path

    return output_path(*parsed)


def _merges_by_entry(path: str) -> bool:
    from ..mind.merge import merges_by_entry

    return merges_by_entry(path)


def _format_resolver(store: GitStore):
    from ..learning.changes import format_resolver

    return format_resolver(store)


__all__ = ["Round", "Syncer", "beside", "claims_for", "conflict_files", "format_message", "remote_for"]


def watch_main(root: Path, poke: Callable[[], None]) -> Any:
    """A started watchdog Observer calling `poke` whenever main moves (git writes main.lock and
    renames it). Not when main is only read: every git command opens the ref, so a round (dozens
    of git calls) poked on reads would start the next at once, for ever — the sync thread spun
    at a third of a core per idle daemon, and three of them saturated this 2-core machine."""
    from watchdog.events import FileSystemEventHandler
    from watchdog.observers import Observer

    class MainMoved(FileSystemEventHandler):
        def on_any_event(self, event) -> None:
            if event.is_directory:
                return
            if PurePosixPath(str(getattr(event, "dest_path", "") or event.src_path)).name == MAIN:
                poke()

    observer = Observer()
    observer.schedule(MainMoved(), str(root / ".git" / "refs" / "heads"), recursive=False,
                      event_filter=written_events())  # reads are not even queued (watcher.py)
    observer.start()
    return observer


class SyncService:
    """The daemon's continuous sync (a DaemonService): a round as soon as main moves here (so
    this machine's commits go up at once) and every `sync.interval_s` (one cheap ls-remote), so
    the interval, not git, sets the delay. On a timer of its own it renews this machine's claims
    and takes over those of machines that died; it runs what it took over, and the due times it
    missed while offline, at most RUN_AT_ONCE at a time."""

    name = "sync"

    def __init__(self, daemon: DaemonHost):
        self.daemon = daemon
        self.vault = daemon.vault
        self.syncer = Syncer(self.vault)
        self.syncer.host_first = True
        self.syncer.claims.on_finish = self.poke
        self.syncer.room = self._room
        self.wake = threading.Event()
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None
        self.renewer: threading.Thread | None = None
        self.observer: Any = None  # watchdog's Observer, started with the service
        self.offline: str | None = None
        self.queue: dict[str, tuple[str, datetime, str]] = {}  # claim key -> (job, due, why): held, waiting for a slot
        self.queue_lock = threading.Lock()

    def poke(self) -> None:
        self.wake.set()

    def start(self) -> None:
        self.daemon.catch_up.hold(self.name)  # agent work starts after the first round (catch_up.py)
        self.observer = watch_main(self.vault.root, self.poke)
        self.thread = threading.Thread(target=self._loop, name="sync", daemon=True)
        self.thread.start()
        self.renewer = threading.Thread(target=self._renew_loop, name="sync-renew", daemon=True)
        self.renewer.start()

    def stop(self) -> None:
        self.stopped.set()
        self.syncer.stopping.set()
        self.wake.set()
        if self.observer is not None:
            self.observer.stop()
            self.observer.join(5)
        if self.thread is not None:
            self.thread.join(30)
        if self.renewer is not None:
            self.renewer.join(10)

    def _renew_loop(self) -> None:
        """Running claims are renewed on their own timer (every sixth of their time), never
        behind a slow round: a live, connected machine never loses a claim it is working on. The
        same timer looks at the remote's claims itself and takes over those of dead machines as
        soon as they expire, and starts the runs taken over as run slots free up. It looks at once
        at start (a restarted machine's own dead runs are taken over without waiting a turn) and
        whatever the last round said: a round that is still retrying its push of main has not
        said the remote answers again, and waiting for it kept takeovers back."""
        tick = self.vault.config.sync.claim_ttl_s * self.syncer.claims.RENEW_EVERY / 2
        self._wait_begun()  # which dead runs to take over depends on the jobs
        while not self.stopped.is_set():
            began = time.time()
            try:  # renewals first: a machine back from a partition may have a second before its claims expire
                for key in self.syncer.claims.renew():
                    self.daemon.error(f"sync: lost claim {key} (cut off past its expiry; another machine took it over)")
                renewed = time.time()
                self.syncer.claims.look()
                looked = time.time()
                self._take_over(self.syncer.claims.dead())
                log.debug("sync: renewer: renewed in %.2f s, looked in %.2f s, took over in %.2f s, %d queued",
                          renewed - began, looked - renewed, time.time() - looked, len(self.queue))
            except Unreachable:
                pass  # offline: the claims hold until their expiry
            except Exception:
                log.exception("sync: renewing claims failed")
            self._start_queued()
            self.stopped.wait(tick)

    def _loop(self) -> None:
        while not self.stopped.is_set():
            self.wake.clear()
            pushed = False
            try:
                r = self.syncer.round()
                self._wait_begun()
                self._after(r)
                pushed = r.pushed
            except Exception as exc:  # the sync thread never dies: report, wait, try again
                log.exception("sync: round failed")
                self.daemon.error(f"sync failed: {type(exc).__name__}: {exc}")
            self.daemon.catch_up.release(self.name)  # caught up, or tried: the work waits no longer
            if pushed:  # let the other machines in: back-to-back pushes from one machine make
                self.stopped.wait(PUSH_GAP_S)  # every other machine's merge lose the race for main
            self.wake.wait(self.vault.config.sync.interval_s)

    def _wait_begun(self) -> None:
        """Until the daemon has loaded its jobs and started its parts: this service starts before
        them (services.py), and what it runs or lets go depends on the jobs. A daemon stopping
        meanwhile opens it too (CatchUp.give_up)."""
        while not self.daemon.catch_up.begun.wait(0.5) and not self.stopped.is_set():
            pass

    def _after(self, r: Round) -> None:
        if r.offline:
            if self.offline is None:
                self.daemon.error(f"sync: remote unreachable ({r.offline}); due jobs wait until it answers")
            self.offline = r.offline
            return
        if self.offline is not None:
            self.daemon.note("sync: remote reachable again")
            self.offline = None
        for path in r.conflicts:
            self.daemon.note(f"sync: conflict, the other machine's version is kept beside: {path}")
        for path in r.withdrawn:
            self.daemon.error(f"sync: withdrew {path}: this machine's claim expired while it worked; the other result stands")
        for job, due in r.caught_up:
            self._queue(cron_key(job, due), job, due, "missed while offline, nobody ran it")
        self._start_queued()
        if r.pruned:
            self.daemon.note(f"sync: pruned {len(r.pruned)} done claim(s) older than a week from the remote")

    def _take_over(self, records: list[ClaimRecord]) -> None:
        """Take over the claims of dead holders (renewer thread only: never behind, nor in the way
        of, a round), in one push: every cron one this machine may run, its run queued (`_queue`),
        and every request whose file is here, written again once its claim is won so the inbox
        takes it (its claim step finds the claim held here). Taking over is not starting: a claim
        taken over is renewed while its run waits for a slot, so it never expires again meanwhile.
        Taking over only as many as there were free slots left the others to expire further (a
        machine with four runs going took none), and the takeovers of the chaos bench came a
        minute after the expiry; a request's claim taken over by its inbox, one after the other,
        three network calls each, came up to a minute late too."""
        cron, asked = [], {}
        for rec in records:
            if rec.key.startswith(INBOX_KEY):
                if (data := self._asked_here(rec)) is not None:
                    asked[rec.key] = (rec, data)
            elif self._may_take(rec):
                cron.append(rec)
            elif rec.host == self.syncer.host:
                self.syncer.claims.forget(rec.key)  # an orphan of a job gone or pinned elsewhere: it expires
        won = self.syncer.claims.take_over(cron + [rec for rec, _ in asked.values()])
        for key in won:
            if key in asked:
                self._redrop(*asked[key])
        holders = {rec.key: rec.host for rec in cron}
        mirror, head = self.syncer.store.rev(mirror_of(self.syncer.branch_ref)), self.syncer.store.head()
        for key in (k for k in won if k in holders):
            rel = result_of(key)
            # published, the claim is only closed: on the remote's main (main here may hold a dead
            # machine's result merged from its host ref and not published yet), or here if this
            # machine made it (a process of it that died)
            where = (mirror, head) if holders[key] == self.syncer.host else (mirror,)
            if rel and any(self.syncer.store.read_file(c, rel) is not None for c in where if c):
                self.syncer.claims.finish(key, [rel])
                continue
            parsed = parse_cron_key(key)
            if parsed:
                why = "whose claim expired" if holders[key] != self.syncer.host else "a process of this machine that died"
                self._queue(key, *parsed, f"took over from {holders[key]}, {why}")

    def _queue(self, key: str, job: str, due: datetime, why: str) -> None:
        """A due time this machine holds the claim of (taken over, caught up): run when a slot is free."""
        with self.queue_lock:
            self.queue[key] = (job, due, why)

    def _start_queued(self) -> None:
        """Start queued runs, the oldest due first, while fewer than RUN_AT_ONCE run here. A claim
        lost meanwhile (cut off past its expiry) or already done is dropped; one of a job gone or
        now pinned elsewhere is let go (it expires); one whose job is running waits."""
        claims = self.syncer.claims
        with self.queue_lock:
            for key, (job, due, why) in sorted(self.queue.items(), key=lambda item: item[1][1]):
                if self._slots() <= 0:
                    break
                held = claims.held.get(key)
                if held is None or held.done:
                    del self.queue[key]
                    continue
                found = self._jobs().get(job)
                if found is None or (getattr(found, "host", None) or self.syncer.host) != self.syncer.host:
                    del self.queue[key]
                    claims.forget(key)
                    continue
                if self._run(job, due, why):
                    del self.queue[key]

    def _slots(self) -> int:
        """How many more cron runs this machine may start now (RUN_AT_ONCE)."""
        scheduler = self.daemon.scheduler
        return max(0, RUN_AT_ONCE - (len(scheduler.running) if scheduler is not None else 0))

    def _room(self) -> int:
        """How many due times missed offline a round may claim: the free slots the queue leaves."""
        return max(0, self._slots() - len(self.queue))

    def _may_take(self, rec: ClaimRecord) -> bool:
        parsed = parse_cron_key(rec.key)
        if parsed is None or parsed[0] not in self._jobs():
            return False
        if (getattr(self._jobs()[parsed[0]], "host", None) or self.syncer.host) != self.syncer.host:
            return False  # pinned to another machine now: not this one's to take
        scheduler = self.daemon.scheduler
        # this machine runs that job right now: not a dead machine's claim to take
        return scheduler is None or parsed[0] not in scheduler.running

    def _asked_here(self, rec: ClaimRecord) -> bytes | None:
        """The file of a request claimed by a machine that died, if main still asks it and it is
        here to be taken (not answered meanwhile, not already taken here)."""
        rel = f"inbox/{_request_name(rec.key)}"
        if request_key(self.vault, rel) != rec.key:
            return None  # answered meanwhile (main no longer holds that request)
        try:
            return (self.vault.root / rel).read_bytes()
        except OSError:
            return None  # already taken here

    def _redrop(self, rec: ClaimRecord, data: bytes) -> None:
        """A request whose dead claimant's claim this machine took over: write it again, unchanged,
        so this daemon's inbox takes it as if just dropped (its claim step finds the claim held)."""
        name = _request_name(rec.key)
        self.daemon.note(f"request {name}: its claimant {rec.host} stopped answering; taking it here")
        with open(self.vault.root / "inbox" / name, "wb") as f:  # a close-after-write event, as a person's save
            f.write(data)

    def _jobs(self) -> dict:
        scheduler = self.daemon.scheduler
        return scheduler.jobs if scheduler is not None else {}

    def _run(self, job_name: str, due: datetime, why: str) -> bool:
        """Start a claimed due time; False if its job is running here right now (it waits)."""
        job = self._jobs().get(job_name)
        scheduler = self.daemon.scheduler
        if job is None or scheduler is None:
            return False
        if not scheduler.run_claimed(job, due):
            return False
        self.daemon.note(f"cron {job_name} due {due.isoformat()}: {why}; running it here")
        return True
