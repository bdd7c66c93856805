"""Where vault files are read and written: the working tree, or (for refine) an overlay of a commit.

Memory and skill operations take a `FileStore`, so the same code edits the live vault in a chat and
an in-memory overlay of snapshot S during a review.
"""

from __future__ import annotations

import functools
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


class Symlink(bytes):
    """A symlink's target, as git stores it (mode 120000): bytes that never equal a file's bytes.

    Whatever moves a file along (a swap put back, an archive, a refused edit) carries a link as a
    link: written out, it becomes a symlink again, never a regular file holding its target."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Symlink) and bytes(self) == bytes(other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = bytes.__hash__

    def __repr__(self) -> str:
        return f"Symlink({bytes(self)!r})"


def _put_bytes(path: Path, data: bytes) -> None:
    """Create `path` (absent) holding `data`: a symlink for a `Symlink`, else a regular file."""
    if isinstance(data, Symlink):
        os.symlink(os.fsdecode(bytes(data)), path)
        return
    with open(path, "wb") as f:
        f.write(data)


def temp_name(target: Path) -> Path:
    """A temp file beside `target`, unique to this process and call (two writers never share one).

    The name matches the daemon's ignore list (`.*.hermes-tmp`), so it is never taken for an edit."""
    return target.with_name(f".{target.name}.{os.getpid()}-{os.urandom(4).hex()}.hermes-tmp")


