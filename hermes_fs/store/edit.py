"""One way to change vault files while people and other processes write them too.

`edit` runs a change (a function of a FileStore: a memory add, a skill patch) against a staged
view of the working tree while holding the vault's lock, checks what it would write (size, secrets)
before anything touches the disk, then swaps each file in (`swap_in`) and looks at what it
displaced. If that is not what the change read, someone wrote in between (a person's editor does
not take our lock): the change is made again on *their* text and swapped in again, so neither
their line nor ours is lost. `undo` puts the files back when what follows (the commit) fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from ..errors import HermesError
from .files import DiskFiles, append, late_append
from .lock import VaultLock

T = TypeVar("T")
ATTEMPTS = 8


class Staged:
    """A FileStore over the disk (or over given base bytes) that keeps its writes in memory."""

    def __init__(self, disk: DiskFiles, bases: dict[str, bytes | None]):
        self.disk = disk
        self.bases = dict(bases)  # rel -> the bytes this change starts from
        self.writes: dict[str, bytes | None] = {}

    def base(self, rel: str) -> bytes | None:
        if rel not in self.bases:
            self.bases[rel] = self.disk.read(rel)
        return self.bases[rel]

    def read(self, rel: str) -> bytes | None:
        return self.writes[rel] if rel in self.writes else self.base(rel)

    def write(self, rel: str, data: bytes) -> None:
        self.base(rel)
        self.writes[rel] = data

    def delete(self, rel: str) -> None:
        self.base(rel)
        self.writes[rel] = None

    def list(self, prefix: str) -> list[str]:
        found = set(self.disk.list(prefix)) | {p for p, d in self.writes.items() if d is not None}
        return sorted(p for p in found if p.startswith(prefix + "/") and self.writes.get(p, b"") is not None)


@dataclass
class Edit(Generic[T]):
    result: T
    wrote: dict[str, bytes | None]  # rel -> what is on disk now (None: removed)
    before: dict[str, bytes | None] = field(default_factory=dict)  # rel -> what was there before
    disk: DiskFiles | None = None
    swapped_out: dict[str, tuple[Path, bytes | None]] = field(default_factory=dict)  # rel -> (old file, its bytes)

    def settle(self) -> list[str]:
        """After the commit: text appended to a swapped-out file through a descriptor opened before
        the swap (`echo ... >> USER.md` caught mid-way) is moved to the live file, never lost.
        Returns the paths that got such text (a person's edit, for the daemon to commit)."""
        assert self.disk is not None
        late = []
        for rel, (old_file, seen) in self.swapped_out.items():
            if late_append(old_file, seen, self.disk.entry(rel)):
                late.append(rel)
        self.swapped_out.clear()
        return late

    def undo(self) -> None:
        """Put back what was there, file by file, where the disk still holds what this edit wrote."""
        assert self.disk is not None
        for rel, data in self.wrote.items():
            now = self.disk.swap(rel, self.before.get(rel))
            if now != data:  # someone wrote after us: theirs stays
                self.disk.swap(rel, now)
        self.settle()


def edit(disk: DiskFiles, lock: VaultLock, change: Callable[[Staged], T],
         check: Callable[[dict[str, bytes | None]], None] | None = None) -> Edit[T]:
    """Run `change` on the vault's files under the lock and write what it wrote, losing no one's text.

    `check(writes)` may raise to refuse the change; then nothing is written. Callers hold the lock
    longer (through their commit) by taking `lock.hold()` around this call: it is re-entrant."""
    with lock.hold():
        bases: dict[str, bytes | None] = {}  # rel -> the text the next attempt starts from
        believed: dict[str, bytes | None] = {}  # rel -> what we last put on disk
        kept: dict[str, tuple[Path, bytes | None]] = {}
        for _attempt in range(ATTEMPTS):
            staged = Staged(disk, bases)
            try:
                result = change(staged)
                if check:
                    check(staged.writes)
            except BaseException:
                for old_file, _seen in kept.values():
                    old_file.unlink(missing_ok=True)
                _put_back(disk, believed, bases)  # a redo refused on their text: their text stays
                raise
            for rel in set(believed) - set(staged.writes):  # written by an earlier attempt, not this one
                _put_back(disk, {rel: believed.pop(rel)}, bases)
            clean = True
            for rel, data in staged.writes.items():
                expected = believed.get(rel, staged.base(rel))
                holder: list[Path] = []
                displaced = disk.swap(rel, data, holder)
                if holder:
                    if rel in kept:
                        late_append(kept[rel][0], kept[rel][1], disk.entry(rel))  # an earlier old file
                    kept[rel] = (holder[0], displaced)
                if displaced != expected and displaced is not None and expected is not None \
                        and displaced.startswith(expected) and data is not None:
                    # lines appended since we read (`echo ... >>`): appended again, after our change
                    append(disk.entry(rel), displaced[len(expected):])
                    bases[rel] = staged.base(rel)
                elif displaced != expected:  # saved whole by an editor since we read: redo on their text
                    clean = False
                    bases[rel] = displaced
                else:
                    bases[rel] = staged.base(rel)
                believed[rel] = data
            if clean:
                return Edit(result, dict(staged.writes), {r: bases[r] for r in staged.writes}, disk, kept)
        for old_file, _seen in kept.values():
            old_file.unlink(missing_ok=True)
        _put_back(disk, believed, bases)
        raise HermesError(f"{', '.join(sorted(believed))} kept changing while being written; try again")


def _put_back(disk: DiskFiles, believed: dict[str, bytes | None], bases: dict[str, bytes | None]) -> None:
    """Where we wrote (`believed`), put back the text we started from, unless someone wrote since."""
    for rel, ours in believed.items():
        now = disk.swap(rel, bases.get(rel))
        if now != ours:
            disk.swap(rel, now)
