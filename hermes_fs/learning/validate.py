"""The validation every learned change passes before it is committed (DESIGN section 5, step 3).

Skills pass the Agent Skills validator, memory stays within budget, frontmatter parses, no secret
is present, and only memory/ and skills/ change. A new skill that nearly duplicates an existing
one is refused at the tool call, naming the skill to patch instead.
"""

from __future__ import annotations

import re

from ..errors import InputError
from ..mind import memory, skills
from ..mind.skills import MAX_FILE_BYTES
from ..store import secrets
from ..store.config import Config
from ..store.docs import decode, parse_doc
from ..store.overlay import OverlayFiles

LEARNABLE = ("memory", "skills")  # the only top folders a learned change may touch


def check(overlay: OverlayFiles, cfg: Config) -> list[str]:
    """Every changed file must be valid, within budget, parseable and secret-free; [] when all pass."""
    problems: list[str] = []
    for path, data in sorted(overlay.effective_changes().items()):
        top = path.split("/", 1)[0]
        if top not in LEARNABLE:
            problems.append(f"{path}: a learned change may only touch memory/ and skills/")
            continue
        if data is None:
            continue
        if len(data) > MAX_FILE_BYTES:
            problems.append(f"{path}: {len(data)} bytes, over the {MAX_FILE_BYTES} a learned file may hold; split it")
            continue
        try:
            text = decode(data, path)
        except InputError as exc:
            problems.append(str(exc))
            continue
        problems += [f"{f.path}:{f.line}: contains a secret ({f.kind}); remove it" for f in secrets.scan(path, data)]
        problems += _check_skill(overlay, path, text) if top == "skills" else _check_memory(overlay, path, cfg)
    return problems


def _check_skill(overlay: OverlayFiles, path: str, text: str) -> list[str]:
    parts = path.split("/")
    if parts[1] == skills.ARCHIVE_DIR:  # an archived skill is kept as it was (secret-scanned above)
        return [] if len(parts) >= 4 else [f"{path}: archived skills go in skills/{skills.ARCHIVE_DIR}/<name>/"]
    if len(parts) == 3 and parts[2] == skills.SKILL_FILE:
        return [f"{path}: {e}" for e in skills.validate_text(parts[1], text)]
    if overlay.read(f"skills/{parts[1]}/{skills.SKILL_FILE}") is None:
        return [f"{path}: skill {parts[1]} has no SKILL.md"]
    return []


def _check_memory(overlay: OverlayFiles, path: str, cfg: Config) -> list[str]:
    try:
        m = memory.load(overlay, path, cfg)
    except InputError as exc:
        return [str(exc)]
    old = overlay.store.read_file(overlay.commit, path)
    old_size = len(parse_doc(decode(old, path), path).body) if old else 0
    if m.size > m.budget and m.size > old_size:  # a file already over budget may shrink, not grow
        return [f"{path}: over budget ({m.size}/{m.budget} characters); consolidate entries"]
    return []


def skills_at(files) -> dict[str, str]:
    """name -> description of the skills in a FileStore (the snapshot, for the reviewer)."""
    out = {}
    for name in skills.names(files):
        try:
            out[name] = skills.read(files, name).description
        except InputError:
            out[name] = ""
    return out


_WORD = re.compile(r"[a-z0-9]{3,}")
# Words every skill description uses ("use when you need the steps to ..."): they say nothing about
# the topic, so two unrelated skills never look alike because of them.
_STOP = set("""the and for with use used using uses when that this from into your you user users what how why
need needs needed want steps step can will should must also more then than about over each any all are
its it's has have been being make makes run runs skill skills task tasks guide help helps way ways like
such other some only just very get gets new one two via per not""".split())


def tokens(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def similar_skill(name: str, description: str, existing: dict[str, str]) -> str | None:
    """The existing skill a new one nearly duplicates: same name words, or mostly the same words."""
    new_name, new_all = tokens(name.replace("-", " ")), tokens(name.replace("-", " ") + " " + description)
    for other, desc in existing.items():
        if other == name:
            return other
        other_name, other_all = tokens(other.replace("-", " ")), tokens(other.replace("-", " ") + " " + desc)
        if new_name and new_name == other_name:
            return other
        if new_all and other_all and len(new_all & other_all) / len(new_all | other_all) >= 0.5:
            return other
    return None


class DuplicateGuard:
    """A skill_guard for the ToolBox: refuses a new skill that nearly duplicates an existing one,
    and remembers what it refused, so a change that ends empty can say why."""

    def __init__(self, existing: dict[str, str]):
        self.existing = existing
        self.refused: list[str] = []  # "new skill 'x' (nearly duplicates 'y')"

    def __call__(self, name: str, content: str) -> None:
        try:
            desc = str(parse_doc(content, f"skills/{name}/SKILL.md", required=True).meta.get("description") or "")
        except InputError:
            return  # the validator will say what is wrong
        twin = similar_skill(name, desc, self.existing)
        if twin:
            self.refused.append(f"the new skill {name!r} was refused as a near duplicate of the existing skill {twin!r}")
            raise InputError(f"skill {name!r} nearly duplicates the existing skill {twin!r}: "
                             f"patch {twin} instead (skill_view it, then skill_manage patch)")


def duplicate_guard(existing: dict[str, str]) -> DuplicateGuard:
    return DuplicateGuard(existing)
