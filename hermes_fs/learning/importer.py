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
- model settings go to hermes.yaml; keys from .env go to .hermes/secrets.env, never to git.

Running it twice changes nothing the second time. `--dry-run` prints the plan and writes nothing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..errors import InputError
from ..mind import memory, skills
from ..store.docs import dump_doc
from ..store.files import atomic_write
from ..store.notify import read_secrets_env
from ..store.provenance import Act
from ..store.vault import Vault

SECTION = "Imported from Hermes Agent"
ENTRY_DELIMITER = "\n§\n"
KEY_NAME = re.compile(r"^[A-Z][A-Z0-9_]*(?:KEY|TOKEN|SECRET)[A-Z0-9_]*$")
SOUL = "memory/SOUL.md"


@dataclass
class ImportPlan:
    writes: dict[str, bytes] = field(default_factory=dict)  # vault path -> new content
    secrets: dict[str, str] = field(default_factory=dict)  # to .hermes/secrets.env (never git)
    lines: list[str] = field(default_factory=list)  # what will happen, for people
    notes: list[str] = field(default_factory=list)  # what a person still has to do

    @property
    def empty(self) -> bool:
        return not self.writes and not self.secrets


class PlannedFiles:
    """The vault's files as they would be after the plan (reads fall through to disk)."""

    def __init__(self, vault: Vault, writes: dict[str, bytes]):
        self.disk = vault.files
        self.writes = writes

    def read(self, rel: str) -> bytes | None:
        return self.writes[rel] if rel in self.writes else self.disk.read(rel)

    def write(self, rel: str, data: bytes) -> None:
        if self.disk.read(rel) != data:
            self.writes[rel] = data

    def delete(self, rel: str) -> None:
        raise InputError("an import never deletes", rel)

    def list(self, prefix: str) -> list[str]:
        return sorted(set(self.disk.list(prefix)) | {p for p in self.writes if p.startswith(prefix + "/")})


def plan_import(vault: Vault, home: Path) -> ImportPlan:
    home = Path(home).expanduser()
    if not (home / "memories").is_dir() and not (home / "config.yaml").is_file():
        raise InputError("not a Hermes Agent home (no memories/ nor config.yaml)", str(home))
    plan = ImportPlan()
    files = PlannedFiles(vault, plan.writes)
    _memories(vault, files, home, plan)
    _soul(files, home, plan)
    _skills(files, home, plan)
    _jobs(vault, files, home, plan)
    _settings(vault, files, home, plan)
    return plan


def entries_of(text: str) -> list[str]:
    return [e.strip() for e in text.replace("\r\n", "\n").split(ENTRY_DELIMITER) if e.strip()]


def _memories(vault: Vault, files: PlannedFiles, home: Path, plan: ImportPlan) -> None:
    for name in ("USER.md", "MEMORY.md"):
        src = home / "memories" / name
        if not src.is_file():
            continue
        existing = {" ".join(e.text[2:].split()) for e in memory.load(files, name, vault.config).entries}
        added = 0
        for entry in entries_of(src.read_text(encoding="utf-8")):
            if " ".join(entry.split()) in existing:
                continue  # imported before (or already written by the person)
            memory.add(files, vault.config, name, entry, section=SECTION, check_budget=False)
            existing.add(" ".join(entry.split()))
            added += 1
        if added:
            plan.lines.append(f"memory/{name}: {added} entr{'y' if added == 1 else 'ies'} from memories/{name}")


def _soul(files: PlannedFiles, home: Path, plan: ImportPlan) -> None:
    src = home / "SOUL.md"
    if src.is_file() and src.read_text(encoding="utf-8").strip():
        text = dump_doc({"title": "Soul", "source": "Hermes Agent SOUL.md"}, "\n" + src.read_text(encoding="utf-8").strip() + "\n")
        before = files.read(SOUL)
        files.write(SOUL, text.encode("utf-8"))
        if files.read(SOUL) != before:
            plan.lines.append(f"{SOUL}: the identity, from SOUL.md (shown first in the system prompt)")


def _skills(files: PlannedFiles, home: Path, plan: ImportPlan) -> None:
    base = home / "skills"
    if not base.is_dir():
        return
    for skill_md in sorted(base.rglob("*")):
        if skill_md.name.lower() != "skill.md" or not skill_md.is_file():
            continue
        folder = skill_md.parent
        parts = folder.relative_to(base).parts
        name = skills.normal_name(parts[-1])
        category = "/".join(parts[:-1])
        try:
            text = skills.reference_form(skill_md.read_text(encoding="utf-8"), name,
                                         {"category": category} if category else None)
        except (InputError, UnicodeDecodeError) as exc:
            plan.notes.append(f"skill {'/'.join(parts)} not imported: {exc}")
            continue
        problems = skills.validate_text(name, text)
        if problems:
            plan.notes.append(f"skill {'/'.join(parts)} not imported: " + "; ".join(problems))
            continue
        target = f"skills/{name}"
        before = {p: files.read(p) for p in files.list(target)}
        files.write(f"{target}/SKILL.md", text.encode("utf-8"))
        for f in sorted(folder.rglob("*")):
            if f.is_file() and f != skill_md and not f.is_symlink():
                files.write(f"{target}/{f.relative_to(folder).as_posix()}", f.read_bytes())
        if {p: files.read(p) for p in files.list(target)} != before:
            plan.lines.append(f"{target}/: from skills/{'/'.join(parts)}" + (f" (category {category})" if category else ""))


