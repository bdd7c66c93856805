"""An in-memory overlay of a commit: the FileStore a refine or learn review edits.

Reads fall through to the commit; writes and deletions stay in `changes` until GitStore
commits them on a branch. Nothing here touches the working tree or the index.
"""

from __future__ import annotations

from . import secrets
from .files import Symlink, clean_relpath
from .git import GitStore


class OverlayFiles:
    def __init__(self, store: GitStore, commit: str):
        self.store = store
        self.commit = commit
        self.changes: dict[str, bytes | None] = {}

    def read(self, rel: str) -> bytes | None:
        rel = clean_relpath(rel)
        if rel in self.changes:
            return self.changes[rel]
        return self.read_committed(rel)  # a link read, moved or copied stays a link

    def write(self, rel: str, data: bytes) -> None:
        """Refuses a secret at once (SecretError), so the reviewer hears about it while it can fix it."""
        rel = clean_relpath(rel)
        secrets.check({rel: bytes(data)})
        self.changes[rel] = data if isinstance(data, Symlink) else bytes(data)

    def delete(self, rel: str) -> None:
        self.changes[clean_relpath(rel)] = None

    def list(self, prefix: str) -> list[str]:
        prefix = clean_relpath(prefix)
        base = set(self.store.list_files(self.commit, prefix))
        for rel, data in self.changes.items():
            if rel.startswith(prefix + "/"):
                (base.add if data is not None else base.discard)(rel)
        return sorted(base)

    def effective_changes(self) -> dict[str, bytes | None]:
        """Changes that differ from the commit (a write of the same bytes is no change)."""
        return {p: d for p, d in self.changes.items() if d != self.read_committed(p)}

    def read_committed(self, rel: str) -> bytes | None:
        data = self.store.read_file(self.commit, rel)
        return Symlink(data) if data is not None and rel in self.store.symlinks(self.commit) else data
