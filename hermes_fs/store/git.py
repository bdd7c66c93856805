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

import json
import os
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from ..errors import ConflictError, GitError, InputError
from .files import atomic_write, clean_relpath, prune_empty_dirs, swap_if_unchanged, symlink_on_path
from .lock import VaultLock
from .provenance import Act, Provenance, format_message, parse_trailers

__all__ = ["Act", "format_message", "parse_trailers"]  # re-exported: callers import them from here too

MAIN = "main"
ZERO = "0" * 40
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
# (path, base, ours, theirs) -> merged bytes; None when it cannot; ConflictError naming what conflicts.
Resolver = Callable[[str, "bytes | None", "bytes | None", "bytes | None"], "bytes | None"]
# (path, base, ours, theirs) -> the files to write instead of a conflict (e.g. both versions, side by side).
KeepBoth = Callable[[str, "bytes | None", "bytes | None", "bytes | None"], "dict[str, bytes | None]"]


@dataclass
class CommitInfo:
    sha: str
    parents: list[str]
    author: str
    timestamp: int
    summary: str
    body: str
    trailers: dict[str, str] = field(default_factory=dict)


@dataclass
class PathCommit:
    """A commit as `path_history` sees it: when, by whom, and (status, path) per changed file."""

    sha: str
    timestamp: int
    author: str
    changes: list[tuple[str, str]]  # ("A" | "M" | "D", path)


@dataclass
class BranchInfo:
    name: str
    sha: str
    timestamp: int
    summary: str


@dataclass
class HumanEditResult:
    sha: str | None
    committed: list[str]
    refused: list  # secrets.Finding: files left uncommitted because they hold a secret


