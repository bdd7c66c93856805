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
   (machines committing often, each attempt slow on a loaded machine, lose it most of the time,
   and a machine back from a partition, with the most to merge, loses it longest); main itself
   still converges through the race. The daemon's first round after a start or an outage pushes
   the host ref before step 1, so what was written meanwhile goes up before the fetch and merge
   of what the others wrote;
5. publish and adopt learned branches (`refine/*`, `learn/*`) and rejected changes, three-way
   against what both sides had at the last round (.hermes/sync/refs.json);
6. claim due times it missed while offline (one push); once an hour, prune the done claims past
   their retention (store/claims.py, `prunable`). The daemon renews its running claims and takes
   over those of dead holders on a timer of its own (sync_service.SyncService), never inside a round.

Which machine does a piece of work is service/work.py's (the claims, built once by the daemon and
passed in); the daemon's part is service/sync_service.py. The measurements behind the choices here
are in the lab note docs/benchmarks/notes/2026-12-03-sync-figures.md.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import ConflictError, GitError, HermesError, Overtaken, RepositoryBusy
from ..store import held_settings
from ..store.claims import RefClaims, parse_cron_key
from ..store.config import CONFIG_NAME
from ..store.files import atomic_write
from ..store.git import MAIN, GitStore, format_message
from ..store.git_base import ZERO
from ..store.host import host_id
from ..store.provenance import HOST, Act
from ..store.remote import HOSTS, MIRROR, RefUpdate, Unreachable, mirror_of, redact_credentials
from ..store.vault import Vault
from .cron_runner import OUTPUTS_DIR
from .inbox import RESULTS_DIR
from .work import (
    INBOX_KEY,
    main_ref,
    open_claims,
    remote_for,
    remote_url,
    request_done,
    request_name,
    result_of,
    sync_dir,
)

log = logging.getLogger("hermes_fs.sync")

CONFLICT_MARK = ".conflict-"
LEARNED_REFS = ("refs/heads/refine/", "refs/heads/learn/", "refs/heads/curate/", "refs/hermes/rejected/")
PUSH_TRIES = 8  # a push that lost a race fetches main, merges and tries again, this many times per round
MERGE_TRIES = 4
"""A merge overtaken by a person's keystroke (or a commit of it) is tried again at once, this many
times in all, before it waits for the next round: with a person typing often and a merge slow on a
loaded machine, a round in which nobody types may not come for a long while, and the other
machines' edits would wait for it."""


RETRY_PAUSE_MAX_S = 2.0


def host_ref(host: str) -> str:
    """The remote ref only machine `host` writes: its main, as it last pushed it."""
    return f"{HOSTS}{host}/main"


def retry_pause(attempt: int, last_s: float) -> float:
    """How long a machine that lost the race for main waits before its next attempt: at random
    within the time its last attempt took (fetch, merge, push), twice that from the third on,
    never more than RETRY_PAUSE_MAX_S. The machines that collided were all inside that window at
    once; spread over it, they seldom collide again, and the loser's merge does not take the CPU
    the winner's push needs. A fixed pause shorter than an attempt makes the losers collide again
    and again; the cap keeps one attempt slowed down by a busy machine from setting a long pause."""
    return random.uniform(0, min(max(last_s, 0.05) * min(attempt, 2), RETRY_PAUSE_MAX_S))

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
        raise GitError(f"git clone failed: {redact_credentials(proc.stderr.strip().replace(url, redact_credentials(url)))}")
    store = GitStore(path, lock_dir=path / ".hermes" / "locks")
    if branch != MAIN:
        store.rename_branch(branch, MAIN)
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


def _settings_at(store: GitStore, commit: str) -> dict | None:
    """hermes.yaml at a commit as a mapping (None: absent or not valid YAML: nothing to compare)."""
    import yaml

    data = store.read_file(commit, CONFIG_NAME)
    try:
        found = yaml.safe_load(data) if data is not None else {}
    except yaml.YAMLError:
        return None
    return found if isinstance(found, dict) else None


def approve_settings(vault: Vault, keys: list[str] | None = None) -> list[held_settings.HeldSetting]:
    """`hermes-fs sync approve [KEY...]`: held settings from another machine take effect here."""
    approved = held_settings.approve(vault.state_dir, keys)
    if keys and len(approved) < len(set(keys)):
        missing = sorted(set(keys) - {h.key for h in approved})
        raise HermesError(f"nothing held under {', '.join(missing)}; `hermes-fs status` lists what is held")
    vault.reload_config()
    return approved


