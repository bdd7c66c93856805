"""A vault's model chosen at `init --model`: hermes.yaml's `model` and `api_base` set, and with
them the review mode that suits the model (`refine.mode`, `learn.mode`).

The mode is what the model does, not what its name suggests: one tiny tool-call probe (the one
`doctor` runs) when the model answers; a model that answers in words gets `structured`. When it
cannot be asked (a server not started yet, a key not set yet), a local model (a local server, or
a local provider such as Ollama) gets `structured`, since small local models rarely call tools,
and a hosted one keeps the default `tools`; `doctor` probes again later.

hermes.yaml is edited as text, line by line, so its comments stay; the result is validated as
the settings file before it is committed, and an edit that does not validate is undone.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..errors import ConfigError, HermesError, InputError
from ..store.config import CONFIG_NAME
from ..store.policies import ReviewMode
from ..store.provenance import Act
from ..store.vault import Vault

LOCAL_PROVIDERS = ("ollama", "ollama_chat", "lm_studio", "hosted_vllm", "vllm", "llamafile", "llamacpp")
MODE_KEYS = ("refine", "learn")


@dataclass
class ModelSetup:
    model: str
    api_base: str | None
    mode: str  # tools | structured, as now in hermes.yaml
    probed: bool  # the mode is what the probe saw (else: chosen by whether the model is local)
    detail: str

    def line(self) -> str:
        how = "probed" if self.probed else "not probed"
        return f"model {self.model}{f' at {self.api_base}' if self.api_base else ''}; review mode " \
               f"{self.mode} ({how}: {self.detail})"


def is_local(model: str, api_base: str | None) -> bool:
    """A model served on this machine or this network (a loopback or private address), or by a
    provider that only runs locally."""
    if model.split("/", 1)[0] in LOCAL_PROVIDERS:
        return True
    host = urlsplit(api_base).hostname if api_base else None
    if not host:
        return False
    if host == "localhost" or host.endswith(".local"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private


def setup_model(vault: Vault, model: str, api_base: str | None = None, probe: bool = True) -> ModelSetup:
    """Set the model in hermes.yaml, then the review mode that suits it; one commit."""
    if not model.strip() or "\n" in model or (api_base is not None and "\n" in api_base):
        raise InputError("a model name and an api_base are one line each", CONFIG_NAME)
    path = vault.root / CONFIG_NAME
    before = path.read_text(encoding="utf-8")
    text = set_key(before, "model", model.strip())
    if api_base is not None:
        text = set_key(text, "api_base", api_base.strip())
    _write_checked(vault, text, before)
    mode, probed, detail = _suited_mode(vault, model, api_base, probe)
    if mode == ReviewMode.STRUCTURED:
        text = path.read_text(encoding="utf-8")
        for section in MODE_KEYS:
            text = set_key(text, f"{section}.mode", mode)
        _write_checked(vault, text, before)
    vault.git.commit_paths([CONFIG_NAME], f"init: model {model}, review mode {mode}", Act.person())
    return ModelSetup(model, api_base, mode, probed, detail)


def _suited_mode(vault: Vault, model: str, api_base: str | None, probe: bool) -> tuple[str, bool, str]:
    from .structured import probe_vault

    why = "--no-probe"
    if probe:
        try:
            advice = probe_vault(vault)[1]
        except HermesError as exc:
            why = f"the model did not answer: {str(exc)[:200]}"
        else:
            return str(advice.suggested), True, advice.detail
    if is_local(model, api_base):
        return ReviewMode.STRUCTURED, False, f"{why}; small local models rarely call tools"
    return ReviewMode.TOOLS, False, f"{why}; a hosted model is expected to call tools (`doctor` checks it)"


def _write_checked(vault: Vault, text: str, before: str) -> None:
    path = vault.root / CONFIG_NAME
    path.write_text(text, encoding="utf-8")
    try:
        vault.reload_config()
    except (ConfigError, HermesError):
        path.write_text(before, encoding="utf-8")
        vault.reload_config()
        raise


def set_key(text: str, dotted: str, value: str) -> str:
    """hermes.yaml's text with `key` or `section.key` set to `value` (a JSON string, which YAML
    reads as the same string), its comments and other lines as they were."""
    shown = json.dumps(value)
    section, _, key = dotted.rpartition(".")
    lines = text.splitlines(keepends=True)
    if not section:
        for i, line in enumerate(lines):
            if re.match(rf"{re.escape(key)}:(\s|$)", line):
                lines[i] = f"{key}: {shown}\n"
                return "".join(lines)
        return _appended(text, f"{key}: {shown}\n")
    head = next((i for i, line in enumerate(lines) if re.match(rf"{re.escape(section)}:(\s|$)", line)), None)
    if head is None:
        return _appended(text, f"{section}:\n  {key}: {shown}\n")
    if not re.match(rf"{re.escape(section)}:\s*(#.*)?$", lines[head]):
        raise InputError(f"`{section}:` is written on one line; set {dotted}: {value} in it by hand", CONFIG_NAME)
    end = head + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t#"):
        if re.match(rf"\s+{re.escape(key)}:(\s|$)", lines[end]):
            indent = lines[end][: len(lines[end]) - len(lines[end].lstrip())]
            lines[end] = f"{indent}{key}: {shown}\n"
            return "".join(lines)
        end += 1
    lines.insert(head + 1, f"  {key}: {shown}\n")
    return "".join(lines)


def _appended(text: str, block: str) -> str:
    return text + ("" if text.endswith("\n") or not text else "\n") + block


__all__ = ["ModelSetup", "is_local", "set_key", "setup_model"]
