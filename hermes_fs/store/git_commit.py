"""GitStore's commits to the working branch (main): exactly the given paths, a person's pending
edits, through the secret scanner; by plumbing, then staging only those paths. Touches main, the
index (those entries) and reads the working tree.
"""

from __future__ import annotations

import os
import time

from ..errors import RepositoryBusy
from .files import clean_relpath, symlink_on_path
from .git_base import EMPTY_TREE, MAIN, HumanEditResult
from .git_worktree import GitWorktree
from .provenance import Act, format_message


class GitCommitter(GitWorktree):
    # -- committing on main ------------------------------------------------------------------
    _OPERATIONS = {"MERGE_HEAD": "a git merge", "rebase-merge": "a git rebase", "rebase-apply": "a git rebase or am",
                   "CHERRY_PICK_HEAD": "a git cherry-pick", "REVERT_HEAD": "a git revert", "BISECT_LOG": "a git bisect"}

    def operation_in_progress(self, index_lock: bool = True) -> str | None:
        """What a person's own git is in the middle of (a merge with conflicts, a rebase, another
        branch checked out, a fresh index.lock), or None. Nothing of hermes-fs commits meanwhile."""
        gitdir = self.root / ".git"
        for name, what in self._OPERATIONS.items():
            if (gitdir / name).exists():
                return f"{what} is in progress"
        ref = self._head_ref()
        if ref != f"refs/heads/{MAIN}":
            return f"{ref.removeprefix('refs/heads/') or 'a detached HEAD'} is checked out instead of {MAIN}"
        try:
            if index_lock and time.time() - (gitdir / "index.lock").stat().st_mtime < 5:
                return "another git command holds the index"
        except FileNotFoundError:
            pass
        return None

    def _require_main_checked_out(self) -> None:
        busy = self.operation_in_progress(index_lock=False)  # a brief index.lock is waited out in _run
        if busy:
            raise RepositoryBusy(f"{busy} in the vault; hermes-fs waits until it is finished (it works on {MAIN})")

    def commit_paths(
        self, paths: list[str], message: str, act: Act, body: str = "",
    ) -> str | None:
        """Commit exactly these paths (adds, edits, deletions) on main; None if they are unchanged.

        Scans what it stages and refuses a secret (SecretError) before anything is staged.
        """
        rels = [clean_relpath(p) for p in paths]
        with self.lock.hold():
            self._require_main_checked_out()
            self.recover_interrupted_merge()  # before anything commits the working tree (see there)
            changed = self.dirty_paths(rels)
            if not changed:
                return None
            self._secrets.check({p: self._disk_bytes(p) for p in changed})
            return self._stage_and_commit(changed, format_message(message, body), act)

    def commit_all(self, message: str, act: Act, paths: list[str] | None = None) -> str | None:
        """Everything not ignored, or only `paths` (used by `init`, whose first commit has no parent
        to build on), still through the secret scanner."""
        with self.lock.hold():
            self.recover_interrupted_merge()
            changed = self.dirty_paths() if paths is None else sorted(set(paths) & set(self.dirty_paths()))
            if not changed:
                return None
            self._secrets.check({p: self._disk_bytes(p) for p in changed})
            self._git("add", "-A", "--", *changed)
            text, env = self.provenance.seal(message, act)
            self._git("commit", "-q", "--no-verify", "-F", "-", input=text, env=env)
            return self.head()

    def commit_human_edits(self, paths: list[str] | None = None) -> HumanEditResult:
        """Commit pending human edits (all, or within `paths`) as `edit: ...` commits.

        A file carrying a secret is left uncommitted and reported; the others are committed.
        """
        with self.lock.hold():
            self._require_main_checked_out()
            self.recover_interrupted_merge()
            # ignored files are dropped before their bytes are read (one check-ignore either way)
            dirty = self.dirty_paths(self._committable(paths)) if paths is not None \
                else self._committable(self.dirty_paths())
            ok: list[str] = []
            refused: list = []
            for p in dirty:
                too_big = self._too_big(p)
                findings = [too_big] if too_big else self._secrets.scan(p, self._disk_bytes(p))
                (refused.extend(findings) if findings else ok.append(p))
            if not ok:
                return HumanEditResult(None, [], refused)
            names = ", ".join(ok[:5]) + (f" and {len(ok) - 5} more" if len(ok) > 5 else "")
            sha = self._stage_and_commit(ok, f"edit: {names}", Act.human_edit())
            return HumanEditResult(sha, ok, refused)

    MAX_EDIT_BYTES = 20_000_000  # bigger files are a person's to commit (or to .gitignore)

    def _committable(self, paths: list[str]) -> list[str]:
        """Drop what .gitignore ignores: those files are a person's choice to keep out of git."""
        paths = [p for p in paths if symlink_on_path(self.root, p) is None]  # git cannot track those anyway
        if not paths:
            return []
        code, out = self._run("check-ignore", "-z", "--stdin", input="\0".join(paths) + "\0", ok=(0, 1))
        ignored = {p for p in out.split("\0") if p}
        return [p for p in paths if p not in ignored]

    def _too_big(self, rel: str):
        try:
            size = os.lstat(self.root / rel).st_size
        except OSError:
            return None
        if size > self.MAX_EDIT_BYTES:
            return self._secrets.Finding(rel, 0, f"file of {size // 1_000_000} MB, over the 20 MB that is committed "
                                                 "automatically (commit it yourself, or add it to .gitignore)")
        return None

    def _stage_and_commit(self, paths: list[str], message: str, act: Act) -> str:
        """Commit the working-tree state of `paths` on main by plumbing, then stage exactly that.

        Trees are rebuilt only along these paths and the index is updated with the committed blobs,
        so the cost follows the change, not the vault; anything else a person staged stays staged.
        """
        old = self.head()
        entries = {p: self._disk_entry(p) for p in paths}
        changes = {p: (e[1] if e else None) for p, e in entries.items()}
        modes = {p: e[0] for p, e in entries.items() if e}
        base_tree = self._git("rev-parse", f"{old}^{{tree}}").strip()
        blobs: dict[str, str] = {}
        tree = self._build_tree(base_tree, changes, modes, blobs) or EMPTY_TREE
        new = self._commit_tree(tree, [old], message, act)
        self._stage(blobs, [p for p, d in changes.items() if d is None], modes)
        self._git("update-ref", "-m", "hermes-fs", f"refs/heads/{MAIN}", new, old)
        return new
