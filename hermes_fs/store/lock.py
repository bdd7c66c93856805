"""A file lock in .hermes/locks/ that serialises everything touching main, the index or the work tree.

flock(2) is released by the kernel when its holder dies, so a lock left by a killed process is never
stale: the next taker simply gets it. The pid written inside is for `status`, not for correctness.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from ..errors import HermesError


class VaultLock:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._fd: int | None = None

    @contextmanager
    def hold(self, timeout: float = 120.0):
        """Re-entrant within a process; exclusive across processes."""
        if not self._thread_lock.acquire(timeout=timeout):
            raise HermesError(f"timed out after {timeout:.0f}s waiting for {self.path}")
        try:
            if self._depth == 0:
                self.acquire(timeout)
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.release()
        finally:
            self._thread_lock.release()

    def acquire(self, timeout: float) -> None:
        """Take the file lock (not re-entrant: `hold` is the re-entrant way); timeout 0 = try once."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise HermesError(f"vault is busy: {self.path} held by pid {self.holder()}") from None
                time.sleep(0.01)
        try:
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())  # for `status`; fails on a full disk
        except OSError:
            pass  # the flock is what counts; an empty pid file only means `status` cannot name the holder
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def is_held(self) -> bool:
        """True when some process holds the lock (a dead holder's lock is free)."""
        if self._fd is not None:
            return True
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)

    def holder(self) -> int | None:
        try:
            text = self.path.read_text().strip()
            return int(text) if text else None
        except (OSError, ValueError):
            return None
