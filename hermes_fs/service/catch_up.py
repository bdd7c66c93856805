"""After a start, agent work (cron runs, inbox requests) waits until the daemon's parts that must
first learn what happened meanwhile have done so: sync's first round, which merges what the other
machines wrote while this one was down and reads the claims they took. Never longer than
CATCH_UP_MAX_S: a remote that does not answer delays nobody's work for more than that.

Why: a restarted daemon that resumes its requests and taken-over cron runs at once spends the
CPU and the GIL on agent work (litellm's import first) that its first sync round needs, and the
other machines' edits wait on that round (the figures: docs/benchmarks/notes). Work that starts
one round later has lost nothing: its claims are held (and renewed) meanwhile.
"""

from __future__ import annotations

import threading

CATCH_UP_MAX_S = 10.0

__all__ = ["CATCH_UP_MAX_S", "CatchUp"]


class CatchUp:
    """Closed from construction; open once the daemon has started every part (`all_started`) and
    each part that held it has released it, or CATCH_UP_MAX_S after `all_started` at the latest."""

    def __init__(self, max_s: float = CATCH_UP_MAX_S):
        self.max_s = max_s
        self.lock = threading.Lock()
        self.holders: set[str] = set()
        self.started = False
        self.open = threading.Event()
        self.begun = threading.Event()  # set by all_started (or give_up): the daemon's jobs are loaded
        self.timer: threading.Timer | None = None

    def hold(self, name: str) -> None:
        """A part that must catch up first (called from its start())."""
        with self.lock:
            if not self.open.is_set():
                self.holders.add(name)

    def release(self, name: str) -> None:
        """That part has caught up, or tried and failed: either way its work may go on."""
        with self.lock:
            self.holders.discard(name)
            self._maybe_open()

    def all_started(self) -> None:
        """Every part is started (and has said whether it holds the gate)."""
        with self.lock:
            self.started = True
            self._maybe_open()
        self.begun.set()
        if not self.open.is_set():
            self.timer = threading.Timer(self.max_s, self.give_up)
            self.timer.daemon = True
            self.timer.start()

    def give_up(self) -> None:
        """Open whatever still holds (max_s ran out, or the daemon is stopping)."""
        with self.lock:
            self.holders.clear()
            self.open.set()
        self.begun.set()
        if self.timer is not None:
            self.timer.cancel()

    def wait(self, timeout: float | None = None) -> bool:
        """Agent work calls this before it starts; True once the gate is open."""
        return self.open.wait(self.max_s * 3 if timeout is None else timeout)

    def _maybe_open(self) -> None:
        if self.started and not self.holders:
            self.open.set()
