"""Memory files: frontmatter plus a body of bullet entries under optional `## Section` headings.

`units` is the one parser of that format (entries with their continuation lines, and the text
between them): edits here and the entry-aware merge (`mind.merge`) both read memory through it,
so a change of format cannot make them disagree. Edits work on one entry, found by a unique
substring, and splice the original text: every byte outside the edited entry stays as it was.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from ..errors import InputError
from ..store.config import Config
from ..store.docs import Doc, decode, parse_doc
from ..store.files import FileStore, clean_relpath

MEMORY_DIR = "memory"
_BULLET = re.compile(r"^[-*] ")
_HEADING = re.compile(r"^#{1,6} (.*?)\s*$")


def heading(line: str) -> str | None:
    """The title of a `# ...` to `###### ...` heading line, else None."""
    m = _HEADING.match(line.rstrip("\r\n"))
    return m.group(1) if m else None


@dataclass
class Unit:
    """One piece of a memory body: an entry (a bullet line and its indented continuation lines) or
    one line of other text (headings, blank lines, comments), in the section it sits in."""

    kind: str  # entry | text
    raw: str  # the exact text, with its line endings
    section: str | None
    start: int = 0  # offset of `raw` in the text that was parsed (plus the offset given to `units`)

    @property
    def end(self) -> int:
        return self.start + len(self.raw)

    @property
    def key(self) -> str:
        """What identifies an entry: its words, whatever the bullet or trailing whitespace."""
        return " ".join(self.raw.strip()[2:].split()) if self.kind == "entry" else self.raw


def units(body: str, offset: int = 0) -> list[Unit]:
    """The body as entries and text lines, in order; `"".join(u.raw for u in units(b)) == b`."""
    out: list[Unit] = []
    section = None
    pos = offset
    for line in body.splitlines(keepends=True):
        bare = line.rstrip("\r\n")
        if out and out[-1].kind == "entry" and bare[:1] in (" ", "\t") and bare.strip():
            out[-1].raw += line  # a continuation line belongs to its entry
        elif _BULLET.match(bare):
            out.append(Unit("entry", line, section, pos))
        else:
            title = heading(bare)
            section = section if title is None else title
            out.append(Unit("text", line, section, pos))
        pos += len(line)
    return out


class BudgetError(InputError):
    """An edit would take a memory file past its budget."""


@dataclass
class Entry:
    start: int  # offsets into the whole file text
    end: int  # just past the entry's final newline (if any)
    text: str  # the raw entry, bullet and continuation lines
    section: str | None

    @property
    def summary(self) -> str:
        first = self.text.splitlines()[0][2:].strip()
        return first if len(first) <= 80 else first[:77] + "..."


@dataclass
class MemoryFile:
    name: str  # relative to memory/, e.g. USER.md or projects/acme.md
    doc: Doc
    entries: list[Entry]
    budget: int

    @property
    def path(self) -> str:
        return f"{MEMORY_DIR}/{self.name}"

    @property
    def size(self) -> int:
        """Characters counted against the budget: the body, not the frontmatter."""
        return len(self.doc.body)

    @property
    def over_budget(self) -> bool:
        return self.size > self.budget


def memory_name(file: str) -> str:
    """Normalise 'USER.md', 'memory/USER.md' or 'projects/x.md' to a name under memory/."""
    rel = clean_relpath(file)
    if rel.startswith(f"{MEMORY_DIR}/"):
        rel = rel[len(MEMORY_DIR) + 1 :]
    allowed = rel in ("USER.md", "MEMORY.md") or (
        rel.startswith("projects/") and rel.endswith(".md") and rel.count("/") == 1
    )
    if not allowed:
        raise InputError(f"memory file must be USER.md, MEMORY.md or projects/<slug>.md, got {file!r}")
    return rel


MAX_BUDGET = 50_000  # characters: a file's own `budget:` can never put more than this in a prompt


def budget_for(name: str, meta: dict, config: Config) -> int:
    if isinstance(meta.get("budget"), int) and not isinstance(meta.get("budget"), bool):
        return max(0, min(meta["budget"], MAX_BUDGET))
    key = "projects" if name.startswith("projects/") else name
    return config.memory.budgets.get(key, 4000)


def parse_entries(doc: Doc) -> list[Entry]:
    """The entries of a memory file, with offsets into its whole text (for splicing edits)."""
    return [Entry(u.start, u.end, u.raw.rstrip("\r\n"), u.section)
            for u in units(doc.text[doc.body_start :], doc.body_start) if u.kind == "entry"]


def load(files: FileStore, file: str, config: Config) -> MemoryFile:
    name = memory_name(file)
    path = f"{MEMORY_DIR}/{name}"
    data = files.read(path)
    text = decode(data, path) if data is not None else ""
    doc = parse_doc(text, path)
    return MemoryFile(name, doc, parse_entries(doc), budget_for(name, doc.meta, config))


@dataclass(frozen=True)
class PromptView:
    """What of a memory file may go into a prompt: its body and its budget, without the entries."""
    path: str
    body: str
    budget: int


def prompt_view(files: FileStore, file: str, config: Config) -> PromptView:
    """A memory file read for a prompt. Unlike `load` it does not split the body into entries, so a
    turn's cost does not grow with a file that is far over its budget."""
    name = memory_name(file)
    path = f"{MEMORY_DIR}/{name}"
    data = files.read(path)
    doc = parse_doc(decode(data, path) if data is not None else "", path)
    return PromptView(path, doc.body.strip(), budget_for(name, doc.meta, config))


