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

TEMPLATE_DIR = Path(__file__).resolve().parents[2] / "vault_template"
DEFAULT_IDENTITY = ("hermes-fs user", "hermes-user@localhost")


@dataclass
class Vault:
    root: Path
    _config: Config | None = field(default=None, repr=False)

    @property
    def config(self) -> Config:
        if self._config is None:
            self._config = load_config(self.root / CONFIG_NAME)
        return self._config

    def reload_config(self) -> Config:
        """Re-read hermes.yaml; on an error (raised) the last good settings stay in force."""
        self._config = load_config(self.root / CONFIG_NAME)
        return self._config

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

        return Provenance(agent=lambda: self.config.git.author)


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


def init_vault(path: Path, template: Path = TEMPLATE_DIR) -> InitResult:
    """Copy the template, `git init -b main`, first commit. Refuses existing vaults and non-empty folders."""
    path = Path(path).expanduser().resolve()
    if (path / CONFIG_NAME).exists():
        raise InputError("already a hermes-fs vault; nothing to do", str(path))
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise InputError("folder is not empty and is not a vault; choose an empty or new folder", str(path))
    if not template.is_dir():
        raise HermesError(f"vault template not found at {template} (is hermes-fs installed from source?)")
    shutil.copytree(template, path, dirs_exist_ok=True)
    from .git import GitStore

    store = GitStore.init(path, lock_dir=path / ".hermes" / "locks")
    set_identity = not (store.config_get("user.name") and store.config_get("user.email"))
    if set_identity:
        store.config_set("user.name", DEFAULT_IDENTITY[0])
        store.config_set("user.email", DEFAULT_IDENTITY[1])
    vault = Vault(path)
    vault.reload_config()  # the template must validate; fail loudly if it does not
    from .provenance import Act

    vault.git.commit_all("init: new hermes-fs vault", Act.init())
    return InitResult(vault, set_identity)

