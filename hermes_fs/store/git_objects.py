"""GitStore's calls that write to the object database and refs only, never the index or the
working tree: branch commits from an overlay (blobs, new trees along the changed paths,
`commit-tree`, `update-ref` with the old value), and moving, deleting or hiding branches.
"""

from __future__ import annotations

from collections import defaultdict

from ..errors import GitError, InputError
from .files import Symlink, clean_relpath
from .git_base import EMPTY_TREE, MAIN, ZERO
from .git_read import GitReader
from .provenance import Act


class GitObjects(GitReader):
    # -- branch commits from an overlay (no working tree, no index) --------------------------
    def commit_overlay(
        self,
        parent: str,
        branch: str,
        overlay: dict[str, bytes | None],
        message: str,
        act: Act,
    ) -> str | None:
        """One commit with parent `parent` on new branch `branch`; None when nothing changes.

        `overlay` maps vault paths to new bytes, or None for a deletion. Only blobs and the trees
        along the changed paths are written; the working tree and the real index are untouched.
        """
        sha = self.derive(parent, overlay, message, act)
        if sha is None:
            return None
        self.move_ref(f"refs/heads/{branch}", sha, None)  # None: fail if it exists
        return sha

    def derive(self, parent: str, overlay: dict[str, bytes | None], message: str, act: Act) -> str | None:
        """A commit of `parent` with `overlay` applied, on no branch (plumbing only); None if unchanged.
        Refuses a secret (SecretError) before anything is written."""
        changes = {clean_relpath(p): d for p, d in overlay.items()}
        for path, data in changes.items():
            if data is not None and not isinstance(data, bytes):
                raise InputError(f"overlay content must be bytes or None, got {type(data).__name__}", path)
        self._secrets.check(changes)
        base_tree = self._git("rev-parse", f"{parent}^{{tree}}").strip()
        tree = self._build_tree(base_tree, changes) or EMPTY_TREE
        if tree == base_tree:
            return None
        return self._commit_tree(tree, [parent], message, act)

    def move_ref(self, ref: str, new: str, old: str | None) -> None:
        """Point `ref` at `new` only if it is still at `old` (None: only if it does not exist yet)."""
        self._secrets.check_text("branch name", ref)
        self._git("update-ref", ref, new, old or ZERO)

    def _build_tree(self, tree: str | None, changes: dict[str, bytes | None], modes: dict[str, str] | None = None,
                    blobs: dict[str, str] | None = None, prefix: str = "") -> str | None:
        """New tree = `tree` with `changes` applied; reads and writes only the trees on changed paths.

        `modes` gives file modes by full path (default: keep the old mode, else 100644); `blobs`, when
        given, collects the full path -> blob id of everything written.
        """
        entries = self._ls_tree(tree) if tree else {}
        nested: dict[str, dict[str, bytes | None]] = defaultdict(dict)
        for path, data in changes.items():
            head, _, rest = path.partition("/")
            if rest:
                nested[head][rest] = data
            elif data is None:
                entries.pop(head, None)
            else:
                old = entries.get(head)
                if old and old[1] == "tree":
                    raise InputError("a folder is in the way of this file", prefix + path)
                mode = (modes or {}).get(prefix + path) or _mode_for(data, old)
                sha = self._hash_blob(data)
                entries[head] = (mode, "blob", sha)
                if blobs is not None:
                    blobs[prefix + path] = sha
        for name, sub in nested.items():
            old = entries.get(name)
            if old and old[1] != "tree":
                raise InputError(f"a file is in the way of folder {prefix}{name}/")
            new = self._build_tree(old[2] if old else None, sub, modes, blobs, f"{prefix}{name}/")
            if new is None:
                entries.pop(name, None)
            else:
                entries[name] = ("040000", "tree", new)
        if not entries:
            return None
        listing = "".join(f"{m} {t} {s}\t{n}\0" for n, (m, t, s) in sorted(entries.items()))
        return self._git("mktree", "-z", input=listing.encode("utf-8", "surrogateescape")).strip()

    def _ls_tree(self, tree: str) -> dict[str, tuple[str, str, str]]:
        entries = {}
        for item in self._git("ls-tree", "-z", tree).split("\0"):
            if item:
                meta, name = item.split("\t", 1)
                mode, kind, sha = meta.split()
                entries[name] = (mode, kind, sha)
        return entries

    def update_ref(self, ref: str, new: str, old: str | None = None) -> None:
        """Point `ref` at `new`; with `old`, only if it is still there (ZERO: only if it does not
        exist yet). Never for main: main moves through commits and merges, under the VaultLock."""
        self._not_main(ref)
        self._git("update-ref", ref, new, *([old] if old else []))

    def delete_ref(self, ref: str, old: str | None = None, missing_ok: bool = False) -> None:
        """Delete `ref`; with `old`, only if it is still there. `missing_ok`: a ref already gone,
        or moved meanwhile, is no error."""
        self._not_main(ref)
        self._git("update-ref", "-d", ref, *([old] if old else []), ok=(0, 1, 128) if missing_ok else (0,))

    @staticmethod
    def _not_main(ref: str) -> None:
        if ref in (MAIN, f"refs/heads/{MAIN}", "HEAD"):
            raise GitError(f"{ref} is moved by commits and merges only")

    def rename_branch(self, old: str, new: str) -> None:
        self._git("branch", "-m", old, new)

    def store_empty_tree(self) -> str:
        """Write the empty tree to the object database (git knows it without storing it; fsck
        wants it stored) and return its id: claim and lease commits have it as their tree."""
        self._git("mktree", input="")
        return EMPTY_TREE

    def commit_tree(self, tree: str, parents: list[str], message: str, act: Act) -> str:
        """A commit of `tree` on no branch (claims, leases: the caller pushes or moves a ref)."""
        return self._commit_tree(tree, parents, message, act)

    def commit_trees(self, commits: list[tuple[str, list[str], str, Act]]) -> list[str]:
        """Many commits of `commit_tree` at once (see `_commit_trees`)."""
        return self._commit_trees(commits)

    def _hash_blob(self, data: bytes) -> str:
        return self._git("hash-object", "-w", "--stdin", input=data).strip()

    def _commit_tree(self, tree: str, parents: list[str], message: str, act: Act) -> str:
        """Every commit is made here: provenance decides its author and trailers; its message (a
        model's summary, a focus, a file name in it) is redacted of secrets on the way in."""
        message, env = self.provenance.seal(message, act)
        message = self._secrets.redact(message)[0]
        args = ["commit-tree", tree]
        for p in parents:
            args += ["-p", p]
        return self._git(*args, "-F", "-", input=message, env=env).strip()

    def _commit_trees(self, commits: list[tuple[str, list[str], str, Act]]) -> list[str]:
        """Many commits (tree, parents, message, act) at once, sealed and redacted as in
        `_commit_tree`, written by one `git hash-object` instead of one `commit-tree` each: a
        daemon renews or takes over many claims at once, and a process per claim made its
        takeovers late. The author and committer
        lines are git's own (`git var`, once per author)."""
        import tempfile

        if len(commits) <= 1:
            return [self._commit_tree(*c) for c in commits]
        idents: dict[tuple, str] = {}
        with tempfile.TemporaryDirectory(prefix="hermes-commits-") as tmp:
            paths = []
            for i, (tree, parents, message, act) in enumerate(commits):
                message, env = self.provenance.seal(message, act)
                message = self._secrets.redact(message)[0]
                key = tuple(sorted(env.items()))
                if key not in idents:
                    idents[key] = (f"author {self._git('var', 'GIT_AUTHOR_IDENT', env=env).strip()}\n"
                                   f"committer {self._git('var', 'GIT_COMMITTER_IDENT', env=env).strip()}\n")
                head = f"tree {tree}\n" + "".join(f"parent {p}\n" for p in parents) + idents[key]
                path = f"{tmp}/{i}"
                with open(path, "w", encoding="utf-8") as f:
                    f.write(f"{head}\n{message}")
                paths.append(path)
            out = self._git("hash-object", "-t", "commit", "-w", "--stdin-paths", input="\n".join(paths) + "\n")
        shas = out.split()
        if len(shas) != len(commits):
            raise GitError(f"git hash-object wrote {len(shas)} of {len(commits)} commits")
        return shas

    # -- branches ------------------------------------------------------------------------------
    def delete_branch(self, branch: str) -> None:
        sha = self.rev(f"refs/heads/{branch}")
        if sha:
            self._git("update-ref", "-d", f"refs/heads/{branch}", sha)

    def reject(self, branch: str) -> str:
        """Hide a branch under refs/hermes/rejected/ (recoverable, invisible to `git branch`)."""
        sha = self.rev(f"refs/heads/{branch}")
        if not sha:
            raise GitError(f"no branch {branch}")
        hidden = f"refs/hermes/rejected/{branch}"
        self._git("update-ref", hidden, sha)
        self._git("update-ref", "-d", f"refs/heads/{branch}", sha)
        return hidden


def _mode_for(data: bytes, old: tuple[str, str, str] | None) -> str:
    """A `Symlink` is written as a link; bytes keep the file's mode (a link given bytes becomes a file)."""
    if isinstance(data, Symlink):
        return "120000"
    if old and old[1] == "blob" and old[0] != "120000":
        return old[0]
    return "100644"
