"""The agent's trust boundary: what a model's tool calls may write, and where its workspace is.

A model's reply is untrusted input (a prompt-injected model is a normal event), so code decides:
the agent writes only memory/ and skills/ in the vault, plus its workspace. Settings (hermes.yaml),
jobs (cron/), requests (inbox/), git's own files (.gitignore, .gitattributes, anything named .git)
and symlinks are a person's to change. The workspace is never `/` nor a home folder (nor a folder
holding one), and a daemon's jobs always work in .hermes/workspace.
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path

from ..errors import InputError
from ..store.config import CUSTOMER_TOOLS
from ..store.files import symlink_on_path

AGENT_VAULT_TOPS = ("memory", "skills")
PROTECTED_NAMES = {".gitignore", ".gitattributes", ".gitmodules", ".git"}


class Source(StrEnum):
    """Where a session comes from. Only a person at this machine's terminal is attended; every
    other source, and any name this code does not know, is unattended (fail closed)."""

    CLI = "cli"  # `hermes-fs chat`
    RUN = "run"  # `hermes-fs run`
    ACP = "acp"  # an editor on this machine (`hermes-fs acp`), which is asked before each change
    CRON = "cron"
    INBOX = "inbox"
    MCP = "mcp"
    GATEWAY = "gateway"  # a chat platform or a signed webhook: a remote sender

    @property
    def attended(self) -> bool:
        return self in (Source.CLI, Source.RUN, Source.ACP)

    @property
    def remote(self) -> bool:
        """A sender who is not on this machine at all."""
        return self is Source.GATEWAY


def is_attended(source: str | None) -> bool:
    """True only for a known attended source; unknown names are unattended."""
    try:
        return Source(source or "").attended
    except ValueError:
        return False


def sandbox_for(config, source: str | None, allow_local_shell: bool = False):
    """The sandbox settings a session gets: a remote sender never gets the host shell
    (`backend: local`) unless `gateway.allow_local_shell` says so; it gets no shell instead."""
    import dataclasses

    try:
        remote = Source(source or "").remote
    except ValueError:
        remote = True  # unknown: treated as the least trusted kind
    if remote and config.backend == "local" and not allow_local_shell:
        return dataclasses.replace(config, backend="none")
    return config


def mcp_servers_for(servers: dict, source: str | None, wanted: list[str] | None = None) -> dict:
    """The MCP servers a session gets: those `wanted` names (None: all), and in an unattended
    session (or one of unknown source) only those whose settings say `unattended: true`: a
    server's tools act with this machine's network and accounts, and nobody is watching."""
    attended = is_attended(source)
    return {name: cfg for name, cfg in servers.items()
            if (wanted is None or name in wanted) and (attended or cfg.unattended)}


def customer_tools(wanted: list[str]) -> list[str]:
    """The tools a customer's turn is offered: those `support.tools` names, but never one outside
    CUSTOMER_TOOLS (reading skills and memory, handing the chat over), whatever the settings say:
    a customer is a stranger, so nothing of theirs writes, runs a command, sends a file or reaches
    another chat. No MCP server and no sub-agent either (Conversation)."""
    return [t for t in dict.fromkeys(wanted) if t in CUSTOMER_TOOLS]


def check_vault_write(root: Path | None, rel: str) -> None:
    """Refuse an agent write to a vault path outside memory/ and skills/, to git's files, or through a symlink."""
    parts = rel.split("/")
    if parts[0] not in AGENT_VAULT_TOPS:
        raise InputError(f"the agent may write only memory/ and skills/ in the vault (and files in its workspace); "
                         f"{rel} is for a person to change", rel)
    if any(p.lower() in PROTECTED_NAMES for p in parts):
        raise InputError("git's own files are for a person to change", rel)
    if root is not None and symlink_on_path(Path(root), rel, include_last=True) is not None:
        raise InputError("the agent does not write through symlinks", rel)


def check_workspace_write(path: str, workspace: Path) -> None:
    ws = Path(os.path.realpath(workspace))
    parts = Path(path).relative_to(ws).parts if Path(path).is_relative_to(ws) else Path(path).parts
    if any(p.lower() in PROTECTED_NAMES for p in parts):
        raise InputError("git's own files are for a person to change", path)
    if os.path.islink(path):
        raise InputError("the agent does not write through symlinks", path)


def is_unsafe_workspace(path: Path) -> bool:
    """`/`, a home folder, or a folder that holds one: never a workspace (nor a sandbox mount)."""
    real = Path(os.path.realpath(path))
    homes = {Path(os.path.realpath(Path.home()))}
    if Path("/home").is_dir():
        homes |= {Path(os.path.realpath(h)) for h in Path("/home").iterdir() if h.is_dir()}
    homes.add(Path("/root"))
    return real == Path("/") or any(real == h or h.is_relative_to(real) for h in homes)


def choose_workspace(cwd: Path, vault_root: Path, scratch: Path, source: str) -> Path:
    """The current folder for a person at a terminal (when it is outside the vault and safe);
    otherwise the vault's scratch folder, .hermes/workspace."""
    cwd = Path(os.path.realpath(cwd))
    if not is_attended(source) or cwd == vault_root or vault_root in cwd.parents or is_unsafe_workspace(cwd):
        return scratch
    return cwd
