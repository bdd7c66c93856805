"""Notifications through Apprise. Target URLs come from hermes.yaml with ${ENV} expansion; the
values live in the environment or in the untracked .hermes/secrets.env, never in a commit."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from .config import Config

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass
class Delivery:
    target: str
    ok: bool
    error: str | None = None
    attached: bool | None = None  # with attachments offered: whether the target took them (None: none offered)

    def as_dict(self) -> dict:
        out: dict[str, object] = {"target": self.target, "status": "ok" if self.ok else "error", **({"error": self.error} if self.error else {})}
        if self.attached is not None:
            out["attached"] = self.attached
        return out


def read_secrets_env(path: Path) -> dict[str, str]:
    """KEY=VALUE lines (comments and `export` allowed) from .hermes/secrets.env."""
    if not path.is_file():
        return {}
    from dotenv import dotenv_values

    return {k: v for k, v in dotenv_values(path, interpolate=False).items() if v is not None}


def expand(url: str, env: dict[str, str]) -> str:
    def sub(m: re.Match) -> str:
        if m.group(1) not in env or not env[m.group(1)]:
            raise InputError(f"${{{m.group(1)}}} is not listed in .hermes/secrets.env (add `{m.group(1)}=...` there; "
                             "only names listed there are expanded in notify URLs)")
        return env[m.group(1)]

    return _VAR.sub(sub, url)


def deliver(apprise, name: str, url: str, title: str, body: str, attach: list[Path] | None = None) -> Delivery:
    """One target. Files in `attach` go only where the target's Apprise plugin carries attachments
    (json://, form://, mailto://, ...); elsewhere the text goes alone, as it always did."""
    ap = apprise.Apprise()
    if not ap.add(url):
        return Delivery(name, False, "not a valid Apprise URL")
    takes = bool(attach) and all(getattr(plugin, "attachment_support", False) for plugin in ap)
    files = None
    if takes:
        files = apprise.AppriseAttachment()
        for path in attach or []:
            files.add(str(path))
    ok = bool(ap.notify(title=title, body=body, attach=files))
    return Delivery(name, ok, None if ok else "delivery failed", attached=(ok and takes) if attach else None)


class Notifier:
    def __init__(self, config: Config, secrets_env: Path):
        self.config = config
        self.secrets_env = secrets_env

    def _env(self) -> dict[str, str]:
        """The values ${NAME} may take: only names listed in .hermes/secrets.env (the environment
        may give the value), so a target added to hermes.yaml cannot send out any other variable."""
        listed = read_secrets_env(self.secrets_env)
        return {name: os.environ.get(name) or value for name, value in listed.items()}

    def resolve(self, target: str) -> str:
        targets = self.config.notify.targets
        if target not in targets:
            known = ", ".join(sorted(targets)) or "none defined"
            raise InputError(f"unknown notify target {target!r} (hermes.yaml notify.targets: {known})")
        return expand(targets[target], self._env())

    def send(self, targets: list[str], title: str, body: str, attach: list[Path] | None = None) -> list[Delivery]:
        """Send to each target separately so one failure never hides another's result; `attach`:
        files for the targets that carry attachments (see `deliver`)."""
        import apprise

        results = []
        for name in targets:
            try:
                url = self.resolve(name)
            except InputError as exc:
                results.append(Delivery(name, False, exc.reason))
                continue
            results.append(deliver(apprise, name, url, title, body, attach))
        return results

    def send_url(self, url: str, title: str, body: str, shown: str) -> Delivery:
        """Try an Apprise URL that is not (yet) a target: `notify test URL`, before adding it to
        hermes.yaml. `${NAME}` expands as in targets; `shown` is how the result names it."""
        import apprise

        try:
            full = expand(url, self._env())
        except InputError as exc:
            return Delivery(shown, False, exc.reason)
        return deliver(apprise, shown, full, title, body)

    def event(self, event: str, title: str, body: str, targets: list[str] | None = None) -> list[Delivery]:
        """Send an event (refine_pending, cron_failure, ...) if hermes.yaml subscribes to it."""
        if event not in self.config.notify.events:
            return []
        return self.send(targets if targets is not None else sorted(self.config.notify.targets), title, body)
