"""Three-way merges that know the vault's formats (DESIGN section 13).

Git merges lines; memory is a list of entries. Two changes that each add an entry to USER.md are
not in conflict, nor is a learned entry beside a person's note. Here a memory file merges by entry,
per `## Section`: entries added on either side are kept (main's first, then the branch's, in the
section where each was added; identical additions once); an entry removed or replaced on one side
and untouched on the other takes that change; the same entry changed differently on both sides, or
removed on one and changed on the other, is a conflict naming the entry and both versions.
Frontmatter merges by key. Text outside entries (headings, comments) merges by line: a side may add
new sections; other changes to it on both sides are a conflict.

Skill files merge by line (git's own merge of the bodies, handed in as `line_merge`), with their
frontmatter merged by key (so two changes bumping `metadata.version` differently still conflict,
but one adding `license` and one patching the body do not).

Only files that `git merge-tree` reported as conflicted come here, so a merge stays O(change).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field

import yaml

from ..store.docs import dump_doc, parse_doc
from .memory import Unit, heading, units

LineMerge = Callable[[str, str, str], "tuple[bool, str]"]  # (base, ours, theirs) -> (clean, text)


@dataclass
class EntryConflict:
    """One thing a person must decide: the entry (or key, or text) and both versions."""

    path: str
    what: str  # e.g. 'entry "- Prefers tabs"' or "frontmatter key 'title'"
    main: str  # main's version ("(removed)" when gone)
    branch: str

    def describe(self) -> str:
        return f"{self.path}: {self.what} changed on both sides\n    main:   {self.main}\n    branch: {self.branch}"


@dataclass
class FileMerge:
    path: str
    text: str | None = None  # the merged file, when there is no conflict
    conflicts: list[EntryConflict] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.conflicts and self.text is not None


# -- a memory body as units (parsed by mind.memory.units, the one parser of the format) ---------
def _skeleton(us: list[Unit]) -> list[str]:
    return [u.raw.strip() for u in us if u.kind == "text" and u.raw.strip()]


# -- what one side did to the base's entries ---------------------------------------------------
@dataclass
class SideChanges:
    fate: dict[int, str | None]  # base entry index -> new raw text (None: removed); absent: kept
    where: dict[int, int]  # base entry index -> index of the same entry in this side's units
    added: list[Unit]  # entries this side added, in order


def side_changes(base: list[Unit], side: list[Unit]) -> SideChanges:
    """What `side` did to `base`'s entries. An entry that only moved (the same words in the same
    section, elsewhere in the file) is kept, not removed and added again: merges of merges made on
    several machines (a criss-cross) order one section's entries differently on each side and in
    the base, and reading a move as "entry i became entry j" would make two sides that both kept
    every entry conflict, and lose one side's additions to the copy kept beside the file."""
    b_idx = [i for i, u in enumerate(base) if u.kind == "entry"]
    s_idx = [i for i, u in enumerate(side) if u.kind == "entry"]
    b_keys = [f"{base[i].section}\0{base[i].key}" for i in b_idx]
    s_keys = [f"{side[i].section}\0{side[i].key}" for i in s_idx]
    fate: dict[int, str | None] = {}
    where: dict[int, int] = {}
    added: list[Unit] = []
    matcher = difflib.SequenceMatcher(a=b_keys, b=s_keys, autojunk=False)
    ops = matcher.get_opcodes()
    moved_to: dict[str, list[int]] = {}  # key -> side positions outside the matched runs, in order
    for op, _i1, _i2, j1, j2 in ops:
        if op != "equal":
            for j in range(j1, j2):
                moved_to.setdefault(s_keys[j], []).append(j)
    used: set[int] = set()
    for op, i1, i2, _j1, _j2 in ops:
        if op != "equal":
            for i in range(i1, i2):
                if moved_to.get(b_keys[i]):
                    j = moved_to[b_keys[i]].pop(0)
                    where[i] = s_idx[j]
                    used.add(j)
    for op, i1, i2, j1, j2 in ops:
        if op == "equal":
            for k in range(i2 - i1):
                where[i1 + k] = s_idx[j1 + k]
            continue
        gone = [i for i in range(i1, i2) if i not in where]
        new = [j for j in range(j1, j2) if j not in used]
        paired = 0
        if op == "replace":  # entry i became entry j, pairwise, within one section
            for i, j in zip(gone, new, strict=False):
                b_unit, s_unit = base[b_idx[i]], side[s_idx[j]]
                if b_unit.section != s_unit.section:
                    break
                fate[i] = s_unit.raw
                where[i] = s_idx[j]
                paired += 1
        for i in gone[paired:]:
            fate[i] = None
        added += [side[s_idx[j]] for j in new[paired:]]
    return SideChanges(fate, where, added)


# -- frontmatter by key ------------------------------------------------------------------------
_GONE = object()  # a key absent from one version


