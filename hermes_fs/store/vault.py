"""A vault: finding it, creating it from the template, and its well-known paths."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from ..errors import HermesError, InputError
from .config import CONFIG_NAME, Config, load_config
from .files import DiskFiles

TEMPLATE_DIR = Path(__file__).resolve().parents[1] / "vault_template"  # package data (pyproject.toml)
DEFAULT_IDENTITY = ("hermes-fs user", "hermes-user@localhost")


@dataclass
class Vault:
    root: Path
    _config: Config | None = field(default=None, repr=False)
    _config_stamp: tuple | None = field(default=None, repr=False)  # hermes.yaml as it was when loaded

    @property
    def config(self) -> Config:
        if self._config is None:
            self.reload_config()
        assert self._config is not None
        return self._config

    def reload_config(self) -> Config:
        """Re-read hermes.yaml; on an error (raised) the last good settings stay in force."""
        from . import held_settings

        stamp = self._stamp()
        held = held_settings.load(self.state_dir)  # widening changes from another machine, not yet approved here
        self._config = load_config(self.root / CONFIG_NAME, (lambda raw: held_settings.apply(raw, held)) if held else None)
        self._config_stamp = stamp
        return self._config

    def current_config(self) -> Config:
        """hermes.yaml as it is now: re-read if the file changed since it was loaded, so a daemon
        serving a CLI never acts on stale settings; an invalid file raises, as it would for the CLI."""
        if self._config is None or self._stamp() != self._config_stamp:
            return self.reload_config()
        return self._config

    def _stamp(self) -> tuple | None:
        try:
            st = os.stat(self.root / CONFIG_NAME)
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    @property
    def secrets_env(self) -> Path:
        """.hermes/secrets.env: untracked KEY=VALUE lines for notification URLs and model keys."""
        return self.root / ".hermes" / "secrets.env"

    def secrets(self) -> dict[str, str]:
        """The names and values of .hermes/secrets.env (read afresh: a person may edit it any time)."""
        from .notify import read_secrets_env

        return read_secrets_env(self.secrets_env)

    @property
    def notifier(self):
        """Apprise delivery with the current settings (built per use: settings reload)."""
        from .notify import Notifier

        return Notifier(self.config, self.secrets_env)

    @cached_property
    def files(self) -> DiskFiles:
        return DiskFiles(self.root)

    @property
    def state_dir(self) -> Path:
        """.hermes/: untracked caches, locks, daemon state; safe to delete."""
        d = self.root / ".hermes"
        d.mkdir(exist_ok=True)
        return d

    @cached_property
    def git(self):
        from .git import GitStore  # GitPython loads only when git is needed

        return GitStore(self.root, lock_dir=self.state_dir / "locks", provenance=self.provenance)

    @cached_property
    def provenance(self):
        """Who authors this vault's commits and which trailers all of them carry (store/provenance.py);
        the agent's name is read from hermes.yaml at each commit, so a reload takes effect."""
        from .provenance import Provenance

        return Provenance(agent=lambda: self.config.git.author, host=self.sync_host)

    def sync_host(self) -> str | None:
        """This machine's host id when the vault syncs through a remote (`remote:` in hermes.yaml):
        then every commit carries `Hermes-Host: <id>` (DESIGN §15); None otherwise."""
        if self.config.remote is None:
            return None
        from .host import host_id

        return host_id(self.state_dir)


def find_vault(explicit: str | os.PathLike | None = None, cwd: Path | None = None) -> Vault:
    """--vault PATH, else $HERMES_VAULT, else the nearest ancestor holding hermes.yaml."""
    given = explicit or os.environ.get("HERMES_VAULT")
    if given:
        root = Path(given).expanduser().resolve()
        if not (root / CONFIG_NAME).is_file():
            raise InputError(f"not a hermes-fs vault (no {CONFIG_NAME}); run `hermes-fs init {given}`", str(root))
        return Vault(root)
    here = (cwd or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / CONFIG_NAME).is_file():
            return Vault(d)
    raise InputError(
        f"no vault found: pass --vault PATH, set HERMES_VAULT, or run inside a folder with {CONFIG_NAME} "
        "(create one with `hermes-fs init PATH`)"
    )


@dataclass
class InitResult:
    vault: Vault
    set_local_identity: bool
    adopted: bool = False  # an existing folder or repository was made a vault
    added: list[str] = field(default_factory=list)  # what adopting added (the folder's own files untouched)
    uncommitted: int = 0  # the adopted folder's own files not yet in git (a folder that was no repository)


# Folders hermes-fs reads or writes as its own: an adopted folder must not already use them.
OWN_FOLDERS = ("memory", "skills", "cron", "inbox", "sessions", "outputs")
SECRETS_HEADER = "# KEY=value lines for model keys and notify URLs: untracked, never committed; keep it mode 0600.\n"


def init_vault(path: Path, template: Path = TEMPLATE_DIR) -> InitResult:
    """Copy the template, `git init -b main`, first commit; or adopt an existing folder or git
    repository (see `adopt`). Refuses an existing vault."""
    path = Path(path).expanduser().resolve()
    if (path / CONFIG_NAME).exists():
        raise InputError("already a hermes-fs vault; nothing to do", str(path))
    if path.exists() and not path.is_dir():
        raise InputError("not a folder", str(path))
    if not template.is_dir():
        raise HermesError(f"vault template not found at {template} (is hermes-fs installed from source?)")
    if path.exists() and any(path.iterdir()):
        return adopt(path, template)
    shutil.copytree(template, path, dirs_exist_ok=True)
    from .git import GitStore

    store = GitStore.init(path, lock_dir=path / ".hermes" / "locks")
    set_identity = _ensure_identity(store)
    create_secrets_env(path)
    vault = Vault(path)
    vault.reload_config()  # the template must validate; fail loudly if it does not
    from .provenance import Act

    vault.git.commit_all("init: new hermes-fs vault", Act.init())
    return InitResult(vault, set_identity)


