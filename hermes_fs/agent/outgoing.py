"""Files the agent sends back with its answer (the `send_file` tool), and which files it may send.

A model's reply is untrusted, so code decides what may leave the machine: a regular file inside
the session's workspace, or a job's or request's result under the vault's `outputs/`; nothing in
`.git/` or `.hermes/` (secrets, the ledger, other sessions' workspaces' siblings), no `.env`
file, no text holding a secret, nothing reached through a symlink that points elsewhere (the
path is resolved first and the resolved path is what is checked). Everything else is refused.

A file is copied ("staged") into `.hermes/outbox/` at the moment the model asks: what is
delivered is what the model saw, however the workspace changes afterwards, and the copy outlives
a restart of the daemon, so a reply's files are delivered exactly once like its text.
"""

from __future__ import annotations

import dataclasses
import mimetypes
import os
import re
import shutil
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..store import secrets

OUTBOX_DIR = "outbox"  # under .hermes/
MAX_STAGED_BYTES = 100 * 1024 * 1024  # no channel carries more; a bigger file is refused at once
MAX_FILES_PER_TURN = 10
SANDBOX_MOUNT = "/workspace"  # where the Docker sandbox shows the workspace to commands
SCAN_TEXT_BYTES = 2 * 1024 * 1024  # a text file up to this size is scanned for secrets before it leaves
VAULT_SENDABLE = ("outputs",)  # vault folders whose files may be sent (results of jobs and requests)


@dataclass(frozen=True)
class OutgoingFile:
    """A file to deliver with a turn's answer: its staged copy, the name the recipient sees, an
    optional caption, its size in bytes and its media type."""

    path: Path  # the staged copy under .hermes/outbox/
    name: str
    size: int
    mime: str = "application/octet-stream"
    caption: str = ""
    to: tuple[str, ...] = ()  # named destinations (gateway.destinations) instead of this chat; () = this chat

    def to_meta(self, outbox: Path) -> dict[str, Any]:
        """The file as a result's frontmatter records it (its staged copy relative to the outbox)."""
        try:
            staged = self.path.relative_to(outbox).as_posix()
        except ValueError:
            staged = self.path.name
        meta: dict[str, Any] = {"name": self.name, "size": self.size, "mime": self.mime, "staged": staged}
        if self.caption:
            meta["caption"] = self.caption
        if self.to:
            meta["to"] = list(self.to)
        return meta

    @classmethod
    def from_meta(cls, meta: Any, outbox: Path) -> OutgoingFile | None:
        """The file read back from a result's frontmatter; None when the entry is not one. A result
        is a file a person (or a synced machine) may have edited: nothing in it is trusted beyond
        its shape, and the staged path must resolve inside the outbox."""
        if not isinstance(meta, dict):
            return None
        name, size, staged = meta.get("name"), meta.get("size"), meta.get("staged")
        if not isinstance(name, str) or not isinstance(size, int) or not isinstance(staged, str):
            return None
        root = Path(os.path.realpath(outbox))
        path = Path(os.path.realpath(root / staged))
        if not path.is_relative_to(root) or path == root:
            return None
        mime, caption, to = meta.get("mime"), meta.get("caption"), meta.get("to")
        names = tuple(t for t in to if isinstance(t, str)) if isinstance(to, list) else ()
        return cls(path, safe_name(name), size, mime if isinstance(mime, str) else "application/octet-stream",
                   caption if isinstance(caption, str) else "", names)


def files_meta(files: list[OutgoingFile], outbox: Path) -> list[dict[str, Any]]:
    return [f.to_meta(outbox) for f in files]


def files_from_meta(value: Any, outbox: Path) -> list[OutgoingFile]:
    """Files recorded in a result (entries that are not files are dropped)."""
    if not isinstance(value, list):
        return []
    return [f for f in (OutgoingFile.from_meta(v, outbox) for v in value) if f is not None]


def safe_name(name: str) -> str:
    """A file name a recipient's client shows and saves safely: no folders, no control
    characters, no leading dot, at most 120 characters (the extension kept)."""
    base = re.sub(r"[\x00-\x1f\x7f/\\]", "_", os.path.basename(name.replace("\\", "/"))).strip().lstrip(".")
    if not base:
        return "file"
    if len(base) > 120:
        stem, dot, ext = base.rpartition(".")
        base = (stem[: 119 - len(ext)] + "." + ext) if dot and len(ext) <= 10 else base[:120]
    return base


