"""Skills in Agent Skills form: skills/<name>/SKILL.md plus optional references/, scripts/, assets/.

Validation is the specification's reference validator (skills-ref), applied to text so the same
check serves the working tree and a refine overlay. hermes-fs keeps its own fields in `metadata`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from ..errors import InputError
from ..store.docs import decode, dump_doc, parse_doc
from ..store.files import FileStore, clean_relpath

SKILLS_DIR = "skills"
SKILL_FILE = "SKILL.md"
SUPPORT_DIRS = ("references", "scripts", "assets")
NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


class SkillError(InputError):
    """A skill is invalid or an operation on it cannot be done."""


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


def check_name(name: str) -> None:
    if not isinstance(name, str) or not NAME_RE.match(name) or len(name) > 64:
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


def _require_valid(name: str, text: str) -> None:
    errors = validate_text(name, text)
    if errors:
        raise SkillError("invalid skill: " + "; ".join(errors), skill_path(name))


def names(files: FileStore) -> list[str]:
    """Folders under skills/ holding a SKILL.md (one directory read when the store offers `children`)."""
    if hasattr(files, "children"):
        return sorted(n for n in files.children(SKILLS_DIR, SKILL_FILE))
    found = set()
    for p in files.list(SKILLS_DIR):
        parts = p.split("/")
        if len(parts) == 3 and parts[2] == SKILL_FILE:
            found.add(parts[1])
    return sorted(found)


def read(files: FileStore, name: str) -> Skill:
    path = skill_path(name)
    data = files.read(path)
    if data is None:
        raise SkillError(f"no skill named {name!r}", path)
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
    rel = support_path(name, file) if file else skill_path(name)
    data = files.read(rel)
    if data is None and (not file or files.read(skill_path(name)) is None):
        raise SkillError(f"no skill named {name!r}", skill_path(name))
    if data is None:
        raise SkillError(f"no such file in skill {name!r}: {file}", rel)
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
    if not file:
        _require_valid(name, new)
    files.write(rel, new.encode("utf-8"))
    return read(files, name)


MAX_FILE_BYTES = 256_000  # a skill file the agent writes: references stay readable in one view


def write_file(files: FileStore, name: str, file: str, content: str) -> str:
    if files.read(skill_path(name)) is None:
        raise SkillError(f"no skill named {name!r}", skill_path(name))
    rel = support_path(name, file)
    data = content.encode("utf-8")
    if len(data) > MAX_FILE_BYTES:
        raise SkillError(f"{len(data)} bytes is over the {MAX_FILE_BYTES} a skill file may hold; split it", rel)
    files.write(rel, data)
    return rel


def remove_file(files: FileStore, name: str, file: str) -> str:
    rel = support_path(name, file)
    if files.read(rel) is None:
        raise SkillError(f"no such file in skill {name!r}: {file}", rel)
    files.delete(rel)
    return rel


def delete(files: FileStore, name: str, merged_into: str | None = None) -> list[str]:
    """Remove a skill folder; when merging skills, the target must exist."""
    if files.read(skill_path(name)) is None:
        raise SkillError(f"no skill named {name!r}", skill_path(name))
    if merged_into is not None and files.read(skill_path(merged_into)) is None:
        raise SkillError(f"merged_into names no existing skill: {merged_into!r}")
    removed = files.list(f"{SKILLS_DIR}/{name}")
    for rel in removed:
        files.delete(rel)
    return removed


def support_path(name: str, file: str) -> str:
    rel = clean_relpath(file)
    top = rel.split("/", 1)[0]
    if top not in SUPPORT_DIRS or "/" not in rel:
        raise SkillError(f"support files live under {', '.join(d + '/' for d in SUPPORT_DIRS)}; got {file!r}")
    return skill_path(name, rel)


def stamp_metadata(content: str, fields: dict[str, str]) -> str:
    """Set hermes-fs fields inside `metadata` (string to string), keeping the skill spec-valid."""
    doc = parse_doc(content, SKILL_FILE, required=True)
    meta = dict(doc.meta)
    merged = {str(k): str(v) for k, v in (meta.get("metadata") or {}).items()}
    merged.update({str(k): str(v) for k, v in fields.items()})
    meta["metadata"] = merged
    return dump_doc(meta, doc.body)