class GitStore:
    def __init__(self, root: Path, lock_dir: Path | None = None, provenance: Provenance | None = None):
        from . import secrets  # imported here: its patterns cost compile time that `status` never needs

        self._secrets = secrets
        self._read_lock = threading.Lock()
        self._paths_of: dict[str, list[str]] = {}  # commit -> paths it changed (see changed_paths_of)
        self.root = Path(root)
        self.provenance = provenance or Provenance()  # every commit's author and trailers (store/provenance.py)
        self.lock = VaultLock((lock_dir or self.root / ".hermes" / "locks") / "main.lock")
        # Written before a merge touches the working tree, removed once main has moved: if a merge
        # is killed in between, the next commit of human edits first puts those files back.
        self.journal = self.lock.path.with_name("merge-journal.json")

    # -- running git -------------------------------------------------------------------------
    def _run(self, *args: str, input: bytes | str | None = None, env: dict | None = None,
             ok=(0,)) -> tuple[int, str]:
        """Run git; returns (exit code, stdout). Raises GitError for a code not in `ok`.

        Returning the code (never storing it on self) keeps one GitStore safe to share between the
        daemon's worker, cron and timer threads.
        """
        data = input.encode() if isinstance(input, str) else input
        full_env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", **(env or {})}
        for _attempt in range(40):
            # --no-optional-locks: our reads (status) never take index.lock from a person's git.
            proc = subprocess.run(
                ["git", "--no-optional-locks", "-c", "core.quotepath=off", *args],
                cwd=self.root,
                input=data,
                capture_output=True,
                env=full_env,
            )
            if proc.returncode in ok or b"index.lock': File exists" not in proc.stderr:
                break
            time.sleep(0.05)  # another git (a person's, an editor's) holds the index briefly
        if proc.returncode not in ok:
            err = proc.stderr.decode(errors="replace").strip() or proc.stdout.decode(errors="replace").strip()
            raise GitError(f"git {args[0]} failed: {err}")
        return proc.returncode, proc.stdout.decode("utf-8", errors="surrogateescape")

    def _git(self, *args: str, input: bytes | str | None = None, env: dict | None = None, ok=(0,)) -> str:
        return self._run(*args, input=input, env=env, ok=ok)[1]

    # -- creating and repairing --------------------------------------------------------------
    @classmethod
    def init(cls, root: Path, lock_dir: Path | None = None) -> GitStore:
        """`git init -b main` with settings that keep staging cheap on huge vaults."""
        root = Path(root)
        subprocess.run(["git", "-C", str(root), "init", "-q", "-b", MAIN], check=True, capture_output=True)
        store = cls(root, lock_dir)
        # A split index rewrites a small delta, not the whole index; manyFiles (index v4, untracked
        # cache) shrinks what git reads on each call.
        for key, value in (("core.splitIndex", "true"), ("feature.manyFiles", "true")):
            store._git("config", key, value)
        return store

    def config_get(self, key: str) -> str:
        return self._git("config", "--get", key, ok=(0, 1)).strip()

    def config_set(self, key: str, value: str) -> None:
        self._git("config", key, value)

    def clear_stale_index_lock(self, older_than_s: float = 5.0) -> bool:
        """Remove .git/index.lock left by a killed git (not one a live git holds right now)."""
        index_lock = self.root / ".git" / "index.lock"
        try:
            stale = time.time() - index_lock.stat().st_mtime > older_than_s
        except FileNotFoundError:
            return False
        if stale:
            index_lock.unlink(missing_ok=True)
        return stale

    # -- reading -----------------------------------------------------------------------------
    def rev(self, ref: str) -> str | None:
        out = self._git("rev-parse", "--verify", "-q", f"{ref}^{{commit}}", ok=(0, 1))
        return out.strip() or None

    def head(self) -> str:
        sha = self.rev(f"refs/heads/{MAIN}")
        if not sha:
            raise GitError(f"branch {MAIN} does not exist in {self.root}")
        return sha

    @cached_property
    def repo(self):
        """GitPython's Repo: its persistent `cat-file --batch` makes many reads cost one process."""
        import git

        return git.Repo(self.root)

    def read_file(self, commit: str, path: str) -> bytes | None:
        """A file's bytes at a commit (None if absent), through one persistent `cat-file --batch`:
        git resolves `commit:path` in C, so wide folders cost nothing extra."""
        with self._read_lock:  # one cat-file process: one reader at a time
            try:
                _sha, kind, _size, data = self.repo.git.get_object_data(f"{commit}:{path}")
            except ValueError:
                return None
        return data if kind == b"blob" else None

    def list_files(self, commit: str, prefix: str = "") -> list[str]:
        args = ["ls-tree", "-r", "-z", "--name-only", commit]
        if prefix:
            args += ["--", prefix]
        return [p for p in self._git(*args).split("\0") if p]

    def newest_paths(self, prefix: str) -> list[str]:
        """Files added or changed under `prefix` by the newest commit on main that touched it."""
        # every parent: a commit another machine made arrives on a merge's second parent
        out = self._git("log", "-1", "--format=", "--name-only", "--diff-filter=AM", MAIN, "--", prefix)
        return [p for p in out.splitlines() if p.strip()]

    def changed_paths(self, a: str, b: str) -> list[str]:
        out = self._git("diff-tree", "-r", "-z", "--no-renames", "--name-only", a, b)
        return [p for p in out.split("\0") if p]

    def changed_paths_of(self, commits: list[str]) -> dict[str, list[str]]:
        """Paths each commit changed against its first parent, for many commits in one git call
        (the pending list of 200 changes costs one process, not 400); remembered per commit id."""
        todo = [c for c in dict.fromkeys(commits) if c not in self._paths_of]
        if todo:
            out = self._git("log", "--no-walk=unsorted", "-z", "--format=%x01%H", "--name-only", "--no-renames",
                            *todo, "--")
            for record in out.split("\x01")[1:]:
                sha, _, rest = record.partition("\0")
                rest = rest[1:] if rest.startswith("\n") else rest
                self._paths_of[sha] = [p for p in rest.split("\0") if p]  # a commit never changes: kept
        return {c: self._paths_of[c] for c in commits if c in self._paths_of}

    def numstat(self, a: str, b: str) -> list[tuple[int, int, str]]:
        """(added, deleted, path) per changed file; binary files count as one line each way."""
        rows = []
        for line in self._git("diff", "--numstat", "--no-renames", a, b).splitlines():
            added, deleted, path = line.split("\t", 2)
            rows.append((int(added) if added.isdigit() else 1, int(deleted) if deleted.isdigit() else 1, path))
        return rows

    def diff(self, a: str, b: str, color: bool = False) -> str:
        return self._git("diff", "--no-renames", f"--color={'always' if color else 'never'}", a, b)

    def merge_base(self, a: str, b: str) -> str | None:
        return self._git("merge-base", a, b, ok=(0, 1)).strip() or None

    def is_ancestor(self, a: str, b: str) -> bool:
        code, _ = self._run("merge-base", "--is-ancestor", a, b, ok=(0, 1))
        return code == 0

    def path_history(self, since: str | None, prefixes: list[str], until: str = MAIN) -> list[PathCommit]:
        """Non-merge commits after `since` (None: all) up to `until` touching `prefixes`, oldest
        first, with the paths each added, modified or deleted: one git process, O(those commits)."""
        span = f"{since}..{until}" if since else until
        out = self._git("log", "--no-merges", "--reverse", "-z", "--no-renames", "--name-status",
                        "--format=%x01%H%x00%ct%x00%an <%ae>", span, "--", *prefixes)
        commits = []
        for record in out.split("\x01")[1:]:
            head, _, rest = record.partition("\n")
            sha, ts, author = head.split("\0", 2)
            fields = [f for f in rest.lstrip("\n").split("\0") if f]
            changes = [(fields[i], fields[i + 1]) for i in range(0, len(fields) - 1, 2)]
            commits.append(PathCommit(sha, int(ts), author.rstrip("\0"), changes))
        return commits

    def blame_authors(self, commit: str, path: str) -> list[tuple[str, int]]:
        """(author `Name <email>`, author time) of each line of a file at a commit."""
        out = self._git("blame", "--line-porcelain", commit, "--", path)
        lines: list[tuple[str, int]] = []
        name = mail = ""
        ts = 0
        for line in out.split("\n"):
            if line.startswith("author "):
                name = line[7:]
            elif line.startswith("author-mail "):
                mail = line[12:]
            elif line.startswith("author-time "):
                ts = int(line[12:])
            elif line.startswith("\t"):
                lines.append((f"{name} {mail}", ts))
        return lines

    _LOG_FORMAT = "--format=%H%x00%P%x00%an <%ae>%x00%ct%x00%B%x1e"

    def commit_info(self, ref: str) -> CommitInfo:
        return self._parse_log(self._git("show", "-s", self._LOG_FORMAT, ref))[0]

    def log(self, ref: str = MAIN, grep: str | None = None, first_parent: bool = True, limit: int = 500) -> list[CommitInfo]:
        """Commits newest first, in one git process (`limit=0`: all of them)."""
        args = ["log", *([f"-n{limit}"] if limit else []), self._LOG_FORMAT]
        if first_parent:
            args.append("--first-parent")
        if grep:
            args += ["-E", f"--grep={grep}"]
        return self._parse_log(self._git(*args, ref, "--"))

    @staticmethod
    def _parse_log(out: str) -> list[CommitInfo]:
        commits = []
        for record in out.split("\x1e"):
            record = record.lstrip("\n")
            if not record:
                continue
            sha, parents, author, ts, message = record.split("\0", 4)
            lines = message.strip().split("\n", 1)
            commits.append(CommitInfo(sha, parents.split(), author, int(ts), lines[0],
                                      lines[1].strip() if len(lines) > 1 else "", parse_trailers(message)))
        return commits

    def branches(self, *prefixes: str) -> list[BranchInfo]:
        """Branches under refs/heads/<prefix> (e.g. 'refine/'; several prefixes: one git call), newest first."""
        return self._refs([f"refs/heads/{p}" for p in prefixes], "refs/heads/")

    def rejected(self) -> list[BranchInfo]:
        return self._refs("refs/hermes/rejected/", "refs/hermes/rejected/")

    def _refs(self, patterns: str | list[str], strip: str) -> list[BranchInfo]:
        fmt = "%(refname)%00%(objectname)%00%(committerdate:unix)%00%(contents:subject)"
        out = self._git("for-each-ref", "--sort=-committerdate", f"--format={fmt}",
                        *([patterns] if isinstance(patterns, str) else patterns))
        result = []
        for line in out.splitlines():
            ref, sha, ts, subject = line.split("\0", 3)
            result.append(BranchInfo(ref[len(strip) :], sha, int(ts or 0), subject))
        return result

    def dirty_paths(self, paths: list[str] | None = None) -> list[str]:
        """Paths whose working-tree content differs from main (edits, new files, deletions).

        With `paths`, compares bytes against main's blobs directly: no index read, no tree walk, so
        it costs the same on a 100-file vault as on a 100,000-file one. Without, asks `git status`.
        """
        if paths is not None:
            head = self.head()
            return sorted(p for p in set(paths) if self._disk_bytes(p) != self.read_file(head, p))
        out = self._git("status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames")
        return sorted({entry[3:] for entry in out.split("\0") if len(entry) > 3})

    def changed_under(self, prefix: str) -> list[str]:
        """Modified, deleted or untracked (not ignored) files below a folder, without a full status."""
        out = self._git("ls-files", "-z", "-m", "-d", "-o", "--exclude-standard", "--", prefix)
        return sorted({p for p in out.split("\0") if p})

    def _disk_entry(self, rel: str) -> tuple[str, bytes] | None:
        """(mode, bytes) of a working-tree file as git would store it; None if absent."""
        p = self.root / rel
        if p.is_symlink():
            return "120000", os.readlink(p).encode("utf-8", "surrogateescape")
        if not p.is_file():
            return None
        return ("100755" if os.access(p, os.X_OK) else "100644"), p.read_bytes()

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
        ref = self._git("symbolic-ref", "-q", "HEAD", ok=(0, 1)).strip()
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
            raise GitError(f"{busy} in the vault; hermes-fs waits until it is finished (it works on {MAIN})")

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

    def _stage(self, blobs: dict[str, str], deleted: list[str], modes: dict[str, str]) -> None:
        """Put committed blobs in the index (and drop deleted paths) without touching other entries."""
        lines = [f"{modes.get(p, '100644')} {sha}\t{p}" for p, sha in blobs.items()]
        lines += [f"0 {ZERO}\t{p}" for p in deleted]
        if lines:
            self._git("update-index", "-z", "--index-info", input="\0".join(lines) + "\0")

    def _disk_bytes(self, rel: str) -> bytes | None:
        entry = self._disk_entry(rel)
        return entry[1] if entry else None

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

    def message(self, ref: str) -> str:
        """A commit's whole message, trailers included."""
        return self._git("show", "-s", "--format=%B", ref)

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
                mode = (modes or {}).get(prefix + path) or (old[0] if old and old[1] == "blob" else "100644")
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
        Returns the new main, or None when main already has `theirs`."""
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
            self._advance_main(ours, new, candidates)
            return new

    def revert_merge(self, merge_sha: str, message: str, act: Act, resolve: Resolver | None = None) -> str:
        """Undo a merged change (like `git revert -m 1`); refuses where people edited those lines since."""
        info = self.commit_info(merge_sha)
        if len(info.parents) != 2:
            raise GitError(f"{merge_sha[:10]} is not a merge commit")
        with self.lock.hold():
            self._require_main_checked_out()
            if not self.is_ancestor(info.sha, self.head()):
                raise GitError(f"{info.sha[:10]} is not on {MAIN}")
            touched = self.changed_paths(info.parents[0], info.sha)
            self._commit_touched_human_edits(touched)
            ours = self.head()
            # A throwaway commit holding the pre-merge tree with the merge as parent: merging it
            # into main applies exactly "merge -> pre-merge" three-way, with the merge as base.
            pre_tree = self._git("rev-parse", f"{info.parents[0]}^{{tree}}").strip()
            undo = self._commit_tree(pre_tree, [info.sha], "hermes-fs: revert helper", act)
            tree = self.merged_tree(ours, undo, resolve, "a person has edited these lines since the merge")
            if tree == self._git("rev-parse", f"{ours}^{{tree}}").strip():
                raise GitError(f"nothing to revert: {info.sha[:10]} is already undone")
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

    def _advance_main(self, old: str, new: str, candidates: list[str] | None = None) -> None:
        """Move main from old to new, writing and staging only the changed paths.

        `candidates` (the paths the merged branch touched) bounds where old and new can differ,
        so they are compared path by path instead of diffing whole trees. Refuses if any changed
        path holds uncommitted text (a person typed while we worked).
        """
        if candidates is None:
            changed = self.changed_paths(old, new)
        else:
            before, after = self._ls_paths(old, candidates), self._ls_paths(new, candidates)
            changed = sorted(p for p in candidates if before.get(p) != after.get(p))
        dirty = self.dirty_paths(changed)
        if dirty:
            raise ConflictError("uncommitted edits appeared while merging; nothing changed", dirty)
        atomic_write(self.journal, json.dumps({"old": old, "new": new, "paths": changed}), fsync=True)
        try:
            self._write_paths(new, changed, expect=old)
            try:
                self._git("update-ref", "-m", "hermes-fs", f"refs/heads/{MAIN}", new, old)
            except GitError:
                raise GitError(f"{MAIN} moved while merging; nothing changed, try again") from None
        except BaseException:
            # Failed half-way (another git holds the index, main moved, a disk error): the working
            # tree must not keep the branch's text, or it would be committed as a person's edit.
            self._undo_advance(old, new, changed)
            raise
        self.journal.unlink(missing_ok=True)

    def _undo_advance(self, old: str, new: str, paths: list[str]) -> None:
        """Files still holding what the merge wrote get main's bytes back (the working tree needs no
        git lock), then the index is restaged; if another git still holds the index, the journal
        stays and the next commit of human edits finishes the job (`recover_interrupted_merge`)."""
        wrote = self._ls_paths(new, paths)
        self._write_tree(old, [rel for rel in paths
                               if self._disk_bytes(rel) == (self.read_file(new, rel) if rel in wrote else None)])
        try:
            self._stage_from(old, paths)
        except GitError:
            return
        self.journal.unlink(missing_ok=True)

    def recover_interrupted_merge(self) -> list[str]:
        """After a merge was killed between writing files and moving main: put back the files it
        wrote (where they still hold exactly what it wrote), so the branch's text is never
        committed as a person's edit. Returns the paths put back.

        Every commit of working-tree state (`commit_paths`, `commit_all`, `commit_human_edits`,
        and the merges through the last) runs this first, under the lock: a commit that moved main
        before it (the daemon's restart saving interrupted transcripts did) used to make it skip
        the files, and the merge's half-written text was then committed as a person's edit."""
        try:
            j = json.loads(self.journal.read_text())
        except (OSError, ValueError):
            return []
        restored = []
        head = self.head()
        if self.rev(j["new"]) is None:  # not in this repository (a foreign or pruned journal)
            self.journal.unlink(missing_ok=True)
            return []
        if head != j["new"] and not self.is_ancestor(j["new"], head):  # the merge never landed
            listed = self._ls_paths(j["new"], j["paths"])
            for rel in j["paths"]:
                disk = self._disk_bytes(rel)
                wrote = self.read_file(j["new"], rel) if rel in listed else None
                if disk == wrote:
                    restored.append(rel)
            self._write_tree(head, restored)
            self._stage_from(head, j["paths"])
        self.journal.unlink(missing_ok=True)
        return restored

    def _write_tree(self, commit: str, paths: list[str]) -> None:
        """The working tree shows `commit` at `paths` (the index is left alone)."""
        listed = self._ls_paths(commit, paths)
        for rel in paths:
            self._refuse_symlinked_parent(rel)
            target = self.root / rel
            if rel not in listed:
                target.unlink(missing_ok=True)
                prune_empty_dirs(target.parent, self.root)
            else:
                data = self.read_file(commit, rel)
                assert data is not None, f"{commit}:{rel} listed but unreadable"
                atomic_write(target, data, mode=0o755 if listed[rel][0] == "100755" else None)

    def _stage_from(self, commit: str, paths: list[str]) -> None:
        """The index shows `commit` at `paths` (the working tree is left alone)."""
        listed = self._ls_paths(commit, paths)
        self._stage({p: sha for p, (_m, sha) in listed.items()}, [p for p in paths if p not in listed],
                    {p: m for p, (m, _sha) in listed.items()})

    def _write_paths(self, commit: str, paths: list[str], expect: str | None = None) -> None:
        """Make the working tree and the index show `commit` at `paths` (and nowhere else).

        With `expect`, each file is compared with its bytes at `expect` right before it is replaced
        (compare-and-swap, file by file): a keystroke that landed after the merge's check is never
        overwritten; the files already written are put back and the merge is refused. No file is
        written through a symlinked folder.
        """
        blobs, modes, deleted = {}, {}, []
        done: list[str] = []
        listed = self._ls_paths(commit, paths)
        for rel in paths:
            target = self.root / rel
            self._refuse_symlinked_parent(rel)
            entry = listed.get(rel)
            data = None
            if entry is not None:
                data = self.read_file(commit, rel)
                assert data is not None, f"{commit}:{rel} listed but unreadable"
            file_mode = 0o755 if entry is not None and entry[0] == "100755" else None
            if expect is not None and not target.is_symlink():
                # compare and swap in one step that also catches a write landing during the swap
                if not swap_if_unchanged(target, data, self.read_file(expect, rel), file_mode):
                    self._write_paths(expect, done)
                    raise ConflictError("a person changed this file while merging; nothing changed", [rel])
            else:
                if expect is not None and self._disk_bytes(rel) != self.read_file(expect, rel):
                    self._write_paths(expect, done)
                    raise ConflictError("a person changed this file while merging; nothing changed", [rel])
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

    def _refuse_symlinked_parent(self, rel: str) -> None:
        link = symlink_on_path(self.root, rel)
        if link is not None:
            raise GitError(f"{link.relative_to(self.root)}/ is a symlink; hermes-fs does not write through it "
                           f"(it could point outside the vault): {rel}")

    def _ls_paths(self, commit: str, paths: list[str]) -> dict[str, tuple[str, str]]:
        """path -> (mode, blob id) at `commit` for those of `paths` that are files there; one git call."""
        if not paths:
            return {}
        found = {}
        for item in self._git("ls-tree", "-z", commit, "--", *[f":(literal){p}" for p in paths]).split("\0"):
            if item:
                meta, path = item.split("\t", 1)
                mode, kind, sha = meta.split()
                if kind == "blob":
                    found[path] = (mode, sha)
        return found

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
