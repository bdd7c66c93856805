"""Skills in Agent Skills form: skills/<name>/SKILL.md plus optional references/, scripts/, assets/.

Validation is the specification's reference validator (skills-ref), applied to text so the same
check serves the working tree and a refine overlay. hermes-fs keeps its own fields in `metadata`.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from ..errors import InputError, NotFound
from ..store.docs import decode, dump_doc, parse_doc
from ..store.files import FileStore, clean_relpath

SKILLS_DIR = "skills"
SKILL_FILE = "SKILL.md"
SUPPORT_DIRS = ("references", "scripts", "assets")
ARCHIVE_DIR = ".archive"  # skills/.archive/<name>/: archived by the curator, out of the prompt and the index
NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


class SkillError(InputError):
    """A skill is invalid or an operation on it cannot be done."""


class NoSkill(SkillError, NotFound):
    """No skill (or no file in a skill) by that name."""


@dataclass
class Skill:
    name: str
    description: str
    meta: dict
    body: str
    files: list[str] = field(default_factory=list)  # support files, relative to the skill folder

    @property
    def path(self) -> str:
        return skill_path(self.name)


def skill_path(name: str, file: str = SKILL_FILE) -> str:
    check_name(name)
    return f"{SKILLS_DIR}/{name}/{file}"


def valid_name(name: object) -> bool:
    """The spec's rule: lowercase Unicode letters and digits, single inner hyphens, at most 64."""
    if not isinstance(name, str) or not name or len(name) > 64 or name != unicodedata.normalize("NFKC", name):
        return False
    return (name == name.lower() and not name.startswith("-") and not name.endswith("-") and "--" not in name
            and all(c.isalnum() or c == "-" for c in name))


def check_name(name: str) -> None:
    if not valid_name(name):
        raise SkillError(
            f"invalid skill name {name!r}: use lowercase letters, digits and single hyphens, at most 64 characters"
        )


def validate_text(name: str, text: str) -> list[str]:
    """Errors from the reference validator for SKILL.md text meant for skills/<name>/ ([] = valid)."""
    from skills_ref.errors import ParseError
    from skills_ref.parser import parse_frontmatter
    from skills_ref.validator import validate_metadata

    try:
        meta, _ = parse_frontmatter(text)
    except ParseError as exc:
        return [str(exc)]
    errors = validate_metadata(meta, PurePosixPath(name))
    if "metadata" in meta and not isinstance(meta["metadata"], dict):
        errors.append("Field 'metadata' must be a mapping of strings to strings")
    return errors


def problems(name: str, text: str) -> list[str]:
    """The reference validator's errors, plus what a tolerant reading sees when strict parsing
    stops early (e.g. at flow-style YAML): a missing description, a name that is not the folder."""
    found = validate_text(name, text)
    try:
        meta = parse_doc(text, skill_path(name), required=True).meta
    except InputError as exc:
        return found + [str(exc)]
    if meta.get("name") != name:
        found.append(f"name {meta.get('name')!r} is not the folder name {name!r}")
    if not isinstance(meta.get("description"), str) or not meta["description"].strip():
        found.append("description is missing")
    return found


def _require_valid(name: str, text: str) -> None:
    errors = validate_text(name, text)
    if errors:
        raise SkillError("invalid skill: " + "; ".join(errors), skill_path(name))


def names(files: FileStore) -> list[str]:
    """Folders under skills/ holding a SKILL.md (one directory read when the store offers `children`)."""
    if hasattr(files, "children"):
        return sorted(n for n in files.children(SKILLS_DIR, SKILL_FILE) if not n.startswith("."))
    found = set()
    for p in files.list(SKILLS_DIR):
        parts = p.split("/")
        if len(parts) == 3 and parts[2] == SKILL_FILE and not parts[1].startswith("."):  # not .archive/
            found.add(parts[1])
    return sorted(found)


