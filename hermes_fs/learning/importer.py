"""`hermes-fs import hermes-agent [HOME]`: a Hermes Agent home (default ~/.hermes) into this vault,
in one commit `import: hermes-agent` (DESIGN section 14).

- memories/USER.md and MEMORY.md (entries separated by `§` lines) become bullet entries, text kept,
  under `## Imported from Hermes Agent`;
- SOUL.md becomes memory/SOUL.md, the vault's identity (shown first in the system prompt);
- skills/<category>/<name>/ become skills/<name>/ in the reference form (extra fields under
  `metadata`, the category as `metadata.category`), support files copied;
- cron/jobs.json becomes cron/<job>.md (`every 30m` repeats; `once in 30m` is a one-shot `at`;
  cron expressions as they are); where Hermes Agent delivered a job is noted in the job file for
  the person to map to a notify target;
- the model goes to hermes.yaml as a litellm route (see `providers`); keys from .env and the
  inline `api_key` go to .hermes/secrets.env, never to git.

The home is foreign input: nothing in it is followed out of it (symlinks), pasted into a file
(values are validated and written by a YAML emitter), or allowed to replace a file the vault already
holds with other text. Running it twice changes nothing the second time. `--dry-run` prints the
plan and writes nothing.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..errors import InputError
from ..mind import memory, skills
from ..store import secrets
from ..store.config import Config
from ..store.docs import dump_doc
from ..store.files import atomic_write, clean_relpath
from ..store.notify import read_secrets_env
from ..store.provenance import Act
from ..store.vault import TEMPLATE_DIR, Vault
from .providers import ModelRoute, route_for

SECTION = "Imported from Hermes Agent"
ENTRY_DELIMITER = "\n§\n"
KEY_NAME = re.compile(r"^[A-Z][A-Z0-9_]*(?:KEY|TOKEN|SECRET)[A-Z0-9_]*$")
KEY_VALUE = re.compile(r"^[A-Za-z0-9._~+/=:@%,-]{1,4096}$")  # one line of the characters keys are made of
OWN_PREFIX = "HERMES_"  # hermes-fs's own settings (HERMES_MCP_TOKEN, ...): never taken from a foreign home
SOUL = "memory/SOUL.md"
NOT_IMPORTED_DIRS = {".git", ".hg", ".svn"}  # a repository's internals (hooks, config) are never copied
MAX_IMPORT_BYTES = 20_000_000  # bigger files are not something a skill carries

Progress = Callable[[str, int, int], None]  # (what, done, total)


@dataclass
class ImportPlan:
    writes: dict[str, bytes] = field(default_factory=dict)  # vault path -> new content
    based_on: dict[str, bytes | None] = field(default_factory=dict)  # vault path -> its bytes when planned
    secrets: dict[str, str] = field(default_factory=dict)  # to .hermes/secrets.env (never git)
    lines: list[str] = field(default_factory=list)  # what will happen, for people
    notes: list[str] = field(default_factory=list)  # what a person still has to do

    @property
    def empty(self) -> bool:
        return not self.writes and not self.secrets


class PlannedFiles:
    """The vault's files as they would be after the plan (reads fall through to disk)."""

    def __init__(self, vault: Vault, plan: ImportPlan):
        self.disk = vault.files
        self.plan = plan
        self.writes = plan.writes

    def read(self, rel: str) -> bytes | None:
        return self.writes[rel] if rel in self.writes else self.disk.read(rel)

    def write(self, rel: str, data: bytes) -> None:
        if rel not in self.plan.based_on:
            self.plan.based_on[rel] = self.disk.read(rel)
        if self.plan.based_on[rel] != data:
            self.writes[rel] = data
        else:
            self.writes.pop(rel, None)

    def delete(self, rel: str) -> None:
        raise InputError("an import never deletes", rel)

    def list(self, prefix: str) -> list[str]:
        return sorted(set(self.disk.list(prefix)) | {p for p in self.writes if p.startswith(prefix + "/")})


