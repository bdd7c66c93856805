"""What the daemon's parts may use of the daemon that starts them: protocols, so a part never
imports the daemon (nor services.py, which imports the parts)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from ..mind.jobs import CronJob
from ..store.claims import RefClaims
from ..store.vault import Vault
from .catch_up import CatchUp


class JobRunner(Protocol):
    """The cron scheduler as a part sees it: the jobs it knows and a way to run a claimed due time."""

    @property
    def jobs(self) -> dict[str, CronJob]: ...

    @property
    def running(self) -> set[str]: ...  # jobs with a run in progress here

    def run_claimed(self, job: CronJob, due: datetime) -> bool: ...


class DaemonHost(Protocol):
    vault: Vault
    catch_up: CatchUp  # a part that must catch up after a start holds agent work back until it has
    claims: RefClaims | None  # the vault's claims on its remote, built once (service/work.py); None: no remote

    @property
    def scheduler(self) -> JobRunner | None: ...

    def note(self, message: str) -> None: ...

    def error(self, message: str) -> None: ...

    def take_request(self, rel: str) -> None: ...  # take inbox/<name> now (its claim is held here)
