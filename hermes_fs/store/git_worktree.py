"""GitStore's calls that make the index and the working tree show a commit at given paths, file by
file (compare-and-swap against what a person may have typed), and put back what a killed merge
left (its journal). Callers hold the vault lock; main does not move here.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass

from ..errors import EditedWhileMerging, GitError, InputError
from .files import (
    Symlink,
    atomic_write,
    clean_relpath,
    prune_empty_dirs,
    settle_kept,
    swap_if_unchanged,
    symlink_on_path,
)
from .git_base import ZERO
from .git_objects import GitObjects


@dataclass
class Fold:
    """A file a person saved into while a merge ran: their text, and what the merge writes instead
    of its own version (their text with the merge folded in). The merge's journal keeps their
    text, so a merge killed half-way puts it back (`GitWorktree._unfold`)."""

    person: bytes
    wrote: bytes

    @property
    def digest(self) -> str:
        return _digest(self.wrote)

    def journal(self) -> dict[str, str]:
        return {"person": base64.b64encode(self.person).decode(), "wrote": self.digest}


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def checkout_refusal(rel: str) -> str | None:
    """Why a name git holds is never written in the working tree (None: it is written). A commit
    from elsewhere may name `.hermes/` (this machine's secrets and state), a `.git` folder, or a
    name the vault's tools cannot address: such a file stays in git, out of the working tree
    (quarantined: `skip-worktree` in the index), and sync goes on."""
    try:
        return None if clean_relpath(rel) == rel else "not a plain vault path"
    except InputError as exc:
        return str(exc)


class GitWorktree(GitObjects):
    def _stage(self, blobs: dict[str, str], deleted: list[str], modes: dict[str, str]) -> None:
        """Put committed blobs in the index (and drop deleted paths) without touching other entries."""
        lines = [f"{modes.get(p, '100644')} {sha}\t{p}" for p, sha in blobs.items()]
        lines += [f"0 {ZERO}\t{p}" for p in deleted]
        if lines:
            self._git("update-index", "-z", "--index-info", input="\0".join(lines) + "\0")

    def recover_interrupted_merge(self) -> list[str]:
        """After a merge was killed between writing files and moving main: put back the files it
        wrote (where they still hold exactly what it wrote), so the branch's text is never
        committed as a person's edit. Returns the paths put back.

        Every commit of working-tree state (`commit_paths`, `commit_all`, `commit_human_edits`,
        and the merges through the last) runs this first, under the lock: otherwise a commit that
        moved main before it would make it skip the files, and the merge's half-written text would
        be committed as a person's edit."""
        try:
            j = json.loads(self.journal.read_text())
        except (OSError, ValueError):
            return []
        restored = []
        head = self.head()
        if self.rev(j["new"]) is None:  # not in this repository (a foreign or pruned journal)
            self.journal.unlink(missing_ok=True)
            return []
        folds = j.get("folds") or {}
        person = {rel: base64.b64decode(f["person"]) for rel, f in folds.items()}
        if head != j["new"] and not self.is_ancestor(j["new"], head):  # the merge never landed
            unfolded = []
            for rel in j["paths"]:
                if rel in folds:  # a person's text the merge was folded into: their text alone
                    if self._unfold(rel, person[rel], folds[rel]["wrote"]):
                        unfolded.append(rel)
            restored = self._restore(head, j["new"], [rel for rel in j["paths"] if rel not in folds])
            self._stage_from(head, j["paths"])
            restored += unfolded
        self._settle_kept(j["old"], j.get("kept") or {}, person)
        self.journal.unlink(missing_ok=True)
        return restored

    def _settle_kept(self, old: str, kept: dict[str, str], person: dict[str, bytes]) -> None:
        """The files a merge swapped out and kept (`_write_paths`' `keep`): what was appended to one
        after the merge read it (a save through a descriptor opened before the swap, or one that
        landed just before a kill -9 cut the swap's check short) goes to the end of the live file,
        the person's text to commit; the kept files are removed. `person`: a fold's text, which is
        what the merge read there (else main's bytes at `old`)."""
        for rel, name in kept.items():
            keep = self.root / name
            if not os.path.lexists(keep):
                continue
            seen = person[rel] if rel in person else self.read_file(old, rel)
            if not settle_kept(keep, seen, self.root / rel) and not os.path.lexists(self.root / rel):
                prune_empty_dirs(keep.parent, self.root)  # a file the merge removed: its folder goes too

    def _restore(self, commit: str, wrote: str, paths: list[str]) -> list[str]:
        """The files at `paths` that still hold exactly what `wrote` has there get `commit`'s bytes
        back (the index is left alone); returns those paths. Both commits' bytes are read first,
        then each file is swapped only if unchanged, so no git process runs between the look at a
        file and its swap, where a save could land and be overwritten. A file changed meanwhile
        stays as it is: the person's text, to commit."""
        before, after = self._ls_paths(commit, paths), self._ls_paths(wrote, paths)
        restored = []
        for rel in paths:
            if checkout_refusal(rel):
                continue  # never written here: nothing to put back
            self._refuse_symlinked_parent(rel)
            data = self.read_file(commit, rel) if rel in before else None
            if data is not None and before[rel][0] == "120000":
                data = Symlink(data)
            expect = self.read_file(wrote, rel) if rel in after else None
            target = self.root / rel
            if data == expect:
                continue  # the same in both: nothing to put back
            mode = 0o755 if rel in before and before[rel][0] == "100755" else None
            if swap_if_unchanged(target, data, expect, mode):
                if data is None:
                    prune_empty_dirs(target.parent, self.root)
                restored.append(rel)
        return restored

    def _stage_from(self, commit: str, paths: list[str]) -> None:
        """The index shows `commit` at `paths` (the working tree is left alone)."""
        listed = self._ls_paths(commit, paths)
        self._stage({p: sha for p, (_m, sha) in listed.items()}, [p for p in paths if p not in listed],
                    {p: m for p, (m, _sha) in listed.items()})

    def _write_paths(self, commit: str, paths: list[str], expect: str | None = None,
                     folds: dict[str, Fold] | None = None, keep: dict[str, str] | None = None) -> None:
        """Make the working tree and the index show `commit` at `paths` (and nowhere else).

        With `expect`, each file is compared with its bytes at `expect` right before it is replaced
        (compare-and-swap, file by file): a keystroke that landed after the merge's check is never
        overwritten; the files already written are put back and the merge is refused. No file is
        written through a symlinked folder. A path in `folds` holds a person's text: it is
        compared with that text and gets the fold's bytes, while the index gets `commit`'s (their
        text stays an edit of theirs, to commit). With `keep` (path -> a name beside it), each file
        swapped out under `expect` is kept at that name (`swap_if_unchanged`), for the caller to
        settle (`_settle_kept`) once main moved or the merge was undone.
        """
        folds = folds or {}
        blobs, modes, deleted = {}, {}, []
        done: list[str] = []
        quarantined: list[str] = []
        listed = self._ls_paths(commit, paths)
        for rel in paths:
            if checkout_refusal(rel):
                entry = listed.get(rel)
                if entry is None:
                    deleted.append(rel)
                else:
                    blobs[rel], modes[rel] = entry[1], entry[0]
                    quarantined.append(rel)
                continue
            target = self.root / rel
            self._refuse_symlinked_parent(rel)
            entry = listed.get(rel)
            data = None
            if entry is not None:
                data = self.read_blob(entry[1])  # by id: any name git can hold, a newline in it too
                if data is None:
                    raise GitError(f"{commit}:{rel!r} is listed but its blob {entry[1]} cannot be read")
                if entry[0] == "120000":
                    data = Symlink(data)  # checked out as git would: a link, not a file holding its target
            file_mode = 0o755 if entry is not None and entry[0] == "100755" else None
            if expect is not None and not target.is_symlink():
                # compare and swap in one step that also catches a write landing during the swap
                want, was = (folds[rel].wrote, folds[rel].person) if rel in folds else (data, self.read_file(expect, rel))
                kept = self.root / keep[rel] if keep and rel in keep else None
                if not swap_if_unchanged(target, want, was, file_mode, keep=kept):
                    self._put_back(expect, commit, done, folds)
                    raise EditedWhileMerging("a person changed this file while merging; nothing changed", [rel])
            else:
                if expect is not None and self._disk_bytes(rel) != self.read_file(expect, rel):
                    self._put_back(expect, commit, done, folds)
                    raise EditedWhileMerging("a person changed this file while merging; nothing changed", [rel])
                if data is None:
                    target.unlink(missing_ok=True)
                else:
                    atomic_write(target, data, mode=file_mode)
            if entry is None:
                deleted.append(rel)
                prune_empty_dirs(target.parent, self.root)
            else:
                blobs[rel], modes[rel] = entry[1], entry[0]
            done.append(rel)
        self._stage(blobs, deleted, modes)
        if quarantined:
            self._git("update-index", "-z", "--skip-worktree", "--stdin", input="\0".join(quarantined) + "\0")

    def quarantined(self) -> list[str]:
        """Paths in the index kept out of the working tree (`checkout_refusal`)."""
        out = self._git("ls-files", "-v", "-z")
        return sorted(item[2:] for item in out.split("\0") if item.startswith("S "))

    def _put_back(self, commit: str, wrote: str, done: list[str], folds: dict[str, Fold]) -> None:
        """Undo the swaps of a refused merge (`wrote`'s bytes written, the index not yet staged):
        `commit`'s bytes back where the file still holds `wrote`'s, or a person's folded text."""
        self._restore(commit, wrote, [rel for rel in done if rel not in folds])
        for rel in done:
            if rel in folds:
                self._unfold(rel, folds[rel].person, folds[rel].digest)

    def _unfold(self, rel: str, person: bytes, wrote: str) -> bool:
        """A file that still holds exactly what a fold wrote (digest `wrote`) gets the person's text back."""
        disk = self._disk_bytes(rel)
        return disk is not None and _digest(disk) == wrote and swap_if_unchanged(self.root / rel, person, disk)

    def _refuse_symlinked_parent(self, rel: str) -> None:
        link = symlink_on_path(self.root, rel)
        if link is not None:
            raise GitError(f"{link.relative_to(self.root)}/ is a symlink; hermes-fs does not write through it "
                           f"(it could point outside the vault): {rel}")
