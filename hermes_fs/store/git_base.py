"""Running git for a GitStore (store/git.py): one `_run` helper every call goes through, repository
creation and settings. What a call touches is what its arguments say.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from ..errors import GitError
from .lock import VaultLock
from .provenance import Provenance

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


class GitBase:
    def __init__(self, root: Path, lock_dir: Path | None = None, provenance: Provenance | None = None):
        from . import secrets  # imported here: its patterns cost compile time that `status` never needs

        self._secrets = secrets
        self._read_lock = threading.Lock()
        self._paths_of: dict[str, list[str]] = {}  # commit -> paths it changed (see changed_paths_of)
        self._between: dict[tuple[str, str, str], Any] = {}  # (question, commit, commit) -> answer (GitReader._pure)
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
                start_new_session=True,  # a chat's Ctrl-C is for the turn, never for a half-made commit
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
    def init(cls, root: Path, lock_dir: Path | None = None) -> Self:
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