class Home:
    """A Hermes Agent home, read without leaving it: a symlink whose target is outside is never followed."""

    def __init__(self, root: Path, plan: ImportPlan):
        self.root = Path(root).expanduser()
        self.real = os.path.realpath(self.root)
        self.plan = plan

    def inside(self, p: Path) -> bool:
        real = os.path.realpath(p)
        return real == self.real or real.startswith(self.real + os.sep)

    def rel(self, p: Path) -> str:
        return p.relative_to(self.root).as_posix()

    def file(self, p: Path) -> Path | None:
        """`p` if it is a regular file inside the home (noted and None otherwise)."""
        if not p.is_file():
            return None
        if not self.inside(p):
            self.plan.notes.append(f"{self.rel(p)!r} not imported: a symlink out of the Hermes Agent home "
                                   "(never followed)")
            return None
        size = p.stat().st_size
        if size > MAX_IMPORT_BYTES:
            self.plan.notes.append(f"{self.rel(p)!r} not imported: {size // 1_000_000} MB is too big")
            return None
        return p

    def text(self, p: Path) -> str | None:
        f = self.file(p)
        if f is None:
            return None
        try:
            return f.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            self.plan.notes.append(f"{self.rel(p)!r} not imported: not UTF-8 text")
            return None

    def walk(self, top: Path) -> list[Path]:
        """Files below `top`, sorted, without descending into symlinked folders or repository internals."""
        out: list[Path] = []
        for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
            for d in sorted(dirnames):
                if d in NOT_IMPORTED_DIRS:
                    self.plan.notes.append(f"{self.rel(Path(dirpath) / d)!r} skipped: a repository's internals "
                                           "are never imported")
                elif os.path.islink(os.path.join(dirpath, d)):
                    self.plan.notes.append(f"{self.rel(Path(dirpath) / d)!r} skipped: a symlinked folder "
                                           "is never followed")
            dirnames[:] = sorted(d for d in dirnames if d not in NOT_IMPORTED_DIRS
                                 and not os.path.islink(os.path.join(dirpath, d)))
            out.extend(Path(dirpath) / name for name in sorted(filenames))
        return out


def plan_import(vault: Vault, home: Path, take_model: bool = False, progress: Progress | None = None) -> ImportPlan:
    home = Path(home).expanduser()
    if not (home / "memories").is_dir() and not (home / "config.yaml").is_file():
        raise InputError("not a Hermes Agent home (no memories/ nor config.yaml)", str(home))
    plan = ImportPlan()
    files = PlannedFiles(vault, plan)
    src = Home(home, plan)
    _memories(vault, files, src, plan)
    _soul(files, src, plan)
    _skills(files, src, plan, progress)
    _jobs(files, src, plan)
    _settings(vault, files, src, plan, take_model)
    _refuse_secrets(plan)
    return plan


def _refuse_secrets(plan: ImportPlan) -> None:
    """A file that would be refused at commit is dropped from the plan (with a note) instead, so an
    import never leaves files written that it could not commit."""
    for rel in sorted(plan.writes):
        findings = secrets.scan(rel, plan.writes[rel])
        if findings:
            del plan.writes[rel]
            plan.lines = [ln for ln in plan.lines if not ln.startswith((rel + ":", rel.rsplit("/", 1)[0] + "/:"))]
            plan.notes.append(f"{rel} not imported: it holds what looks like a secret ({findings[0].kind}); "
                              "keys belong in .hermes/secrets.env")


def entries_of(text: str) -> list[str]:
    return [e.strip() for e in text.replace("\r\n", "\n").split(ENTRY_DELIMITER) if e.strip()]


def _same_entry(text: str) -> str:
    """An entry as memory stores it, whitespace folded: `- x` and `x` are the same entry."""
    return " ".join(memory.format_entry(text).split())