def list_memory(files: FileStore) -> list[str]:
    names = [p[len(MEMORY_DIR) + 1 :] for p in files.list(MEMORY_DIR) if p.endswith(".md")]
    return [n for n in names if n in ("USER.md", "MEMORY.md") or PurePosixPath(n).parent.as_posix() == "projects"]


def format_entry(text: str) -> str:
    """A bullet; continuation lines indented two spaces so they stay in the entry."""
    lines = [ln.rstrip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        raise InputError("memory entry text is empty")
    first = lines[0][2:] if _BULLET.match(lines[0]) else lines[0]
    return "\n".join([f"- {first}", *(f"  {ln.strip()}" for ln in lines[1:])])


def find_entry(mem: MemoryFile, old_text: str) -> Entry:
    if not old_text or not old_text.strip():
        raise InputError("old_text is empty: give a substring that identifies one entry", mem.path)
    hits = [e for e in mem.entries if old_text in e.text]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        listing = "; ".join(f"'{e.summary}'" for e in mem.entries[:20]) or "(no entries)"
        raise InputError(f"no entry contains {old_text!r}. Entries: {listing}", mem.path)
    listing = "; ".join(f"'{e.summary}'" for e in hits)
    raise InputError(f"{len(hits)} entries contain {old_text!r}; use a longer substring. Matches: {listing}", mem.path)


def add(files: FileStore, config: Config, file: str, text: str, section: str | None = None,
        check_budget: bool = True) -> MemoryFile:
    mem = load(files, file, config)
    entry = format_entry(text)
    if any(e.text.strip() == entry for e in mem.entries):
        raise InputError("that entry already exists", mem.path)
    src = mem.doc.text
    if not src:
        title = PurePosixPath(mem.name).stem
        src = f"---\ntitle: {title}\n---\n"
        mem = MemoryFile(mem.name, parse_doc(src, mem.path), [], mem.budget)
    at = _insert_point(mem, section)
    before, after = src[:at], src[at:]
    nl = "\r\n" if "\r\n" in src else "\n"
    prefix = "" if not before or before.endswith("\n") else nl
    if section and not any(e.section == section for e in mem.entries) and not _has_heading(mem, section):
        prefix += f"{nl}## {section}{nl}{nl}"
    new = before + prefix + entry.replace("\n", nl) + nl + after
    return _save(files, mem, new, check_budget)


def replace(files: FileStore, config: Config, file: str, old_text: str, text: str) -> MemoryFile:
    mem = load(files, file, config)
    e = find_entry(mem, old_text)
    nl = "\r\n" if "\r\n" in mem.doc.text else "\n"
    src = mem.doc.text
    tail_nl = src[e.start : e.end][len(e.text) :]  # the entry's own line ending, kept as it was
    new = src[: e.start] + format_entry(text).replace("\n", nl) + tail_nl + src[e.end :]
    return _save(files, mem, new)


def remove(files: FileStore, config: Config, file: str, old_text: str) -> MemoryFile:
    mem = load(files, file, config)
    e = find_entry(mem, old_text)
    src = mem.doc.text
    return _save(files, mem, src[: e.start] + src[e.end :], check_budget=False)


def _has_heading(mem: MemoryFile, section: str) -> bool:
    return any(heading(ln) == section for ln in mem.doc.body.splitlines())


def _insert_point(mem: MemoryFile, section: str | None) -> int:
    """After the last entry of the section (or of the file); end of file otherwise."""
    candidates = [e for e in mem.entries if section is None or e.section == section]
    if candidates:
        return candidates[-1].end
    if section and _has_heading(mem, section):
        offset = mem.doc.body_start
        for line in mem.doc.body.splitlines(keepends=True):
            offset += len(line)
            if heading(line) == section:
                return offset
    return len(mem.doc.text)


def _save(files: FileStore, mem: MemoryFile, new_text: str, check_budget: bool = True) -> MemoryFile:
    doc = parse_doc(new_text, mem.path)
    updated = MemoryFile(mem.name, doc, parse_entries(doc), mem.budget)
    if check_budget and updated.size > mem.budget and updated.size > mem.size:
        raise BudgetError(
            f"over budget: {updated.size} of {mem.budget} characters. Consolidate or remove entries first "
            "(replace several related entries with one shorter one).",
            mem.path,
        )
    files.write(mem.path, new_text.encode("utf-8"))
    return updated
