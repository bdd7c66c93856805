"""Watching the vault: which paths matter, and a watchdog observer that reports them.

Event-driven (inotify on Linux), no polling, so an idle daemon uses no CPU. The Watcher only says
"this vault path changed"; what to do about it is the Daemon's business.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import fnmatch
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

IGNORED_DIRS = {".git", ".hermes", ".obsidian", ".trash", ".idea", ".vscode"}
# Editor swap, backup and temp files: vim, emacs, VS Code, JetBrains, Obsidian, LibreOffice, ours.
IGNORED_NAMES = ["*.swp", "*.swo", "*.swx", ".*.sw?", "*~", "#*#", ".#*", "4913", "*.tmp", "*.bak", "*.orig",
                 "*.crswap", "*___jb_tmp___", "*___jb_old___", ".~lock.*", ".*.hermes-tmp", ".DS_Store", "*.part"]


def ignored(rel: str) -> bool:
    parts = rel.split("/")
    if parts[0] in IGNORED_DIRS:
        return True
    return any(fnmatch.fnmatch(parts[-1], pat) for pat in IGNORED_NAMES)


def written_events() -> list[type]:
    """The watchdog events the daemon asks the kernel for: every one but a file opened, or closed
    without a write. Those two are most of what a vault's files see: each git command opens dozens
    of files in the vault (`python bench/watch_events.py` counts them), and every event, even one
    dropped at once, queues in the kernel (whose queue is bounded and can overflow) and costs the
    daemon's Python, GIL held, to read and drop."""
    from watchdog import events as ev

    return [ev.FileCreatedEvent, ev.FileModifiedEvent, ev.FileClosedEvent, ev.FileMovedEvent, ev.FileDeletedEvent,
            ev.DirCreatedEvent, ev.DirModifiedEvent, ev.DirMovedEvent, ev.DirDeletedEvent]


class Watcher:
    """Calls `on_change(rel, kind)` for each changed, non-ignored file of the vault (from watchdog's
    thread). `kind` is created, modified, closed (the writer closed it), moved (renamed into place)
    or deleted.

    `skip`: top-level directories not watched at all (the daemon: .git, .hermes, editors' own).
    The vault's top level is then watched by itself and each other top-level directory with its
    whole tree, so git's own writes under .git/ (many times the events of the edits themselves:
    bench/watch_events.py) and the daemon's log and state are never queued. A top-level directory made or moved in later is watched from
    then on, and the files it already holds are reported. `also`: folders inside skipped ones to
    watch all the same, each (path from the vault, recursive) — the web page's feed shows refs."""

    def __init__(self, root: Path, on_change: Callable[[str, str], None],
                 keep: Callable[[str], bool] | None = None, on_lost: Callable[[], None] | None = None,
                 skip: Iterable[str] = (), also: Iterable[tuple[str, bool]] = ()):
        self.root = Path(root).resolve()
        self.on_change = on_change
        self.keep = keep or (lambda rel: not ignored(rel))  # which vault paths are reported
        self.skip = frozenset(skip)
        self.also = tuple(also)
        self.observer: Any = None  # watchdog's Observer, imported on start
        self.handler: Any = None
        self.trees: dict[str, Any] = {}  # top-level directory -> its watch (with `skip`)
        self.reports_close = False  # inotify says when a writer closed a file; other platforms do not
        self.lost = EventsLost(on_lost) if on_lost else None

    def start(self) -> None:
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer

        watcher = self

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event):
                if event.is_directory:
                    if watcher.skip:
                        watcher._top_level_changed(event)
                    return
                if event.event_type == "moved":
                    watcher.report(os.fsdecode(event.src_path), "deleted")
                    watcher.report(os.fsdecode(event.dest_path), "moved")
                else:
                    watcher.report(os.fsdecode(event.src_path), event.event_type)

        self.observer = Observer()
        self.handler = Handler()
        self.reports_close = "inotify" in type(self.observer).__name__.lower()
        self._schedule(self.root, recursive=not self.skip)
        if self.skip:
            for child in sorted(self.root.iterdir()):
                self._watch_tree(child)
        for rel, recursive in self.also:
            if (self.root / rel).is_dir():
                self._schedule(self.root / rel, recursive)
        if self.lost:
            logging.getLogger(OVERFLOW_LOGGER).addHandler(self.lost)
        self.observer.start()

    def _schedule(self, path: Path, recursive: bool) -> Any:
        """Watch `path` for writes (written_events), with the one handler; watchdog's watch."""
        return self.observer.schedule(self.handler, str(path), recursive=recursive, event_filter=written_events())

    def _top_level_changed(self, event) -> None:
        """A directory event: one at the vault's top level starts or ends a tree's watch."""
        if event.event_type in ("deleted", "moved"):
            self._unwatch_tree(Path(os.fsdecode(event.src_path)))
        if event.event_type in ("created", "moved"):
            added = Path(os.fsdecode(event.dest_path if event.event_type == "moved" else event.src_path))
            if self._watch_tree(added):
                for dirpath, _dirs, files in os.walk(added):  # what it held before its watch began
                    for name in files:
                        self.report(os.path.join(dirpath, name), "moved")

    def _watch_tree(self, path: Path) -> bool:
        if path.parent != self.root or path.name in self.skip or path.name in self.trees:
            return False
        if path.is_symlink() or not path.is_dir():
            return False
        try:
            self.trees[path.name] = self._schedule(path, recursive=True)
        except OSError:  # gone again already
            return False
        return True

    def _unwatch_tree(self, path: Path) -> None:
        watch = self.trees.pop(path.name, None) if path.parent == self.root else None
        if watch is not None:
            with contextlib.suppress(KeyError, RuntimeError):  # its watch ended with the directory
                self.observer.unschedule(watch)

    def report(self, abs_path: str, kind: str = "modified") -> None:
        try:
            rel = Path(os.path.abspath(abs_path)).relative_to(self.root).as_posix()
        except ValueError:
            return
        if self.keep(rel):
            self.on_change(rel, kind)

    def stop(self) -> None:
        if self.lost:
            logging.getLogger(OVERFLOW_LOGGER).removeHandler(self.lost)
        if self.observer:
            self.observer.stop()
            self.observer.join(5)