def sync_status(vault: Vault) -> dict:
    """For `status`: the remote, this machine's host id, conflicts kept, due times missed offline.
    No network: what the last round left in .hermes/sync/."""
    try:
        missed = json.loads((vault.state_dir / "sync" / "claims.json").read_text()).get("missed", {})
    except (OSError, ValueError, AttributeError):
        missed = {}
    url = remote_url(vault)
    return {"remote": redact_credentials(url) if url else None, "host": host_id(vault.state_dir),
            "conflicts": conflict_files(vault), "missed": missed,
            "quarantined": vault.git.quarantined() if url else [],
            "held_settings": [{"key": h.key, "from": h.host, "offered": held_settings.describe(h.offered),
                               "in_force": held_settings.describe(h.approved)} for h in held_settings.load(vault.state_dir)],
            "settings_changed": _last_settings_change(vault)}


def _last_settings_change(vault: Vault) -> dict:
    try:
        found = json.loads((sync_dir(vault) / "settings.json").read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


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
    settings: list[str] = field(default_factory=list)  # hermes.yaml keys another machine changed, this round
    held: list[str] = field(default_factory=list)  # of those, the ones held until approved here

    def line(self) -> str:
        if self.offline:
            return f"offline: {self.offline}"
        parts = [("fetched" if self.fetched else "up to date"), ("merged" if self.merged else ""),
                 ("pushed" if self.pushed else "pushed to its host ref" if self.hosted else ""),
                 (f"{len(self.refs)} learned ref(s)" if self.refs else ""),
                 (f"{len(self.conflicts)} conflict(s) kept beside: {', '.join(self.conflicts)}" if self.conflicts else ""),
                 (f"settings changed elsewhere: {', '.join(self.settings)}" if self.settings else ""),
                 (f"held until approved here (`hermes-fs sync approve`): {', '.join(self.held)}" if self.held else "")]
        return ", ".join(p for p in parts if p)


class Syncer:
    def __init__(self, vault: Vault, claims: RefClaims | None = None, notify: Callable[[str, str], None] | None = None):
        self.vault = vault
        self.store = vault.git
        self.remote = remote_for(vault)
        self.claims = claims or _open(vault)
        self.host = host_id(vault.state_dir)
        self.branch_ref = main_ref(vault)
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
        the other machines' edits wait for.

        After a start or an outage (`host_first`), this machine's main as it is goes up on its
        host ref while the fetch and merge run: what was written meanwhile is on the remote at
        once (see _push_host), and what the others wrote does not wait for that push. The remote's
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
            here = {self._unmirror(ref): sha for ref, sha in self.store.refs(MIRROR).items()}
            if there == here:
                return
        self.remote.fetch()
        self.claims.refresh()
        r.fetched = True

    @staticmethod
    def _unmirror(ref: str) -> str:
        return "refs/" + ref.removeprefix(MIRROR)

    def _integrate(self, r: Round) -> None:
        theirs = self.store.rev(mirror_of(self.branch_ref))
        if theirs is not None:
            self._merge(r, theirs, f"sync: merge {self._host_of(theirs)}'s main", published=True)

    def _integrate_hosts(self, r: Round) -> None:
        """Merge what the other machines have and the remote main may not yet (their host refs)."""
        own = mirror_of(host_ref(self.host))
        head = self.store.head()
        for ref, sha in sorted(self.store.refs(mirror_of(HOSTS)).items()):
            if ref == own or self.store.is_ancestor(sha, head):
                continue
            host = ref.removeprefix(mirror_of(HOSTS)).split("/", 1)[0]
            self._merge(r, sha, f"sync: merge {host}'s main (not yet on the remote's main)", published=False)
            head = self.store.head()

    def _unhosted(self) -> bool:
        """Has main here a commit of its own that neither the remote's main nor any machine's
        host ref holds (as last fetched)? Then it goes up on this machine's host ref at once: a
        round can retry main for many seconds, and an edit made meanwhile waited for its end."""
        mirror = self.store.rev(mirror_of(self.branch_ref))
        return self.store.has_own_commit("HEAD", *([mirror] if mirror else []), other_globs=(mirror_of(HOSTS),))

    def _push_host(self, r: Round, ours: str | None = None) -> None:
        """Put this machine's main on its own ref on the remote (only this machine writes it, so
        no race to lose; compare-and-swap all the same, against the value it last pushed).

        Besides after a lost race, the daemon's first round after a start or an outage does this
        at once, beside its fetch and merge (`host_first`, _first_attempt), with main as it was
        before that merge: what was written meanwhile is then on the remote at once, where the
        other machines merge it, instead of after this round's fetch and merge of everything the
        others wrote meanwhile."""
        ref = host_ref(self.host)
        ours = ours or self.store.head()
        for _ in range(2):
            was = self.store.rev(mirror_of(ref))
            if was == ours:
                return
            result = self.remote.push([RefUpdate(ref, ours, was)])
            if result.ok:  # only this machine writes that ref: the remote has `ours` now, whatever
                self.store.update_ref(mirror_of(ref), ours)  # a fetch beside it mirrored
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
            except RepositoryBusy as exc:  # a person's git operation (a rebase, another branch checked out)
                self._not_now(r, mark, exc)
                return
        if new:
            r.merged = new
            changed = self.store.changed_paths(before, new)
            _remember_conflicts(self.vault, changed)
            if CONFIG_NAME in changed:
                self._settings_arrived(r, before, new, self._host_of(theirs))
        if r.conflicts:
            self.notify("hermes-fs: sync kept both versions",
                        "Another machine changed the same text. Its version is kept beside yours:\n"
                        + "\n".join(f"- {p}" for p in r.conflicts)
                        + "\nMerge what you want to keep into the original file, then delete the copy.")

    def _settings_arrived(self, r: Round, before: str, new: str, host: str) -> None:
        """hermes.yaml changed by a merge: say what changed, and hold what widens what runs here."""
        old, now = _settings_at(self.store, before), _settings_at(self.store, new)
        if old is None or now is None:
            return
        r.settings = held_settings.changed_keys(old, now)
        held = held_settings.hold(self.vault.state_dir, old, now, host)
        r.held = [h.key for h in held]
        record = {"host": host, "at": time.time(), "changed": r.settings, "held": r.held}
        atomic_write(sync_dir(self.vault) / "settings.json", json.dumps(record, indent=2))
        log.warning("sync: %s changed settings: %s%s", host, ", ".join(r.settings) or "(formatting only)",
                    f"; held until approved here: {', '.join(r.held)}" if r.held else "")
        if r.held:
            self.notify("hermes-fs: settings from another machine held",
                        f"{host} changed hermes.yaml in ways that widen what runs on this machine:\n"
                        + "\n".join(f"- {h.key}: {held_settings.describe(h.offered)}" for h in held)
                        + "\nThey take effect here only after `hermes-fs sync approve` on this machine.")
        self.vault.reload_config()

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
            if path.startswith(f"{OUTPUTS_DIR}/"):  # one due time run on two machines (a claim lost while
                # cut off): the published run stands, so there is one output; between two runs not
                # yet published, this machine's stays until the remote's main says which stands
                return {path: other if published else ours}
            host = self._last_host(theirs, path)
            copy = beside(path, host)
            r.conflicts.append(copy)
            return {path: ours, copy: other}

        return keep

    def _last_host(self, sha: str, path: str) -> str:
        return self.store.last_trailers(sha, path).get(HOST) or "remote"

    def _finish_committed(self) -> None:
        """A claim is done exactly when its result is on main: so the `done` claim always goes up
        in the same atomic push as the result, even if the process died between the two."""
        head = self.store.head()
        for key in self.claims.running():
            rel = result_of(key)
            if rel and self.store.read_file(head, rel) is not None:
                self.claims.finish(key, [rel])
            elif key.startswith(INBOX_KEY) and request_done(self.store, key, head):
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
            lost = self.claims.settle(result.accepted, sorted(result.stale))
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
        a mirror of main cannot say it is safe (a run withdrawn when a renewal found its claim lost
        can leave a due time without any output)."""
        paths, asked = [], []
        mirror = self.store.rev(mirror_of(self.branch_ref))
        for key, kept in lost:
            if key.startswith(INBOX_KEY):
                answers = self._unpublished_answers(key)
                paths += kept + answers
                asked += [f"inbox/{request_name(key)}"] if answers else []
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
        name = request_name(key)
        found = []
        for host, paths in self.store.added_paths(mirror, "HEAD", f"{RESULTS_DIR}/", HOST):
            if host == self.host:
                found += [p for p in paths if p.endswith((f"-{name}", f"-{name}.md"))]
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
        round runs often on each machine, and each git call counts."""
        local, mirror = {}, {}
        for ref, sha in self.store.refs(*LEARNED_REFS, *map(mirror_of, LEARNED_REFS)).items():
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
                self.store.delete_ref(ref, old)
        else:
            self.store.update_ref(ref, new, old or ZERO)

    def _notify(self, title: str, body: str) -> None:
        try:
            self.vault.notifier.event("sync_conflict", title, body)
        except Exception:
            log.exception("sync: notification failed")


def _open(vault: Vault) -> RefClaims:
    """The claims of a Syncer run without a daemon (`hermes-fs sync`, a decision's publishing)."""
    claims = open_claims(vault)
    if claims is None:
        raise HermesError("no remote configured: add `remote: {url: ..., branch: main}` to hermes.yaml")
    return claims


def _merges_by_entry(path: str) -> bool:
    from ..mind.merge import merges_by_entry

    return merges_by_entry(path)


def _format_resolver(store: GitStore):
    from ..learning.changes import format_resolver

    return format_resolver(store)


__all__ = ["Round", "Syncer", "beside", "clone_vault", "conflict_files", "host_ref", "sync_status"]
