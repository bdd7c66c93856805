"""A message in, a reply out, and where both belong: the records every part of the gateway passes
around. They sit below the channel interface, the access rules and the ledger, which all name
them, so none of those three needs another to describe a message."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...agent.outgoing import OutgoingFile
from ...errors import InputError


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


class AudioTooLarge(InputError):
    """Audio larger than the gateway takes (`voice.max_bytes`): not downloaded further."""


@dataclass(frozen=True)
class Audio:
    """A voice note or audio file a message carries. The channel only says where it is: the core
    fetches it, bounds it and transcribes it (service/gateway/voice.py), and only for a sender the
    access rules let through. The bytes stay in memory: audio is never written in the vault."""

    # the audio's bytes, at most `limit` of them: raises AudioTooLarge past the limit (a download
    # stops there), any other exception when it cannot be fetched
    fetch: Callable[[int], bytes]
    mime: str = ""  # the platform's content type (audio/ogg, audio/mp4, ...); "" unknown
    name: str = ""  # the platform's file name, if any (shown in refusals; the format is read from the bytes)
    size: int | None = None  # bytes, as the platform declares it: over the limit is refused before fetching
    duration_s: float | None = None  # seconds, as the platform declares it: likewise (the decoded length is checked too)

    @classmethod
    def of_bytes(cls, data: bytes, mime: str = "", name: str = "") -> Audio:
        """Audio the channel already holds (a mail's attachment)."""
        def fetch(limit: int) -> bytes:
            if len(data) > limit:
                raise AudioTooLarge(f"{len(data)} bytes, over the {limit} byte limit")
            return data

        return cls(fetch, mime, name, len(data))


@dataclass
class Inbound:
    """One message from a channel, before access control."""

    origin: Origin
    text: str  # with `audio`: a caption (or ""); the transcript is added by the core
    direct: bool = True  # a DM (or a mail to the agent) rather than a shared room
    attachments: list[Path] = field(default_factory=list)  # already saved under the workspace
    context: str | None = None  # text from others in a shared room: untrusted context, not a request
    audio: Audio | None = None  # a voice message: the core transcribes it, the transcript is the message


@dataclass
class Outbound:
    """A reply to send: the origin it answers and the text, and the files the agent sent with it
    (staged copies, each within the channel's `max_file_bytes`). On `send_file` it is one file,
    and `text` is its caption."""

    origin: Origin
    text: str
    reply_id: str  # stable id of this reply (the request id): a channel may use it to avoid double sends
    files: list[OutgoingFile] = field(default_factory=list)


__all__ = ["Audio", "AudioTooLarge", "Inbound", "Origin", "Outbound"]
