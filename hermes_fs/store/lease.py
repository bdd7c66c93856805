"""Leases: one machine at a time holds a named thing (a gateway channel account) on the remote.

A lease is the ref `refs/hermes/leases/<name>` on the vault's remote. It points at a tiny commit
(empty tree, no parent: a lease has no history worth keeping, and renewals every few seconds
must not grow one) whose trailers say who holds it (`Hermes-Host`) and until when
(`Lease-Expires`, the holder's clock), and whose body carries the holder's `journal`: what a
machine taking over must know to go on where the holder stopped (for a channel: its cursor and
which messages are taken, being answered or answered; service/gateway/holder.py).

Every write is a compare-and-swap (`store/remote.py`): create with "must not exist", renew and
take over with the exact old value. So of any number of machines racing for a free or expired
lease exactly one wins, and a holder that was cut off past its expiry learns it lost the lease
at its next write. Nothing here decides when to renew or take over: that is the holder's.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from .provenance import HOST, LEASE_EXPIRES, Act
from .remote import RefUpdate, Remote

if TYPE_CHECKING:
    from .git import GitStore

LEASES = "refs/hermes/leases/"
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def lease_ref(name: str) -> str:
    """`refs/hermes/leases/<name>`, the name quoted so any account id (`@bot:example.org`) is a valid ref."""
    return LEASES + "/".join(quote(part, safe="-_.") or "_" for part in name.split("/"))


@dataclass
class LeaseRecord:
    """A lease as the remote has it."""

    sha: str
    host: str
    expires: float
    journal: dict[str, Any] = field(default_factory=dict)

    def expired(self, now: float | None = None) -> bool:
        return (time.time() if now is None else now) > self.expires


class RefLease:
    """One lease on one remote, seen from one machine."""

    def __init__(self, store: GitStore, remote: Remote, name: str, host: str):
        self.store = store
        self.remote = remote
        self.name = name
        self.ref = lease_ref(name)
        self.host = host
        self._tree_written = False

    def read(self) -> LeaseRecord | None:
        """The lease on the remote now (fetched afresh); None if nobody ever took it. Raises
        Unreachable."""
        sha = self.remote.fetch_ref(self.ref)
        if sha is None:
            return None
        return parse(sha, self.store.message(sha))

    def write(self, expect: str | None, expires: float, journal: dict[str, Any]) -> str | None:
        """Set the lease to this machine until `expires` with `journal`, if the remote's lease is
        `expect` now (None: only if there is none). The new sha, or None when the remote's lease
        was something else (another machine holds it). Raises Unreachable."""
        sha = self._commit(expires, journal)
        result = self.remote.push([RefUpdate(self.ref, sha, expect)])
        return sha if result.ok else None

    def _commit(self, expires: float, journal: dict[str, Any]) -> str:
        if not self._tree_written:  # git knows the empty tree without storing it; fsck wants it stored
            self.store.store_empty_tree()
            self._tree_written = True
        body = json.dumps(journal, separators=(",", ":"), sort_keys=True)
        message = f"lease {self.name}\n\n{body}"
        return self.store.commit_tree(EMPTY_TREE, [], message, Act.lease(self.host, expires))


def parse(sha: str, message: str) -> LeaseRecord:
    """A lease commit's holder, expiry and journal; a malformed one (written by hand, by another
    version) reads as expired with an empty journal, so it can be taken over, never trusted."""
    from .provenance import split_trailers

    text, trailers = split_trailers(message)
    try:
        expires = float(trailers.get(LEASE_EXPIRES) or 0)
    except ValueError:
        expires = 0.0
    _summary, _, body = text.partition("\n\n")
    try:
        journal = json.loads(body) if body.strip() else {}
    except ValueError:
        journal = {}
    if not isinstance(journal, dict):
        journal = {}
    return LeaseRecord(sha, trailers.get(HOST, "?"), expires, journal)


__all__ = ["LEASES", "LeaseRecord", "RefLease", "lease_ref", "parse"]