def adopt(path: Path, template: Path = TEMPLATE_DIR) -> InitResult:
    """Make an existing folder (an Obsidian vault, a notes repository) a vault: add hermes.yaml,
    the template's folders and the missing `.gitignore` lines, and commit only those. Existing
    files and history are never rewritten; a layout that collides is refused before anything is
    written, naming each collision."""
    from .git import MAIN, GitStore

    problems = collisions(path, template)
    if problems:
        raise InputError("cannot adopt this folder, nothing was changed: " + "; ".join(problems), str(path))
    repo = (path / ".git").exists()
    store = GitStore(path, lock_dir=path / ".hermes" / "locks") if repo else GitStore.init(path, path / ".hermes" / "locks")
    added = []
    for src in sorted(p for p in template.rglob("*") if p.is_file() and p.name != ".gitignore"):
        rel = src.relative_to(template).as_posix()
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, path / rel)
        added.append(rel)
    if _add_ignore_lines(path / ".gitignore", (template / ".gitignore").read_text(encoding="utf-8")):
        added.append(".gitignore")
    set_identity = _ensure_identity(store)
    create_secrets_env(path)
    vault = Vault(path)
    vault.reload_config()
    from .provenance import Act

    message = f"init: adopt {path.name} as a hermes-fs vault"
    if store.rev(f"refs/heads/{MAIN}"):
        store.commit_paths(added, message, Act.init())  # by plumbing: whatever the person staged stays as it was
    else:
        store.commit_all(message, Act.init(), paths=added)
    uncommitted = 0 if repo else len([p for p in store.dirty_paths() if p not in added])
    return InitResult(vault, set_identity, adopted=True, added=added, uncommitted=uncommitted)


def collisions(path: Path, template: Path = TEMPLATE_DIR) -> list[str]:
    """What in an existing folder stands where a vault needs its own files."""
    from .git import MAIN

    found = []
    for name in OWN_FOLDERS:
        p = path / name
        if p.is_symlink() or (p.exists() and not p.is_dir()):
            found.append(f"{name} is not a folder (hermes-fs needs {name}/)")
        elif p.is_dir() and any(p.iterdir()):
            found.append(f"{name}/ already holds files (hermes-fs would take them as its own {name})")
    for name in (".gitignore",):
        if (path / name).is_symlink() or (path / name).is_dir():
            found.append(f"{name} is not a plain file")
    if (path / ".hermes").exists() and not (path / ".hermes").is_dir():
        found.append(".hermes is not a folder")
    import subprocess

    top = subprocess.run(["git", "-C", str(path), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if top.returncode == 0 and Path(top.stdout.strip()).resolve() != path:
        found.append(f"it is inside the git repository {top.stdout.strip()} (adopt that folder, or choose another)")
    elif top.returncode == 0:
        head = subprocess.run(["git", "-C", str(path), "symbolic-ref", "-q", "HEAD"], capture_output=True, text=True)
        branch = head.stdout.strip().removeprefix("refs/heads/")
        if branch != MAIN:
            found.append(f"its checked-out branch is {branch or 'a detached HEAD'!r}, and hermes-fs works on "
                         f"{MAIN!r} (e.g. `git branch -m {branch or 'BRANCH'} {MAIN}` first)")
    return found


def _add_ignore_lines(gitignore: Path, wanted: str) -> bool:
    """Append the template's ignore lines a `.gitignore` lacks (its own lines stay as they are)."""
    have = gitignore.read_text(encoding="utf-8").splitlines() if gitignore.exists() else []
    missing = [line for line in wanted.splitlines() if line.strip() and not line.startswith("#") and line not in have]
    if not missing:
        return False
    text = gitignore.read_text(encoding="utf-8") if gitignore.exists() else ""
    sep = "" if not text or text.endswith("\n") else "\n"
    gitignore.write_text(text + sep + ("\n" if text else "") + "# added by hermes-fs init\n" + "\n".join(missing) + "\n",
                         encoding="utf-8")
    return True


def _ensure_identity(store) -> bool:
    """A vault-local git identity when none is configured; True when one was set."""
    if store.config_get("user.name") and store.config_get("user.email"):
        return False
    store.config_set("user.name", DEFAULT_IDENTITY[0])
    store.config_set("user.email", DEFAULT_IDENTITY[1])
    return True


def create_secrets_env(root: Path) -> Path:
    """.hermes/secrets.env, born 0600, so `echo KEY=... >> .hermes/secrets.env` keeps it private."""
    path = root / ".hermes" / "secrets.env"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        return path
    with os.fdopen(fd, "w") as f:
        f.write(SECRETS_HEADER)
    return path


def secrets_env_warning(root: Path) -> str | None:
    """A warning when .hermes/secrets.env can be read by other users (e.g. made by `echo >>` with
    a 022 umask before `init` created it)."""
    path = root / ".hermes" / "secrets.env"
    try:
        mode = path.stat().st_mode & 0o777
    except OSError:
        return None
    if mode & 0o077:
        return (f"warning: {path} is readable by other users (mode {mode:04o}); it holds keys: "
                f"run `chmod 600 {path}`")
    return None
