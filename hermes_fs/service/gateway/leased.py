"""Channels consumed by one machine at a time (a vault with `remote:`): each one's lease, and what
waits for it.

Each leased channel account has a `ChannelHolder` (holder.py) that acquires and renews its lease
on a thread of its own. Here: which channels have a holder, the requests that were claimed on this
machine before a crash and wait to learn from the lease journal whether anybody answered them
(`parked`), and which channels have taken in their last holder's shared state (`merged`, so this
machine publishes its own only once it carries the last holder's too). The core gets callbacks:
`start_channel(name, journal)` once this machine holds a channel (raising if it did not start), `stop_channel(name, why)` when it lost
it, `process(claim, session_key, origin)` for a parked request the journal says nobody answered.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from ...store.vault import Vault
from .. import inbox
from .access import CODE_TTL_S
from .channel import ChannelBase, Origin, Sink
from .delivery import GO
from .ledger import GatewayLedger

if TYPE_CHECKING:
    from .holder import ChannelHolder, Entry, LeaseJournal

log = logging.getLogger(__name__)


@dataclass
class Parked:
    """A request claimed here before a restart, waiting for its channel's lease."""

    claim: inbox.TakenRequest
    session_key: str
    origin: Origin


class LeasedChannels:
    def __init__(self, vault: Vault, ledger: GatewayLedger, sink: Sink,
                 channel: Callable[[str], ChannelBase], start_channel: Callable[[str, LeaseJournal], None],
                 stop_channel: Callable[[str, str], None], process: Callable[[Parked], None],
                 note: Callable[[str], None]):
        self.vault = vault
        self.ledger = ledger
        self.sink = sink
        self.channel = channel  # the live channel of a name (it may be rebuilt on a reload)
        self.start_channel = start_channel
        self.stop_channel = stop_channel
        self.process = process
        self.note = note
        self.holders: dict[str, ChannelHolder] = {}
        self.merged: set[str] = set()
        self.parked: dict[str, list[Parked]] = {}

    def add(self, ch: ChannelBase) -> bool:
        """Give `ch` a lease holder if it pulls its messages and the vault syncs through a remote;
        False: the channel runs here without one."""
        from .holder import ChannelHolder, lease_for

        if not ch.leased:
            return False
        lease = lease_for(self.vault, f"{ch.name}/{ch.account or 'default'}")
        if lease is None:
            return False
        self.holders[ch.name] = ChannelHolder(lease, self.vault.config.sync.lease_s, partial(self._progress, ch.name),
                                              partial(self._acquired, ch.name), partial(self._released, ch.name),
                                              partial(self._shared, ch.name))
        return True

    def __contains__(self, name: str) -> bool:
        return name in self.holders

    def start(self, name: str) -> None:
        self.holders[name].start()

    def remove(self, name: str) -> None:
        """The channel is gone from the settings: stop holding it (another machine may take it)."""
        holder = self.holders.pop(name, None)
        if holder is not None:
            holder.stop()
            holder.hand_over()
        self.merged.discard(name)

    def stop(self) -> None:
        for holder in self.holders.values():
            holder.stop()

    def hand_over(self) -> None:
        """At the end of a stop: another machine takes the channels over at once."""
        for holder in self.holders.values():
            holder.hand_over()

    # -- what the core asks about a message or a reply -------------------------------------------
    def answered_by_last_holder(self, platform: str, rid: str) -> Entry | None:
        """The journal's entry for a message another holder took and settled (None otherwise)."""
        holder = self.holders.get(platform)
        entry = holder.state(rid) if holder is not None else None
        return entry if entry is not None and entry.state != "taken" else None

    def take(self, platform: str, rid: str) -> None:
        """Publish the message as taken here before anything can answer it (NotHeld: not taken)."""
        holder = self.holders.get(platform)
        if holder is not None:
            holder.take(rid)

    def may_send(self, platform: str, rid: str) -> str:
        holder = self.holders.get(platform)
        return holder.sending(rid) if holder is not None else GO

    def settle(self, platform: str, rid: str) -> None:
        holder = self.holders.get(platform)
        if holder is not None:
            holder.settled(rid)

    def park(self, parked: Parked) -> None:
        self.parked.setdefault(parked.origin.platform, []).append(parked)

    # -- the holder's callbacks ------------------------------------------------------------------
    def _progress(self, name: str) -> str | None:
        return self.channel(name).progress(self.sink)

    def _shared(self, name: str) -> dict | None:
        """What the channel's next holder takes in (ledger.shared_state); None (the journal keeps
        what it has) until this hold has taken in the last holder's."""
        if name not in self.merged:
            return None
        return self.ledger.shared_state(name, time.time() - CODE_TTL_S)

    def _acquired(self, name: str, journal: LeaseJournal) -> None:
        """This machine now holds `name`: go on where the journal says, then start consuming."""
        from .holder import TAKEN

        taken_in = self.ledger.merge_shared(name, journal.shared)
        if taken_in:
            self.note(f"gateway {name}: took in {taken_in} chat session(s), approval(s) and code(s) from the last holder")
        self.merged.add(name)
        for p in self.parked.pop(name, []):
            rid = p.claim.request_id
            entry = journal.entries.get(rid)
            if entry is not None and entry.state == TAKEN:
                self.holders[name].take(rid)
                self.note(f"gateway: resuming request {p.claim.name}")
                self.process(p)
            else:  # answered by the machine that took the channel over meanwhile
                where = entry.host if entry else "another machine"
                p.claim.path.unlink(missing_ok=True)
                self.ledger.finish_message(rid, "error", f"answered on {where}")
                self.note(f"gateway: request {p.claim.name} was answered on {where}")
        self.note(f"gateway {name}: this machine holds the channel now")
        self.start_channel(name, journal)  # raises when it did not start: the lease is given up

    def _released(self, name: str, why: str) -> None:
        self.merged.discard(name)
        self.stop_channel(name, why)


__all__ = ["LeasedChannels", "Parked"]
