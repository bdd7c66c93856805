"""One learned change, laid out for a reviewer: per file what it does (memory entry by entry, with
the reason the reviewer gave; skills and other files as a diff), what merging it now would do (or
the conflict, with the entry, both versions and the next steps), and where it came from (the
conversation excerpt of a refine, the document of a learn).

`changes.show` prints the same facts for a terminal; this module gives them as records, so the web
page renders them without parsing text. It reads only (git objects, one source file); deciding is
`changes.merge` / `reject` / `revert`.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConflictError, InputError, NotFound
from ..mind.memory import Unit, units
from ..mind.merge import side_changes
from ..mind.sessions import parse_messages, session_path
from ..store.docs import decode, parse_doc
from ..store.git import GitStore
from ..store.provenance import LEARN_MODEL, LEARN_SOURCE, REFINE_FOCUS, REFINE_MODEL, REFINE_SESSION, REFINE_SNAPSHOT
from .changes import LEARNED_PREFIXES, format_resolver, learned_log, next_steps
from .checks import LINE_PREFIX, CheckResult, results_in

EXCERPT_MESSAGES = 12  # the newest messages of the conversation shown beside a refine
EXCERPT_CHARS = 4000  # of a learn's source document
EXCERPT_MAX_BYTES = 5_000_000  # a bigger source is not read for the page
DIFF_LINES = 4000  # a longer diff is cut, with a note
_WORDS = re.compile(r"[a-z0-9]{3,}")


@dataclass
class EntryChange:
    action: str  # added | replaced | removed
    section: str | None
    old: str | None  # the entry before (replaced, removed)
    new: str | None  # the entry after (added, replaced)
    reason: str = ""  # the reviewer's line for this change, when one matches


@dataclass
class FileChange:
    path: str
    status: str  # added | modified | deleted
    kind: str  # memory | skill | other
    entries: list[EntryChange] = field(default_factory=list)  # memory files
    diff: str = ""  # skills and other files (and memory text outside entries)
    reasons: list[str] = field(default_factory=list)  # the reviewer's lines naming this file
    binary: bool = False


@dataclass
class Preview:
    """What merging the change into main would do now."""

    clean: bool
    files: list[str] = field(default_factory=list)  # conflicted files
    details: list[str] = field(default_factory=list)  # each entry in conflict, both versions
    next_steps: str = ""
    already_merged: bool = False  # main already holds it all


@dataclass
class Message:
    role: str
    text: str


@dataclass
class Origin:
    """Where the change came from, read from its trailers."""

    kind: str  # refine | learn | other
    session: str | None = None
    focus: str | None = None
    model: str | None = None
    messages: list[Message] = field(default_factory=list)
    omitted: int = 0  # earlier messages not shown
    sources: list[str] = field(default_factory=list)
    excerpt: str = ""
    note: str = ""  # why an excerpt is missing


@dataclass
class ChangeDetail:
    branch: str
    state: str  # pending | merged | reverted | rejected
    sha: str  # the change's own commit
    timestamp: int
    summary: str
    lines: list[str]  # the message's change lines (one per change, with its reason)
    trailers: dict[str, str]
    files: list[FileChange]
    origin: Origin
    preview: Preview | None  # pending changes only
    checks: list[CheckResult] = field(default_factory=list)  # the person's checks, run when it was made


def detail(store: GitStore, branch: str) -> ChangeDetail:
    """The change named `branch`, pending or decided (merged, reverted, rejected)."""
    tip = store.rev(f"refs/heads/{branch}") if branch.startswith(LEARNED_PREFIXES) else None
    state = "pending"
    if not tip:
        decided = {c.branch: c for c in learned_log(store) if c.state != "pending"}
        if branch not in decided:
            raise NotFound(f"no learned change {branch!r}; see `hermes-fs review` or `hermes-fs log`")
        c = decided[branch]
        state = c.state
        tip = c.sha if c.state == "rejected" else store.commit_info(c.sha).parents[1]
    info = store.commit_info(tip)
    base = info.parents[0]
    all_lines = [ln for ln in info.body.splitlines() if ln.startswith("- ")]
    results = results_in(all_lines)
    lines = [ln for ln in all_lines if not ln.startswith(LINE_PREFIX)]
    files = [file_change(store, base, tip, path, lines) for path in store.changed_paths(base, tip)]
    return ChangeDetail(branch, state, tip, info.timestamp, info.summary, lines, info.trailers, files,
                        origin(store, info.trailers), preview(store, branch, tip) if state == "pending" else None,
                        results)


def preview(store: GitStore, branch: str, tip: str) -> Preview:
    """Merging now: clean, or the conflicts as the CLI states them (entry, both versions, next steps)."""
    main = store.head()
    try:
        tree = store.merged_tree(main, tip, format_resolver(store))
    except ConflictError as exc:
        return Preview(False, exc.files, exc.details, next_steps(branch, exc.files))
    return Preview(True, already_merged=not store.changed_paths(main, tree))


def file_change(store: GitStore, base: str, tip: str, path: str, lines: list[str]) -> FileChange:
    old, new = store.read_file(base, path), store.read_file(tip, path)
    status = "added" if old is None else "deleted" if new is None else "modified"
    kind = "memory" if path.startswith("memory/") and path.endswith(".md") else \
        "skill" if path.startswith("skills/") else "other"
    fc = FileChange(path, status, kind, reasons=reasons_for(path, lines))
    try:
        old_text, new_text = _text(old, path), _text(new, path)
    except InputError:
        fc.binary = True
        return fc
    if kind == "memory":
        fc.entries, outside = entry_changes(path, old_text, new_text)
        for e in fc.entries:
            e.reason = best_reason(e.new or e.old or "", fc.reasons)
        if outside:  # headings, comments, frontmatter: shown as a diff beside the entries
            fc.diff = unified(path, old_text, new_text, old is None, new is None)
    else:
        fc.diff = unified(path, old_text, new_text, old is None, new is None)
    return fc


def _text(data: bytes | None, path: str) -> str:
    return decode(data, path) if data is not None else ""


def entry_changes(path: str, old: str, new: str) -> tuple[list[EntryChange], bool]:
    """Entries added, replaced and removed from `old` to `new` (the entry merge's own reading), and
    whether text outside the entries changed too."""
    try:
        old_doc, new_doc = parse_doc(old, path), parse_doc(new, path)
        old_meta, new_meta = old_doc.meta, new_doc.meta
        old_body, new_body = old_doc.body, new_doc.body
    except InputError:  # frontmatter that does not parse: the entries are still bullets of the text
        old_meta = new_meta = {}
        old_body, new_body = old, new
    b, s = units(old_body), units(new_body)
    side = side_changes(b, s)
    base_entries = [u for u in b if u.kind == "entry"]
    out = []
    for i, fate in sorted(side.fate.items()):
        gone = base_entries[i]
        if fate is None:
            out.append(EntryChange("removed", gone.section, _entry(gone), None))
        else:
            out.append(EntryChange("replaced", gone.section, _entry(gone), _entry(Unit("entry", fate, None))))
    out += [EntryChange("added", u.section, None, _entry(u)) for u in side.added]
    outside = [u.raw for u in b if u.kind == "text"] != [u.raw for u in s if u.kind == "text"] or old_meta != new_meta
    return out, outside


def _entry(u: Unit) -> str:
    return u.raw.rstrip("\r\n")


def reasons_for(path: str, lines: list[str]) -> list[str]:
    """The message's change lines that name this file (`- memory/USER.md: ... (because ...)`)."""
    short = path.removeprefix("memory/")
    skill = path.split("/")[1] if path.startswith("skills/") and path.count("/") >= 2 else None
    found = []
    for line in lines:
        head = line[2:].split(":", 1)[0].strip().strip("`")
        if head in (path, short) or (skill and (head == skill or head.startswith(f"skills/{skill}"))):
            found.append(line[2:].strip())
    return found


def best_reason(entry: str, reasons: list[str]) -> str:
    """The reviewer's line that shares the most words with the entry (the only one, if one)."""
    if len(reasons) <= 1:
        return reasons[0] if reasons else ""
    words = set(_WORDS.findall(entry.lower()))
    scored = [(len(words & set(_WORDS.findall(r.lower()))), -i, r) for i, r in enumerate(reasons)]
    score, _i, best = max(scored)
    return best if score else ""


def unified(path: str, old: str, new: str, created: bool, deleted: bool) -> str:
    diff = list(difflib.unified_diff(old.splitlines(), new.splitlines(), "/dev/null" if created else f"a/{path}",
                                     "/dev/null" if deleted else f"b/{path}", lineterm="", n=3))
    if len(diff) > DIFF_LINES:
        diff = diff[:DIFF_LINES] + [f"... {len(diff) - DIFF_LINES} more diff lines (see `hermes-fs review show`)"]
    return "\n".join(diff)


def origin(store: GitStore, trailers: dict[str, str]) -> Origin:
    if REFINE_SESSION in trailers:
        o = Origin("refine", trailers.get(REFINE_SESSION), trailers.get(REFINE_FOCUS), trailers.get(REFINE_MODEL))
        _conversation(store, o, trailers.get(REFINE_SNAPSHOT, ""))
        return o
    if LEARN_SOURCE in trailers:
        o = Origin("learn", model=trailers.get(LEARN_MODEL),
                   sources=[s.strip() for s in trailers[LEARN_SOURCE].split(",") if s.strip()])
        _document(store, o)
        return o
    return Origin("other")


def _conversation(store: GitStore, o: Origin, snapshot: str) -> None:
    """The newest messages of the session as the reviewer saw it (at the snapshot commit)."""
    try:
        rel = session_path(o.session or "")
    except InputError:
        o.note = f"the trailer names no valid session ({o.session!r})"
        return
    data = store.read_file(snapshot, rel) if re.fullmatch(r"[0-9a-f]{40}", snapshot) else None
    if data is None:
        o.note = f"{rel} is not in the snapshot commit"
        return
    try:
        doc = parse_doc(decode(data, rel), rel, required=True)
        messages = parse_messages(doc.body.lstrip("\n"), rel)
    except InputError as exc:
        o.note = f"the transcript does not parse: {exc}"
        return
    shown = []
    for m in messages:
        if m["role"] in ("user", "assistant", "note") and m.get("content"):
            shown.append(Message(m["role"], m["content"]))
        for call in m.get("tool_calls") or []:
            shown.append(Message("tool call", f"{call['function']['name']}: {call['function']['arguments'][:300]}"))
    o.omitted = max(0, len(shown) - EXCERPT_MESSAGES)
    o.messages = shown[-EXCERPT_MESSAGES:]


def _document(store: GitStore, o: Origin) -> None:
    """The start of the first source, read as `learn` read it (a vault path or an absolute one)."""
    from .sources import SUPPORTED, read_file

    for source in o.sources:
        path = Path(source) if Path(source).is_absolute() else store.root / source
        try:
            # a trailer names the file: outside the vault only documents learn reads (never a bare
            # name like /etc/shadow), and none so big that the page waits on it
            if path.suffix.lower() not in SUPPORTED - {""} and not path.resolve().is_relative_to(store.root.resolve()):
                raise InputError("not a document kind learn reads", source)
            if path.is_file() and path.stat().st_size > EXCERPT_MAX_BYTES:
                raise InputError(f"over {EXCERPT_MAX_BYTES // 1_000_000} MB; open it yourself", source)
            text = read_file(path).text
        except (InputError, OSError) as exc:
            o.note = f"{source}: {exc}"
            continue
        o.excerpt = text[:EXCERPT_CHARS] + (" …" if len(text) > EXCERPT_CHARS else "")
        o.note = ""
        return
