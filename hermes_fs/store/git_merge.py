"""GitStore's merges and reverts into main: the merged tree without the working tree (`git
merge-tree --write-tree`), then only the changed paths written and staged after checking them for
a person's uncommitted text. Touches main, the index and the working tree.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from ..errors import ConflictError, EditedWhileMerging, GitError, Overtaken
from .files import atomic_write, temp_name
from .git_base import EMPTY_TREE, MAIN, KeepBoth, Resolver
from .git_commit import GitCommitter
from .git_worktree import Fold, checkout_refusal
from .provenance import Act


class GitMerger(GitCommitter):
    # -- merging and reverting into main ------------------------------------------------------
    def merge(self, branch: str, message: str, act: Act, resolve: Resolver | None = None) -> str:
        """Merge a branch into main with --no-ff semantics, three-way, without a checkout; the
        merged branch is then deleted.

        Pending human edits in the paths the branch touches are committed first. A conflict raises
        ConflictError naming the files; main, the index and the working tree are then untouched.
        """
        theirs = self.rev(f"refs/heads/{branch}")
        if not theirs:
            raise GitError(f"no branch {branch}")
        with self.lock.hold():
            self._require_main_checked_out()
            base = self.merge_base(self.head(), theirs) or EMPTY_TREE
            touched = self.changed_paths(base, theirs)
            self._commit_touched_human_edits(touched)
            ours = self.head()
            tree = self.merged_tree(ours, theirs, resolve)
            new = self._commit_tree(tree, [ours, theirs], message, act)
            self._advance_main(ours, new, touched)
            # The merge commit now holds the branch; `log` finds it there as "merged".
            self._git("update-ref", "-d", f"refs/heads/{branch}", theirs)
            return new

    def integrate(self, theirs: str, message: str, act: Act, resolve: Resolver | None = None,
                  keep_both: KeepBoth | None = None, recheck: Callable[[str], bool] | None = None) -> str | None:
        """Bring another line of main (a fetched remote main) into main: a fast-forward when main
        has nothing of its own, else a merge commit with parents [main, theirs]. Never a rebase:
        published history is not rewritten. Like `merge`, pending human edits in the paths it
        touches are committed first, and the working tree changes only by CAS, file by file.
        Returns the new main, or None when main already has `theirs`. A person saving a file the
        merge changes while it runs does not refuse it where `resolve` folds the merge into their
        text (`_folds`): with frequent saves and slow merges, a refusing merge would wait for a
        quiet moment that may not come, and the other machines' edits with it."""
        with self.lock.hold():
            self._require_main_checked_out()
            if self.is_ancestor(theirs, self.head()):
                return None
            base = self.merge_base(self.head(), theirs) or EMPTY_TREE
            touched = self.changed_paths(base, theirs)
            self._commit_touched_human_edits(touched)
            ours = self.head()
            if self.is_ancestor(ours, theirs):
                new = theirs
                candidates = self.changed_paths(ours, theirs)
            else:
                tree = self.merged_tree(ours, theirs, resolve, keep_both=keep_both, recheck=recheck)
                new = self._commit_tree(tree, [ours, theirs], message, act)
                candidates = sorted(set(touched) | set(self.changed_paths(ours, new)))
            self._advance_main(ours, new, candidates, fold=resolve)
            return new

    def revert_merge(self, merge_sha: str, message: str, act: Act, resolve: Resolver | None = None,
                     paths: list[str] | None = None) -> str:
        """Undo a merged change (like `git revert -m 1`), or only its `paths`; refuses where people
        edited those lines since."""
        info = self.commit_info(merge_sha)
        if len(info.parents) != 2:
            raise GitError(f"{merge_sha[:10]} is not a merge commit")
        with self.lock.hold():
            self._require_main_checked_out()
            if not self.is_ancestor(info.sha, self.head()):
                raise GitError(f"{info.sha[:10]} is not on {MAIN}")
            touched = self.changed_paths(info.parents[0], info.sha)
            if paths is not None:
                touched = [p for p in touched if p in paths]
            self._commit_touched_human_edits(touched)
            ours = self.head()
            # A throwaway commit holding the pre-merge tree (of `paths` only, if given) with the merge
            # as parent: merging it into main applies exactly "merge -> pre-merge" three-way, with the
            # merge as base.
            if paths is None:
                pre_tree = self._git("rev-parse", f"{info.parents[0]}^{{tree}}").strip()
                undo = self._commit_tree(pre_tree, [info.sha], "hermes-fs: revert helper", act)
            else:
                part = self.derive(info.sha, {p: self.read_file(info.parents[0], p) for p in touched},
                                   "hermes-fs: revert helper", act)
                if part is None:
                    raise GitError(f"nothing to revert: {info.sha[:10]} does not change {', '.join(paths)}")
                undo = part
            tree = self.merged_tree(ours, undo, resolve, "a person has edited these lines since the merge")
            if tree == self._git("rev-parse", f"{ours}^{{tree}}").strip():
                if paths is None:
                    raise GitError(f"nothing to revert: {info.sha[:10]} is already undone")
                raise GitError(f"nothing to revert: {', '.join(touched)} already as before {info.sha[:10]} "
                               "(that part is undone; the rest of the change stays merged)")
            new = self._commit_tree(tree, [ours], message, act)
            self._advance_main(ours, new, touched)
            return new

    def _commit_touched_human_edits(self, touched: list[str]) -> None:
        result = self.commit_human_edits(touched)
        if result.refused:
            raise ConflictError(
                "uncommitted edits that cannot be committed (a secret, or over 20 MB) are in the way",
                sorted({f.path for f in result.refused}),
            )

    def merged_tree(self, ours: str, theirs: str, resolve: Resolver | None = None,
                    conflict_message: str = "merge would conflict", keep_both: KeepBoth | None = None,
                    recheck: Callable[[str], bool] | None = None) -> str:
        """The tree a three-way merge of two commits gives, without touching anything (O(change)).

        git's line merge first; the files it leaves conflicted go to `resolve` (a format-aware merge
        from the three blobs). What is still conflicted raises ConflictError with the details, or,
        with `keep_both`, is replaced by the files it returns (never by conflict markers).

        `recheck` names files whose format-aware merge stands even where git's line merge was
        clean, when both sides changed them: a line merge of two sides that moved the same line
        to different places keeps it twice without a conflict (memory entries, reordered by merges
        of merges on several machines); where `resolve` itself conflicts, git's clean merge stands.
        """
        code, out = self._run(
            "merge-tree", "--write-tree", "--name-only", "--no-messages", "-z", ours, theirs, ok=(0, 1)
        )
        tree, *rest = out.split("\0")
        conflicted = sorted({p for p in rest if p}) if code == 1 else []
        base = self.merge_base(ours, theirs) if conflicted or recheck else None
        again = self._changed_on_both(base, ours, theirs, recheck, conflicted) if resolve and recheck else []
        if not conflicted and not again:
            return tree
        if resolve is None:
            raise ConflictError(conflict_message, conflicted)
        resolved: dict[str, bytes | None] = {}
        for path in again:
            blobs = (self.read_file(base, path) if base else None, self.read_file(ours, path),
                     self.read_file(theirs, path))
            try:
                data = resolve(path, *blobs)
            except ConflictError:
                continue
            if data is not None:
                resolved[path] = data
        if not conflicted:
            return self._build_tree(tree, resolved) or EMPTY_TREE
        unresolved, details = [], []
        for path in conflicted:
            blobs = (self.read_file(base, path) if base else None, self.read_file(ours, path),
                     self.read_file(theirs, path))
            try:
                data = resolve(path, *blobs)
            except ConflictError as exc:
                data = None
                details += exc.details
            if data is None and keep_both is not None:
                resolved.update(keep_both(path, *blobs))
            elif data is None:
                unresolved.append(path)
            else:
                resolved[path] = data
        if unresolved:
            raise ConflictError(conflict_message, unresolved, details)
        return self._build_tree(tree, resolved) or EMPTY_TREE

    def _changed_on_both(self, base: str | None, ours: str, theirs: str, recheck: Callable[[str], bool],
                         conflicted: list[str]) -> list[str]:
        if base is None:
            return []
        both = set(self.changed_paths(base, ours)) & set(self.changed_paths(base, theirs))
        return sorted(p for p in both - set(conflicted) if recheck(p))

    def merge_text(self, base: str, ours: str, theirs: str) -> tuple[bool, str]:
        """git's line merge of three texts (`git merge-file`): (clean, merged text with markers if not)."""
        import tempfile

        with tempfile.TemporaryDirectory(prefix="hermes-merge-") as d:
            paths = []
            for name, text in (("ours", ours), ("base", base), ("theirs", theirs)):
                p = Path(d) / name
                p.write_text(text, encoding="utf-8")
                paths.append(str(p))
            code, out = self._run("merge-file", "-p", "-L", "main", "-L", "base", "-L", "branch", *paths,
                                  ok=tuple(range(0, 128)))
        return code == 0, out

    def _advance_main(self, old: str, new: str, candidates: list[str] | None = None,
                      fold: Resolver | None = None) -> None:
        """Move main from old to new, writing and staging only the changed paths.

        `candidates` (the paths the merged branch touched) bounds where old and new can differ,
        so they are compared path by path instead of diffing whole trees. Refuses if any changed
        path holds uncommitted text (a person typed while we worked), unless `fold` merges the
        change into their text (`_folds`).
        """
        if candidates is None:
            changed = self.changed_paths(old, new)
        else:
            before, after = self._ls_paths(old, candidates), self._ls_paths(new, candidates)
            changed = sorted(p for p in candidates if before.get(p) != after.get(p))
        dirty = self.dirty_paths([p for p in changed if not checkout_refusal(p)])  # the others are never written
        folds = self._folds(old, new, dirty, fold) if dirty and fold else {}
        if set(dirty) - set(folds):
            raise EditedWhileMerging("uncommitted edits appeared while merging; nothing changed",
                                     sorted(set(dirty) - set(folds)))
        # each file swapped out stays beside it until main moved (or the merge was undone): a save
        # that reaches it after the merge read it is then moved to the live file, never lost (the
        # journal names them, for a merge cut short by a kill -9)
        keep = {rel: str(temp_name(self.root / rel).relative_to(self.root)) for rel in changed
                if not checkout_refusal(rel)}
        person = {rel: f.person for rel, f in folds.items()}
        atomic_write(self.journal, json.dumps({"old": old, "new": new, "paths": changed,
                                               "folds": {rel: f.journal() for rel, f in folds.items()},
                                               "kept": keep}), fsync=True)
        try:
            self._write_paths(new, changed, expect=old, folds=folds, keep=keep)
            try:
                self._git("update-ref", "-m", "hermes-fs", f"refs/heads/{MAIN}", new, old)
            except GitError:
                raise Overtaken(f"{MAIN} moved while merging; nothing changed, try again") from None
        except BaseException:
            # Failed half-way (another git holds the index, main moved, a disk error): the working
            # tree must not keep the branch's text, or it would be committed as a person's edit.
            self._undo_advance(old, new, changed, folds)
            self._settle_kept(old, keep, person)
            raise
        self._settle_kept(old, keep, person)
        self.journal.unlink(missing_ok=True)

    def _folds(self, old: str, new: str, dirty: list[str], resolve: Resolver) -> dict[str, Fold]:
        """Files a person saved into while the merge ran, with the merge folded into their text:
        the format-aware merge of main before the merge (base), their text (ours) and the merged
        file (theirs). Written instead of the merged file, their text stays theirs (an edit to
        commit, as any other), and the merge need not wait for a moment nobody types. A file that
        does not fold cleanly (both changed one entry, a deletion, not memory or a skill, a
        symlink) is left out, and the merge is refused as before."""
        folds = {}
        for rel in dirty:
            if (self.root / rel).is_symlink():
                continue
            person, base, merged = self._disk_bytes(rel), self.read_file(old, rel), self.read_file(new, rel)
            if person is None or base is None or merged is None:
                continue
            try:
                text = resolve(rel, base, person, merged)
            except ConflictError:
                continue
            if text is not None:
                folds[rel] = Fold(person, text)
        return folds

    def _undo_advance(self, old: str, new: str, paths: list[str], folds: dict[str, Fold] | None = None) -> None:
        """Files still holding what the merge wrote get main's bytes back (the working tree needs no
        git lock), a person's folded text its own, then the index is restaged; if another git still
        holds the index, the journal stays and the next commit of human edits finishes the job
        (`recover_interrupted_merge`)."""
        folds = folds or {}
        self._restore(old, new, [rel for rel in paths if rel not in folds])
        for rel, f in folds.items():
            self._unfold(rel, f.person, f.digest)
        try:
            self._stage_from(old, paths)
        except GitError:
            return
        self.journal.unlink(missing_ok=True)