def _memories(vault: Vault, files: PlannedFiles, home: Home, plan: ImportPlan) -> None:
    for name in ("USER.md", "MEMORY.md"):
        text = home.text(home.root / "memories" / name)
        if text is None:
            continue
        existing = {" ".join(e.text.split()) for e in memory.load(files, name, vault.config).entries}
        added = 0
        for entry in entries_of(text):
            if _same_entry(entry) in existing:
                continue  # imported before (or already written by the person)
            if secrets.find_secrets(entry, f"memories/{name}"):
                plan.notes.append(f"an entry of memories/{name} not imported: it holds what looks like a secret")
                continue
            memory.add(files, vault.config, name, entry, section=SECTION, check_budget=False)
            existing.add(_same_entry(entry))
            added += 1
        if added:
            plan.lines.append(f"memory/{name}: {added} entr{'y' if added == 1 else 'ies'} from memories/{name}")


def _write_new(files: PlannedFiles, rel: str, data: bytes, plan: ImportPlan, what: str) -> bool:
    """Write `rel` unless the vault already holds other text there (a person's, or an earlier
    import they edited since): that is kept and noted. True when the file is (or will be) `data`."""
    have = files.disk.read(rel)
    if have is not None and have != data and rel not in files.writes and have != _template(rel):
        plan.notes.append(f"{rel} not imported from {what}: the vault's own {rel} differs; kept it")
        return False
    files.write(rel, data)
    return True


def _template(rel: str) -> bytes | None:
    """The vault template's own copy of a file (an example job, the starter SOUL): not a person's text."""
    p = TEMPLATE_DIR / rel
    return p.read_bytes() if p.is_file() else None


def _soul(files: PlannedFiles, home: Home, plan: ImportPlan) -> None:
    text = home.text(home.root / "SOUL.md")
    if text and text.strip():
        doc = dump_doc({"title": "Soul", "source": "Hermes Agent SOUL.md"}, "\n" + text.strip() + "\n")
        before = files.read(SOUL)
        if _write_new(files, SOUL, doc.encode("utf-8"), plan, "SOUL.md") and files.read(SOUL) != before:
            plan.lines.append(f"{SOUL}: the identity, from SOUL.md (shown first in the system prompt)")


def _unique(name: str, taken: set[str]) -> str:
    """`name`, or `name-2`, `name-3`... when another source of this import already took it."""
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name[: 64 - len(str(n)) - 1]}-{n}"
    taken.add(candidate)
    return candidate


def _skills(files: PlannedFiles, home: Home, plan: ImportPlan, progress: Progress | None) -> None:
    base = home.root / "skills"
    if not base.is_dir() or not home.inside(base):
        return
    found = home.walk(base)
    folders = {f.parent for f in found if f.name.lower() == "skill.md"}
    members: dict[Path, list[Path]] = {d: [] for d in folders}
    for f in found:  # each file belongs to the nearest skill folder above it
        owner = next((d for d in (f.parent, *f.parent.parents) if d in folders), None)
        if owner is not None:
            members[owner].append(f)
    taken: set[str] = set()
    ordered = sorted(folders)
    for i, folder in enumerate(ordered):
        if progress:
            progress("skills", i, len(ordered))
        _skill(files, home, plan, base, folder, members[folder], taken)
    if progress and ordered:
        progress("skills", len(ordered), len(ordered))


