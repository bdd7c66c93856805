"""A message in, a reply out, and where both belong: the records every part of the gateway passes
around. They sit below the channel interface, the access rules and the ledger, which all name
them, so none of those three needs another to describe a message."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ...agent.outgoing import OutgoingFile


@dataclass(frozen=True)
class Origin:
    """Where a message came from, and so where its reply goes. `sender` is a stable,
    server-authenticated id (a Matrix user id, a proven mail address), never a display name."""

    platform: str  # the channel's name (its registry key)
    chat: str  # a room, a chat, a mailbox thread root, a route
    sender: str
    message: str  # the platform's message id: the idempotency key
    thread: str | None = None  # m.thread root, mail thread root

    def session_key(self, per_sender: bool = False) -> str:
        """One session per chat and thread (and per sender where a shared room asks for it)."""
        parts = [self.platform, self.chat, self.thread or "-"]
        if per_sender:
            parts.append(self.sender)
        return "|".join(parts)


@dataclass
class Inbound:
    """One message from a channel, before access control."""

    origin: Origin
    text: str
    direct: bool = True  # a DM (or a mail to the agent) rather than a shared room
    attachments: list[Path] = field(default_factory=list)  # already saved under the workspace
    context: str | None = None  # text from others in a shared room: untrusted context, not a request


@dataclass
class Outbound:
    """A reply to send: the origin it answers and the text, and the files the agent sent with it
    (staged copies, each within the channel's `max_file_bytes`). On `send_file` it is one file,
    and `text` is its caption."""

    origin: Origin
    text: str
    reply_id: str  # stable id of this reply (the request id): a channel may use it to avoid double sends
    files: list[OutgoingFile] = field(default_factory=list)


__all__ = ["Inbound", "Origin", "Outbound"]