def read(files: FileStore, name: str) -> Skill:
    path = skill_path(name)
    data = files.read(path)
    if data is None:
        raise NoSkill(f"no skill named {name!r}", path)
    doc = parse_doc(decode(data, path), path, required=True)
    desc = doc.meta.get("description")
    support = [p[len(f"{SKILLS_DIR}/{name}/") :] for p in files.list(f"{SKILLS_DIR}/{name}")]
    return Skill(
        name=name,
        description=desc if isinstance(desc, str) else "",
        meta=doc.meta,
        body=doc.body,
        files=[f for f in support if f != SKILL_FILE],
    )


def load_all(files: FileStore) -> tuple[list[Skill], list[InputError]]:
    """Every readable skill, and an error per unreadable one (nothing is dropped silently)."""
    skills, errors = [], []
    for name in names(files):
        try:
            skills.append(read(files, name))
        except InputError as exc:
            errors.append(exc)
    return skills, errors


def validate(files: FileStore, name: str) -> list[str]:
    data = files.read(skill_path(name))
    if data is None:
        return [f"{skill_path(name)}: missing"]
    try:
        text = decode(data, skill_path(name))
    except InputError as exc:
        return [str(exc)]
    return validate_text(name, text)


def view(files: FileStore, name: str, file: str | None = None) -> str:
    """SKILL.md, or any file inside the skill's folder (the spec allows any; bodies point at them)."""
    rel = support_path(name, file, any_file=True) if file else skill_path(name)
    data = files.read(rel)
    if data is None and (not file or files.read(skill_path(name)) is None):
        raise NoSkill(f"no skill named {name!r}", skill_path(name))
    if data is None:
        raise NoSkill(f"no such file in skill {name!r}: {file}", rel)
    return decode(data, rel)


def create(files: FileStore, name: str, content: str, metadata: dict[str, str] | None = None) -> Skill:
    check_name(name)
    if files.read(skill_path(name)) is not None:
        raise SkillError(f"skill {name!r} already exists: patch it instead", skill_path(name))
    text = stamp_metadata(content, metadata) if metadata else content
    _require_valid(name, text)
    files.write(skill_path(name), text.encode("utf-8"))
    return read(files, name)


def patch(files: FileStore, name: str, old_text: str, new_text: str, file: str | None = None) -> Skill:
    """Replace one unique occurrence of old_text in SKILL.md (or a support file)."""
    rel = support_path(name, file) if file else skill_path(name)
    text = view(files, name, file)
    if not old_text:
        raise SkillError("old_text is empty: give a unique piece of the current text", rel)
    count = text.count(old_text)
    if count != 1:
        what = "not found" if count == 0 else f"found {count} times; use a longer, unique piece"
        raise SkillError(f"old_text {what}", rel)
    new = text.replace(old_text, new_text, 1)
    if not file:  # a skill that was never valid may be patched, as long as the patch adds no problem
        added = [e for e in problems(name, new) if e not in problems(name, text)]
        if added:
            raise SkillError("invalid skill: " + "; ".join(added), skill_path(name))
    files.write(rel, new.encode("utf-8"))
    return read(files, name)


MAX_FILE_BYTES = 256_000  # a skill file the agent writes: references stay readable in one view


def write_file(files: FileStore, name: str, file: str, content: str) -> str:
    if files.read(skill_path(name)) is None:
        raise NoSkill(f"no skill named {name!r}", skill_path(name))
    rel = support_path(name, file)
    data = content.encode("utf-8")
    if len(data) > MAX_FILE_BYTES:
        raise SkillError(f"{len(data)} bytes is over the {MAX_FILE_BYTES} a skill file may hold; split it", rel)
    files.write(rel, data)
    return rel


def remove_file(files: FileStore, name: str, file: str) -> str:
    rel = support_path(name, file)
    if files.read(rel) is None:
        raise NoSkill(f"no such file in skill {name!r}: {file}", rel)
    files.delete(rel)
    return rel