def _skill(files: PlannedFiles, home: Home, plan: ImportPlan, base: Path, folder: Path, members: list[Path],
           taken: set[str]) -> None:
    parts = folder.relative_to(base).parts
    shown = "/".join(parts)
    skill_md = next(f for f in members if f.parent == folder and f.name.lower() == "skill.md")
    raw = home.text(skill_md)
    if raw is None:
        return
    category = "/".join(parts[:-1])
    want = skills.normal_name(parts[-1] if parts else "skill")
    name = _unique(want, taken)
    try:
        text = skills.reference_form(raw, name, {"category": category} if category else None)
    except InputError as exc:
        plan.notes.append(f"skill {shown!r} not imported: {exc}")
        return
    problems = skills.validate_text(name, text)
    if problems:
        plan.notes.append(f"skill {shown!r} not imported: " + "; ".join(problems))
        return
    target = f"{skills.SKILLS_DIR}/{name}"
    before = {p: files.read(p) for p in files.list(target)}
    if not _write_new(files, f"{target}/SKILL.md", text.encode("utf-8"), plan, f"skills/{shown}"):
        return
    for f in members:
        if f == skill_md:
            continue
        try:
            rel = clean_relpath(f"{target}/{f.relative_to(folder).as_posix()}")
        except InputError as exc:
            plan.notes.append(f"{home.rel(f)!r} not imported: {exc}")
            continue
        src = home.file(f)
        if src is not None:
            _write_new(files, rel, src.read_bytes(), plan, home.rel(f))
    if {p: files.read(p) for p in files.list(target)} != before:
        renamed = f" (as {name}: {want} was taken by another skill of this import)" if name != want else ""
        plan.lines.append(f"{target}/: from skills/{shown}" + (f" (category {category})" if category else "") + renamed)


def job_schedule(job: dict) -> str:
    """Hermes Agent's schedule as a hermes-fs one: `every 30m` repeats, a one-shot is `at <time>`."""
    s = job.get("schedule")
    if isinstance(s, str):  # an older jobs.json keeps the schedule as written
        text = s
    elif isinstance(s, dict):
        kind = s.get("kind")
        if kind == "interval":
            text = f"every {int(s['minutes'])}m"
        elif kind == "cron":
            text = str(s["expr"])
        elif kind == "once":
            text = f"at {s['run_at']}"
        else:
            raise InputError(f"unknown schedule kind {kind!r}")
    else:
        raise InputError(f"no schedule (got {type(s).__name__})")
    from ..mind.schedule import parse_schedule, zone

    parse_schedule(text, zone("UTC"))  # refuses anything hermes-fs could not run (and any line break)
    return text


def _jobs_of(data: object) -> list:
    if isinstance(data, list):
        return data
    if isinstance(data, dict) and isinstance(data.get("jobs") or [], list):
        return data.get("jobs") or []
    raise InputError(f"cron/jobs.json holds {type(data).__name__}, not a list of jobs")


def _jobs(files: PlannedFiles, home: Home, plan: ImportPlan) -> None:
    text = home.text(home.root / "cron" / "jobs.json")
    if text is None:
        return
    try:
        jobs = _jobs_of(json.loads(text))
    except ValueError as exc:
        raise InputError(f"cron/jobs.json is not valid JSON ({exc})", str(home.root / "cron/jobs.json")) from None
    taken: set[str] = set()
    for job in jobs:
        if not isinstance(job, dict):
            plan.notes.append(f"a job of cron/jobs.json not imported: {type(job).__name__}, not an object")
            continue
        want = skills.normal_name(str(job.get("name") or job.get("id") or "job"))
        name = _unique(want, taken)
        try:
            meta: dict = {"schedule": job_schedule(job),
                          "enabled": bool(job.get("enabled", True)) and not job.get("paused_at")}
        except (InputError, KeyError, ValueError, TypeError) as exc:
            plan.notes.append(f"job {want!r} not imported: {exc}")
            continue
        wanted = job.get("skills") or []
        if isinstance(wanted, list) and wanted:
            meta["skills"] = [skills.normal_name(str(s)) for s in wanted]
        model = job.get("model")
        if isinstance(model, str) and model:
            try:
                meta["model"] = _one_line_value("model", model)
            except InputError as exc:
                plan.notes.append(f"job {want!r}: model not imported: {exc}")
        body = f"{str(job.get('prompt') or '').strip()}\n"
        deliver = job.get("deliver")
        rel = f"cron/{name}.md"
        if deliver and deliver not in ("local", "origin"):
            # A YAML comment holds no value, so any text is safe there once it is one line.
            note = json.dumps(str(deliver), ensure_ascii=True)
            head = dump_doc(meta, "").rstrip("\n")
            head = head[: -len("---")] + (f"# Hermes Agent delivered this job to {note}: add a target in hermes.yaml "
                                          "notify.targets and list it here as `notify: [name]`\n---")
            plan.notes.append(f"{rel}: Hermes Agent delivered it to {note}; map that to a notify target")
            doc = f"{head}\n{body}"
        else:
            doc = dump_doc(meta, body)
        before = files.read(rel)
        if _write_new(files, rel, doc.encode("utf-8"), plan, f"job {want!r}") and files.read(rel) != before:
            renamed = f" (as {name}: another job of this import is also named {want})" if name != want else ""
            plan.lines.append(f"{rel}: {meta['schedule']}" + ("" if meta["enabled"] else " (disabled)") + renamed)


