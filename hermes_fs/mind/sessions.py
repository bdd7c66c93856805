"""Session transcripts: sessions/YYYY/MM/<id>.md, readable Markdown that parses back exactly.

Each message is a block: a marker comment, a heading for people, a blank line, the content, a
blank line. Blocks are appended as the conversation goes, so a crash loses at most the message
being written. Content lines that look like a marker are escaped with a backslash.
"""

from __future__ import annotations

import json
import os
import re
import secrets as _random
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ..errors import InputError, SessionGone
from ..store.docs import decode, dump_doc, parse_doc
from ..store.files import atomic_write
from ..store.host import host_hex, host_id

SESSIONS_DIR = "sessions"
_MARKER_LINE = re.compile(
    r"^<!-- hermes:(user|assistant|tool-call|tool-result|note)(?: (\S+))?(?: (\S+))? -->\n", re.M
)
_ESCAPED = re.compile(r"^(\\*)(<!-- hermes:)")
_HEADINGS = {"user": "## User", "assistant": "## Assistant", "note": "## Note"}


def new_id(now: datetime | None = None, host: str | None = None) -> str:
    """`<stamp>-<hex>`; with a host id, the hex starts with that host's tag, so sessions started on
    two machines in the same second never share an id."""
    now = now or datetime.now(UTC)
    tag = host_hex(host) if host else ""
    return f"{now:%Y%m%d-%H%M%S}-{tag}{_random.token_hex(2)}"


def session_path(session_id: str) -> str:
    m = re.match(r"^(\d{4})(\d{2})\d{2}-\d{6}-[0-9a-f]+$", session_id)
    if not m:
        raise InputError(f"not a session id: {session_id!r}")
    return f"{SESSIONS_DIR}/{m.group(1)}/{m.group(2)}/{session_id}.md"


def _escape(text: str) -> str:
    return "\n".join(_ESCAPED.sub(r"\\\1\2", line) for line in text.split("\n"))


def _unescape(text: str) -> str:
    return "\n".join(_ESCAPED.sub(lambda m: m.group(1)[1:] + m.group(2), line) if line.startswith("\\") else line
                     for line in text.split("\n"))


_TOKEN_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]")


def _token(value: str | None) -> str:
    """A tool name or call id as it may appear in a marker line: a model chooses these, so anything
    that could end the marker or start a new one (spaces, newlines, `-->`) is replaced."""
    return _TOKEN_UNSAFE.sub("_", value or "")[:64] or "-"


def _fence(text: str, lang: str = "") -> tuple[str, str]:
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return ticks + lang, ticks


def render_message(msg: dict) -> str:
    """One or more blocks for an OpenAI-style message."""
    role = msg["role"]
    if role in ("user", "note"):
        return f"<!-- hermes:{role} -->\n{_HEADINGS[role]}\n\n{_escape(msg.get('content') or '')}\n\n"
    if role == "assistant":
        out = f"<!-- hermes:assistant -->\n{_HEADINGS['assistant']}\n\n{_escape(msg.get('content') or '')}\n\n"
        for call in msg.get("tool_calls") or []:
            fn = call["function"]
            open_, close = _fence(fn["arguments"], "json")
            name = _token(fn["name"])
            out += (f"<!-- hermes:tool-call {_token(call['id'])} {name} -->\n**Tool call** `{name}`\n\n"
                    f"{open_}\n{_escape(fn['arguments'])}\n{close}\n\n")
        return out
    if role == "tool":
        content = msg.get("content") or ""
        open_, close = _fence(content)
        name = _token(msg.get("name"))
        return (f"<!-- hermes:tool-result {_token(msg['tool_call_id'])} {name} -->\n"
                f"**Tool result** `{name}`\n\n{open_}\n{_escape(content)}\n{close}\n\n")
    raise ValueError(f"unknown role {role!r}")


def parse_messages(body: str, path: str = "session") -> list[dict]:
    """The inverse of render_message over a whole body (a block cut short by a crash is kept)."""
    messages: list[dict] = []
    marks = list(_MARKER_LINE.finditer(body))
    for n, m in enumerate(marks):
        end = marks[n + 1].start() if n + 1 < len(marks) else len(body)
        kind, ident, name = m.group(1), m.group(2), m.group(3)
        rest = body[m.end() : end].split("\n", 1)[1] if "\n" in body[m.end() : end] else ""
        if rest.startswith("\n") and rest.endswith("\n\n"):
            content = rest[1:-2]
        elif n + 1 == len(marks):
            content = rest[1:].rstrip("\n")  # the last block of a crashed session
        else:
            raise InputError(f"malformed transcript block at offset {m.start()}", path)
        if kind in ("user", "note", "assistant"):
            messages.append({"role": kind, "content": _unescape(content)})
            continue
        inner = content.split("\n", 1)[1].rsplit("\n", 1)[0] if content.count("\n") >= 1 else ""
        tool_name = "" if name in (None, "-") else name
        if kind == "tool-call":
            if not messages or messages[-1]["role"] != "assistant":
                raise InputError(f"tool call without an assistant turn at offset {m.start()}", path)
            messages[-1].setdefault("tool_calls", []).append(
                {"id": ident, "type": "function", "function": {"name": tool_name, "arguments": _unescape(inner)}})
        else:
            messages.append({"role": "tool", "tool_call_id": ident, "name": tool_name, "content": _unescape(inner)})
    return messages


