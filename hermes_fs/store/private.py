"""State files are the owner's alone: `.hermes/` holds message text (gateway requests, the ledger's
and the mail channel's SQLite write-ahead logs), tokens and the search index of every session.

Three rules close the class rather than file by file:
- the daemon runs with umask 077 (`tighten_umask`), so every file it or its children create is
  0600 and every folder 0700, whatever creates it (SQLite's -wal/-shm included);
- every SQLite database under `.hermes/` is opened by `connect_private`, which makes the file
  0600 before SQLite sees it (SQLite gives its -wal and -shm the database's mode);
- at start, `protect_tree` takes group and other bits off what an older version left readable.

Commands the agent runs for the person (the local shell) get the person's own umask back
(`person_umask`): files in their projects are made the way their shell would make them.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

PRIVATE_UMASK = 0o077
_PERSON_UMASK_ENV = "HERMES_PERSON_UMASK"  # the umask before tightening, for child processes too
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def tighten_umask() -> int:
    """From now on this process (and what it starts) creates files 0600 and folders 0700.
    Returns the umask it had; the first one is remembered for `person_umask`."""
    old = os.umask(PRIVATE_UMASK)
    os.environ.setdefault(_PERSON_UMASK_ENV, f"{old:03o}")
    return old


def person_umask() -> int | None:
    """The umask the person's shell gave (None: never tightened, the current one stands)."""
    value = os.environ.get(_PERSON_UMASK_ENV, "")
    try:
        return int(value, 8) & 0o777 if value else None
    except ValueError:
        return None


def protect_tree(folder: Path) -> None:
    """`folder` 0700 and everything below it without group or other bits (links are not followed)."""
    folder = Path(folder)
    if not folder.is_dir() or folder.is_symlink():
        return
    _tighten(folder, 0o700)
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            _tighten(Path(dirpath) / name, None)


def _tighten(path: Path, mode: int | None) -> None:
    try:
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode) or st.st_uid != os.getuid():
            return
        want = mode if mode is not None else stat.S_IMODE(st.st_mode) & 0o700
        if stat.S_IMODE(st.st_mode) != want:
            os.chmod(path, want)
    except OSError:  # gone meanwhile, or not ours to change
        pass


def connect_private(path: Path, **options) -> sqlite3.Connection:
    """`sqlite3.connect` to a database that is 0600 before SQLite opens it, side files too."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    for suffix in SQLITE_SIDE_FILES:
        side = path.with_name(path.name + suffix)
        if side.exists() and not side.is_symlink():
            side.chmod(0o600)
    return sqlite3.connect(path, **options)
