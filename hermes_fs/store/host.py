"""This machine's name among the machines that share a vault through a remote.

A host id is chosen once per clone and kept in the untracked `.hermes/host-id`, so two clones on
one computer (or two computers with the same hostname) still differ; `HERMES_HOST` overrides it.
It goes into every commit (`Hermes-Host`), into claim refs, into learned branch names and session
ids, so that what two machines make never collides and anyone can see which machine made what.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import socket
from pathlib import Path

from ..errors import InputError
from .files import atomic_write

HOST_FILE = "host-id"
_VALID = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")


def _slug(text: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", text.lower())).strip("-")[:30] or "host"


def valid_host(text: str) -> bool:
    return bool(_VALID.match(text))


def host_id(state_dir: Path) -> str:
    """The id of this clone: `$HERMES_HOST`, else `.hermes/host-id`, else a new `<hostname>-<4 hex>`."""
    given = os.environ.get("HERMES_HOST")
    if given:
        if not _VALID.match(given):
            raise InputError(f"HERMES_HOST must be lowercase letters, digits and hyphens (at most 40), got {given!r}")
        return given
    path = Path(state_dir) / HOST_FILE
    try:
        found = path.read_text(encoding="utf-8").strip()
        if _VALID.match(found):
            return found
    except OSError:
        pass
    made = f"{_slug(socket.gethostname())}-{secrets.token_hex(2)}"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, made + "\n")
    return made


def host_hex(host: str, digits: int = 4) -> str:
    """A short hex tag of a host id, for names that allow only hex (session ids)."""
    return hashlib.sha1(host.encode()).hexdigest()[:digits]