def delete(files: FileStore, name: str, merged_into: str | None = None) -> list[str]:
    """Remove a skill folder; when merging skills, the target must exist."""
    if files.read(skill_path(name)) is None:
        raise NoSkill(f"no skill named {name!r}", skill_path(name))
    if merged_into is not None and files.read(skill_path(merged_into)) is None:
        raise SkillError(f"merged_into names no existing skill: {merged_into!r}")
    removed = files.list(f"{SKILLS_DIR}/{name}")
    for rel in removed:
        files.delete(rel)
    return removed


def support_path(name: str, file: str, any_file: bool = False) -> str:
    """A file of the skill: any file inside its folder to read (`any_file`), one under references/,
    scripts/ or assets/ to write (what hermes-fs writes keeps the spec's layout)."""
    rel = clean_relpath(file)
    top = rel.split("/", 1)[0]
    if not any_file and (top not in SUPPORT_DIRS or "/" not in rel):
        raise SkillError(f"support files live under {', '.join(d + '/' for d in SUPPORT_DIRS)}; got {file!r}")
    return skill_path(name, rel)


# -- the reference form ---------------------------------------------------------------------------
SPEC_FIELDS = ("name", "description", "license", "compatibility", "allowed-tools", "metadata")


def normal_name(text: str) -> str:
    """A folder or title as a spec-valid skill name: `PDF Formulář` -> `pdf-formulář`."""
    cleaned = "".join(c if c.isalnum() else "-" for c in unicodedata.normalize("NFKC", text).lower())
    return re.sub(r"-+", "-", cleaned).strip("-")[:64].rstrip("-") or "skill"


def _string(value) -> str:
    if isinstance(value, str):
        return value
    import json

    return json.dumps(value, ensure_ascii=False)


def reference_form(text: str, name: str, extra: dict[str, str] | None = None) -> str:
    """SKILL.md text rewritten to the reference form: `name` = the folder, spec fields at the top
    (block-style YAML), every other field (and `extra`, e.g. the category) as strings under
    `metadata`. The body is kept byte for byte."""
    doc = parse_doc(text, SKILL_FILE, required=True)
    meta = dict(doc.meta)
    out: dict = {"name": name, "description": " ".join(_string(meta.get("description") or name).split())[:1024]}
    for key in ("license", "compatibility"):
        if meta.get(key) is not None:
            out[key] = _string(meta[key])[: 500 if key == "compatibility" else None]
    tools = meta.get("allowed-tools")
    if tools is not None:
        out["allowed-tools"] = " ".join(map(str, tools)) if isinstance(tools, list) else _string(tools)
    metadata = {str(k): _string(v) for k, v in (meta.get("metadata") or {}).items()} \
        if isinstance(meta.get("metadata"), dict) else ({"metadata": _string(meta["metadata"])} if "metadata" in meta else {})
    for key, value in meta.items():
        if key not in SPEC_FIELDS:
            metadata[str(key)] = _string(value)
    if meta.get("name") not in (None, name):
        metadata.setdefault("original-name", _string(meta["name"]))
    metadata.update(extra or {})
    if metadata:
        out["metadata"] = metadata
    if out == meta:
        return text  # already in the reference form: every byte kept
    head = text[: doc.body_start]
    gap = head[len(head.rstrip("\r\n")):]  # the blank line(s) between the fence and the body
    return _with_comments(dump_doc(out, gap + doc.body), head)


_COMMENT = re.compile(r"^\s*(#.*)$")
_INLINE_COMMENT = re.compile(r"^[^'\"#]*?\s(#\s.*)$")


def _with_comments(text: str, old_head: str) -> str:
    """`text` with the comments a person wrote in the old frontmatter (YAML drops them on a
    rewrite) put back, in their order, just before the closing fence."""
    lines = old_head.splitlines()[1:-1] if old_head.startswith("---") else []
    comments = [m.group(1) for ln in lines if (m := _COMMENT.match(ln) or _INLINE_COMMENT.match(ln))]
    if not comments:
        return text
    end = text.index("\n---", 3) + 1
    return text[:end] + "".join(f"{c}\n" for c in comments) + text[end:]


