"""The one interface every gateway channel implements (Matrix, webhook, e-mail, ...).

A channel turns what its platform delivers into `Inbound` messages and hands each to the core's
`Sink`; `Sink.submit` returns only once the message is durably a request (committed or claimed in
the vault), so a channel saves its own cursor (a Matrix sync token, an IMAP UID) *after* that
call: nothing is lost across a crash, and the message id makes a second submit a no-op. Replies
come back through `Channel.send`, addressed by the same `Origin`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class Origin:
    """Where a message came from, and so where its reply goes. `sender` is a stable,
    server-authenticated id (a Matrix user id, a proven mail address), never a display name."""

    platform: str  # the channel's name: matrix, webhook, email
    chat: str  # room id, mailbox thread root, webhook route
    sender: str
    message: str  # the platform's message id: the idempotency key
    thread: str | None = None  # m.thread root, mail thread root

    def session_key(self, per_sender: bool = False) -> str:
        """One session per chat and thread (and per sender where a shared room asks for it)."""
        parts = [self.platform, self.chat, self.thread or "-"]
        if per_sender:
            parts.append(self.sender)
        return "|".join(parts)


def attachments_dir(state_dir: Path, origin: Origin) -> Path:
    """Where a channel saves a message's files (under the workspace, one folder per message, so a
    resubmission rewrites the same files and a command such as /learn finds them by the origin)."""
    key = hashlib.sha256(f"{origin.platform}|{origin.chat}|{origin.message}".encode()).hexdigest()[:16]
    return state_dir / "workspace" / origin.platform / key


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
    """A reply to send: the origin it answers and the text."""

    origin: Origin
    text: str
    reply_id: str  # stable id of this reply (the request id): a channel may use it to avoid double sends


class Sink(Protocol):
    def submit(self, message: Inbound) -> str:
        """Make the message a durable request; returns its request id (the same id for a duplicate)."""
        ...


class Channel(Protocol):
    name: str

    def start(self, sink: Sink) -> None:
        """Connect and begin delivering messages to `sink` (from the channel's own thread)."""
        ...

    def stop(self) -> None: ...

    def send(self, reply: Outbound) -> str:
        """Deliver a reply in the same chat and thread; returns the platform's message id.
        Raises on failure (the core records the reason and retries later)."""
        ...
