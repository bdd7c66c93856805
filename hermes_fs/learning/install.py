"""`hermes-fs skills install URL [--ref REF] [--path DIR]` and `skills update`: skills copied from
any git repository onto an `install/<stamp>-<name>` branch, reviewed, merged and reverted like a
learned change (`changes`), with the source recorded in its `Skill-Source` trailer.

The repository is hostile input. It is cloned bare with plain git into a temp dir (never into the
vault: no checkout, so no hooks, filters or symlinks ever touch a disk) and read from git objects;
only regular files are taken, and never a symlink, a submodule, anything under a `.git`, a file
over the size a skill file may hold, or a name that would leave `skills/<name>/`. What was left
out is listed, not silently dropped. Each skill then passes the learned-change checks (the Agent
Skills validator, the secret scanner); a skill that fails them is left out with the reason. An
install always waits for the person's review, whatever the refine policy: a skill may carry
scripts, and the review says so.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from ..errors import HermesError, InputError
from ..mind import skills
from ..mind.skills import MAX_FILE_BYTES
from ..store.overlay import OverlayFiles
from ..store.provenance import SKILL_SOURCE, Act, format_message, install_trailers, parse_install_trailers
from ..store.vault import Vault
from .pipeline import Outcome, commit_on_new_branch
from .validate import check

KIND = "install"
CLONE_TIMEOUT_S = 300  # a clone that takes longer is given up (a slow or endless server)
MAX_TOTAL_BYTES = 20_000_000  # all the skills of one install together
MAX_FILES_PER_SKILL = 200
SCRIPT_SUFFIXES = {".py", ".sh", ".bash", ".zsh", ".js", ".mjs", ".cjs", ".ts", ".rb", ".pl", ".php", ".ps1",
                   ".bat", ".cmd", ".exe", ".bin", ".so", ".jar", ".lua", ".r", ".go"}
_BLOB_MODES = {"100644", "100755"}
_NAME_PART = re.compile(r"^[^\x00-\x1f\x7f\\]+$")


class InstallError(HermesError):
    """The repository could not be fetched, or held nothing installable."""


@dataclass(frozen=True)
class Source:
    """Where skills come from: a git URL (or local path), an optional ref and folder."""

    url: str
    ref: str | None = None
    path: str | None = None


@dataclass
class Entry:
    """One object of the repository's tree (`git ls-tree -r -l`)."""

    mode: str
    sha: str
    size: int
    path: str


@dataclass
class FoundSkill:
    name: str
    files: dict[str, bytes] = field(default_factory=dict)  # path inside the skill folder -> bytes

    @property
    def scripts(self) -> list[str]:
        return sorted(f for f in self.files if is_script(f, self.files[f]))


@dataclass
class Install:
    """What an install did: the Outcome (branch, files), the commit it came from, what was left out."""

    outcome: Outcome
    commit: str = ""
    skills: list[str] = field(default_factory=list)
    scripts: dict[str, list[str]] = field(default_factory=dict)  # skill -> its scripts
    skipped: list[str] = field(default_factory=list)  # "path: why" for each thing left out

    def lines(self) -> list[str]:
        out = [self.outcome.line()]
        out += [f"  skill {name}" + (f" (with scripts: {', '.join(self.scripts[name])})" if self.scripts.get(name) else "")
                for name in self.skills]
        out += [f"  left out {s}" for s in self.skipped]
        return out


def is_script(rel: str, data: bytes) -> bool:
    """A file that runs code when the agent follows the skill: under scripts/, a program's suffix,
    or a `#!` first line."""
    p = PurePosixPath(rel)
    return "scripts" in p.parts[:-1] or p.suffix.lower() in SCRIPT_SUFFIXES or data.startswith(b"#!")


def check_source(src: Source) -> None:
    """Refuse what could turn a URL, ref or folder into an option, a credential in git, or a path out."""
    if not src.url.strip() or src.url.startswith("-") or any(c in src.url for c in "\x00\n\r \t"):
        raise InputError(f"not a repository URL: {src.url!r}")
    parts = urlsplit(src.url)
    if parts.scheme.startswith("ext") or src.url.startswith("ext::"):
        raise InputError("the ext:: transport runs commands; use an https, ssh, git or file URL")
    if parts.password:
        raise InputError("a password in the URL would be recorded in the commit; use a git credential helper")
    if src.ref is not None and (not src.ref.strip() or src.ref.startswith("-") or any(c in src.ref for c in "\x00\n\r :~^?*[\\")):
        raise InputError(f"not a git ref: {src.ref!r}")
    if src.path is not None:
        safe_parts(src.path.strip("/"), "--path")


def safe_parts(rel: str, what: str) -> list[str]:
    """The components of a repository path, or InputError if it could leave its folder."""
    parts = rel.split("/")
    for part in parts:
        if part in ("", ".", "..") or not _NAME_PART.match(part) or part.lower() == ".git":
            raise InputError(f"{what} {rel!r} has a component {part!r} that is not allowed")
    return parts


