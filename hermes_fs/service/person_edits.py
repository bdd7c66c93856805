"""Changes a person asks for by command (`memory add`, `memory edit`, `cron enable`, `cron new`):
made exactly as an editor's save from the web page is (service/web/edits.py) — the vault's
locked swap-in, the secret scanner, one `edit: <path>` commit authored by the person — so the
agent and the daemon see a person's edit, never a second kind of write.

Each change is computed from the bytes on disk and saved only if the file still holds them; a
file that moved in between (the agent, an editor) is read again and the change made again on it.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import HermesError, InputError
from ..mind import jobs, memory
from ..store.docs import decode
from ..store.edit import Staged
from ..store.vault import Vault
from .web.edits import Saved, digest, save

ATTEMPTS = 3


def rewrite(vault: Vault, rel: str, make: Callable[[str | None], str]) -> Saved:
    """Save `make(current text)` (None: no such file) as the person's edit of `rel`."""
    for _attempt in range(ATTEMPTS):
        data = vault.files.read(rel)
        text = make(decode(data, rel) if data is not None else None)
        saved = save(vault, rel, text, digest(data))
        if saved.ok:
            return saved
    raise HermesError(f"{rel} kept changing while being saved; try again")


def save_edited(vault: Vault, rel: str, text: str, loaded: bytes | None) -> Saved:
    """A text the person edited (in $EDITOR) from `loaded`: saved if the file still holds
    `loaded`; else nothing is written and Saved.current says what is there now."""
    return save(vault, rel, text, digest(loaded))


def memory_rel(file: str) -> str:
    return f"{memory.MEMORY_DIR}/{memory.memory_name(file)}"


def add_memory_entry(vault: Vault, file: str, text: str, section: str | None = None) -> Saved:
    """One entry added to a memory file (under `section` if given), within its budget."""
    name = memory.memory_name(file)
    rel = f"{memory.MEMORY_DIR}/{name}"

    def make(current: str | None) -> str:
        staged = Staged(vault.files, {rel: current.encode("utf-8") if current is not None else None})
        memory.add(staged, vault.config, name, text, section)
        return (staged.writes[rel] or b"").decode("utf-8")

    return rewrite(vault, rel, make)


def set_job_enabled(vault: Vault, name: str, enabled: bool) -> Saved:
    """`enabled:` of cron/<name>.md set; the job must still be valid afterwards."""
    rel = f"{jobs.CRON_DIR}/{jobs.check_job_name(name)}.md"

    def make(current: str | None) -> str:
        if current is None:
            raise InputError(f"no job {name!r} in cron/ (see `hermes-fs cron list`)", rel)
        text = jobs.with_enabled(current, enabled, rel)
        jobs.parse_job(name, text, vault.config)  # a job left invalid is refused, with the reason
        return text

    return rewrite(vault, rel, make)


def new_job(vault: Vault, name: str, schedule: str, prompt: str, notify: list[str] | None = None,
            enabled: bool = True) -> Saved:
    """cron/<name>.md made from a schedule and a prompt; refused if that job exists or is invalid."""
    rel = f"{jobs.CRON_DIR}/{jobs.check_job_name(name)}.md"

    def make(current: str | None) -> str:
        if current is not None:
            raise InputError(f"a job named {name!r} exists; edit {rel} or choose another name", rel)
        text = jobs.job_text(schedule, prompt, notify or [], enabled)
        jobs.parse_job(name, text, vault.config)
        return text

    return rewrite(vault, rel, make)
