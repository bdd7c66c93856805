"""Claims: which machine does a piece of work (a cron due time, a request, a review decision), once.

One interface, two implementations:

* `CronLedger`: one machine. `.hermes/cron-ledger.json` (fsynced before a run) holds the latest due
  time started per job; a due time at or before it is never run again, across restarts.
* `RefClaims`: several machines sharing a remote. A claim is the ref `refs/hermes/claims/<key>`
  on the remote, created by a push whose lease says "must not exist yet" (`store/remote.py`): the
  remote's receive-pack lets exactly one of any number of racing machines create it. A claim
  points at a tiny commit (empty tree) whose trailers say who holds it (`Hermes-Host`), whether the
  work is `running` or `done`, and until when a running claim holds (`Claim-Expires`). A running
  claim past its expiry belongs to a machine that died: anyone may take it over with a lease on
  its exact old value (again exactly one wins). The holder renews its running claims well before
  they expire, and marks one `done` in the same atomic push that publishes the result on main.
  `RefClaims` keeps the local ledger too, so a restart never re-runs what this machine started.

Claims do not pile up on the remote: a `done` cron or inbox claim older than RETENTION_S (a
week) is pruned by whichever daemon looks first, except each job's newest cron claim, the
high-water mark every machine's scheduler reads `last` from; and no machine claims a due time
older than CLAIMABLE_S, so a pruned claim never reads as "nobody ran it" (`prunable`).

Machine-local state (what this machine holds, what it missed while offline) lives in
`.hermes/sync/claims.json`, written by the one `RefClaims` of each process (built once:
service/work.py). The daemon and a CLI command deciding on a change both write it, so each
writes only the entries it changed, onto the file as it is then, under the file's lock.
Nothing here decides *when* to claim: that is the scheduler's and the sync service's. The words (claim, lease, ledger, holder, ...) are defined in docs/design/glossary.md;
the measurements behind the choices are in docs/benchmarks/notes/2026-12-03-sync-figures.md.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import quote, unquote

from .files import atomic_write
from .git_base import MAIN
from .lock import VaultLock
from .provenance import CLAIM_EXPIRES, CLAIM_STATE, HOST, Act
from .remote import HOSTS, MIRROR, RefUpdate, Remote, Unreachable, mirror_of

if TYPE_CHECKING:
    from .git import GitStore

log = logging.getLogger("hermes_fs.claims")

CLAIMS = "refs/hermes/claims/"
LEDGER_NAME = "cron-ledger.json"  # in .hermes/
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
RUNNING, DONE = "running", "done"
RETENTION_S = 7 * 86400
"""How long a `done` cron or inbox claim stays on the remote before any machine prunes it. Every
claim is a ref that each round's `ls-remote` lists, so they must not pile up (a job every five
minutes makes 2,016 a week); a week is far longer than a partition or a kill, so a claim is never
pruned while a machine that could still act on it is catching up. Not a hermes.yaml setting:
DESIGN section 15 has none, and a person gains nothing by tuning it."""
CLAIMABLE_S = RETENTION_S - 86400
"""A cron due time older than this is never claimed (and so never run), wherever it comes from: its
claim may already be pruned (by a machine whose clock runs up to a day ahead), and a missing claim
must never read as "nobody ran it". A machine offline longer than this reports those due times
missed and does not catch them up."""
PRUNE_EVERY_S = 3600.0  # how often a daemon looks for prunable claims (the look itself is local)
PRUNE_BATCH = 200  # deletions per push (each is two arguments on git's command line)


class Claims(Protocol):
    """The cron scheduler's view: `mark` claims a due time (False: never run it here), `passed`
    records locally that a due time is not owed (first seen, no catch-up), `done` says its run
    finished, `last` is the newest due time started anywhere this machine knows of. `host` is the
    machine deciding; `local` decides for this machine alone (a job pinned here with `host:`)."""

    host: str

    @property
    def local(self) -> CronLedger: ...

    def last(self, job: str) -> datetime | None: ...

    def mark(self, job: str, due: datetime) -> bool: ...

    def passed(self, job: str, due: datetime) -> None: ...

    def done(self, job: str, due: datetime) -> None: ...


class CronLedger:
    """job -> the latest due time started (ISO). Written atomically and fsynced before a run."""

    def __init__(self, path: Path, host: str = ""):
        self.path = path
        self.host = host
        self.lock = threading.Lock()
        try:
            self.data: dict[str, str] = json.loads(path.read_text())
        except (OSError, ValueError):
            self.data = {}

    @property
    def local(self) -> CronLedger:
        return self

    def last(self, job: str) -> datetime | None:
        value = self.data.get(job)
        return datetime.fromisoformat(value) if value else None

    def mark(self, job: str, due: datetime) -> bool:
        """Claim (job, due); False if it was already claimed (never run twice)."""
        with self.lock:
            last = self.last(job)
            if last is not None and due <= last:
                return False
            self.data[job] = due.isoformat()
            atomic_write(self.path, json.dumps(self.data, indent=2), fsync=True)
            return True

    def passed(self, job: str, due: datetime) -> None:
        self.mark(job, due)

    def done(self, job: str, due: datetime) -> None:
        """Nothing to publish: on one machine the ledger entry made before the run is the record."""


class Take(StrEnum):
    WON = "won"  # this machine holds the claim now
    TAKEN = "taken"  # another machine holds it (or finished the work)
    OFFLINE = "offline"  # the remote could not be reached: nobody could be asked


@dataclass
class ClaimRecord:
    key: str
    sha: str
    host: str
    state: str
    expires: float
    timestamp: int = 0

    def expired(self, now: float) -> bool:
        return self.state == RUNNING and now > self.expires


def cron_key(job: str, due: datetime) -> str:
    """`cron/<job>/<due in UTC>`; the job name quoted so any file name makes a valid ref."""
    return f"cron/{quote(job, safe='-_')}/{due.astimezone(UTC):%Y%m%dT%H%M%SZ}"


def parse_cron_key(key: str) -> tuple[str, datetime] | None:
    parts = key.split("/")
    if len(parts) != 3 or parts[0] != "cron":
        return None
    try:
        return unquote(parts[1]), datetime.strptime(parts[2], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


@dataclass
class _Held:
    sha: str  # the claim commit the remote has (as far as this machine knows)
    expires: float
    done: str | None = None  # the `done` commit waiting to go up with the result
    paths: list[str] = field(default_factory=list)  # what the result wrote (to withdraw if it lost)
    orphan: bool = False  # held by a previous process of this machine: not renewed; done only if its result is on main


class RefClaims:
    """Claims as refs on the remote (see the module docstring)."""

    def __init__(self, store: GitStore, remote: Remote, host: str, ttl_s: float, ledger: CronLedger,
                 state_path: Path):
        self.store = store
        self.remote = remote
        self.host = host
        self.ttl_s = ttl_s
        self.ledger = ledger
        self.state_path = state_path
        self.file_lock = VaultLock(state_path.with_suffix(".lock"))  # other processes write the file too
        self._written: dict[str, dict] = {"held": {}, "missed": {}}  # the file's entries as this process last saw them
        self.lock = threading.Lock()
        self.push_lock = threading.RLock()  # one push of claims at a time (renewals, done with main)
        self.on_finish: Callable[[], None] | None = None  # the sync service: push now
        # requests' claims lost at a renewal, for the next round to withdraw their answers; not cron
        # runs: their output's path is the taker's too, and the taker may close the claim on it (a
        # run withdrawn after that would leave its due time without any output)
        self.lost_meanwhile: list[tuple[str, list[str]]] = []
        self._tree_written = False
        self.held: dict[str, _Held] = {}
        self.first_seen: dict[str, float] = {}  # claim commit -> when this process first saw it (`_bounded`)
        self.missed: dict[str, str] = {}  # job -> the latest due time (ISO) it could not claim, offline
        self._load()
        self.remote_last: dict[str, datetime] = {}
        self.pruned_at = 0.0  # when this process last pruned claims (see prune_due)
        self.refresh()

    # -- persisted state ------------------------------------------------------------------------
    def _load(self) -> None:
        data = self._read()
        # A running claim of a previous process is an orphan: its run is gone, so it is not renewed;
        # if its result reached main it is finished, else it expires and is taken over like anyone's.
        self.held = {k: _Held(**{**v, "orphan": not v.get("done")}) for k, v in data["held"].items()}
        self.missed = dict(data["missed"])
        self._written = self._state()

    def _read(self) -> dict[str, dict]:
        try:
            data = json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            data = {}
        return {"held": dict(data.get("held", {})), "missed": dict(data.get("missed", {}))}

    def _state(self) -> dict[str, dict]:
        return {"held": {k: asdict(v) for k, v in self.held.items()}, "missed": dict(self.missed)}

    def _save(self) -> None:
        """Write the entries this process changed since it last read or wrote them (set or
        removed) onto the file as it is now, under the file's lock: another process's entries,
        written meanwhile, stay (the whole file from this process's memory would drop them)."""
        mine = self._state()
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        with self.file_lock.hold():
            data = self._read()
            for part, now in mine.items():
                before = self._written[part]
                for key in now.keys() | before.keys():
                    if key in now and now[key] != before.get(key):
                        data[part][key] = now[key]
                    elif key not in now and key in before:
                        data[part].pop(key, None)
            atomic_write(self.state_path, json.dumps(data, indent=2), fsync=True)
        self._written = mine

    # -- claim commits ----------------------------------------------------------------------------
    def _commit(self, key: str, state: str, note: str = "", took_over: ClaimRecord | None = None,
                parent: str | None = None) -> tuple[str, float]:
        """A claim commit (empty tree). Each renewal, takeover or `done` has the previous claim as
        parent, so `git log` of a claim ref tells its story and every update is a fast-forward."""
        return self._commits({key: (state, note, took_over, parent)})[key]

    def _commits(self, specs: dict[str, tuple[str, str, ClaimRecord | None, str | None]]) -> dict[str, tuple[str, float]]:
        """Claim commits for many keys (key -> state, note, took_over, parent) in one git call:
        key -> (sha, expiry)."""
        if not self._tree_written:  # git knows the empty tree without storing it; fsck wants it stored
            self.store.store_empty_tree()
            self._tree_written = True
        made, expiries = [], []
        for key, (state, note, took_over, parent) in specs.items():
            expires = round(time.time() + self.ttl_s, 3) if state == RUNNING else 0.0
            took = f"{took_over.host} {took_over.expires}" if took_over is not None else ""
            made.append((EMPTY_TREE, [parent] if parent else [], f"claim {key}{': ' + note if note else ''}",
                         Act.claim(self.host, state, expires, took)))
            expiries.append(expires)
        shas = self.store.commit_trees(made)
        return {key: (sha, expires) for key, sha, expires in zip(specs, shas, expiries, strict=True)}

    def records(self, prefix: str = "") -> list[ClaimRecord]:
        """The claims of the last fetch (mirrored under refs/hermes/remote/), in one git call."""
        base = mirror_of(CLAIMS)
        known = self._known_hosts()
        return [self._bounded(_parse(ref[len(base):], sha, ts, message), known)
                for ref, sha, ts, message in self.store.ref_messages(base + prefix)]

    def holder(self, key: str) -> ClaimRecord | None:
        """Who holds `key` on the remote now (fetched afresh); None if nobody."""
        sha = self.remote.fetch_ref(CLAIMS + key)
        if sha is None:
            return None
        return self._bounded(_parse(key, sha, 0, self.store.message(sha)), self._known_hosts())

    def _known_hosts(self) -> set[str] | None:
        """The machines that sync this vault: those whose commits are on main, or that have a host
        ref on the remote; None when none is known yet (nothing to judge a claimant by)."""
        base = mirror_of(HOSTS)
        hosts = {ref[len(base):].split("/", 1)[0] for ref in self.store.refs(base)}
        head = self.store.rev(f"refs/heads/{MAIN}")
        if head:
            hosts |= self.store.hosts_in_history(head)
        return hosts or None

    def _bounded(self, record: ClaimRecord, known: set[str] | None) -> ClaimRecord:
        """A claim's expiry as far as it can be believed. Anyone who can push may write a claim ref
        with any trailers (an expiry in the year 2300, a host that does not exist), so the expiry
        counts only up to a ttl after this process first saw that claim commit (a live holder
        renews within a sixth of it: a new commit), and a claimant that is no known machine of this
        vault gets two renewal periods. One forged ref cannot silence a job for longer."""
        if record.state != RUNNING or record.key in self.held:
            return record
        if len(self.first_seen) > 50_000:  # claims come and go; a forged one gets one more ttl at most
            self.first_seen.clear()
        seen = self.first_seen.setdefault(record.sha, time.time())
        trusted = self.ttl_s * (1 + self.RENEW_EVERY)
        if known is not None and record.host not in known:
            trusted = self.ttl_s * self.RENEW_EVERY * 2
        if record.expires > seen + trusted:
            log.warning("claim %s by %s says it expires at %.0f; counted as expiring at %.0f", record.key,
                        record.host, record.expires, seen + trusted)
            record.expires = seen + trusted
        return record

    def look(self) -> None:
        """Mirror the remote's claim refs now, and only them (one fetch of refs/hermes/claims/, tiny
        commits), so `dead` sees the expiries of now. The mirror of the last round's fetch was
        often stale: a round retries its push of main while machines race for it, and fetches
        only at its start."""
        self.remote.fetch(CLAIMS)
        self.refresh()

    def refresh(self) -> None:
        """Recompute `last` per job from the mirrored claim refs (after each fetch)."""
        newest: dict[str, datetime] = {}
        for r in self.records("cron/"):
            parsed = parse_cron_key(r.key)
            if parsed and (parsed[0] not in newest or parsed[1] > newest[parsed[0]]):
                newest[parsed[0]] = parsed[1]
        self.remote_last = newest

    # -- taking, renewing, finishing ----------------------------------------------------------------
    def take(self, key: str) -> Take:
        """Create the claim; if it exists and its holder's time ran out, take it over. Exactly one
        machine gets WON for a key (and again at most one per expiry)."""
        ref = CLAIMS + key
        try:
            sha, expires = self._commit(key, RUNNING)
            if self.remote.push([RefUpdate(ref, sha, None)]).ok:
                return self._won(key, sha, expires)
            current = self.holder(key)
            if current is None or not current.expired(time.time()):
                return Take.TAKEN
            sha, expires = self._commit(key, RUNNING, f"taken over from {current.host}, whose claim expired", current,
                                        current.sha)
            if self.remote.push([RefUpdate(ref, sha, current.sha)]).ok:
                return self._won(key, sha, expires)
            return Take.TAKEN
        except Unreachable:
            return Take.OFFLINE

    def _won(self, key: str, sha: str, expires: float) -> Take:
        with self.lock:
            self.held[key] = _Held(sha, expires)
            self._save()
        return Take.WON

    RENEW_EVERY = 1 / 6  # of the ttl: a claim just renewed outlives a partition of 5/6 of its ttl

    def renew(self) -> list[str]:
        """Push fresh expiries for running claims a sixth of their time old, all in one push (each
        with a lease on its own old value: one machine may hold dozens of claims, and a push per
        claim is slow on a loaded machine while the takeovers of the same timer wait behind it);
        the keys lost to a takeover (this machine was too slow or cut off) are returned and
        forgotten."""
        now = time.time()
        # a done claim waiting for its result's push is renewed too: main may not go up at once
        due = {key: held for key, held in list(self.held.items())
               if not held.orphan and held.expires - now <= self.ttl_s * (1 - self.RENEW_EVERY)}
        if not due:
            return []
        lost = []
        with self.push_lock:
            fresh = self._commits({key: (RUNNING, "renewed", None, held.sha) for key, held in due.items()})
            result = self.remote.push([RefUpdate(CLAIMS + key, fresh[key][0], held.sha) for key, held in due.items()],
                                      atomic=False)
        with self.lock:
            dones = self._commits({key: (DONE, "", None, fresh[key][0]) for key, held in due.items()
                                   if held.done and CLAIMS + key in result.accepted})
            for key, held in due.items():
                if CLAIMS + key in result.accepted:
                    held.sha, held.expires = fresh[key]
                    if held.done:
                        held.done = dones[key][0]
                elif self.held.get(key) is held:
                    self.held.pop(key)
                    lost.append(key)
                    if parse_cron_key(key) is None:  # a request's answer: the next round withdraws it
                        self.lost_meanwhile.append((key, held.paths))
            self._save()
        return lost

    def dead(self, prefix: str = "") -> list[ClaimRecord]:
        """Running claims whose holder is dead, to take over: past their expiry (as of the last
        fetch), and this machine's own orphans at once — a previous process of this machine held
        them, and this process holds the daemon's lock, so that one is gone: waiting out the
        expiry would only delay the work (the remote holds the value this machine last pushed,
        unless someone took it over since, and then the lease on it fails)."""
        found = {r.key: r for r in self.expired(prefix)}
        for key, held in list(self.held.items()):  # cron runs: a request's claim is taken through the inbox
            if held.orphan and not held.done and key.startswith(prefix) and key not in found and parse_cron_key(key):
                found[key] = ClaimRecord(key, held.sha, self.host, RUNNING, held.expires)
        return list(found.values())

    def take_over(self, records: list[ClaimRecord]) -> list[str]:
        """Take over these running claims of dead holders in one push, each with a lease on the
        exact value seen (so, for each, at most one machine of any number racing wins); the keys
        won. One push for all: after a partition heals or a machine dies holding many claims,
        one takeover after the other (three network calls each) leaves the last ones waiting
        long past their expiry."""
        if not records:
            return []
        now = time.time()
        commits = self._commits({r.key: (RUNNING, f"taken over from {r.host}, whose "
                                         + ("claim expired" if r.expired(now) else "process died"), r, r.sha)
                                 for r in records})
        with self.push_lock:
            result = self.remote.push([RefUpdate(CLAIMS + r.key, commits[r.key][0], r.sha) for r in records],
                                      atomic=False)
        won = [r.key for r in records if CLAIMS + r.key in result.accepted]
        with self.lock:
            for key in won:
                self.held[key] = _Held(*commits[key])
            for r in records:  # an orphan someone else took over meanwhile is not this machine's any more
                if r.key not in won and r.key in self.held and self.held[r.key].orphan:
                    del self.held[r.key]
            self._save()
        return won

    def finish(self, key: str, paths: list[str] | None = None) -> None:
        """The work is done: its `done` commit goes up with the next push of main (`pending`).
        A previous process's claim whose result is on main here is this process's from now on:
        renewed until that push (left an orphan, it would not be renewed, so while main kept
        losing the race it would expire and another machine could take the finished work over
        and do it again)."""
        with self.lock:
            held = self.held.get(key)
            if held is None or held.done:
                return
            held.done = self._commit(key, DONE, parent=held.sha)[0]
            held.paths = list(paths or [])
            held.orphan = False
            self._save()
        if self.on_finish:
            self.on_finish()

    def running(self) -> list[str]:
        """Keys this machine holds whose work is not marked done."""
        return [k for k, h in self.held.items() if not h.done]

    def adopt(self, key: str) -> bool:
        """This process goes on with the work of a previous one's claim (a request it resumes
        after a restart): renew it again, from its last value (if another machine took it over
        meanwhile, the next renewal says so). False if that claim is not held here as an orphan."""
        with self.lock:
            held = self.held.get(key)
            if held is None or not held.orphan or held.done:
                return False
            held.orphan = False
            self._save()
            return True

    def forget(self, key: str) -> None:
        """Stop tracking an orphan claim: it expires on the remote and is taken over there."""
        with self.lock:
            if self.held.pop(key, None):
                self._save()

    def release(self, key: str) -> None:
        """Give a running claim back (the work was not done): delete the ref, with a lease."""
        with self.lock:
            held = self.held.pop(key, None)
            self._save()
        if held:
            try:
                self.remote.push([RefUpdate(CLAIMS + key, None, held.sha)])
            except Unreachable:
                pass  # it expires

    def pending(self) -> list[RefUpdate]:
        """`done` updates not yet on the remote; pushed atomically with main."""
        return [RefUpdate(CLAIMS + k, h.done, h.sha) for k, h in self.held.items() if h.done]

    def settle(self, accepted: list[str], rejected: list[str]) -> list[tuple[str, list[str]]]:
        """After a push: forget what went up; return (key, paths) of done claims that were lost to
        a takeover (their result must be withdrawn: the other machine's stands)."""
        lost = []
        with self.lock:
            for ref in accepted:
                key = ref.removeprefix(CLAIMS)
                if key in self.held and self.held[key].done:
                    del self.held[key]
            for ref in rejected:
                key = ref.removeprefix(CLAIMS)
                held = self.held.get(key)
                if held and held.done and not self._still_ours(key, held):
                    lost.append((key, held.paths))
                    del self.held[key]
            self._save()
        return lost

    def _still_ours(self, key: str, held: _Held) -> bool:
        """After a rejected `done`: is the remote's claim still the one this machine holds?"""
        try:
            current = self.holder(key)
        except Unreachable:
            return True  # cannot tell: keep it and try again
        return current is not None and current.sha == held.sha

    def lost_to_takeover(self) -> list[tuple[str, list[str]]]:
        """Claims this machine holds that the last fetch shows in another machine's hands (this one
        was cut off past the expiry): forgotten, and returned as (key, paths) like `settle`; with
        them the claims a renewal found lost since the last call (their results, committed
        meanwhile, must be withdrawn too)."""
        mirrored = {r.key: r for r in self.records()}
        with self.lock:
            lost, self.lost_meanwhile = self.lost_meanwhile, []  # found by a renewal since the last round
            for key, held in list(self.held.items()):
                rec = mirrored.get(key)
                # a claim in this machine's own hands is never lost: its renewer may just have taken
                # over a run of its own whose claim expired, its push seen by this fetch before
                # `held` was updated (that race withdrew results whose claims then closed as done)
                if rec is None or rec.host == self.host or rec.sha in (held.sha, held.done) \
                        or self._older_of_ours(rec.sha, held.sha):
                    continue
                lost.append((key, held.paths))
                del self.held[key]
            if lost:
                self._save()
        return lost

    def _older_of_ours(self, seen: str, held: str) -> bool:
        """Is the mirrored claim an earlier state of the one this machine holds? The renewer pushes
        without fetching, so the mirror of the last fetch often lags one renewal behind; that is
        not a takeover (a takeover is built on top of this machine's claim, never under it)."""
        return self.store.is_ancestor(seen, held)

    # -- the scheduler's interface (Claims) ---------------------------------------------------------
    @property
    def local(self) -> CronLedger:
        return self.ledger

    def last(self, job: str) -> datetime | None:
        known = [d for d in (self.ledger.last(job), self.remote_last.get(job)) if d is not None]
        return max(known) if known else None

    def mark(self, job: str, due: datetime) -> bool:
        """Claim a due time on the remote. Offline, nothing runs: the due time is remembered as
        missed and `catch_up` claims it once the remote answers (if nobody ran it meanwhile)."""
        last = self.ledger.last(job)
        if last is not None and due <= last:
            return False
        if too_old_to_claim(due):
            log.warning("cron %s due %s: not run, older than claims are kept (its claim may be pruned)",
                        job, due.isoformat())
            self.ledger.passed(job, due)
            return False
        outcome = self.take(cron_key(job, due))
        self.ledger.passed(job, due)
        if outcome == Take.OFFLINE:
            log.warning("cron %s due %s: missed, the remote cannot be reached (not run here; it runs once the "
                        "remote answers, if no machine ran it)", job, due.isoformat())
            with self.lock:
                self.missed[job] = due.isoformat()
                self._save()
        return outcome == Take.WON

    def passed(self, job: str, due: datetime) -> None:
        self.ledger.passed(job, due)

    def done(self, job: str, due: datetime) -> None:
        self.finish(cron_key(job, due))

    def take_missed(self, limit: int | None = None) -> list[tuple[str, datetime]]:
        """Once the remote answers again: claim the due times missed while offline (the `limit`
        oldest, the others wait for a later round), in one push; those won are returned, to be run
        now (a due time another machine claimed meanwhile is dropped: it ran it, or its claim
        expires and is taken over like any dead machine's)."""
        missed: dict[str, datetime] = {}
        for job, due_iso in sorted(self.missed.items(), key=lambda item: item[1]):
            due = datetime.fromisoformat(due_iso)
            if too_old_to_claim(due):
                log.warning("cron %s due %s: missed while offline for too long; not caught up", job, due_iso)
            elif limit is None or len(missed) < limit:
                missed[job] = due
        if not missed:  # none to claim now (no room, or all too old): only the too old are dropped
            stale = [job for job, due_iso in self.missed.items() if too_old_to_claim(datetime.fromisoformat(due_iso))]
            if stale:
                with self.lock:
                    for job in stale:
                        self.missed.pop(job, None)
                    self._save()
            return []
        by_key = self._commits({cron_key(job, due): (RUNNING, "", None, None) for job, due in missed.items()})
        commits = {job: by_key[cron_key(job, due)] for job, due in missed.items()}
        result = self.remote.push([RefUpdate(CLAIMS + cron_key(job, due), commits[job][0], None)
                                   for job, due in missed.items()], atomic=False)  # Unreachable: still missed
        won = []
        with self.lock:
            for job, due in missed.items():
                if CLAIMS + cron_key(job, due) in result.accepted:
                    self.held[cron_key(job, due)] = _Held(*commits[job])
                    won.append((job, due))
            for job, due_iso in list(self.missed.items()):  # not one the scheduler missed since
                if (job in missed and due_iso == missed[job].isoformat()) or too_old_to_claim(datetime.fromisoformat(due_iso)):
                    del self.missed[job]
            self._save()
        return won

    def prune(self, now: float | None = None) -> list[str]:
        """Delete the claims `prunable` names from the remote, each with a lease on the exact value
        seen (a claim that moved meanwhile stays); returns the keys deleted."""
        now = time.time() if now is None else now
        old = prunable(self.records(), now)
        pruned = []
        for i in range(0, len(old), PRUNE_BATCH):
            batch = old[i:i + PRUNE_BATCH]
            result = self.remote.push([RefUpdate(CLAIMS + r.key, None, r.sha) for r in batch], atomic=False)
            for r in batch:
                if CLAIMS + r.key in result.accepted:
                    self.store.delete_ref(mirror_of(CLAIMS + r.key), r.sha, missing_ok=True)
                    pruned.append(r.key)
        self.pruned_at = now
        return pruned

    def prune_due(self, now: float | None = None) -> bool:
        """Is it time for this process to look for prunable claims again?"""
        return (time.time() if now is None else now) - self.pruned_at >= PRUNE_EVERY_S

    def expired(self, prefix: str = "") -> list[ClaimRecord]:
        """Running claims past their expiry, as of the last fetch: their holder died."""
        now = time.time()
        return [r for r in self.records(prefix) if r.expired(now)
                and (r.key not in self.held or self.held[r.key].orphan)]


def too_old_to_claim(due: datetime, now: float | None = None) -> bool:
    """A due time whose claim may have been pruned (see CLAIMABLE_S)."""
    return due.timestamp() < (time.time() if now is None else now) - CLAIMABLE_S


def prunable(records: list[ClaimRecord], now: float) -> list[ClaimRecord]:
    """The claims that may leave the remote: `done` for RETENTION_S, and

    * a cron claim whose due time is that old too and is not its job's newest claim: the newest
      stays, so every machine's `last` (the ledger's high-water mark, read from the claims) is
      past every pruned due time and the scheduler never computes one again; a one-shot job thus
      keeps its single claim;
    * an inbox claim: its request is gone from main (its removal went up with the `done`), and a
      machine still holding the request checks the remote's main before answering it
      (service/sync.py, claim_request).

    Running claims (a dead machine's, to be taken over) and review decisions (one per decision a
    person makes) are kept."""
    newest: dict[str, datetime] = {}
    for r in records:
        parsed = parse_cron_key(r.key)
        if parsed and (parsed[0] not in newest or parsed[1] > newest[parsed[0]]):
            newest[parsed[0]] = parsed[1]
    out = []
    for r in records:
        if r.state != DONE or not r.timestamp or now - r.timestamp < RETENTION_S:
            continue
        if r.key.startswith("cron/"):
            parsed = parse_cron_key(r.key)
            if parsed is None or now - parsed[1].timestamp() < RETENTION_S or parsed[1] >= newest[parsed[0]]:
                continue
        elif not r.key.startswith("inbox/"):
            continue
        out.append(r)
    return out


def _parse(key: str, sha: str, timestamp: int, message: str) -> ClaimRecord:
    from .git import parse_trailers

    t = parse_trailers(message)
    try:
        expires = float(t.get(CLAIM_EXPIRES) or 0)
    except ValueError:
        expires = 0.0
    return ClaimRecord(key, sha, t.get(HOST, "?"), t.get(CLAIM_STATE, RUNNING), expires, timestamp)


__all__ = ["CLAIMS", "MIRROR", "RETENTION_S", "ClaimRecord", "Claims", "CronLedger", "RefClaims", "Take", "cron_key",
           "prunable", "too_old_to_claim"]
