"""How the library is used, derived from the record (git history and session transcripts), not kept
in a database of its own.

A skill is *used* when a session's agent called `skill_view` or `skill_manage` on it (the tool calls
are in the committed transcripts); it was *created* when its SKILL.md was first committed, and
*touched by a person* when a commit by someone other than the agent changed its folder. The result
is cached in `.hermes/cache/usage.json` with the commit it is good for, so a refresh reads only
the commits (and transcripts) since: O(skills + transcripts changed), never a re-read of history.
Delete the cache and it is rebuilt. A transcript that cannot be parsed is listed, not fatal.

Staleness (`stale`): unused for `curate.stale_days` and not created or edited by a person in that
time; the reason says so with the figures.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field

from ..errors import InputError
from ..store.docs import decode, parse_doc
from ..store.files import atomic_write
from ..store.overlay import OverlayFiles
from ..store.vault import Vault
from .sessions import SESSIONS_DIR, parse_messages
from .skills import ARCHIVE_DIR, SKILL_FILE, SKILLS_DIR

CACHE = "usage.json"
USE_TOOLS = ("skill_view", "skill_manage")  # a call naming a skill: the agent read or improved it
DAY = 86400


@dataclass
class SkillUsage:
    name: str
    uses: int = 0
    last_used: int | None = None  # unix time of the newest session that used it
    created: int | None = None  # unix time of the commit that added its SKILL.md
    created_by: str = "person"  # metadata.created-by (refine, learn, session, mcp:...), else person
    person_touched: int | None = None  # newest commit by a person that changed the skill's folder

    @property
    def last_activity(self) -> int | None:
        """The newest of: last use, creation, a person's edit."""
        times = [t for t in (self.last_used, self.created, self.person_touched) if t]
        return max(times) if times else None


@dataclass
class Usage:
    head: str  # the commit the figures are good for
    skills: dict[str, SkillUsage] = field(default_factory=dict)
    sessions: dict[str, dict] = field(default_factory=dict)  # transcript path -> {ts, skills: {name: n}}
    unreadable: dict[str, str] = field(default_factory=dict)  # transcript path -> why it was skipped
    commits_read: int = 0  # commits read by the last refresh (0: the cache was current)

    def skill(self, name: str) -> SkillUsage:
        return self.skills.setdefault(name, SkillUsage(name))


def refresh(vault: Vault) -> Usage:
    """The usage figures as of main, updating the cache from the commits since it was written."""
    store = vault.git
    head = store.head()
    cached = _load(vault)
    if cached and cached.head == head:
        cached.commits_read = 0
        return cached
    since = cached.head if cached and store.rev(cached.head) and store.is_ancestor(cached.head, head) else None
    usage = cached if cached is not None and since else Usage(head)
    agent = vault.provenance.agent()
    commits = store.path_history(since, [f"{SKILLS_DIR}/", f"{SESSIONS_DIR}/"], head)
    for c in commits:
        for status, path in c.changes:
            if path.startswith(f"{SESSIONS_DIR}/") and path.endswith(".md"):
                _read_session(vault, usage, c.sha, c.timestamp, status, path)
            elif path.startswith(f"{SKILLS_DIR}/"):
                _skill_change(usage, c.timestamp, c.author != agent, status, path)
    usage.head, usage.commits_read = head, len(commits)
    _totals(usage)
    _created_by(vault, usage)
    _save(vault, usage)
    return usage


def _read_session(vault: Vault, usage: Usage, sha: str, ts: int, status: str, path: str) -> None:
    if status == "D":
        usage.sessions.pop(path, None)
        return
    data = vault.git.read_file(sha, path) or b""
    try:
        doc = parse_doc(decode(data, path), path, required=True)
        messages = parse_messages(doc.body.lstrip("\n"), path)
    except InputError as exc:
        usage.unreadable[path] = str(exc)
        usage.sessions.pop(path, None)
        return
    usage.unreadable.pop(path, None)
    counts: dict[str, int] = {}
    for m in messages:
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            if fn.get("name") not in USE_TOOLS:
                continue
            try:
                name = json.loads(fn.get("arguments") or "{}").get("name")
            except (ValueError, AttributeError):
                continue  # a model's garbled arguments: not a use
            if isinstance(name, str) and name:
                counts[name] = counts.get(name, 0) + 1
    usage.sessions[path] = {"ts": ts, "skills": counts}  # a transcript committed again replaces its figures