# -- settings ---------------------------------------------------------------------------------------
_MODEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+=-]{0,199}$")
_URL = re.compile(r"^https?://[A-Za-z0-9._~:/?#\[\]@!$&()*+,;=%-]{1,2000}$")


def _one_line_value(what: str, value: object) -> str:
    """A value from a foreign file, as a value: one line of the characters such a value is made of."""
    if not isinstance(value, str):
        raise InputError(f"{what} must be a string, got {type(value).__name__}")
    pattern = _URL if what == "base_url" else _MODEL
    if not pattern.match(value):
        raise InputError(f"{what} {value[:80]!r} is not a valid {what} (one line of letters, digits and ./:_-)")
    return value


def _settings(vault: Vault, files: PlannedFiles, home: Home, plan: ImportPlan, take_model: bool) -> None:
    env = _env_keys(home, plan)
    text = home.text(home.root / "config.yaml")
    if text is not None:
        try:
            cfg = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise InputError(f"config.yaml is not valid YAML ({exc})", str(home.root / "config.yaml")) from None
        if not isinstance(cfg, dict):
            raise InputError("config.yaml is not a mapping of settings", str(home.root / "config.yaml"))
        try:
            route = route_for(cfg, env, _one_line_value)
        except InputError as exc:
            plan.notes.append(f"model not imported: {exc}")
            route = None
        if route is not None:
            plan.notes.extend(route.notes)
            if route.key_value:
                env[route.key_value[0]] = route.key_value[1]
            _set_model(vault, files, route, plan, take_model)
    have = vault.secrets()
    for key, value in env.items():
        if have.get(key) != value:
            plan.secrets[key] = value
    if plan.secrets:
        plan.lines.append(f".hermes/secrets.env: {', '.join(sorted(plan.secrets))} (untracked, never committed)")


def _env_keys(home: Home, plan: ImportPlan) -> dict[str, str]:
    """The keys of the home's .env worth taking: named like a key, one line of key characters."""
    path = home.file(home.root / ".env")
    if path is None:
        return {}
    out = {}
    for key, value in read_secrets_env(path).items():
        if not KEY_NAME.match(key) or not value:
            continue
        if key.startswith(OWN_PREFIX):
            plan.notes.append(f".env: {key} not imported: HERMES_ names are hermes-fs's own settings")
        elif not KEY_VALUE.match(value):
            plan.notes.append(f".env: {key} not imported: its value is not one line of key characters")
        else:
            out[key] = value
    return out


def _set_model(vault: Vault, files: PlannedFiles, route: ModelRoute, plan: ImportPlan, take_model: bool) -> None:
    """Set `model`, `api_base` and `api_key_env` in hermes.yaml, keeping every other line and comment;
    a model the person chose (not the template's) is kept unless `take_model`."""
    current = vault.config.model
    if current != Config().model and current != route.model and not take_model:
        plan.notes.append(f"hermes.yaml names model {current}; kept it (Hermes Agent used {route.model}: "
                          "`--take-model` replaces it)")
        return
    text = (files.read("hermes.yaml") or b"").decode("utf-8")
    values = {"model": route.model, "api_base": route.api_base, "api_key_env": route.api_key_env}
    new = set_top_level(text, values)
    if new != text:
        files.write("hermes.yaml", new.encode("utf-8"))
        shown = ", ".join(f"{k}: {v}" for k, v in values.items() if v)
        plan.lines.append(f"hermes.yaml: {shown}")


