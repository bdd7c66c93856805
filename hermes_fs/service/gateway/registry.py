"""Which gateway channels exist, and which ones hermes.yaml turns on: the one place that names them.

A channel is one adapter module under service/gateway/ with one `ChannelBase` subclass, plus one
line in CHANNELS. Everything else (the daemon, `gateway status`, `doctor`, `status`, the web page)
asks this module, so a new channel touches no other file. Adapter modules import their platform's
library only when started, so reading a channel's `Settings` costs an import of its file alone.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError
from ...store.config import CONFIG_NAME, build_section

if TYPE_CHECKING:
    from ...store.vault import Vault
    from .channel import ChannelBase

# name -> "module:Class"; the order is the order channels are started and listed in
CHANNELS = {
    "webhook": "hermes_fs.service.gateway.webhook:WebhookChannel",
    "matrix": "hermes_fs.service.gateway.matrix:MatrixChannel",
    "email": "hermes_fs.service.gateway.email:EmailChannel",
    "telegram": "hermes_fs.service.gateway.telegram:TelegramChannel",
    "slack": "hermes_fs.service.gateway.slack:SlackChannel",
    "signal": "hermes_fs.service.gateway.signal:SignalChannel",
    "discord": "hermes_fs.service.gateway.discord:DiscordChannel",
    "whatsapp": "hermes_fs.service.gateway.whatsapp:WhatsAppChannel",
}


def channel_class(name: str) -> type[ChannelBase]:
    module, _, cls = CHANNELS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def configured(vault: Vault) -> list[str]:
    """The channel sections hermes.yaml has under `gateway:`, known channels in CHANNELS order
    first, then unknown names (which `settings` refuses with the key's line)."""
    given = vault.config.gateway.channels
    return [n for n in CHANNELS if n in given] + sorted(n for n in given if n not in CHANNELS)


def settings(vault: Vault, name: str) -> Any:
    """The channel's settings: its `gateway.<name>` section as its adapter's `Settings` dataclass.
    Raises ConfigError (the dotted key and its line) for an unknown channel or a bad setting."""
    section = vault.config.gateway.channels.get(name)
    if section is None:
        raise ConfigError(f"gateway.{name} is not set", CONFIG_NAME)
    if name not in CHANNELS:
        raise ConfigError(f"unknown gateway channel '{section.prefix.rstrip('.')}' (known: {', '.join(CHANNELS)})",
                          section.filename, section.line)
    return build_section(channel_class(name).Settings, section)


def load_channel(vault: Vault, name: str) -> ChannelBase:
    """The channel `name` built with its settings from hermes.yaml (ConfigError if they are bad)."""
    return channel_class(name)(vault, settings(vault, name))


__all__ = ["CHANNELS", "channel_class", "configured", "load_channel", "settings"]