def _skill_change(usage: Usage, ts: int, by_person: bool, status: str, path: str) -> None:
    parts = path.split("/")
    if len(parts) < 3 or parts[1].startswith("."):  # skills/.archive/...: archived, not in the library
        return
    s = usage.skill(parts[1])
    if status == "A" and parts[2] == SKILL_FILE and len(parts) == 3:
        s.created = ts
    if by_person:
        s.person_touched = ts


def _totals(usage: Usage) -> None:
    for s in usage.skills.values():
        s.uses, s.last_used = 0, None
    for record in usage.sessions.values():
        for name, n in record["skills"].items():
            s = usage.skill(name)
            s.uses += n
            s.last_used = max(s.last_used or 0, record["ts"])


def _created_by(vault: Vault, usage: Usage) -> None:
    from . import skills

    for name, s in usage.skills.items():
        try:
            meta = skills.read(vault.files, name).meta.get("metadata")
        except InputError:
            continue
        by = meta.get("created-by") if isinstance(meta, dict) else None
        s.created_by = str(by) if by else "person"


def current(usage: Usage, names: list[str]) -> dict[str, SkillUsage]:
    """The figures of the skills in the library now (a skill never seen gets empty figures)."""
    return {n: usage.skills.get(n) or SkillUsage(n) for n in names}


def stale(usage: Usage, names: list[str], stale_days: int, now: float | None = None) -> dict[str, str]:
    """name -> why it is stale, for skills unused for `stale_days` and not created or edited by a
    person in that time."""
    now = now or time.time()
    limit = now - stale_days * DAY
    found = {}
    for name, s in current(usage, names).items():
        if s.last_activity is not None and s.last_activity >= limit:
            continue
        if s.last_used:
            why = f"last used {_days(now, s.last_used)} days ago ({s.uses} use{'s' if s.uses != 1 else ''})"
        else:
            why = "never used"
        if s.created:
            why += f", created {_days(now, s.created)} days ago by {s.created_by}"
        found[name] = f"{why}; stale after {stale_days} days"
    return found


def _days(now: float, ts: int) -> int:
    return int((now - ts) // DAY)


def _load(vault: Vault) -> Usage | None:
    try:
        raw = json.loads((vault.state_dir / "cache" / CACHE).read_text())
        usage = Usage(raw["head"], {n: SkillUsage(**s) for n, s in raw["skills"].items()}, raw["sessions"],
                      raw.get("unreadable", {}))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no cache, or one from another version: rebuilt from history
    return usage


def _save(vault: Vault, usage: Usage) -> None:
    raw = {"head": usage.head, "skills": {n: asdict(s) for n, s in usage.skills.items()},
           "sessions": usage.sessions, "unreadable": usage.unreadable}
    atomic_write(vault.state_dir / "cache" / CACHE, json.dumps(raw))


__all__ = ["ARCHIVE_DIR", "SkillUsage", "Usage", "current", "refresh", "stale"]


@dataclass
class EntryUsage:
    """One memory entry as the curator sees it: who wrote it, when, and whether it reaches the prompt."""

    index: int  # 1-based, in file order
    text: str
    section: str | None
    by_person: bool
    added: int  # unix time its first line was committed (0: not committed yet)
    in_prompt: bool  # within the file's budget, so shown in every session's system prompt
    sessions_since: int  # sessions committed since it was added: how often it was shown (if in_prompt)


def memory_entries(vault: Vault, usage: Usage, rel: str, commit: str | None = None) -> list[EntryUsage]:
    """The entries of a memory file at `commit` (default main) with their authorship and showing."""
    from . import memory

    store = vault.git
    commit = commit or store.head()
    data = store.read_file(commit, rel)
    if data is None:
        return []
    mem = memory.load(OverlayFiles(store, commit), rel, vault.config)
    blame = store.blame_authors(commit, rel)
    agent = vault.provenance.agent()
    text = mem.doc.text
    shown_until = mem.doc.body_start + len(mem.doc.body) - len(mem.doc.body.lstrip()) + mem.budget
    session_times = sorted(r["ts"] for r in usage.sessions.values())
    out = []
    for i, e in enumerate(mem.entries, 1):
        line = text.count("\n", 0, e.start)
        author, added = blame[line] if line < len(blame) else ("", 0)
        since = len(session_times) - _bisect(session_times, added)
        out.append(EntryUsage(i, e.text, e.section, author != agent, added, e.end <= shown_until + 1,
                              since if e.end <= shown_until + 1 else 0))
    return out


def _bisect(times: list[int], t: int) -> int:
    import bisect

    return bisect.bisect_left(times, t)