def set_top_level(text: str, values: dict[str, str | None]) -> str:
    """`text` (a YAML mapping) with these top-level keys set, every other line and comment kept.

    Each value is written by the YAML emitter (never pasted into the text), and the result is
    parsed back: if any other setting would change, nothing is changed and that is an error."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    for key, value in values.items():
        emitted = yaml.safe_dump({key: value}, default_flow_style=False, allow_unicode=True, width=1 << 20)
        if emitted.count("\n") != 1:
            raise InputError(f"{key}: the value does not fit on one line", "hermes.yaml")
        at = next((i for i, ln in enumerate(lines) if re.match(rf"{re.escape(key)}:(\s|$)", ln)), None)
        if at is None:
            if value is not None:
                lines.append(emitted)
        else:
            lines[at] = emitted
    new = "".join(lines)
    old_values = yaml.safe_load(text) or {}
    new_values = yaml.safe_load(new) or {}
    expected = {**old_values, **{k: v for k, v in values.items() if v is not None or k in old_values}}
    if new_values != expected:
        raise InputError("could not set the model settings without changing others; set "
                         + ", ".join(f"{k}: {v}" for k, v in values.items()) + " by hand", "hermes.yaml")
    return new


# -- applying ---------------------------------------------------------------------------------------
@dataclass
class ImportResult:
    plan: ImportPlan
    sha: str | None


def run_import(vault: Vault, home: Path, take_model: bool = False, progress: Progress | None = None) -> ImportResult:
    """Plan and apply under the vault's lock: a person's pending edits in those files are committed
    first (as merges do), and the plan is made again if the files changed since it was made."""
    plan = plan_import(vault, home, take_model, progress)
    with vault.git.lock.hold():
        if plan.writes:
            result = vault.git.commit_human_edits(sorted(plan.writes))
            if result.refused:
                raise InputError("a person's uncommitted edit that cannot be committed (it holds a secret) is in "
                                 + ", ".join(sorted({f.path for f in result.refused})) + "; fix that file first")
        if any(vault.files.read(p) != b for p, b in plan.based_on.items()):
            vault._config = None
            plan = plan_import(vault, home, take_model)
        return ImportResult(plan, apply_import(vault, plan))


def apply_import(vault: Vault, plan: ImportPlan) -> str | None:
    """Write the plan and commit it as one `import: hermes-agent` commit; keys go to secrets.env once
    the commit is made. A failure puts every file back as it was."""
    sha = None
    if plan.writes:
        written: list[str] = []
        try:
            for rel, data in plan.writes.items():
                vault.files.write(rel, data)
                written.append(rel)
            body = "\n".join(f"- {line}" for line in plan.lines if not line.startswith(".hermes/"))
            sha = vault.git.commit_paths(sorted(plan.writes), "import: hermes-agent", Act.imported(), body=body)
        except BaseException:
            for rel in written:
                if vault.files.read(rel) == plan.writes[rel]:
                    before = plan.based_on.get(rel)
                    vault.files.delete(rel) if before is None else vault.files.write(rel, before)
            raise
    if plan.secrets:
        write_env(vault.secrets_env, plan.secrets)
    return sha


def write_env(path: Path, values: dict[str, str]) -> None:
    """Set KEY=VALUE lines in an env file (0600): a key already there is replaced in place, never
    appended twice; every other line is kept."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    left = dict(values)
    out = []
    for line in lines:
        m = re.match(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=", line)
        if m and m.group(1) in values:
            if m.group(1) in left:
                out.append(f"{m.group(1)}={left.pop(m.group(1))}")
            continue  # a second line for the same key: dropped, so no later line silently wins
        out.append(line)
    out += [f"{k}={v}" for k, v in sorted(left.items())]
    for k, v in values.items():
        if not KEY_VALUE.match(v) or "\n" in k:
            raise InputError(f"{k}: not one line of key characters", str(path))
    atomic_write(path, "\n".join(out) + "\n", mode=0o600)