def merge_meta(path: str, base: dict, ours: dict, theirs: dict, prefix: str = "") -> tuple[dict, list[EntryConflict]]:
    """Three-way merge of two mappings by key (nested mappings by their keys)."""
    merged: dict = {}
    conflicts: list[EntryConflict] = []
    for key in list(ours) + [k for k in theirs if k not in ours]:
        b, o, t = base.get(key, _GONE), ours.get(key, _GONE), theirs.get(key, _GONE)
        if isinstance(b, dict) and isinstance(o, dict) and isinstance(t, dict):
            merged[key], more = merge_meta(path, b, o, t, f"{prefix}{key}.")
            conflicts += more
            continue
        if o == t or t == b:
            value = o
        elif o == b:
            value = t
        else:
            conflicts.append(EntryConflict(path, f"frontmatter key '{prefix}{key}'", _show(o), _show(t)))
            value = o
        if value is not _GONE:
            merged[key] = value
    return merged, conflicts


def _show(value) -> str:
    return "(removed)" if value is _GONE else yaml.safe_dump(value, default_flow_style=True).strip()


def _split(text: str, path: str) -> tuple[dict, str, str]:
    """(frontmatter, its raw text, body)."""
    doc = parse_doc(text, path)
    return dict(doc.meta), text[: doc.body_start], doc.body


def _with_meta(path: str, base: str, ours: str, theirs: str,
               line_merge: LineMerge | None = None) -> tuple[str, str, str, str, list[EntryConflict]]:
    """Merge the frontmatter; returns (merged head, base body, ours body, theirs body, conflicts).

    A side whose frontmatter text is unchanged takes the other's bytes; when both changed it (a
    comment a person added on main, a key the branch changed), the texts are merged by line so that
    neither side's comments are lost, and the result must parse to the keys merged by key."""
    (bm, bh, bb), (om, oh, ob), (tm, th, tb) = _split(base, path), _split(ours, path), _split(theirs, path)
    meta, conflicts = merge_meta(path, bm, om, tm)
    if th == bh or (meta == om and th.strip() == oh.strip()):
        head = oh  # the branch left the frontmatter's text alone: main's bytes, untouched
    elif oh == bh:
        head = th if meta == tm else _dumped(meta)
    else:
        clean, text = line_merge(bh, oh, th) if line_merge else (False, "")
        if clean and _meta_of(text, path) == meta:
            head = text
        else:  # the side whose keys won, with the other side's comments put back before the fence
            head = oh if meta == om else th if meta == tm else _dumped(meta)
            head = _plus_comments(head, [c for c in _comment_lines(oh) + _comment_lines(th)
                                         if c not in _comment_lines(bh)])
    return head, bb, ob, tb, conflicts


def _dumped(meta: dict) -> str:
    return dump_doc(meta, "").rstrip("\n")  # the body starts with the newline after the fence


def _meta_of(head: str, path: str) -> dict | None:
    try:
        return dict(parse_doc(head + "\n", path).meta)
    except Exception:  # a line merge can produce text that is no longer YAML
        return None


def _comment_lines(head: str) -> list[str]:
    """The comments of a frontmatter, each as a whole line (an inline one moved to its own line)."""
    out = []
    for ln in head.splitlines():
        stripped = ln.strip()
        if stripped.startswith("#"):
            out.append(stripped)
        elif " #" in ln and not any(q in ln.split(" #", 1)[0] for q in "'\""):
            out.append("#" + ln.split(" #", 1)[1])
    return out


def _plus_comments(head: str, comments: list[str]) -> str:
    have = set(_comment_lines(head))
    missing = list(dict.fromkeys(c for c in comments if c not in have))
    if not missing:
        return head
    end = head.rstrip().rfind("\n---")
    return head[: end + 1] + "".join(f"{c}\n" for c in missing) + head[end + 1:]


# -- memory files ------------------------------------------------------------------------------
def merge_memory(path: str, base: str, ours: str, theirs: str, line_merge: LineMerge | None = None,
                 skip: frozenset[int] = frozenset()) -> FileMerge:
    """`skip`: base entries (0-based, among entries) whose change on the `theirs` side is left out."""
    head, base_body, ours_body, theirs_body, conflicts = _with_meta(path, base, ours, theirs, line_merge)
    b, o, t = units(base_body), units(ours_body), units(theirs_body)
    if _skeleton(t)[: len(_skeleton(b))] != _skeleton(b) or (
        _skeleton(o) != _skeleton(b) and _skeleton(t) != _skeleton(b)
        and not all(line.startswith("#") for line in _skeleton(t)[len(_skeleton(b)):])):
        conflicts.append(EntryConflict(path, "text outside the entries (headings, comments)", "(edited)", "(edited)"))
        return FileMerge(path, None, conflicts)
    mine, yours = side_changes(b, o), side_changes(b, t)
    result = [Unit(u.kind, u.raw, u.section) for u in o]
    dropped: set[int] = set()
    for i, new in yours.fate.items():
        if i in skip:
            continue
        base_unit = b[[k for k, u in enumerate(b) if u.kind == "entry"][i]]
        if i not in mine.fate:  # main kept it: the branch's change applies
            at = mine.where[i]
            if new is None:
                dropped.add(at)
            else:
                result[at].raw = _ends_line(new)
        elif mine.fate[i] != new and not _same(mine.fate[i], new):
            conflicts.append(EntryConflict(path, f'entry "{_brief(base_unit.raw)}"', _brief(mine.fate[i]), _brief(new)))
    result = [u for k, u in enumerate(result) if k not in dropped]
    present = {(u.section, u.key) for u in result if u.kind == "entry"}
    for unit in yours.added:
        if (unit.section, unit.key) in present:
            continue  # added identically on both sides (or already there): once
        _insert(result, unit)
        present.add((unit.section, unit.key))
    if conflicts:
        return FileMerge(path, None, conflicts)
    return FileMerge(path, head + "".join(u.raw for u in result))


