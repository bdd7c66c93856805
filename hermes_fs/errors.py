"""Error types. Every user-facing error names the file (and line where known)."""

from __future__ import annotations


class HermesError(Exception):
    """Base class: a failed operation (CLI exit 1)."""

    exit_code = 1


class InputError(HermesError):
    """Bad input from a person or a model: bad file, bad argument (CLI exit 2)."""

    exit_code = 2

    def __init__(self, message: str, path: str | None = None, line: int | None = None):
        self.path, self.line, self.reason = path, line, message
        where = path or ""
        if path and line:
            where = f"{path}:{line}"
        super().__init__(f"{where}: {message}" if where else message)


class NotFound(InputError):
    """What was asked for does not exist (a session, a skill, a change, a job): the web page
    answers 404, not 400."""


class SessionGone(NotFound):
    """The session a conversation was to continue is gone (deleted, never synced here)."""


class ConfigError(InputError):
    """hermes.yaml or a job file is invalid."""


class SecretError(HermesError):
    """A commit would have included a secret."""


class GitError(HermesError):
    """A git operation failed, or lost a race (a ref moved under us)."""


class RepositoryBusy(GitError):
    """A person's own git is in the middle of something in the vault (a merge, a rebase, another
    branch checked out): hermes-fs changes nothing on main until it is finished."""


class ConflictError(GitError):
    """A merge or revert would conflict; nothing was changed."""

    def __init__(self, message: str, files: list[str], details: list[str] | None = None):
        self.files = files
        self.details = details or []  # per file: the entry (or key, or lines) and both versions
        super().__init__(f"{message}: {', '.join(files)}")


class Overtaken(GitError):
    """Main moved, or a person typed, while a merge was under way: nothing changed, and the merge
    can be tried again at once (it commits the person's new text first, as theirs)."""


class EditedWhileMerging(ConflictError, Overtaken):
    """A person's keystroke landed in a file the merge changes: their text stays, nothing changed."""
