"""What changed in the vault, for the page's server-sent events: the daemon's Watcher (watchdog) over
the vault, keeping its files, the branch refs under .git/ and the daemon's state file, coalesced for
a short moment and handed to every open page, which then fetches itself again. Of .git/ and
.hermes/ only what a page shows is watched (SHOWN_INSIDE): not the objects git writes.

Event-driven (inotify), no polling; with no page open it only records nothing.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

from ..watcher import IGNORED_DIRS, Watcher, ignored

COALESCE_S = 0.25  # a commit touches many files at once: one event for all of them
SHOWN_INSIDE = ((".git", False), (".git/refs", True), (".hermes", False))  # HEAD, packed-refs; refs; daemon.json


def interesting(rel: str) -> str | None:
    """The name a page is told for a changed vault path, or None when no page shows it."""
    if rel.startswith(".git/"):
        inner = rel[len(".git/"):]
        if inner.startswith("refs/") and not inner.endswith(".lock"):
            return "git:" + inner
        return "git:" + inner if inner in ("packed-refs", "HEAD") else None
    if rel == ".hermes/daemon.json":
        return "daemon"
    return None if ignored(rel) else rel


class ChangeFeed:
    """Watches the vault; `subscribe()` gives an asyncio queue that receives lists of changed names."""

    def __init__(self, root: Path, on_change: Callable[[list[str]], None] | None = None):
        self.root = Path(root).resolve()
        self.on_change = on_change  # called (from the timer thread) before pages are told
        self.watcher: Watcher | None = None
        self.lock = threading.Lock()
        self.pending: set[str] = set()
        self.timer: threading.Timer | None = None
        self.clients: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = []

    def start(self) -> None:
        self.watcher = Watcher(self.root, self._changed, keep=lambda rel: interesting(rel) is not None,
                               skip=IGNORED_DIRS, also=SHOWN_INSIDE)
        self.watcher.start()

    def stop(self) -> None:
        if self.watcher:
            self.watcher.stop()
        with self.lock:
            if self.timer:
                self.timer.cancel()

    def _changed(self, rel: str, _kind: str) -> None:
        name = interesting(rel)
        if name is None:
            return
        with self.lock:
            self.pending.add(name)
            if self.timer is None:
                self.timer = threading.Timer(COALESCE_S, self._flush)
                self.timer.daemon = True
                self.timer.start()

    def _flush(self) -> None:
        with self.lock:
            names, self.pending, self.timer = sorted(self.pending), set(), None
            clients = list(self.clients)
        if self.on_change:
            self.on_change(names)
        for loop, queue in clients:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, names)
            except RuntimeError:  # that page's loop is closed
                pass

    def subscribe(self) -> asyncio.Queue:
        queue: asyncio.Queue = asyncio.Queue()
        with self.lock:
            self.clients.append((asyncio.get_running_loop(), queue))
        return queue

    def unsubscribe(self, queue: asyncio.Queue) -> None:
        with self.lock:
            self.clients = [(lp, q) for lp, q in self.clients if q is not queue]