def _git(*args: str, cwd: Path | None = None, timeout: float = CLONE_TIMEOUT_S) -> bytes:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "/bin/false", "SSH_ASKPASS": "/bin/false",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_LFS_SKIP_SMUDGE": "1"}
    try:
        r = subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "-c", "protocol.ext.allow=never", *args],
                           cwd=cwd, env=env, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise InstallError(f"git {args[0]} took over {timeout:.0f} s; gave up") from None
    if r.returncode != 0:
        raise InstallError(f"git {args[0]} failed: {r.stderr.decode(errors='replace').strip()[-500:]}")
    return r.stdout


def clone(src: Source, dest: Path) -> str:
    """A bare clone of the repository in `dest`; returns the commit `ref` (default: its HEAD) names."""
    _git("clone", "--bare", "--quiet", "--", src.url, str(dest))
    ref = src.ref or "HEAD"
    for candidate in (ref, f"refs/tags/{ref}", f"refs/heads/{ref}"):
        try:
            return _git("rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}", cwd=dest).decode().strip()
        except InstallError:
            continue
    try:  # a commit no branch points at: ask the server for it
        _git("fetch", "--quiet", "origin", ref, cwd=dest)
        return _git("rev-parse", "--verify", "--quiet", "FETCH_HEAD^{commit}", cwd=dest).decode().strip()
    except InstallError:
        raise InstallError(f"{src.url} has no branch, tag or commit {ref!r}") from None


def tree(repo: Path, commit: str) -> list[Entry]:
    out = _git("ls-tree", "-r", "-l", "-z", "--full-tree", commit, cwd=repo)
    entries = []
    for record in out.split(b"\0"):
        if not record:
            continue
        meta, _, path = record.partition(b"\t")
        mode, _kind, sha, size = meta.decode().split(maxsplit=3)
        entries.append(Entry(mode, sha, int(size) if size.strip().isdigit() else 0, path.decode(errors="replace")))
    return entries


def find_skills(repo: Path, entries: list[Entry], folder: str | None,
                repo_name: str = "") -> tuple[list[FoundSkill], list[str]]:
    """The skills under `folder` (every folder holding a SKILL.md, outermost first) with their
    regular files; and a line for everything left out. A SKILL.md at the repository's top makes
    the whole repository one skill, named after it (`repo_name`)."""
    prefix = (folder.strip("/") + "/") if folder else ""
    skipped: list[str] = []
    safe: list[Entry] = []
    for e in entries:
        if not e.path.startswith(prefix):
            continue
        why = _refusal(e)
        if why:
            skipped.append(f"{e.path!r}: {why}")
        else:
            safe.append(e)
    roots = sorted({str(PurePosixPath(e.path).parent) for e in safe if PurePosixPath(e.path).name == skills.SKILL_FILE},
                   key=lambda p: (p.count("/"), p))
    outer: list[str] = []
    for root in roots:
        if not any(root == o or root.startswith(o + "/") or o == "." for o in outer):
            outer.append(root)
    found: dict[str, FoundSkill] = {}
    owner: dict[str, FoundSkill] = {}
    for root in outer:
        name = PurePosixPath(root).name if root != "." else repo_name
        if not skills.valid_name(name):
            skipped.append(f"{root!r}: a skill folder must be named like a skill (lowercase letters, digits, hyphens)")
        elif name in found:
            skipped.append(f"{root!r}: a second skill named {name!r} (the first one is kept)")
        else:
            owner[root] = found[name] = FoundSkill(name)
    total = 0
    for e in safe:
        home = next((r for r in owner if r == "." or e.path.startswith(r + "/")), None)
        if home is None:
            continue  # not part of a skill (the repository's README, licence, CI files)
        skill = owner[home]
        if len(skill.files) >= MAX_FILES_PER_SKILL:
            skipped.append(f"{e.path!r}: skill {skill.name} already has {MAX_FILES_PER_SKILL} files")
            continue
        total += e.size
        if total > MAX_TOTAL_BYTES:
            raise InstallError(f"the skills hold over {MAX_TOTAL_BYTES // 1_000_000} MB; install one with --path")
        skill.files[e.path[len(home) + 1:] if home != "." else e.path] = _git("cat-file", "blob", e.sha, cwd=repo)
    return list(found.values()), skipped


def _refusal(e: Entry) -> str:
    """Why a tree entry is not copied ('' when it may be)."""
    try:
        safe_parts(e.path, "the name")
    except InputError:
        return "a name that could leave the skill's folder"
    if e.mode == "120000":
        return "a symlink (only regular files are installed)"
    if e.mode == "160000":
        return "a submodule (nested repositories are not installed)"
    if e.mode not in _BLOB_MODES:
        return f"not a regular file (mode {e.mode})"
    if e.size > MAX_FILE_BYTES:
        return f"{e.size} bytes, over the {MAX_FILE_BYTES} a skill file may hold"
    return ""


def changes_for(vault: Vault, base: str, skill: FoundSkill) -> dict[str, bytes | None]:
    """The vault paths the skill writes, and deletions of the files an older copy had that it has not."""
    overlay = OverlayFiles(vault.git, base)
    writes: dict[str, bytes | None] = {f"skills/{skill.name}/{rel}": data for rel, data in skill.files.items()}
    for old in overlay.list(f"skills/{skill.name}/"):
        writes.setdefault(old, None)
    return writes


