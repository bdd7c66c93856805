"""The daemon's optional long-running parts (gateway, sync, web page, curator, skill vectors), chosen from hermes.yaml.

Each is one object with start() and stop(); the daemon starts them after the watcher and the
scheduler and stops them first on the way out. Adding a part is one entry in `services_for`, so
the daemon's own code never names a platform. Sync is the one part started first, before the
watcher, the jobs and the scheduler (`services_for(daemon, early=True)`): a restarted machine's
first round is what the other machines' edits wait for, and it needs none
of them; what it does that needs the jobs waits for `catch_up.begun`.
"""

from __future__ import annotations

from typing import Protocol

from .host import DaemonHost  # what a part may use of the daemon (a protocol: parts never import the daemon)

__all__ = ["DaemonHost", "DaemonService", "services_for", "started_on_reload"]


class DaemonService(Protocol):
    name: str

    def start(self) -> None: ...

    def stop(self) -> None: ...


def services_for(daemon: DaemonHost, early: bool = False) -> list[DaemonService]:
    """The parts this vault's settings ask for, those to start first (`early`) or the others;
    each import is lazy so an unused part costs nothing."""
    found: list[DaemonService] = []
    if early:
        if daemon.vault.config.remote is not None:
            from .sync_service import SyncService

            found.append(SyncService(daemon))
        return found
    if daemon.vault.config.web.enabled:
        from .web.server import WebService

        found.append(WebService(daemon.vault, daemon.claims))
    if daemon.vault.config.curate.every is not False:
        from .curator import CuratorService

        found.append(CuratorService(daemon))
    from ..mind import embeddings

    if embeddings.wanted(daemon.vault.config.skills.embeddings) and embeddings.available():
        from .skill_vectors import SkillVectorsService

        found.append(SkillVectorsService(daemon))
    from .gateway.registry import configured

    if configured(daemon.vault):
        from .gateway.core import Gateway

        found.append(Gateway(daemon.vault, note=daemon.note, error=daemon.error, claims=daemon.claims))
    return found


def started_on_reload(daemon: DaemonHost, running: set[str]) -> list[DaemonService]:
    """The parts a reload of hermes.yaml starts, given the names of those `running`: the gateway,
    once hermes.yaml names a channel (a running gateway follows its channels itself:
    `Gateway.settings_changed`). The others start with the daemon."""
    from .gateway.registry import configured

    if "gateway" in running or not configured(daemon.vault):
        return []
    from .gateway.core import Gateway

    return [Gateway(daemon.vault, note=daemon.note, error=daemon.error)]