def job_schedule(job: dict) -> str:
    """Hermes Agent's schedule as a hermes-fs one: `every 30m` repeats, a one-shot is `at <time>`."""
    s = job.get("schedule") or {}
    kind = s.get("kind")
    if kind == "interval":
        return f"every {int(s['minutes'])}m"
    if kind == "cron":
        return str(s["expr"])
    if kind == "once":
        return f"at {s['run_at']}"
    raise InputError(f"unknown schedule kind {kind!r}")


def _jobs(vault: Vault, files: PlannedFiles, home: Path, plan: ImportPlan) -> None:
    src = home / "cron" / "jobs.json"
    if not src.is_file():
        return
    try:
        jobs = json.loads(src.read_text(encoding="utf-8")).get("jobs") or []
    except ValueError as exc:
        raise InputError(f"cron/jobs.json is not valid JSON ({exc})", str(src)) from None
    for job in jobs:
        name = skills.normal_name(str(job.get("name") or job.get("id") or "job"))
        try:
            meta = {"schedule": job_schedule(job), "enabled": bool(job.get("enabled", True)) and not job.get("paused_at")}
        except (InputError, KeyError, ValueError) as exc:
            plan.notes.append(f"job {name!r} not imported: {exc}")
            continue
        wanted = [skills.normal_name(s) for s in job.get("skills") or []]
        if wanted:
            meta["skills"] = wanted
        if job.get("model"):
            meta["model"] = str(job["model"])
        head = dump_doc(meta, "").rstrip("\n")
        deliver = job.get("deliver")
        if deliver and deliver not in ("local", "origin"):
            head = head[: -len("---")] + (f"# Hermes Agent delivered this job to {deliver!r}: add a target in hermes.yaml "
                                          "notify.targets and list it here as `notify: [name]`\n---")
            plan.notes.append(f"cron/{name}.md: Hermes Agent delivered it to {deliver!r}; map that to a notify target")
        text = f"{head}\n{str(job.get('prompt') or '').strip()}\n"
        rel = f"cron/{name}.md"
        before = files.read(rel)
        files.write(rel, text.encode("utf-8"))
        if files.read(rel) != before:
            plan.lines.append(f"{rel}: {meta['schedule']}" + ("" if meta["enabled"] else " (disabled)"))


def _settings(vault: Vault, files: PlannedFiles, home: Path, plan: ImportPlan) -> None:
    cfg_path = home / "config.yaml"
    if cfg_path.is_file():
        try:
            cfg = yaml.safe_load(cfg_path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise InputError(f"config.yaml is not valid YAML ({exc})", str(cfg_path)) from None
        model: dict = cfg["model"] if isinstance(cfg.get("model"), dict) else {"default": cfg.get("model")}
        default, provider = model.get("default"), model.get("provider")
        if isinstance(default, str) and default:
            wanted = default if not provider or default.startswith(f"{provider}/") else f"{provider}/{default}"
            _set_model(vault, files, wanted, model.get("base_url"), plan)
    env = home / ".env"
    if env.is_file():
        have = vault.secrets()
        for key, value in read_secrets_env(env).items():
            if KEY_NAME.match(key) and value and have.get(key) != value:
                plan.secrets[key] = value
        if plan.secrets:
            plan.lines.append(f".hermes/secrets.env: {', '.join(sorted(plan.secrets))} (untracked, never committed)")


def _set_model(vault: Vault, files: PlannedFiles, model: str, base_url: str | None, plan: ImportPlan) -> None:
    """Change `model:` (and `api_base:`) in hermes.yaml, keeping every other line and comment."""
    text = (files.read("hermes.yaml") or b"").decode("utf-8")
    new = re.sub(r"^model:.*$", f"model: {model}", text, count=1, flags=re.M) if re.search(r"^model:", text, re.M) \
        else f"model: {model}\n" + text
    if base_url:
        new = re.sub(r"^api_base:.*$", f"api_base: {base_url}", new, count=1, flags=re.M) \
            if re.search(r"^api_base:", new, re.M) else new + f"api_base: {base_url}\n"
    if new != text:
        files.write("hermes.yaml", new.encode("utf-8"))
        plan.lines.append(f"hermes.yaml: model: {model}" + (f", api_base: {base_url}" if base_url else ""))


def apply_import(vault: Vault, plan: ImportPlan) -> str | None:
    """Write the plan and commit it as one `import: hermes-agent` commit; keys go to secrets.env."""
    if plan.secrets:
        have = vault.secrets()
        text = vault.secrets_env.read_text() if vault.secrets_env.is_file() else ""
        text += "".join(f"{k}={v}\n" for k, v in sorted(plan.secrets.items()) if have.get(k) != v)
        atomic_write(vault.secrets_env, text, mode=0o600)
    for rel, data in plan.writes.items():
        vault.files.write(rel, data)
    if not plan.writes:
        return None
    body = "\n".join(f"- {line}" for line in plan.lines if not line.startswith(".hermes/"))
    return vault.git.commit_paths(sorted(plan.writes), "import: hermes-agent", Act.imported(), body=body)