def _same(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and " ".join(a.split()) == " ".join(b.split())


def _brief(raw: str | None) -> str:
    if raw is None:
        return "(removed)"
    text = " ".join(raw.split())
    return text if len(text) <= 160 else text[:157] + "..."


def _ends_line(raw: str) -> str:
    return raw if raw.endswith("\n") else raw + "\n"


def _insert(result: list[Unit], unit: Unit) -> None:
    """After the last entry of the unit's section in `result`; a new section goes at the end."""
    new = Unit("entry", _ends_line(unit.raw), unit.section)
    last_entry = max((k for k, u in enumerate(result) if u.kind == "entry" and u.section == unit.section), default=None)
    if last_entry is not None:
        result.insert(last_entry + 1, new)
        return
    at_heading = next((k for k, u in enumerate(result) if u.kind == "text" and u.section == unit.section
                       and (unit.section is None or heading(u.raw.strip()) is not None)), None)
    if at_heading is not None:
        result.insert(at_heading + 1, new)
        return
    if result and not result[-1].raw.endswith("\n"):
        result[-1].raw += "\n"
    if unit.section is not None:
        result.append(Unit("text", f"\n## {unit.section}\n\n", unit.section))
    result.append(new)


# -- skill files -------------------------------------------------------------------------------
def merge_skill(path: str, base: str, ours: str, theirs: str, line_merge: LineMerge) -> FileMerge:
    if not path.endswith("/SKILL.md"):
        clean, text = line_merge(base, ours, theirs)
        return FileMerge(path, text) if clean else FileMerge(path, None, [_line_conflict(path)])
    head, bb, ob, tb, conflicts = _with_meta(path, base, ours, theirs, line_merge)
    clean, body = line_merge(bb, ob, tb)
    if not clean:
        conflicts.append(_line_conflict(path))
    return FileMerge(path, None, conflicts) if conflicts else FileMerge(path, head + body)


def _line_conflict(path: str) -> EntryConflict:
    return EntryConflict(path, "the same lines", "(edited)", "(edited)")


def merges_by_entry(path: str) -> bool:
    """A memory file: merged by entry, even where git's line merge is clean (a line merge keeps an
    entry that both sides moved, to different places, twice)."""
    return path.startswith("memory/") and path.endswith(".md")


def merge_file(path: str, base: str, ours: str, theirs: str, line_merge: LineMerge) -> FileMerge | None:
    """The format-aware merge for a vault path, or None when git's line merge is all there is."""
    if merges_by_entry(path):
        return merge_memory(path, base, ours, theirs, line_merge)
    if path.startswith("skills/"):
        return merge_skill(path, base, ours, theirs, line_merge)
    return None


def resolver(line_merge: LineMerge) -> Callable[[str, bytes | None, bytes | None, bytes | None], bytes | None]:
    """A GitStore resolver: the format-aware merge of one conflicted file from its three blobs.

    Returns the merged bytes, None where no format-aware merge applies (a deletion on one side, a
    binary file, a path outside memory/ and skills/), or raises ConflictError naming what conflicts.
    """
    from ..errors import ConflictError, InputError

    def resolve(path: str, base: bytes | None, ours: bytes | None, theirs: bytes | None) -> bytes | None:
        if ours is None or theirs is None:
            return None  # removed on one side, changed on the other: a person decides
        try:
            texts = [(b or b"").decode("utf-8") for b in (base, ours, theirs)]
            merged = merge_file(path, texts[0], texts[1], texts[2], line_merge)
        except (UnicodeDecodeError, InputError):
            return None  # not text, or frontmatter that does not parse: git's conflict stands
        if merged is None:
            return None
        if not merged.clean:
            raise ConflictError("conflict", [path], [c.describe() for c in merged.conflicts])
        assert merged.text is not None
        return merged.text.encode("utf-8")

    return resolve