def resolve_sendable(path: str, workspace: Path | None, vault_root: Path | None) -> Path:
    """The real path of a file the agent may send, or an InputError saying why not.

    Accepted: a path inside the workspace (absolute, under the sandbox's /workspace, or relative
    to the workspace); a path under the vault's outputs/ (relative to the vault, or absolute).
    Default deny for the rest."""
    if not isinstance(path, str) or not path.strip():
        raise InputError("path is empty")
    raw = path.strip()
    if workspace is not None and (raw == SANDBOX_MOUNT or raw.startswith(SANDBOX_MOUNT + "/")):
        raw = str(Path(workspace) / raw[len(SANDBOX_MOUNT) + 1 :])  # what the Docker sandbox calls it
    if not os.path.isabs(raw):  # the workspace's file first (write_pdf's outputs/), else the vault's
        in_ws = Path(workspace) / raw if workspace is not None else None
        if in_ws is not None and (in_ws.exists() or vault_root is None):
            raw = str(in_ws)
        elif vault_root is not None:
            raw = str(Path(vault_root) / raw)
        else:
            raise InputError("give the file's absolute path in the workspace", path)
    real = Path(os.path.realpath(raw))
    if not _allowed(real, workspace, vault_root):
        raise InputError("only files in the workspace or under the vault's outputs/ may be sent", path)
    _refuse_private(real, path)
    try:
        st = os.stat(real)
    except OSError:
        raise InputError("no such file", path) from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError("not a regular file", path)
    if st.st_size > MAX_STAGED_BYTES:
        raise InputError(f"{st.st_size} bytes is over the {MAX_STAGED_BYTES} bytes a file sent may have", path)
    return real


def _allowed(real: Path, workspace: Path | None, vault_root: Path | None) -> bool:
    """Inside the vault only outputs/ and the vault's own workspace (.hermes/workspace); outside
    it, only the workspace (a person's project folder at a terminal)."""
    in_ws = _inside_workspace(real, workspace)
    if vault_root is not None:
        root = Path(os.path.realpath(vault_root))
        if real.is_relative_to(root):
            parts = real.relative_to(root).parts
            return bool(parts) and (parts[0] in VAULT_SENDABLE or (parts[:2] == (".hermes", "workspace") and in_ws))
    return in_ws


def _inside_workspace(real: Path, workspace: Path | None) -> bool:
    if workspace is None:
        return False
    ws = Path(os.path.realpath(workspace))
    if not real.is_relative_to(ws) or real == ws:
        return False
    return real.relative_to(ws).parts[0] not in (".git", ".hermes")


def _refuse_private(real: Path, shown: str) -> None:
    """Never a git folder, an .env file or a secrets file, wherever it sits."""
    for part in real.parts:
        if part == ".git" or part.lower() in secrets.ENV_FILE_NAMES or part.lower().startswith(".env"):
            raise InputError("this file is private (git's own, or an environment/secrets file) and is never sent",
                             shown)
    if real.name.lower().endswith("secrets.env"):
        raise InputError("a secrets file is never sent", shown)


def stage(real: Path, outbox: Path, caption: str = "", name: str | None = None) -> OutgoingFile:
    """Copy a checked file into the outbox (its own folder, the name kept) and describe it. A text
    file holding a secret is refused here, before it can leave the machine."""
    shown = safe_name(name or real.name)
    data = _read_checked(real)
    if len(data) > MAX_STAGED_BYTES:
        raise InputError(f"over the {MAX_STAGED_BYTES} bytes a file sent may have", str(real))
    if len(data) <= SCAN_TEXT_BYTES and _looks_text(data):
        findings = secrets.scan_text(shown, data.decode("utf-8", errors="replace"))
        if findings:
            raise InputError(f"the file holds a secret ({findings[0].kind}, line {findings[0].line}); it is not sent",
                             shown)
    folder = outbox / uuid.uuid4().hex[:12]
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / shown
    with open(target, "wb") as out:
        out.write(data)
    mime = mimetypes.guess_type(shown)[0] or "application/octet-stream"
    return OutgoingFile(target, shown, len(data), mime, caption.strip()[:1000])


def _read_checked(real: Path) -> bytes:
    """The file's bytes, read through one descriptor that is still the checked path: a symlink
    swapped in after the check (by a command in the sandbox, say) is refused, not followed."""
    try:
        fd = os.open(real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise InputError(f"cannot open the file ({exc.strerror})", str(real)) from None
    with os.fdopen(fd, "rb") as src:  # one open: what is scanned is what is copied
        opened = Path(f"/proc/self/fd/{fd}")
        if not stat.S_ISREG(os.fstat(fd).st_mode) or (opened.exists() and Path(os.path.realpath(opened)) != real):
            raise InputError("the file changed while it was being sent", str(real))
        return src.read(MAX_STAGED_BYTES + 1)


def copy_of(file: OutgoingFile) -> OutgoingFile:
    """Another staged copy (a folder of its own): each delivery owns the copy it discards."""
    folder = file.path.parent.parent / uuid.uuid4().hex[:12]
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(file.path, folder / file.path.name)
    return dataclasses.replace(file, path=folder / file.path.name)


def _looks_text(data: bytes) -> bool:
    return b"\x00" not in data[:8192]


def discard(file: OutgoingFile) -> None:
    """Remove a staged copy once its delivery is settled (delivered, or failed for good)."""
    shutil.rmtree(file.path.parent, ignore_errors=True)


def human_size(size: int) -> str:
    """1000 bytes, 5.0 KB, 50.0 MB (decimal units, as the platforms state their limits)."""
    if size < 1000:
        return f"{size} bytes"
    value = size / 1000
    for unit in ("KB", "MB"):
        if value < 1000:
            return f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


__all__ = ["OutgoingFile", "files_from_meta", "files_meta", "resolve_sendable", "stage", "discard", "safe_name", "human_size"]
