"""GitStore: the one class that owns every git operation on a vault.

Writes go through git's plumbing commands (one `_git` helper); reads of file contents go through
GitPython's object database, which keeps one `cat-file --batch` process for all of them.

Branch-side work (refine/learn commits) is pure plumbing: blobs, new trees only along the changed
paths, `commit-tree`, and `update-ref` with the expected old value, so its cost follows the change, not
the vault (DESIGN principle 6). Merges compute the merged tree with `git merge-tree --write-tree`
and then write and stage only the changed paths, after committing or refusing any uncommitted
human text there (principle 3). A VaultLock serialises everything that touches main, the index or
the working tree.
"""

from __future__ import annotations

from .git_base import EMPTY_TREE, MAIN, ZERO, BranchInfo, CommitInfo, HumanEditResult, KeepBoth, PathCommit, Resolver
from .git_merge import GitMerger
from .provenance import Act, format_message, parse_trailers

# re-exported: callers import them from here
__all__ = ["EMPTY_TREE", "MAIN", "ZERO", "Act", "BranchInfo", "CommitInfo", "GitStore", "HumanEditResult", "KeepBoth",
           "PathCommit", "Resolver", "format_message", "parse_trailers"]


class GitStore(GitMerger):
    """The one owner of git on a vault. Its calls live in modules by what they can touch on the way
    (each class builds on the one before): git_base.py (running git), git_read.py (touches
    nothing), git_objects.py (objects and refs only), git_worktree.py (index and working tree at
    given paths), git_commit.py (commits on main), git_merge.py (merges into main). The remote is
    store/remote.py's."""
