"""Saving a memory file or a skill file from the page: a person's edit, as if typed in an editor.

Compare-and-swap: the page sends the digest of the bytes it loaded; when the file on disk is no
longer those bytes (an editor, the agent, another tab wrote it), nothing is written and the page
shows both texts, so a newer edit made elsewhere is never overwritten. Otherwise the file is swapped in
under the vault's lock (so an editor's save in between is seen, never overwritten) and committed the way the daemon commits an editor's save (`edit: <path>`, trailer
`Hermes-Change: human-edit`, authored by the person), through the same secret scanner.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ...errors import InputError
from ...store import secrets
from ...store.docs import decode
from ...store.edit import Staged, edit
from ...store.files import symlink_on_path
from ...store.vault import Vault

MAX_EDIT_CHARS = 2_000_000


class TooLong(InputError):
    """A save over MAX_EDIT_CHARS: answered 413 (web/pages.py), nothing written."""


def too_long_message(chars: int) -> str:
    return (f"the text is {chars:,} characters; a file edited here holds at most {MAX_EDIT_CHARS:,} characters: "
            "nothing was saved (edit a file this large in a text editor)")


def digest(data: bytes | None) -> str:
    return "absent" if data is None else hashlib.sha256(data).hexdigest()


@dataclass
class Saved:
    ok: bool
    sha: str | None = None  # the commit (None: nothing changed, or not saved)
    current: str | None = None  # the text on disk now, when it moved since the page loaded it
    current_digest: str = ""
    message: str = ""


def as_bytes(text: str, like: bytes | None) -> bytes:
    """A browser sends a textarea with CRLF line ends; the file keeps the ones it had."""
    text = text.replace("\r\n", "\n")
    if like is not None and b"\r\n" in like:
        text = text.replace("\n", "\r\n")
    return text.encode("utf-8")


class _Moved(Exception):
    """The file is no longer what the page loaded: the save is refused, their text stays."""

    def __init__(self, now: bytes | None):
        super().__init__("moved")
        self.now = now


def save(vault: Vault, rel: str, text: str, base: str) -> Saved:
    """Write `text` to `rel` if the file still holds what the page loaded (`base`), and commit it.

    The write goes through the vault's locked swap-in (`store.edit`): an editor that does not take
    our lock and saves between our check and our write is seen in what the swap displaced; the
    check is then made again on their text, fails, and their text is put back."""
    if len(text) > MAX_EDIT_CHARS:
        raise TooLong(too_long_message(len(text)), rel)
    if symlink_on_path(vault.root, rel, include_last=True) is not None:
        raise InputError("a symlink is never written through: edit the file it points to", rel)
    store = vault.git

    def change(files: Staged) -> bool:
        on_disk = files.read(rel)
        if digest(on_disk) != base:
            raise _Moved(on_disk)
        data = as_bytes(text, on_disk)
        findings = secrets.scan(rel, data)
        if findings:
            raise InputError("refusing to save a secret: " + "; ".join(f"line {f.line}: {f.kind}" for f in findings)
                             + ". Put it in .hermes/secrets.env instead.", rel)
        if data == on_disk:
            return False
        files.write(rel, data)
        return True

    with store.lock.hold():  # no merge or commit of hermes-fs moves the file between check and commit
        try:
            done = edit(vault.files, store.lock, change)
        except _Moved as moved:
            current = decode(moved.now, rel) if moved.now is not None else ""
            return Saved(False, current=current, current_digest=digest(moved.now),
                         message="the file changed since this page loaded it; nothing was saved. Both versions are "
                                 "shown: copy what you need into the editor and save again to replace the file.")
        if not done.result:
            return Saved(True, message="no change")
        try:
            result = store.commit_human_edits([rel])
        finally:
            done.settle()
    if result.refused:
        return Saved(True, message=f"saved but not committed: {result.refused[0]}")
    return Saved(True, result.sha, message=f"saved and committed as your edit ({(result.sha or '')[:10]})")