def misplaced(files: FileStore) -> list[tuple[str, str, str]]:
    """SKILL.md files not at skills/<name>/SKILL.md (e.g. in category folders, or `skill.md`):
    (path, the category, the name it would get)."""
    found = []
    for p in files.list(SKILLS_DIR):
        parts = p.split("/")
        if parts[-1].lower() != SKILL_FILE.lower() or (len(parts) == 3 and parts[-1] == SKILL_FILE):
            continue
        if parts[1] == ARCHIVE_DIR:  # archived skills are kept as they were, not moved back
            continue
        if len(parts) == 3:  # skills/<name>/skill.md: the wrong case
            found.append((p, "", normal_name(parts[1])))
        elif len(parts) >= 4:  # skills/<category>[/<subcategory>]/<name>/SKILL.md
            found.append((p, "/".join(parts[1:-2]), normal_name(parts[-2])))
    return found


def stamp_metadata(content: str, fields: dict[str, str]) -> str:
    """Set hermes-fs fields inside `metadata` (string to string), keeping the skill spec-valid."""
    doc = parse_doc(content, SKILL_FILE, required=True)
    meta = dict(doc.meta)
    merged = {str(k): str(v) for k, v in (meta.get("metadata") or {}).items()}
    merged.update({str(k): str(v) for k, v in fields.items()})
    meta["metadata"] = merged
    return dump_doc(meta, doc.body)


@dataclass
class SkillReport:
    """What `skills validate` found: problems per skill, and skills outside skills/<name>/SKILL.md."""

    checked: int = 0
    problems: dict[str, list[str]] = field(default_factory=dict)  # name or path -> problems
    misplaced: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def invalid(self) -> int:
        return len(self.problems)


def check_all(files: FileStore, only: list[str] | None = None) -> SkillReport:
    report = SkillReport()
    for name in only or names(files):
        report.checked += 1
        errors = validate(files, name) if valid_name(name) or only else [f"folder name {name!r} is not a valid skill name"]
        if errors:
            report.problems[name] = errors
    report.misplaced = [] if only else misplaced(files)
    return report


def fixes(files: FileStore) -> tuple[dict[str, bytes | None], list[str]]:
    """The changes that bring every skill to the reference form (block-style YAML, extra fields
    under `metadata`, folder = name, category folders flattened), and what could not be fixed."""
    changes: dict[str, bytes | None] = {}
    skipped: list[str] = []
    taken = set(names(files))
    # a folder whose name is not a valid skill name is one more skill to fix (renamed), not an error for all
    moves = [(f"{SKILLS_DIR}/{n}", "", n) for n in sorted(taken) if not valid_name(n) or validate(files, n)]
    moves += [(p.rsplit("/", 1)[0], cat, new) for p, cat, new in misplaced(files)]
    for folder, category, old_name in moves:
        name = normal_name(old_name)
        target = f"{SKILLS_DIR}/{name}"
        if target != folder and (name in taken or any(k.startswith(target + "/") for k in changes)):
            skipped.append(f"{folder}: a skill named {name!r} already exists; rename one of them by hand")
            continue
        skill_file = next((p for p in files.list(folder) if p.rsplit("/", 1)[-1].lower() == SKILL_FILE.lower()
                           and p.count("/") == folder.count("/") + 1), None)
        if skill_file is None:
            skipped.append(f"{folder}: no SKILL.md")
            continue
        try:
            text = reference_form(decode(files.read(skill_file) or b"", skill_file), name,
                                  {"category": category} if category else None)
        except InputError as exc:
            skipped.append(f"{folder}: {exc}")
            continue
        errors = validate_text(name, text)
        if errors:
            skipped.append(f"{folder}: still invalid after rewriting: " + "; ".join(errors))
            continue
        for p in files.list(folder):
            rel = p[len(folder) + 1:]
            new = f"{target}/{SKILL_FILE}" if p == skill_file else f"{target}/{rel}"
            changes[p] = None
            changes[new] = text.encode("utf-8") if p == skill_file else files.read(p)
        taken.add(name)
    return changes, skipped
