"""The daemon's optional long-running parts (gateway, sync, web page, curator), chosen from hermes.yaml.

Each is one object with start() and stop(); the daemon starts them after the watcher and the
scheduler and stops them first on the way out. Adding a part is one entry in `services_for`, so
the daemon's own code never names a platform.
"""

from __future__ import annotations

from typing import Protocol

from ..store.vault import Vault


class DaemonHost(Protocol):
    """What a part may use of the daemon that starts it (a protocol, so parts never import the daemon)."""

    vault: Vault

    def note(self, message: str) -> None: ...

    def error(self, message: str) -> None: ...


class DaemonService(Protocol):
    name: str

    def start(self) -> None: ...

    def stop(self) -> None: ...


def services_for(daemon: DaemonHost) -> list[DaemonService]:
    """The parts this vault's settings ask for; each import is lazy so an unused part costs nothing."""
    found: list[DaemonService] = []
    if daemon.vault.config.web.enabled:
        from .web.server import WebService

        found.append(WebService(daemon.vault))
    return found