def install(vault: Vault, src: Source, only: list[str] | None = None) -> Install:
    """Clone, pick the skills (all, or `only` these names), check them, and commit them on a new
    `install/` branch for review. Raises InstallError / InputError when nothing can be installed."""
    check_source(src)
    with tempfile.TemporaryDirectory(prefix="hermes-skills-") as tmp:
        repo = Path(tmp) / "repo.git"
        commit = clone(src, repo)
        found, skipped = find_skills(repo, tree(repo, commit), src.path, repo_name(src.url))
    if only is not None:
        found = [s for s in found if s.name in only]
    if not found:
        raise InstallError(f"no skill (a folder with a SKILL.md) in {src.url}"
                           + (f" under {src.path}" if src.path else "") + _left_out(skipped))
    base = vault.git.head()
    result = Install(Outcome("nothing", KIND), commit)
    changes: dict[str, bytes | None] = {}
    for skill in found:
        mine = changes_for(vault, base, skill)
        overlay = OverlayFiles(vault.git, base)
        try:
            _apply(overlay, mine)  # refuses a secret at once
            problems = check(overlay, vault.config)
        except HermesError as exc:
            problems = [str(exc)]
        if problems:
            skipped.append(f"skill {skill.name}: " + "; ".join(problems[:5]))
            continue
        if not overlay.effective_changes():
            continue  # main already has it as it is
        changes.update(mine)
        result.skills.append(skill.name)
        if skill.scripts:
            result.scripts[skill.name] = skill.scripts
    result.skipped = skipped
    if not result.skills:
        reason = "every skill is already installed as it is" if not any(s.startswith("skill ") for s in skipped) \
            else "no skill passed the checks"
        result.outcome.reason = reason + _left_out(skipped)
        return result
    overlay = OverlayFiles(vault.git, base)
    _apply(overlay, changes)
    effective = overlay.effective_changes()
    summary = f"install {', '.join(result.skills)} from {src.url}"
    lines = [f"- skills/{name}/: from {src.url}" + (f" {src.path}" if src.path else "") + f" at {commit[:12]}"
             for name in result.skills]
    lines += [f"- skills/{name}/{rel}: a SCRIPT: it runs code when the agent follows this skill"
              for name, rels in result.scripts.items() for rel in rels]
    lines += [f"- left out {s}" for s in skipped]
    slug = result.skills[0] if len(result.skills) == 1 else repo_name(src.url) or "skills"
    branch = commit_on_new_branch(vault, KIND, slug, base, effective, format_message(summary, lines),
                                  Act.installed(install_trailers(src.url, commit, src.ref, src.path)))
    result.outcome = Outcome("pending", KIND, branch, sorted(effective), summary,
                             f"waiting for `hermes-fs review merge {branch}`")
    return result


def repo_name(url: str) -> str:
    """`https://host/me/pdf-tools.git` -> `pdf-tools` (the name of a repository that is one skill)."""
    return PurePosixPath(urlsplit(url).path.rstrip("/")).name.removesuffix(".git").lower()


def _apply(overlay: OverlayFiles, changes: dict[str, bytes | None]) -> None:
    for rel, data in changes.items():
        overlay.write(rel, data) if data is not None else overlay.delete(rel)


def _left_out(skipped: list[str]) -> str:
    return ("; left out: " + "; ".join(skipped[:10]) + (f" (and {len(skipped) - 10} more)" if len(skipped) > 10 else "")) \
        if skipped else ""


def installed_sources(vault: Vault) -> dict[str, Source]:
    """skill name -> the source it was last installed from, for the skills main holds now (read
    from the merged install commits' Skill-Source trailers, newest first)."""
    store = vault.git
    present = set(skills.names(vault.files))
    sources: dict[str, Source] = {}
    for c in store.log(grep=f"^{SKILL_SOURCE}: ", first_parent=False, limit=0):
        parsed = parse_install_trailers(c.trailers)
        if not parsed or not c.parents:
            continue
        url, _commit, ref, path = parsed
        for rel in store.changed_paths(c.parents[0], c.sha):
            name = rel.split("/")[1] if rel.startswith("skills/") and rel.count("/") >= 2 else None
            if name and name in present:
                sources.setdefault(name, Source(url, ref, path))
    return sources


def update(vault: Vault, names: list[str] | None = None) -> list[Install]:
    """A new install/ branch per recorded source whose skills changed there (all installed skills,
    or `names`); an Install with status `nothing` for a source that has nothing new."""
    sources = installed_sources(vault)
    unknown = [n for n in names or [] if n not in sources]
    if unknown:
        raise InputError(f"not installed from a repository: {', '.join(unknown)} (see `hermes-fs skills list`)")
    wanted = names or sorted(sources)
    by_source: dict[Source, list[str]] = {}
    for name in wanted:
        by_source.setdefault(sources[name], []).append(name)
    if not by_source:
        raise InputError("no skill here was installed from a repository; `hermes-fs skills install URL` first")
    return [install(vault, src, only=group) for src, group in by_source.items()]
