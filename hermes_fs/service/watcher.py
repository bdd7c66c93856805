"""Watching the vault: which paths matter, and a watchdog observer that reports them.

Event-driven (inotify on Linux), no polling, so an idle daemon uses no CPU. The Watcher only says
"this vault path changed"; what to do about it is the Daemon's business.
"""

from __future__ import annotations

import fnmatch
import os
import threading
from collections.abc import Callable
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


class Watcher:
    """Calls `on_change(rel)` for each changed, non-ignored file of the vault (from watchdog's thread)."""

    def __init__(self, root: Path, on_change: Callable[[str], None]):
        self.root = Path(root).resolve()
        self.on_change = on_change
        self.observer: Any = None  # watchdog's Observer, imported on start

    def start(self) -> None:
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer

        watcher = self

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event):
                if event.event_type in ("opened", "closed_no_write") or event.is_directory:
                    return
                for attr in ("src_path", "dest_path"):
                    path = getattr(event, attr, None)
                    if path:
                        watcher.report(os.fsdecode(path))

        self.observer = Observer()
        self.observer.schedule(Handler(), str(self.root), recursive=True)
        self.observer.start()

    def report(self, abs_path: str) -> None:
        try:
            rel = Path(abs_path).resolve().relative_to(self.root).as_posix()
        except ValueError:
            return
        if not ignored(rel):
            self.on_change(rel)

    def stop(self) -> None:
        if self.observer:
            self.observer.stop()
            self.observer.join(5)


class Debouncer:
    """Collects keys and calls `fire(keys)` once nothing new arrived for `delay_s` seconds."""

    def __init__(self, delay_s: float, fire: Callable[[list[str]], None]):
        self.delay_s = delay_s
        self.fire = fire
        self.pending: set[str] = set()
        self.lock = threading.Lock()
        self.timer: threading.Timer | None = None

    def add(self, key: str) -> None:
        with self.lock:
            self.pending.add(key)
            if self.timer:
                self.timer.cancel()
            self.timer = threading.Timer(self.delay_s, self.flush)
            self.timer.daemon = True
            self.timer.start()

    def add_many(self, keys: list[str]) -> None:
        with self.lock:
            self.pending.update(keys)

    def flush(self) -> None:
        with self.lock:
            keys, self.pending = sorted(self.pending), set()
        if keys:
            self.fire(keys)

    def cancel(self) -> None:
        with self.lock:
            if self.timer:
                self.timer.cancel()