def atomic_write(target: Path, data: bytes | str, mode: int | None = None, fsync: bool = False) -> None:
    """Write a file so that a reader (or a crash) sees the old bytes or the new ones, never half."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(target)
    try:
        if isinstance(data, Symlink):
            _put_bytes(tmp, data)
            os.replace(tmp, target)
            return
        with open(tmp, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        if mode is not None:
            tmp.chmod(mode)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


@functools.cache
def _renameat2():
    """libc's renameat2 (Linux 3.15+, glibc 2.28+), or None where it is missing. Looked up on first
    use, in the libc this process already runs on: `ctypes.util.find_library` starts `ldconfig`,
    which every hermes-fs process would pay at start for a function most never call."""
    import ctypes

    fn = None
    for name in (None, "libc.so.6"):
        try:
            fn = ctypes.CDLL(name, use_errno=True).renameat2
            break
        except (OSError, AttributeError):
            continue
    if fn is None:
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn


def swap_in(target: Path, data: bytes | None, keep: list[Path] | None = None) -> bytes | None:
    """Put `data` at `target` (None: remove it) in one step and return the bytes that were there at
    that instant (None: no file). With the old bytes in hand, a caller can tell whether someone
    (a person's editor) wrote since it read, and redo its change on their text instead of losing it.

    Linux swaps the two names atomically (renameat2 RENAME_EXCHANGE); elsewhere the old bytes are
    read right before the replace (a few microseconds in which a write can still be missed). With
    `keep`, the old file itself is kept (its path appended) so that a write through a descriptor
    opened before the swap (`echo >>`) can still be found there (`late_append`)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(target)
    kept = False
    try:
        if data is None:
            try:
                os.rename(target, tmp)
            except FileNotFoundError:
                return None
            old = _read_link_or_file(tmp)
            kept = _keep(tmp, keep)
            return old
        _put_bytes(tmp, data)
        exchange = _renameat2()
        if exchange is not None:
            if exchange(_AT_FDCWD, os.fsencode(tmp), _AT_FDCWD, os.fsencode(target), _RENAME_EXCHANGE) == 0:
                old = _read_link_or_file(tmp)
                kept = _keep(tmp, keep)
                return old
            import ctypes

            err = ctypes.get_errno()
            if err == 2:  # ENOENT: no file there yet; link() creates it only if it is still absent
                try:
                    os.link(tmp, target, follow_symlinks=False)
                    return None
                except FileExistsError:
                    return swap_in(target, data, keep)
            if err not in (22, 38, 95):  # EINVAL/ENOSYS/EOPNOTSUPP: this filesystem cannot; fall back
                raise OSError(err, os.strerror(err), str(target))
        old = _read_link_or_file(target)
        os.replace(tmp, target)
        return old
    finally:
        if not kept:
            tmp.unlink(missing_ok=True)


def _keep(tmp: Path, keep: list[Path] | None) -> bool:
    if keep is None or tmp.is_symlink():
        return False
    keep.append(tmp)
    return True


def late_append(old_file: Path, seen: bytes | None, target: Path) -> bytes:
    """Bytes appended to a file swapped out (`old_file`) after its contents `seen` were read: moved
    to the end of `target`, where the writer meant them to be. The old file is then removed."""
    try:
        now = old_file.read_bytes()
    except FileNotFoundError:
        return b""
    finally:
        old_file.unlink(missing_ok=True)
    extra = now[len(seen):] if seen is not None and now.startswith(seen) else b""
    append(target, extra)
    return extra


def append(target: Path, data: bytes) -> None:
    """Append in one write(2) with O_APPEND: concurrent appenders never overwrite each other."""
    if data:
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


def _read_link_or_file(p: Path) -> bytes | None:
    if p.is_symlink():
        return Symlink(os.fsencode(os.readlink(p)))
    try:
        return p.read_bytes()
    except FileNotFoundError:
        return None


def swap_if_unchanged(target: Path, data: bytes | None, expect: bytes | None, mode: int | None = None,
                      keep: Path | None = None) -> bool:
    """Replace (or, with `data` None, remove) a file only if it holds exactly `expect` (None: absent),
    and never lose a write that lands while it is being replaced: the old file stays open, and if
    it changed between the check and the swap, it is put back in place (their write in it) and
    False is returned (as for a file that did not match). A person's editor appending at that
    moment keeps its text.

    With `keep`, the old file is linked there before the swap and stays there on success: a write
    that reaches it later (through a descriptor opened before the swap, or one that landed just
    before a kill -9 cut the check short) is still on disk, for `late_append` to move to the live
    file once the caller is done (a merge: after main moved, or after a kill, from its journal)."""
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
        if keep is not None:
            linked = _link_same(target, keep, before)
            if linked is False:
                return False  # replaced (an editor's save by rename) since it was opened
            if linked is None:
                keep = None  # no hard links here: the swap as without `keep`
        if data is None:
            target.unlink()
        else:
            atomic_write(target, data, mode=mode)
        after = os.fstat(fd)
        if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
            if keep is not None:
                os.replace(keep, target)  # their file back in place, as it is: a later write to it lands too
            else:
                atomic_write(target, _read_all(fd), mode=before.st_mode & 0o777)  # their write, put back
            return False
        return True
    finally:
        if fd is not None:
            os.close(fd)


def _link_same(target: Path, keep: Path, opened: os.stat_result) -> bool | None:
    """Link `target` at `keep` if it is still the file opened (`opened`); False (nothing linked) if
    not; None if this filesystem makes no hard link."""
    try:
        os.link(target, keep, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except OSError:
        return None
    now = os.lstat(keep)
    if (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino):
        keep.unlink()
        return False
    return True


def settle_kept(keep: Path, seen: bytes | None, target: Path) -> bytes:
    """A file swapped out and kept (`swap_if_unchanged(keep=...)`): what was appended to it after
    its bytes `seen` were read goes to the end of `target` (`late_append`); the kept file is
    removed. Nothing moves when the kept file is still the one at `target` (the swap never came)."""
    try:
        a, b = os.lstat(keep), os.lstat(target)
        if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino):
            keep.unlink()
            return b""
    except FileNotFoundError:
        pass
    return late_append(keep, seen, target)


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

    def entry(self, rel: str) -> Path:
        """Where `rel` itself lives (its folder resolved and confined, its last part not followed):
        writing or deleting a symlink replaces or removes the link, never the file it points to."""
        rel = clean_relpath(rel)
        folder, _, name = rel.rpartition("/")
        parent = self.path(folder) if folder else self.root
        return parent / name

    def read(self, rel: str) -> bytes | None:
        p = self.path(rel)
        return p.read_bytes() if p.is_file() else None

    def read_entry(self, rel: str) -> bytes | None:
        """What `rel` itself holds, the link not followed: a `Symlink` for a link (to move or copy
        it as a link), else the file's bytes."""
        return _read_link_or_file(self.entry(rel))

    def write(self, rel: str, data: bytes) -> None:
        """Bytes make a regular file; a `Symlink` makes a link."""
        atomic_write(self.entry(rel), data)

    def swap(self, rel: str, data: bytes | None, keep: list[Path] | None = None) -> bytes | None:
        """`swap_in` at `rel`: put `data` there (None: remove) and return what was there."""
        p = self.entry(rel)
        old = swap_in(p, data, keep)
        if data is None:
            prune_empty_dirs(p.parent, self.root)
        return old

    def delete(self, rel: str) -> None:
        p = self.entry(rel)
        if p.is_symlink() or p.exists():
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
