"""Where vault files are read and written: the working tree, or (for refine) an overlay of a commit.

Memory and skill operations take a `FileStore`, so the same code edits the live vault in a chat and
an in-memory overlay of snapshot S during a review.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Protocol

from ..errors import InputError

FORBIDDEN_TOP = {".git", ".hermes"}


def clean_relpath(rel: str) -> str:
    """Normalise a vault-relative path, refusing anything that could escape or touch internals."""
    if not isinstance(rel, str) or not rel.strip():
        raise InputError("empty path")
    if "\x00" in rel or "\\" in rel:
        raise InputError(f"invalid characters in path {rel!r}")
    p = PurePosixPath(rel)
    if p.is_absolute():
        raise InputError(f"path must be relative to the vault, got {rel!r}")
    parts = [part for part in p.parts if part not in ("", ".")]
    if not parts or any(part == ".." for part in parts):
        raise InputError(f"path escapes the vault: {rel!r}")
    if parts[0] in FORBIDDEN_TOP:
        raise InputError(f"path is inside {parts[0]}/, which tools may not touch: {rel!r}")
    if any(part.lower() == ".git" for part in parts):  # a nested repository runs its own hooks and config
        raise InputError(f"a path component named .git is not allowed: {rel!r}")
    return "/".join(parts)


def atomic_write(target: Path, data: bytes | str, mode: int | None = None, fsync: bool = False) -> None:
    """Write a file so that a reader (or a crash) sees the old bytes or the new ones, never half.

    The temp name matches the daemon's ignore list (`.*.hermes-tmp`), so it is never taken for an edit.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.hermes-tmp")
    with open(tmp, "wb") as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    if mode is not None:
        tmp.chmod(mode)
    os.replace(tmp, target)


def swap_if_unchanged(target: Path, data: bytes | None, expect: bytes | None, mode: int | None = None) -> bool:
    """Replace (or, with `data` None, remove) a file only if it holds exactly `expect` (None: absent),
    and never lose a write that lands while it is being replaced: the old file stays open, and if
    it changed between the check and the swap, its bytes are put back and False is returned (as
    for a file that did not match). A person's editor appending at that moment keeps its text."""
    target = Path(target)
    try:
        fd = os.open(target, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        fd = None
    except OSError:  # a symlink or something else that is not a plain file: compare as git would
        return False
    try:
        if fd is None:
            if expect is not None:
                return False
            if data is not None:
                atomic_write(target, data, mode=mode)
            return True
        before = os.fstat(fd)
        if _read_all(fd) != expect:
            return False
        if data is None:
            target.unlink()
        else:
            atomic_write(target, data, mode=mode)
        after = os.fstat(fd)
        if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
            atomic_write(target, _read_all(fd), mode=before.st_mode & 0o777)  # their write, put back
            return False
        return True
    finally:
        if fd is not None:
            os.close(fd)


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


def symlink_on_path(root: Path, rel: str, include_last: bool = False) -> Path | None:
    """The first folder of `rel` (and, with `include_last`, the file itself) that is a symlink, or
    None: writing through one could land outside the vault."""
    parts = rel.split("/")
    here = Path(root)
    for part in parts if include_last else parts[:-1]:
        here = here / part
        if here.is_symlink():
            return here
    return None


def prune_empty_dirs(start: Path, root: Path) -> None:
    """Remove `start` and its parents while empty, stopping at `root` (git keeps no empty folders)."""
    while start != root and start.is_dir() and not any(start.iterdir()):
        start.rmdir()
        start = start.parent


class FileStore(Protocol):
    def read(self, rel: str) -> bytes | None: ...
    def write(self, rel: str, data: bytes) -> None: ...
    def delete(self, rel: str) -> None: ...
    def list(self, prefix: str) -> list[str]: ...


class DiskFiles:
    """The vault's working tree, confined: symlinks are resolved before the check."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        self._root = str(self.root)

    def path(self, rel: str) -> Path:
        # String operations, not pathlib: this runs once per file on every listing.
        rel = clean_relpath(rel)
        target = os.path.realpath(os.path.join(self._root, rel))
        if target == self._root:
            return self.root
        if not target.startswith(self._root + os.sep):
            raise InputError(f"path resolves outside the vault (symlink?): {rel!r}")
        top = target[len(self._root) + 1 :].split(os.sep, 1)[0]
        if top in FORBIDDEN_TOP:
            raise InputError(f"path resolves into {top}/: {rel!r}")
        return Path(target)

    def read(self, rel: str) -> bytes | None:
        p = self.path(rel)
        return p.read_bytes() if p.is_file() else None

    def write(self, rel: str, data: bytes) -> None:
        atomic_write(self.path(rel), data)

    def delete(self, rel: str) -> None:
        p = self.path(rel)
        if p.exists():
            p.unlink()
        prune_empty_dirs(p.parent, self.root)

    def children(self, prefix: str, containing: str) -> list[str]:
        """Names of the folders directly under `prefix` that hold a file `containing` (cheap: no walk)."""
        base = self.path(prefix)
        if not base.is_dir():
            return []
        with os.scandir(base) as it:
            return [e.name for e in it if e.is_dir(follow_symlinks=False)
                    and e.name not in FORBIDDEN_TOP and os.path.isfile(os.path.join(e.path, containing))]

    def list(self, prefix: str) -> list[str]:
        base = self.path(prefix)
        if not base.is_dir():
            return []
        out: list[str] = []
        skip = len(self._root) + 1
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if d not in FORBIDDEN_TOP]
            rel_dir = dirpath[skip:].replace(os.sep, "/")
            out.extend(f"{rel_dir}/{name}" for name in filenames)
        return sorted(out)