@dataclass
class Transcript:
    """A session file being written as the conversation goes."""

    root: Path
    id: str
    meta: dict
    messages: list[dict] = field(default_factory=list)

    @property
    def rel(self) -> str:
        return session_path(self.id)

    @property
    def path(self) -> Path:
        return self.root / self.rel

    @classmethod
    def start(cls, root: Path, model: str, source: str, title: str = "") -> Transcript:
        now = datetime.now(UTC)
        sid = new_id(now, host_id(Path(root) / ".hermes"))
        meta = {"id": sid, "started": now.isoformat(timespec="seconds"), "model": model, "source": source,
                "title": title or "untitled"}
        t = cls(Path(root), sid, meta)
        t.path.parent.mkdir(parents=True, exist_ok=True)
        t.path.write_text(dump_doc(meta, "\n"), encoding="utf-8")
        return t

    @classmethod
    def load(cls, root: Path, session_id: str) -> Transcript:
        rel = session_path(session_id)
        p = Path(root) / rel
        if not p.is_file():
            raise SessionGone(f"no session {session_id}", rel)
        doc = parse_doc(decode(p.read_bytes(), rel), rel, required=True)
        body = doc.body[1:] if doc.body.startswith("\n") else doc.body
        return cls(Path(root), session_id, doc.meta, parse_messages(body, rel))

    def append(self, msg: dict) -> None:
        """Add a message to the transcript on disk at once (flushed and fsynced).

        Secrets are redacted on the way to disk, so a transcript can always be committed; the
        live conversation keeps the message as it was.
        """
        from ..store.secrets import redact

        self.messages.append(msg)
        text, _ = redact(render_message(msg))
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())

    def set_title(self, title: str) -> None:
        """Rewrite the frontmatter title (done once, from the first user message)."""
        from ..store.secrets import redact

        self.meta["title"] = redact(" ".join(title.split())[:80])[0] or "untitled"
        doc = parse_doc(self.path.read_text(encoding="utf-8"), self.rel, required=True)
        atomic_write(self.path, dump_doc(self.meta, doc.body))

    def set_parent(self, parent_id: str) -> None:
        """Mark this session as a sub-agent's, started by `parent_id` (frontmatter `parent`)."""
        session_path(parent_id)  # refuses what is not a session id
        self.meta["parent"] = parent_id
        doc = parse_doc(self.path.read_text(encoding="utf-8"), self.rel, required=True)
        atomic_write(self.path, dump_doc(self.meta, doc.body))

    @property
    def user_turns(self) -> int:
        return sum(1 for m in self.messages if m["role"] == "user")


def latest_session(root: Path) -> str | None:
    """The newest session id by name (ids sort by time), without walking every month."""
    base = Path(root) / SESSIONS_DIR
    for year in sorted((d for d in base.glob("[0-9][0-9][0-9][0-9]") if d.is_dir()), reverse=True):
        for month in sorted((d for d in year.iterdir() if d.is_dir()), reverse=True):
            files = sorted(month.glob("*.md"), reverse=True)
            if files:
                return files[0].stem
    return None


_HEAD_FIELD = re.compile(r"^(title|started|source|model):[ \t]*(.*)$", re.M)
_SNIPPET_NOISE = re.compile(r"<!-- hermes:[^>]*-->|<!--|-->|\bhermes:[\w-]*(?:\.\.\.)?|^## (?:User|Assistant|Note)$|## (?:User|Assistant|Note)\b", re.M)
HEAD_BYTES = 2048  # a session's frontmatter is read from its first bytes: listing never reads whole transcripts


@dataclass
class SessionInfo:
    """One line about a session, for lists (`hermes-fs sessions`, the web page)."""

    id: str
    title: str = ""
    started: str = ""
    source: str = ""
    snippet: str = ""  # a search hit's matching words, [marked]

    @property
    def rel(self) -> str:
        return session_path(self.id)


def recent_sessions(root: Path, limit: int = 100) -> list[SessionInfo]:
    """The newest `limit` sessions, newest first (ids sort by time), walking months from the
    newest and reading only the head of each listed file, so the cost follows `limit`, not history."""
    base = Path(root) / SESSIONS_DIR
    found: list[SessionInfo] = []
    for year in sorted((d for d in base.glob("[0-9][0-9][0-9][0-9]") if d.is_dir()), reverse=True):
        for month in sorted((d for d in year.iterdir() if d.is_dir()), reverse=True):
            for f in sorted(month.glob("*.md"), reverse=True):
                if len(found) >= limit:
                    return found
                if not f.is_symlink():
                    found.append(_info(f))
    return found


def _info(path: Path) -> SessionInfo:
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES).decode("utf-8", errors="replace")
    except OSError:
        head = ""
    front = head.split("\n---", 1)[0] if head.startswith("---") else ""
    fields = {k: v.strip().strip("'\"") for k, v in _HEAD_FIELD.findall(front)}
    return SessionInfo(path.stem, fields.get("title", ""), fields.get("started", ""), fields.get("source", ""))


def search_sessions(root: Path, query: str, limit: int = 50) -> list[SessionInfo]:
    """Sessions whose transcript matches `query` (full-text, best first), with the matching words."""
    from .search import search

    hits = search(Path(root), "sessions", query, limit=limit)
    out = []
    for h in hits:
        info = _info(Path(root) / h.path)
        info.snippet = " ".join(_SNIPPET_NOISE.sub(" ", h.snippet).split())
        out.append(info)
    return out


def dumps_arguments(args: dict) -> str:
    return json.dumps(args, ensure_ascii=False)
