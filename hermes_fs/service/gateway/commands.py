"""Commands from chat: `/refine [focus]`, `/review`, `/show B`, `/merge B`, `/reject B`,
`/status`, `/new`, `/help`; for admins also `/handoffs`, `/resume CHANNEL:CHAT` (give a chat handed
to a person back to the agent) and `/reply CHANNEL:CHAT text` (answer that customer). A customer
(a channel's `customers: true`) may use only `/new` and `/help`. `/hermes refine` (Slack's form) and `!refine` (for clients that eat a
leading `/`) are the same commands. Merging and rejecting are for admins only.

A command runs in its chat's queue like a message, so `/new` or `/refine` sent after a message
acts after that message's turn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import InputError
from ...store.claims import RefClaims
from ...store.vault import Vault
from .handoff import HandoffBook, describe, parse_key

if TYPE_CHECKING:
    from ..decisions import Action

SHOW_LIMIT = 3500  # characters of a diff sent to a chat; the rest is on the machine (`review show`)

HELP = """Commands (also as /hermes <command> or !<command>):
/refine [focus]  review this chat's session now (the result is a refine/ branch)
/learn [focus]   turn the documents attached to this message into skills (a learn/ branch)
/review          learned changes waiting for review
/show BRANCH     what merging a change would do
/merge BRANCH    accept a change (admins only)
/reject BRANCH   refuse a change (admins only)
/status          this chat's session and the pending reviews
/new             start a new session for this chat
/handoffs        chats handed to a person (admins only)
/resume CHAT     give a chat handed to a person back to the agent: /resume CHANNEL:ID (admins only)
/reply CHAT      answer a handed-over customer: /reply CHANNEL:ID TEXT (admins only)
/help            this list"""

CUSTOMER_HELP = """Commands here: /new (start a new conversation), /help (this list)."""
CUSTOMER_COMMANDS = {"new", "help"}  # all a customer may run: nothing that reads or decides the owner's things
ADMIN_ONLY = {"merge", "reject", "handoffs", "resume", "reply"}
NAMES = {"refine", "learn", "review", "show", "merge", "reject", "status", "new", "help", "handoffs", "resume", "reply"}


@dataclass
class Command:
    name: str  # without its prefix; may be unknown (answered with the list)
    arg: str


def parse(text: str) -> Command | None:
    """The command a message is, or None for an ordinary message."""
    text = text.strip()
    if not text or text[0] not in "/!" or len(text) < 2 or text[1].isspace():
        return None
    words = text[1:].splitlines()[0].split(None, 1)  # the command is the first line; a mail's body may follow
    word, rest = words[0].lower(), (words[1].strip() if len(words) > 1 else "")
    if word == "hermes":  # `/hermes refine deploy notes`
        words = rest.split(None, 1)
        word, rest = (words[0].lower() if words else "help"), (words[1].strip() if len(words) > 1 else "")
    return Command(word, rest)


@dataclass
class ChatContext:
    """What a command may see and change about its chat."""

    vault: Vault
    admin: bool
    session: str | None  # this chat's current session id
    clear_session: Callable[[], None]
    attachments: list[Path] = field(default_factory=list)  # files the channel saved for this message
    text: str = ""  # the whole message: the command line, then the person's notes (a mail's body)
    claims: RefClaims | None = None  # the daemon's claims on the remote: a decision is claimed there first
    handoffs: HandoffBook | None = None  # chats handed to a person (/handoffs, /resume)
    reply: Callable[[str, str], str] | None = None  # (CHANNEL:CHAT, text): an admin's answer to a handed-over customer


def run(cmd: Command, ctx: ChatContext) -> tuple[str, str]:
    """(status, answer) for a command."""
    if cmd.name not in NAMES:
        return "error", f"unknown command /{cmd.name}. {HELP}"
    if cmd.name in ADMIN_ONLY and not ctx.admin:
        return "error", f"/{cmd.name} is for admins only (gateway.<channel>.admins in hermes.yaml)."
    if cmd.name in ("show", "merge", "reject") and not cmd.arg:
        return "error", f"usage: /{cmd.name} BRANCH (see /review)"
    if cmd.name in ("resume", "reply") and not cmd.arg:
        return "error", f"usage: /{cmd.name} CHANNEL:CHAT{' TEXT' if cmd.name == 'reply' else ''} (see /handoffs)"
    return COMMANDS[cmd.name](ctx, cmd.arg)


def _help(ctx: ChatContext, arg: str) -> tuple[str, str]:
    return "ok", HELP


def _new(ctx: ChatContext, arg: str) -> tuple[str, str]:
    ctx.clear_session()
    return "ok", "New session: the next message starts a fresh conversation."


def _refine(ctx: ChatContext, arg: str) -> tuple[str, str]:
    from ...learning.refine import RefineOptions, refine

    if not ctx.session:
        return "error", "Nothing to review yet: this chat has no session."
    outcome = refine(ctx.vault, RefineOptions(session=ctx.session, focus=arg or None))
    return ("ok" if outcome.ok else "error"), outcome.line()


def _learn(ctx: ChatContext, arg: str) -> tuple[str, str]:
    """Learn from the message's attachments through the learn pipeline, the rest of the message as
    notes. A sender who is not an admin never gets an automatic merge, whatever the policy: merging
    is for admins, and a merge by policy on their document would be one."""
    from ...learning.learn import LearnOptions, learn

    notes = [ln for ln in ctx.text.splitlines()[1:] if not ln.startswith("(Attached files")]
    refused = [ln for ln in notes if ln.startswith("[attachments refused")]  # the e-mail channel's note
    if not ctx.attachments:
        return "error", "\n".join(["/learn needs documents attached to the same message (Markdown, text, HTML or PDF).",
                                    *refused])
    body = "\n".join(ln for ln in notes if ln not in refused).strip()
    outcome = learn(ctx.vault, LearnOptions(list(ctx.attachments), focus=arg or None, notes=body or None,
                                            policy=None if ctx.admin else "review"))
    lines = [outcome.line()]
    if outcome.branch and outcome.summary:
        lines.append(f"It proposes: {outcome.summary}")
    if outcome.branch and outcome.status == "pending":
        lines.append(f"See it with /show {outcome.branch}; an admin merges it with /merge {outcome.branch}.")
    return ("ok" if outcome.ok else "error"), "\n".join(lines + refused)


def _review(ctx: ChatContext, arg: str) -> tuple[str, str]:
    from ...learning.changes import pending

    rows = pending(ctx.vault.git)
    if not rows:
        return "ok", "No learned changes are waiting for review."
    return "ok", "\n".join(f"{p.branch} [{', '.join(p.files)}] {p.summary}" for p in rows)


def _show(ctx: ChatContext, arg: str) -> tuple[str, str]:
    from ...learning.changes import resolve_name, show

    text = show(ctx.vault.git, resolve_name(ctx.vault.git, arg, include_decided=True))
    if len(text) > SHOW_LIMIT:
        text = text[:SHOW_LIMIT] + f"\n[... {len(text) - SHOW_LIMIT} more characters: `hermes-fs review show {arg}`]"
    return "ok", text


def _merge(ctx: ChatContext, arg: str) -> tuple[str, str]:
    return _decide(ctx, arg, "merge")  # the admin's decision


def _reject(ctx: ChatContext, arg: str) -> tuple[str, str]:
    return _decide(ctx, arg, "reject")


def _decide(ctx: ChatContext, arg: str, action: Action) -> tuple[str, str]:
    """Through the one decision path (claimed first when the vault syncs); decided on another
    machine, or no remote to ask, is an answer, not a failure of the request."""
    from ..decisions import DecidedElsewhere, Undecidable, decide

    try:
        return "ok", decide(ctx.vault, arg, action, claims=ctx.claims).line()
    except (DecidedElsewhere, Undecidable) as exc:
        return "error", str(exc)


def _status(ctx: ChatContext, arg: str) -> tuple[str, str]:
    from ...learning.changes import pending

    waiting = len(pending(ctx.vault.git))
    session = ctx.session or "none yet"
    return "ok", f"session: {session}\npending reviews: {waiting}\nyou are {'an admin' if ctx.admin else 'allowed'}"


def _handoffs(ctx: ChatContext, arg: str) -> tuple[str, str]:
    open_ = ctx.handoffs.all() if ctx.handoffs else []
    return "ok", "\n".join(describe(h) for h in open_) or "No chat is with a person."


def _resume(ctx: ChatContext, arg: str) -> tuple[str, str]:
    """Give a handed-over chat back to the agent: its next message is answered again."""
    try:
        key = ":".join(parse_key(arg.split()[0]))
    except InputError as exc:
        return "error", str(exc)
    closed = ctx.handoffs.close(key) if ctx.handoffs else None
    if closed is None:
        return "error", f"{key} is not with a person (see /handoffs)."
    return "ok", f"{key} is the agent's again: its next message is answered."


def _reply(ctx: ChatContext, arg: str) -> tuple[str, str]:
    """The owner's answer to a handed-over customer, on the customer's own channel. The text is the
    rest of the message (its first line after the chat, then any further lines)."""
    words = arg.split(None, 1)
    lines = ctx.text.splitlines()[1:]
    text = "\n".join([words[1] if len(words) > 1 else "", *lines]).strip()
    if not text or ctx.reply is None:
        return "error", "usage: /reply CHANNEL:CHAT TEXT"
    try:
        return "ok", ctx.reply(":".join(parse_key(words[0])), text)
    except InputError as exc:
        return "error", str(exc)


COMMANDS: dict[str, Callable[[ChatContext, str], tuple[str, str]]] = {
    "help": _help, "new": _new, "refine": _refine, "learn": _learn, "review": _review, "show": _show,
    "merge": _merge, "reject": _reject, "status": _status, "handoffs": _handoffs, "resume": _resume,
    "reply": _reply}
