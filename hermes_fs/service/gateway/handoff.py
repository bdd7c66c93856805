"""Chats handed to a person: the `handoff` tool's book of chats the agent answers no more.

A customer's turn may hand its chat to the owner (support.handoff.owner). From then on the chat is
"with a person": the core runs nothing of it (its messages reach the owner instead) until the
owner gives it back (`hermes-fs gateway resume CHANNEL:CHAT`, or `/resume CHANNEL:CHAT` from an
admin in chat). The book is a JSON file under .hermes/gateway/, read on every message, so a
resume from the command line acts on the running daemon at once and a hand-off survives restarts.
"""

from __future__ import annotations

import fcntl
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from ...errors import InputError
from ...store.files import atomic_write
from .message import Origin

BOOK = "handoffs.json"
SUMMARY_CHARS = 4_000  # of the model's summary sent to the owner; the rest is in the session


@dataclass
class Handoff:
    """One chat with a person: where it is, why it was handed over, and whether the owner was told."""

    key: str  # CHANNEL:CHAT, as `gateway resume` takes it
    platform: str
    chat: str
    sender: str  # the customer
    thread: str | None
    reason: str
    summary: str
    session: str | None  # the agent's session of that chat, when it had one
    opened: float
    told: str = ""  # how the owner was told ("notify phone", "signal:+1555..."), or why they were not


def chat_key(platform: str, chat: str) -> str:
    return f"{platform}:{chat}"


def parse_key(key: str) -> tuple[str, str]:
    """(channel, chat) of `CHANNEL:CHAT` (the chat may hold colons: a Matrix room id)."""
    platform, sep, chat = key.strip().partition(":")
    if not sep or not platform or not chat:
        raise InputError(f"expected CHANNEL:CHAT (as `hermes-fs gateway handoffs` lists them), got {key!r}")
    return platform, chat


class HandoffBook:
    """The open hand-offs of a vault (.hermes/gateway/handoffs.json, owner-only), under a file lock
    shared by the daemon and the command line."""

    def __init__(self, state_dir: Path):
        self.path = state_dir / "gateway" / BOOK
        self.lock_path = self.path.with_suffix(".lock")

    @contextmanager
    def _held(self) -> Iterator[dict[str, Handoff]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                book = self._read()
                before = {k: asdict(h) for k, h in book.items()}  # copies: a record changed in place shows
                yield book
                data = {k: asdict(h) for k, h in book.items()}
                if data != before:
                    atomic_write(self.path, json.dumps(data, indent=2, sort_keys=True) + "\n", mode=0o600)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> dict[str, Handoff]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except ValueError as exc:  # a damaged book silences nobody by accident: say so loudly
            raise InputError(f"{self.path} is not valid JSON ({exc}); fix or remove it") from None
        names = {f.name for f in fields(Handoff)}
        return {k: Handoff(**{n: v for n, v in row.items() if n in names}) for k, row in data.items()
                if isinstance(row, dict)}

    def open(self, handoff: Handoff) -> bool:
        """Record the hand-off; False when the chat was already with a person (kept as it was)."""
        with self._held() as book:
            if handoff.key in book:
                return False
            book[handoff.key] = handoff
            return True

    def set_told(self, key: str, told: str) -> None:
        with self._held() as book:
            if key in book:
                book[key].told = told

    def close(self, key: str) -> Handoff | None:
        """Give the chat back to the agent; the hand-off that was open (None: none was)."""
        with self._held() as book:
            return book.pop(key, None)

    def get(self, key: str) -> Handoff | None:
        with self._held() as book:
            return book.get(key)

    def all(self) -> list[Handoff]:
        with self._held() as book:
            return sorted(book.values(), key=lambda h: h.opened)


def new_handoff(origin: Origin, reason: str, summary: str, session: str | None) -> Handoff:
    return Handoff(chat_key(origin.platform, origin.chat), origin.platform, origin.chat, origin.sender, origin.thread,
                   reason[:500], summary[:SUMMARY_CHARS], session, time.time())


def owner_text(h: Handoff) -> str:
    """What the owner reads: who, why, the summary and what was tried, and how to answer or give
    the chat back."""
    return (f"A customer's chat was handed to you: {h.key} (from {h.sender}).\n"
            f"Reason: {h.reason or '(none given)'}\n\n"
            f"Summary and what was tried:\n{h.summary or '(none given)'}\n\n"
            f"The agent answers this chat no more. Answer the customer with /reply {h.key} TEXT (where the "
            f"platform allows it); give the chat back with /resume {h.key} or `hermes-fs gateway resume {h.key}`.")


def forwarded_text(h: Handoff, text: str) -> str:
    """A customer's message in a chat with a person, passed on to the owner."""
    return f"{h.key} ({h.sender}) wrote, while with you:\n{text[:SUMMARY_CHARS]}\n\nAnswer with /reply {h.key} TEXT."


CUSTOMER_LINE = "(A person will take over this chat and answer you here.)"


def describe(h: Handoff) -> str:
    """One line of `gateway handoffs`."""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(h.opened))
    told = f"; owner: {h.told}" if h.told else ""
    return f"{h.key}  since {when}  {h.reason[:80]}{told}"


__all__ = ["CUSTOMER_LINE", "Handoff", "HandoffBook", "chat_key", "describe", "forwarded_text", "new_handoff",
           "owner_text", "parse_key"]
