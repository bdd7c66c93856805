"""hermes.yaml: settings as dataclasses, validated strictly (unknown key or wrong type is an error).

Errors name the file, the dotted key and the line, so a person can fix the file at once.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError
from .docs import refuse_aliases

CONFIG_NAME = "hermes.yaml"


@dataclass
class ModelsConfig:
    refine: str | None = None
    cron: str | None = None
    learn: str | None = None
    curate: str | None = None


class Policy(StrEnum):
    """What happens to a learned change once it is committed on its branch."""

    REVIEW = "review"  # wait for `hermes-fs review merge`
    AUTO = "auto"  # merge now
    ADDITIONS = "additions"  # merge only pure additions; hold edits and removals


class ReviewMode(StrEnum):
    """How the reviewer model answers: by calling edit tools, or with one schema-constrained document."""

    TOOLS = "tools"
    STRUCTURED = "structured"  # for models that cannot call tools well (small local ones)


@dataclass
class RefineConfig:
    policy: str = Policy.REVIEW
    every_turns: int = 10
    mode: str = ReviewMode.TOOLS


@dataclass
class LearnConfig:
    mode: str = ReviewMode.TOOLS


@dataclass
class MemoryConfig:
    budgets: dict[str, int] = field(
        default_factory=lambda: {"USER.md": 2000, "MEMORY.md": 4000, "projects": 3000}
    )


@dataclass
class SkillsConfig:
    prompt_budget_chars: int = 4000
    embeddings: bool = False  # rank skills by meaning too (the optional `embeddings` extra, mind/embeddings.py)


@dataclass
class ToolsConfig:
    # auto: a tool call a model writes as text (<tool_call>{...}</tool_call>, a fenced JSON block
    # naming an offered tool) is run as a call, never printed as the answer; off: text is text.
    # YAML reads an unquoted `off` as false, which means the same.
    text_calls: bool | str = "auto"

    @property
    def read_text_calls(self) -> bool:
        return self.text_calls not in ("off", False)


@dataclass
class SandboxConfig:
    backend: str = "docker"
    image: str = "python:3.12-slim"
    network: bool = False
    memory: str = "1g"
    cpus: float = 1.0
    timeout_s: int = 120


@dataclass
class NotifyConfig:
    targets: dict[str, str] = field(default_factory=dict)
    events: list[str] = field(
        default_factory=lambda: ["refine_pending", "cron_output", "cron_failure", "sync_conflict"]
    )


@dataclass
class CronConfig:
    timezone: str = "UTC"
    catch_up: bool = True


@dataclass
class GitConfig:
    author: str = "hermes-fs <agent@hermes-fs.invalid>"  # the agent's own writes; you stay the committer


@dataclass
class McpServerConfig:
    """One MCP server the agent may use: a command (stdio) or a url (streamable HTTP)."""

    command: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # values may say ${NAME} (from .hermes/secrets.env)
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)  # the same ${NAME} expansion
    tools: list[str] | None = None  # allow-list of the server's tool names; None = all
    timeout_s: float = 30.0


@dataclass
class McpConfig:
    servers: dict[str, McpServerConfig] = field(default_factory=dict)


# -- §15: gateway, several machines, the web page, curation ----------------------------------------


@dataclass
class WebhookRouteConfig:
    secret_env: str | None = None  # no secret configured: the route answers 403 (there is no insecure mode)
    scheme: str = "standard"  # standard (Standard Webhooks) | github (X-Hub-Signature-256)
    prompt: str | None = None  # "{payload}" is replaced by the body; default: the payload is the message
    reply_to: str | None = None  # a notify target name that receives the answer
    rate_per_min: int = 60


@dataclass
class WebhookConfig:
    listen: str = "127.0.0.1:8787"
    routes: dict[str, WebhookRouteConfig] = field(default_factory=dict)


@dataclass
class MatrixConfig:
    homeserver: str = "http://127.0.0.1:8008"
    user_id: str = ""
    password_env: str | None = None
    access_token_env: str | None = None
    allow: list[str] = field(default_factory=list)  # empty = nobody (plus approved pairings)
    admins: list[str] = field(default_factory=list)
    pairing: bool = True
    per_sender_in_rooms: bool = True  # group rooms: one session per sender


@dataclass
class ImapConfig:
    host: str = ""
    port: int = 993
    tls: bool = True
    user: str = ""
    password_env: str | None = None
    mailbox: str = "INBOX"


@dataclass
class SmtpConfig:
    host: str = ""
    port: int = 587
    starttls: bool = True
    tls: bool = False
    user: str = ""
    password_env: str | None = None
    from_: str = ""  # written `from:` in hermes.yaml


@dataclass
class EmailConfig:
    imap: ImapConfig = field(default_factory=ImapConfig)
    smtp: SmtpConfig = field(default_factory=SmtpConfig)
    allow: list[str] = field(default_factory=list)
    admins: list[str] = field(default_factory=list)
    authserv_id: str | None = None  # Authentication-Results from this host are trusted
    max_attachment_bytes: int = 10_000_000


@dataclass
class GatewayConfig:
    webhook: WebhookConfig | None = None
    matrix: MatrixConfig | None = None
    email: EmailConfig | None = None
    allow_local_shell: bool = False  # gateway sessions never get the host shell unless this says so
    workers: int = 2  # chats answered at once (each chat's messages run one at a time, in order)
    sender_rate_per_min: int = 20  # messages a minute from one sender; more are answered once, not run
    commit_idle_s: float = 10.0  # chat results and transcripts are committed after this long without a message
    retry_base_s: float = 2.0  # first wait before a reply that could not be sent is tried again (doubling)


@dataclass
class RemoteConfig:
    url: str = ""  # any URL git accepts; credentials stay with git (helpers, ssh keys)
    branch: str = "main"


@dataclass
class SyncConfig:
    interval_s: float = 5.0
    claim_ttl_s: float = 30.0  # a running claim not renewed this long belongs to a dead machine
    lease_s: float = 15.0  # a channel lease (one gateway consumer per account) not renewed this long is free


@dataclass
class WebConfig:
    enabled: bool = False
    listen: str = "127.0.0.1:9120"


@dataclass
class CurateConfig:
    every: str | bool = "weekly"  # or a schedule as in cron jobs, or false
    stale_days: int = 30
    policy: str = "review"  # review | auto: what becomes of the curate/ branch (the daemon's runs too)


@dataclass
class Config:
    model: str = "openai/gpt-4o-mini"
    api_base: str | None = None
    api_key_env: str | None = None
    models: ModelsConfig = field(default_factory=ModelsConfig)
    refine: RefineConfig = field(default_factory=RefineConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    skills: SkillsConfig = field(default_factory=SkillsConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    notify: NotifyConfig = field(default_factory=NotifyConfig)
    cron: CronConfig = field(default_factory=CronConfig)
    git: GitConfig = field(default_factory=GitConfig)
    mcp: McpConfig = field(default_factory=McpConfig)
    learn: LearnConfig = field(default_factory=LearnConfig)
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    remote: RemoteConfig | None = None
    sync: SyncConfig = field(default_factory=SyncConfig)
    web: WebConfig = field(default_factory=WebConfig)
    curate: CurateConfig = field(default_factory=CurateConfig)

    def model_for(self, task: str) -> str:
        """The model for a task (refine, cron, learn), falling back to `model`."""
        return getattr(self.models, task, None) or self.model


CHOICES = {
    "refine.policy": {p.value for p in Policy},
    "sandbox.backend": {"docker", "local", "none"},
    "notify.events": {"refine_pending", "refine_failed", "cron_output", "cron_failure", "sync_conflict"},
    "refine.mode": {m.value for m in ReviewMode},
    "learn.mode": {m.value for m in ReviewMode},
    "curate.policy": {Policy.REVIEW.value, Policy.AUTO.value},
    "tools.text_calls": {"auto", "off"},
}
RENAMED = {"from": "from_"}  # YAML keys that are Python keywords


def load_config(path: Path) -> Config:
    """Read and validate hermes.yaml; a missing file gives the defaults."""
    if not path.exists():
        return Config()
    text = _read_text(path)
    return parse_config(text, str(path))


def parse_config(text: str, filename: str = CONFIG_NAME) -> Config:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        refuse_aliases(text)
        node = yaml.compose(text, Loader=loader)
        data = yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else None
        raise ConfigError(f"invalid YAML: {getattr(exc, 'problem', exc)}", filename, line) from None
    if data is None:
        return Config()
    lines = _key_lines(node)
    config = _build(Config, data, "", filename, lines)
    _check_key_variable(config.api_key_env, filename, lines.get("api_key_env"))
    return config


def _check_key_variable(name: str | None, filename: str, line: int | None) -> None:
    """`api_key_env` names a variable; a key pasted there is refused without ever being shown."""
    import re

    from .secrets import scan_text

    if name is None:
        return
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,99}", name) or scan_text("", name):
        raise ConfigError("'api_key_env' must be the name of an environment variable (e.g. OPENAI_API_KEY), not "
                          "the key itself (what is there looks like a key, so it is not shown): put the key in "
                          ".hermes/secrets.env as NAME=... and write NAME here", filename, line)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text", str(path)) from None


def _key_lines(node: Any, prefix: str = "") -> dict[str, int]:
    """Map dotted keys to their 1-based line in the YAML source."""
    lines: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = f"{prefix}{key_node.value}"
            lines[key] = key_node.start_mark.line + 1
            lines.update(_key_lines(value_node, key + "."))
    return lines


def _build(cls: type, data: Any, prefix: str, filename: str, lines: dict[str, int]):
    if not isinstance(data, dict):
        raise ConfigError(
            f"'{prefix.rstrip('.') or 'top level'}' must be a mapping", filename, lines.get(prefix.rstrip("."))
        )
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        key = RENAMED.get(key, key) if RENAMED.get(key) in names else key
        if key not in names:
            raise ConfigError(
                f"unknown key '{dotted}' (known: {', '.join(sorted(n.rstrip('_') for n in names))})", filename, lines.get(dotted)
            )
        kwargs[key] = _coerce(hints[key], value, dotted, filename, lines)
    return cls(**kwargs)


def _coerce(hint: Any, value: Any, dotted: str, filename: str, lines: dict[str, int]):
    def fail(expected: str):
        raise ConfigError(
            f"'{dotted}' must be {expected}, got {type(value).__name__} {value!r}", filename, lines.get(dotted)
        )

    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _build(hint, value if value is not None else {}, dotted + ".", filename, lines)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        for i, kind in enumerate(inner):  # e.g. `str | bool`: the first kind that fits
            try:
                return _coerce(kind, value, dotted, filename, lines)
            except ConfigError:
                if i == len(inner) - 1:
                    raise
    if origin is dict:
        if not isinstance(value, dict):
            fail("a mapping")
        return {str(k): _coerce(args[1], v, f"{dotted}.{k}", filename, lines) for k, v in value.items()}
    if origin is list:
        if not isinstance(value, list):
            fail("a list")
        items = [_coerce(args[0], v, dotted, filename, lines) for v in value]
        _check_choice(dotted, items, filename, lines)
        return items
    if hint is bool:
        if not isinstance(value, bool):
            fail("true or false")
    elif hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            fail("an integer")
    elif hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            fail("a number")
        value = float(value)
    elif hint is str:
        if not isinstance(value, str):
            fail("a string")
        _check_choice(dotted, [value], filename, lines)
    return value


def _check_choice(dotted: str, values: list, filename: str, lines: dict[str, int]) -> None:
    allowed = CHOICES.get(dotted)
    for value in values:
        if allowed and value not in allowed:
            raise ConfigError(
                f"'{dotted}' must be one of {', '.join(sorted(allowed))}, got {value!r}",
                filename,
                lines.get(dotted),
            )
