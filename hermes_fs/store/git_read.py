"""GitStore's reading calls: refs, commits, trees, blobs, diffs, history, what the working tree
holds. They touch nothing: no ref, no index entry, no file is written.
"""

from __future__ import annotations

import os
from functools import cache, cached_property

from ..errors import GitError
from .git_base import (
    MAIN,
    BranchInfo,
    CommitInfo,
    GitBase,
    PathCommit,
)
from .provenance import parse_trailers

PURE_KEPT = 4096  # answers about pairs of commits kept (GitReader._pure); past it, forgotten at once
_UNKNOWN = object()


@cache
def _own_session_repo():
    """git.Repo whose git commands (GitPython's `GitCommandWrapperType`) start with
    start_new_session=True, so they never receive the terminal's signals."""
    import git

    class OwnSessionGit(git.Git):
        def execute(self, command, *args, **kwargs):
            kwargs.setdefault("start_new_session", True)
            return super().execute(command, *args, **kwargs)

    class OwnSessionRepo(git.Repo):
        GitCommandWrapperType = OwnSessionGit

    return OwnSessionRepo


def _is_id(name: str) -> bool:
    return len(name) in (40, 64) and all(c in "0123456789abcdef" for c in name)


class GitReader(GitBase):
    # -- reading -----------------------------------------------------------------------------
    def rev(self, ref: str) -> str | None:
        out = self._git("rev-parse", "--verify", "-q", f"{ref}^{{commit}}", ok=(0, 1))
        return out.strip() or None

    def head(self) -> str:
        sha = self._loose_ref(f"refs/heads/{MAIN}") or self.rev(f"refs/heads/{MAIN}")
        if not sha:
            raise GitError(f"branch {MAIN} does not exist in {self.root}")
        return sha

    def _loose_ref(self, ref: str) -> str | None:
        """A branch's commit read from its loose ref file, without a git process: git writes the
        file whole and renames it into place, so a read sees the old or the new value. A sync
        round asks for main many times, and a process each is slow on a loaded machine. None when
        the ref is packed, `.git` is not a folder, or the file holds anything but an object id:
        then `rev-parse` answers, as before."""
        try:
            text = (self.root / ".git" / ref).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return text if _is_id(text) else None

    def _head_ref(self) -> str:
        """The branch HEAD names ('refs/heads/main'), '' when detached: read from .git/HEAD, which
        git replaces whole, without a process (asked before every commit); git's answer if that
        file cannot be read."""
        try:
            text = (self.root / ".git" / "HEAD").read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return self._git("symbolic-ref", "-q", "HEAD", ok=(0, 1)).strip()
        return text.removeprefix("ref:").strip() if text.startswith("ref:") else ""

    @cached_property
    def repo(self):
        """GitPython's Repo: its persistent `cat-file --batch` makes many reads cost one process.
        Its git processes run in a session of their own: a Ctrl-C at the terminal (meant for a chat
        turn) would otherwise kill the long-lived cat-file, and every read after it would fail."""
        return _own_session_repo()(self.root)

    def read_file(self, commit: str, path: str) -> bytes | None:
        """A file's bytes at a commit (None if absent), through one persistent `cat-file --batch`:
        git resolves `commit:path` in C, so wide folders cost nothing extra. A name the batch's
        line protocol cannot carry (a newline in it: git holds any name) is looked up by its blob."""
        if "\n" in path or "\r" in path:
            found = self._ls_paths(commit, [path]).get(path)
            return self.read_blob(found[1]) if found else None
        return self.read_blob(f"{commit}:{path}")

    def read_blob(self, name: str) -> bytes | None:
        """A blob's bytes by id (or `commit:path`); None when there is no such blob."""
        with self._read_lock:  # one cat-file process: one reader at a time
            try:
                _sha, kind, _size, data = self.repo.git.get_object_data(name)
            except ValueError:
                return None
        return data if kind == b"blob" else None

    def hosts_in_history(self, commit: str, limit: int = 2000) -> frozenset[str]:
        """The machines (`Hermes-Host` trailers) that made the last `limit` commits up to `commit`:
        the machines known to sync this vault. Remembered per commit id."""
        def ask() -> frozenset[str]:
            out = self._git("log", f"-n{limit}", "--format=%(trailers:key=Hermes-Host,valueonly,separator=%x00)%x00",
                            commit)
            return frozenset(h.strip() for h in out.split("\0") if h.strip())

        return self._pure("hosts", commit, commit, ask)

    def symlinks(self, commit: str) -> frozenset[str]:
        """The paths that are symlinks (mode 120000) at `commit`: their blob is a link's target,
        never a file's text. Remembered per commit id."""
        def ask() -> frozenset[str]:
            found = set()
            for item in self._git("ls-tree", "-r", "-z", commit).split("\0"):
                meta, _, path = item.partition("\t")
                if meta.startswith("120000 "):
                    found.add(path)
            return frozenset(found)

        return self._pure("symlinks", commit, commit, ask)

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
        def ask() -> list[str]:
            out = self._git("diff-tree", "-r", "-z", "--no-renames", "--name-only", a, b)
            return [p for p in out.split("\0") if p]

        return list(self._pure("changed", a, b, ask))

    def _pure(self, question: str, a: str, b: str, ask):
        """The answer to a question about two commits named by id, remembered: commits never
        change, so neither do their merge base, ancestry or the paths between them. A sync merge
        asked some of these twice, and every round asks again of the same commits (a git
        process each). Names that can move (HEAD, main) are
        never remembered."""
        if not (_is_id(a) and _is_id(b)):
            return ask()
        key = (question, a, b)
        found = self._between.get(key, _UNKNOWN)  # one lookup: another thread may clear meanwhile
        if found is _UNKNOWN:
            found = ask()
            if len(self._between) >= PURE_KEPT:
                self._between.clear()
            self._between[key] = found
        return found

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
        return self._pure("base", a, b, lambda: self._git("merge-base", a, b, ok=(0, 1)).strip() or None)

    def is_ancestor(self, a: str, b: str) -> bool:
        return self._pure("ancestor", a, b, lambda: self._run("merge-base", "--is-ancestor", a, b, ok=(0, 1))[0] == 0)

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

    def refs(self, *prefixes: str) -> dict[str, str]:
        """ref -> sha of every ref under `prefixes` (full ref names), in one git call."""
        out = self._git("for-each-ref", "--format=%(objectname) %(refname)", *prefixes)
        found = {}
        for line in out.splitlines():
            sha, _, ref = line.partition(" ")
            found[ref] = sha
        return found

    def ref_messages(self, prefix: str) -> list[tuple[str, str, int, str]]:
        """(ref, sha, commit time, whole message) of every ref under `prefix`, in one git call:
        claim and lease refs keep their state in their commit's trailers."""
        fmt = "%(refname)%00%(objectname)%00%(committerdate:unix)%00%(contents)%1e"
        found = []
        for rec in self._git("for-each-ref", f"--format={fmt}", prefix).split("\x1e"):
            rec = rec.strip("\n")
            if rec:
                ref, sha, ts, message = rec.split("\0", 3)
                found.append((ref, sha, int(ts or 0), message))
        return found

    def blob_id(self, commit: str, path: str) -> str | None:
        """The object id of `path` in `commit`; None when the commit or the path is not there."""
        out = self._git("rev-parse", "-q", "--verify", f"{commit}:{path}", ok=(0, 1, 128)).strip()
        return out or None

    def has_own_commit(self, tip: str, *others: str, other_globs: tuple[str, ...] = ()) -> bool:
        """Has `tip` a commit (not a merge) that none of `others` nor the refs matching
        `other_globs` holds?"""
        out = self._git("rev-list", "-n1", "--no-merges", tip, "--not", *(f"--glob={g}" for g in other_globs),
                        *others)
        return bool(out.strip())

    def last_trailers(self, commit: str, path: str) -> dict[str, str]:
        """The trailers of the last commit up to `commit` that changed `path`."""
        return parse_trailers(self._git("log", "-1", "--format=%B", commit, "--", path))

    def added_paths(self, since: str, until: str, under: str, trailer: str) -> list[tuple[str, list[str]]]:
        """(the `trailer`'s value, the paths it added under `under`) of each commit (merges left
        out) in since..until, newest first."""
        out = self._git("log", "--no-merges", "--diff-filter=A", "--no-renames", "--name-only",
                        f"--format=%x00%(trailers:key={trailer},valueonly,separator=)", f"{since}..{until}",
                        "--", under)
        found = []
        for commit in out.split("\0")[1:]:
            value, *paths = [line.strip() for line in commit.split("\n")]
            found.append((value, [p for p in paths if p]))
        return found

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

    def _disk_bytes(self, rel: str) -> bytes | None:
        entry = self._disk_entry(rel)
        return entry[1] if entry else None

    def message(self, ref: str) -> str:
        """A commit's whole message, trailers included."""
        return self._git("show", "-s", "--format=%B", ref)

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