OVERFLOW_LOGGER = "watchdog.observers.inotify_c"


class EventsLost(logging.Handler):
    """When the kernel's inotify queue overflows (a burst of more events than it holds), watchdog
    rebuilds its watches but tells no event handler; it only logs a warning. That warning is the
    one signal there is, so it is caught here and `on_lost` is called (from watchdog's thread: it
    must return at once). Without it, a file dropped during an overflow (an inbox request) would
    never be taken."""

    def __init__(self, on_lost: Callable[[], None]):
        super().__init__(logging.WARNING)
        self.on_lost = on_lost

    def emit(self, record: logging.LogRecord) -> None:
        if "overflow" in record.getMessage().lower():
            self.on_lost()


F_SETLEASE = getattr(fcntl, "F_SETLEASE", 1024)  # Linux only


def open_for_writing(path: Path) -> bool:
    """Whether any process still has `path` open for writing (Linux: a read lease is refused then).
    A file moved in from outside the vault, or linked in, gives no close event to wait for; this
    tells a finished file from one a writer created and has not written yet. False where leases
    are not supported (another platform, a file system without them, a file we do not own)."""
    if not hasattr(fcntl, "F_RDLCK") or sys.platform != "linux":
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.fcntl(fd, F_SETLEASE, fcntl.F_RDLCK)
        fcntl.fcntl(fd, F_SETLEASE, fcntl.F_UNLCK)
        return False
    except OSError as exc:
        return exc.errno in (errno.EAGAIN, errno.EBUSY)
    finally:
        os.close(fd)


class Settler:
    """Calls `take(key)` once a file has been quiet for `delay_s` and its size is stable, from one
    thread for any number of files (10,000 requests dropped at once cost one thread, not 10,000)."""

    def __init__(self, delay_s: float, size_of: Callable[[str], int | None], take: Callable[[str], None],
                 busy: Callable[[str], bool] = lambda _key: False):
        self.delay_s = delay_s
        self.size_of = size_of
        self.take = take
        self.busy = busy  # someone still has the file open for writing: wait again
        self.due: dict[str, tuple[float, int | None]] = {}  # key -> (deadline, size when scheduled)
        self.cond = threading.Condition()
        self.stopped = False
        self.thread = threading.Thread(target=self._loop, name="settler", daemon=True)
        self.thread.start()

    def add(self, key: str) -> None:
        with self.cond:
            self.due[key] = (time.monotonic() + self.delay_s, self.size_of(key))
            self.cond.notify()

    def touch(self, key: str) -> None:
        """The file changed again: if it was waiting, wait again from now."""
        with self.cond:
            if key in self.due:
                self.due[key] = (time.monotonic() + self.delay_s, self.size_of(key))

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify()
        self.thread.join(5)

    def _loop(self) -> None:
        while True:
            with self.cond:
                if self.stopped:
                    return
                now = time.monotonic()
                ready = [k for k, (t, _s) in self.due.items() if t <= now]
                if not ready:
                    wait = min((t for t, _s in self.due.values()), default=now + 3600) - now
                    self.cond.wait(max(wait, 0.01))
                    continue
                sizes = {k: self.due.pop(k)[1] for k in ready}
            for key in ready:
                if self.size_of(key) != sizes[key] or self.busy(key):  # still being written: wait again
                    self.add(key)
                    continue
                try:
                    self.take(key)
                except Exception:  # one bad file never stops the others
                    import logging

                    logging.getLogger("hermes_fs").exception(f"taking {key} failed")


class Debouncer:
    """Collects keys and calls `fire(keys)` once nothing new arrived for `delay_s` seconds."""

    def __init__(self, delay_s: float, fire: Callable[[list[str]], None]):
        self.delay_s = delay_s
        self.fire = fire
        self.pending: set[str] = set()
        self.lock = threading.Lock()
        self.timer: threading.Timer | None = None

    def add(self, *keys: str) -> None:
        """Add keys and (re)start the wait, as if each had just changed: one timer, however many."""
        with self.lock:
            self.pending.update(keys)
            if self.timer:
                self.timer.cancel()
            self.timer = threading.Timer(self.delay_s, self.flush)
            self.timer.daemon = True
            self.timer.start()

    def flush(self) -> None:
        with self.lock:
            keys, self.pending = sorted(self.pending), set()
        if keys:
            self.fire(keys)

    def cancel(self) -> None:
        with self.lock:
            if self.timer:
                self.timer.cancel()
