"""hermes.yaml: settings as dataclasses, validated strictly (unknown key or wrong type is an error).

Errors name the file, the dotted key and the line, so a person can fix the file at once.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError
from .docs import refuse_aliases
from .policies import Policy, ReviewMode

CONFIG_NAME = "hermes.yaml"


@dataclass
class ModelsConfig:
    """Per-task models; a task without one uses `model`."""

    refine: str | None = None  # the reviewer of conversations (a larger model than chat's, if you can)
    cron: str | None = None  # scheduled jobs (a job's own `model:` wins)
    learn: str | None = None  # the drafter of skills from documents
    curate: str | None = None  # the curator's merges of duplicates and memory consolidation


@dataclass
class RefineConfig:
    """Reviewing conversations into learned changes (refine/ branches)."""

    policy: str = Policy.REVIEW  # review: wait for you; auto: merge at once; additions: merge pure additions only
    every_turns: int = 10  # review a session automatically every N user turns; 0 = only when asked
    mode: str = ReviewMode.TOOLS  # tools: the reviewer calls edit tools; structured: one JSON document (small models)
    max_cost_per_day: float | None = None  # USD: past it, automatic (background) reviews stop until tomorrow (UTC)
    # structured mode: answers drawn per review (lessons with their quotes, judged by code; a lesson
    # is kept when 2 of them propose it, or the only one); 0 = one JSON document of memory and skill edits
    samples: int = 3


@dataclass
class LearnConfig:
    """Learning skills from documents (learn/ branches); the policy is refine's."""

    mode: str = ReviewMode.TOOLS  # as refine.mode, for the drafter


@dataclass
class MemoryConfig:
    """Memory files (memory/*.md)."""

    # characters per file (its body); over budget is flagged and the prompt carries only the budget.
    # Keys: USER.md, MEMORY.md, projects (each file under memory/projects/); a file's `budget:` wins
    budgets: dict[str, int] = field(
        default_factory=lambda: {"USER.md": 2000, "MEMORY.md": 4000, "projects": 3000}
    )


@dataclass
class SkillsConfig:
    """The skills index in the system prompt."""

    prompt_budget_chars: int = 4000  # most characters the index takes; past it, the most relevant skills are shown
    # rank skills by meaning too (the `embeddings` extra, mind/embeddings.py). auto: static vectors
    # where the extra is installed (no transformer per turn), plus the model's in the daemon once
    # loaded; true: the model too in every process (a CLI turn loads it); false: full-text alone
    embeddings: bool | str = "auto"


@dataclass
class ToolsConfig:
    """How the agent reads the tool calls a model makes."""

    # auto: a tool call a model writes as text (<tool_call>{...}</tool_call>, a fenced JSON block
    # naming an offered tool) is run as a call, never printed as the answer; off: text is text.
    # YAML reads an unquoted `off` as false, which means the same.
    text_calls: bool | str = "auto"

    @property
    def read_text_calls(self) -> bool:
        return self.text_calls not in ("off", False)


@dataclass
class DelegationConfig:
    """The `delegate` tool: sub-agents with their own session, step budget and tool subset."""

    max_parallel: int = 3  # sub-agents running at once (more tasks wait their turn)
    max_depth: int = 1  # how deep sub-agents may delegate again (1: only the session you talk to)
    max_tasks: int = 8  # tasks one delegate call may hand out
    max_steps: int = 15  # model calls each sub-agent may make
    timeout_s: int = 600  # a delegate call running longer stops all its sub-agents


@dataclass
class SshConfig:
    """The remote host of `sandbox.backend: ssh`. Its host key must already be in `known_hosts`
    (never accepted on first sight); the key comes from `identity_file` or the ssh agent, never a
    password."""

    host: str = "127.0.0.1"  # the remote host's name or address
    port: int = 22  # its SSH port
    user: str = "agent"  # the account commands run as there (one of its own, never root)
    identity_file: str = "~/.ssh/id_ed25519"  # used when it exists; the ssh agent's keys too
    known_hosts: str = "~/.ssh/known_hosts"  # the host's key must be here already (checked, never added)
    workdir: str = "~/work"  # commands run here (~: the user's home there); read_file/write_file reach files under it
    connect_timeout_s: int = 15  # seconds to connect, exchange keys and log in


@dataclass
class SandboxConfig:
    """Where the agent's `shell` tool runs."""

    backend: str = "docker"  # docker | ssh (a remote host, sandbox.ssh) | local: this machine (explicit opt-in) | none
    image: str = "python:3.12-slim"  # the container image (`hermes-fs sandbox build-image` makes one offline)
    network: bool = False  # give the container a network
    memory: str = "1g"  # the container's memory limit (Docker's notation)
    cpus: float = 1.0  # the container's CPU limit
    timeout_s: int = 120  # a command running longer is killed, with every process it started
    ssh: SshConfig = field(default_factory=SshConfig)  # backend ssh: where, as whom, verified how


@dataclass
class NotifyConfig:
    """Notifications through Apprise."""

    targets: dict[str, str] = field(default_factory=dict)  # name -> Apprise URL; tokens as ${NAME} from .hermes/secrets.env
    events: list[str] = field(  # which events are sent to every target
        default_factory=lambda: ["refine_pending", "cron_output", "cron_failure", "sync_conflict"]
    )


@dataclass
class CronConfig:
    """Defaults for scheduled jobs (cron/*.md); a job's own frontmatter wins."""

    timezone: str = "UTC"  # an IANA time zone name (Europe/Paris)
    catch_up: bool = True  # a due time missed while the daemon was down runs once on start


@dataclass
class GitConfig:
    """Commits."""

    author: str = "hermes-fs <agent@hermes-fs.invalid>"  # the agent's own writes; you stay the committer


@dataclass
class McpServerConfig:
    """One MCP server the agent may use: a command (stdio) or a url (streamable HTTP)."""

    command: str | None = None  # the program of a stdio server
    args: list[str] = field(default_factory=list)  # its arguments
    cwd: str | None = None  # the folder a stdio server starts in (null: the one hermes-fs runs in); files it saves land there
    env: dict[str, str] = field(default_factory=dict)  # values may say ${NAME} (from .hermes/secrets.env)
    url: str | None = None  # the URL of a streamable-HTTP server (instead of command)
    headers: dict[str, str] = field(default_factory=dict)  # the same ${NAME} expansion
    tools: list[str] | None = None  # allow-list of the server's tool names; null = all
    timeout_s: float = 30.0  # a call (or the start) taking longer is a tool error the model sees
    unattended: bool = False  # true: gateway chats, cron jobs, inbox requests and webhooks get it too (default: only chat, run, acp)


@dataclass
class McpConfig:
    """Other MCP servers whose tools the agent may use."""

    servers: dict[str, McpServerConfig] = field(default_factory=dict)  # name -> server; tools appear as <name>__<tool>


# -- §15: gateway, several machines, the web page, curation ----------------------------------------


@dataclass
class Section:
    """A part of hermes.yaml validated later by its owner (a gateway channel's settings, declared by
    its adapter): the raw mapping, kept with its dotted prefix and the file's line numbers so the
    owner's errors name the key and line as a setting of this file does (`build_section`)."""

    name: str
    data: dict[str, Any]
    prefix: str  # "gateway.<name>."
    filename: str
    lines: dict[str, int]

    @property
    def line(self) -> int | None:
        return self.lines.get(self.prefix.rstrip("."))


def build_section(cls: type, section: Section):
    """`section` as the dataclass `cls` (strict, as every setting: an unknown key or a wrong type is
    a ConfigError naming the dotted key and its line)."""
    return _build(cls, section.data, section.prefix, section.filename, section.lines)


@dataclass
class DestinationConfig:
    """A place, other than the chat a request came from, where the agent may send files: a chat of
    a configured channel, named by you. Only the senders listed may direct files there."""

    channel: str = ""  # a channel configured under gateway: (telegram, matrix, email, slack, ...)
    chat: str = ""  # where on it: a chat or channel id, a room id, an e-mail address
    thread: str | None = None  # optional: a thread in that chat
    senders: list[str] = field(default_factory=list)  # "<channel>:<sender id>" who may send here; empty: nobody


@dataclass
class GatewayConfig:
    """Chat and events from outside, run by the daemon; a channel is on when its key is set."""

    # every other key under `gateway:` is a channel's section, validated by that channel's adapter
    # (service/gateway/registry.py); a section set to null is off
    channels: dict[str, Section] = field(default_factory=dict, metadata={"rest": True})
    allow_local_shell: bool = False  # gateway sessions never get the host shell unless this says so
    workers: int = 2  # chats answered at once (each chat's messages run one at a time, in order)
    sender_rate_per_min: int = 20  # messages a minute from one sender; more are answered once, not run
    commit_idle_s: float = 10.0  # chat results and transcripts are committed after this long without a message
    retry_base_s: float = 2.0  # first wait before a reply that could not be sent is tried again (doubling)
    # name -> a chat where files may also be sent (send_file's `to`), e.g. your Slack channel or mailbox
    destinations: dict[str, DestinationConfig] = field(default_factory=dict)


# the tools a customer's turn may ever be offered (support.tools picks among them): reading the
# agent's skills and memory, and handing the chat to a person; nothing that writes, runs or sends
CUSTOMER_TOOLS = ("skill_view", "skill_search", "memory_read", "handoff")


@dataclass
class HandoffChat:
    """A chat of a configured gateway channel that receives hand-offs (and from which the owner
    answers with /reply and /resume)."""

    channel: str = ""  # a channel configured under gateway: (whatsapp, signal, discord, telegram, ...)
    chat: str = ""  # the chat there: a phone number, a channel or user id, a room
    thread: str | None = None  # optional: a thread in that chat


@dataclass
class HandoffConfig:
    """Where a hand-off goes: the owner, told of the chat and what was tried."""

    # a notify target's name (notify.targets), or a gateway chat {channel, chat}; unset: a hand-off
    # still silences the chat and is listed by `gateway handoffs`, but nobody is told
    owner: str | HandoffChat | None = None


@dataclass
class SupportConfig:
    """Customers: people a channel with `customers: true` answers though they are not on its allow
    list. Their turns get these tools and no others (never a write, a shell, a file or another chat)."""

    # all that a customer's turn may use, among skill_view, skill_search, memory_read, handoff
    tools: list[str] = field(default_factory=lambda: ["skill_view", "memory_read", "handoff"])
    handoff: HandoffConfig = field(default_factory=HandoffConfig)


@dataclass
class VoiceConfig:
    """Voice messages from the gateway's chats: transcribed, and the transcript is the message.
    The audio itself is never stored: held in memory while it is transcribed, then dropped."""

    # pocketsphinx: offline, with the English model its package ships (rough on free speech);
    # api: a hosted model through litellm's transcription (accurate); off: voice messages are
    # answered that voice is off. YAML reads an unquoted `off` as false, which means the same.
    engine: str | bool = "pocketsphinx"
    model: str = "whisper-1"  # api: the litellm transcription route (whisper-1, groq/whisper-large-v3, ...)
    api_base: str | None = None  # api: the server's URL (null: the provider's own)
    api_key_env: str | None = None  # api: the NAME of the variable holding its key (null: the provider's usual one)
    language: str | None = None  # api: the language spoken (ISO 639-1, e.g. en), a hint; null: detected
    max_seconds: int = 300  # longer voice messages are answered with the limit, not transcribed
    max_bytes: int = 20_000_000  # larger audio files are answered with the limit, never downloaded

    @property
    def engine_name(self) -> str:
        return "off" if self.engine is False else str(self.engine)


@dataclass
class RemoteConfig:
    """The git remote that carries the vault between machines; unset: one machine."""

    url: str = ""  # any URL git accepts; credentials stay with git (helpers, ssh keys)
    branch: str = "main"  # the remote's branch that is main

    @property
    def ref(self) -> str:
        """The remote branch that is the vault's main, as a full ref."""
        return f"refs/heads/{self.branch}"


@dataclass
class SyncConfig:
    """Several machines: how often, and how long a dead machine's work waits."""

    interval_s: float = 5.0  # how often the daemon asks the remote for news (its own commits go up at once)
    claim_ttl_s: float = 30.0  # a running claim not renewed this long belongs to a dead machine
    lease_s: float = 15.0  # a channel lease (one gateway consumer per account) not renewed this long is free


@dataclass
class DaemonConfig:
    """The daemon: the one `run` and `chat` start by themselves when none is running, and its model worker."""

    autostart: bool = True  # run/chat start a daemon that serves turns only (no watcher, cron, gateway, sync)
    idle_stop_min: float = 30.0  # that daemon stops after this many minutes without a turn; 0: it stays
    model_worker_idle_s: float = 600.0  # the model layer (litellm) runs in a worker process the daemon starts; after this many seconds without a model call it is let go (memory back) and the next call starts it again; 0: never let go (the daemon run and chat start keeps it until it stops)


@dataclass
class WebConfig:
    """The web page."""

    enabled: bool = False  # the daemon serves the page too (`hermes-fs web` serves it alone)
    listen: str = "127.0.0.1:9120"  # host:port; not loopback needs HERMES_WEB_TOKEN in .hermes/secrets.env


@dataclass
class CurateConfig:
    """The curator: what to take away from the library (curate/ branches)."""

    every: str | bool = "weekly"  # how often the daemon curates: weekly, daily, a schedule as in cron jobs, or false
    stale_days: int = 30  # a skill unused this long, and not edited by a person, is archived
    policy: str = "review"  # review | auto: what becomes of the curate/ branch (the daemon's runs too)


@dataclass
class Config:
    """A vault's hermes.yaml. A field's comment is its meaning in docs/reference/hermes-yaml.md."""

    model: str = "openai/gpt-4o-mini"  # a litellm route: provider/model (anthropic/..., ollama_chat/..., openai/<name> + api_base)
    api_base: str | None = None  # the URL of an OpenAI-compatible or local server (Ollama, llama.cpp, LM Studio, vLLM)
    api_key_env: str | None = None  # the NAME of the variable holding the key; null: the provider's usual one
    models: ModelsConfig = field(default_factory=ModelsConfig)
    refine: RefineConfig = field(default_factory=RefineConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    skills: SkillsConfig = field(default_factory=SkillsConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    delegation: DelegationConfig = field(default_factory=DelegationConfig)
    notify: NotifyConfig = field(default_factory=NotifyConfig)
    cron: CronConfig = field(default_factory=CronConfig)
    git: GitConfig = field(default_factory=GitConfig)
    mcp: McpConfig = field(default_factory=McpConfig)
    learn: LearnConfig = field(default_factory=LearnConfig)
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    voice: VoiceConfig = field(default_factory=VoiceConfig)
    support: SupportConfig = field(default_factory=SupportConfig)
    remote: RemoteConfig | None = None
    sync: SyncConfig = field(default_factory=SyncConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    web: WebConfig = field(default_factory=WebConfig)
    curate: CurateConfig = field(default_factory=CurateConfig)

    def model_for(self, task: str) -> str:
        """The model for a task (refine, cron, learn), falling back to `model`."""
        return getattr(self.models, task, None) or self.model


# Integer settings with a range: a port outside it would only fail later, at connect time, obscurely.
RANGES = {"sandbox.ssh.port": (1, 65535)}

CHOICES = {
    "refine.policy": {p.value for p in Policy},
    "sandbox.backend": {"docker", "ssh", "local", "none"},
    "notify.events": {"refine_pending", "refine_failed", "cron_output", "cron_failure", "sync_conflict"},
    "refine.mode": {m.value for m in ReviewMode},
    "learn.mode": {m.value for m in ReviewMode},
    "curate.policy": {Policy.REVIEW.value, Policy.AUTO.value},
    "tools.text_calls": {"auto", "off"},
    "skills.embeddings": {"auto"},
    "voice.engine": {"pocketsphinx", "api", "off"},
    "support.tools": set(CUSTOMER_TOOLS),
}
RENAMED = {"from": "from_"}  # YAML keys that are Python keywords


def load_config(path: Path, adjust: Callable[[dict], dict] | None = None) -> Config:
    """Read and validate hermes.yaml; a missing file gives the defaults. `adjust` changes the raw
    settings before they are built (the changes held until approved here: held_settings)."""
    if not path.exists():
        return Config()
    text = _read_text(path)
    return parse_config(text, str(path), adjust)


def parse_config(text: str, filename: str = CONFIG_NAME, adjust: Callable[[dict], dict] | None = None) -> Config:
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
    if adjust is not None and isinstance(data, dict):
        data = adjust(data)
    lines = _key_lines(node)
    config = _build(Config, data, "", filename, lines)
    _check_key_variables(data, "", filename, lines)
    return config


def _check_key_variables(data: Any, prefix: str, filename: str, lines: dict[str, int]) -> None:
    """Every `*_env` key (api_key_env, token_env, password_env, ...) names a variable; a key or token
    pasted there is refused without ever being shown, as an error message would otherwise print it."""
    import re

    from .secrets import scan_text

    if isinstance(data, list):
        for item in data:
            _check_key_variables(item, prefix, filename, lines)
    if not isinstance(data, dict):
        return
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict | list):
            _check_key_variables(value, dotted + ".", filename, lines)
        elif str(key).endswith("_env") and isinstance(value, str) and (
                not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,99}", value) or scan_text("", value)):
            raise ConfigError(f"'{dotted}' must be the name of an environment variable (e.g. OPENAI_API_KEY), "
                              "not the key itself (what is there looks like a key, so it is not shown): put the "
                              "key in .hermes/secrets.env as NAME=... and write NAME here", filename, lines.get(dotted))


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
    fields = dataclasses.fields(cls)
    names = {f.name for f in fields if not f.metadata.get("rest")}
    rest = next((f.name for f in fields if f.metadata.get("rest")), None)
    kwargs: dict[str, Any] = {rest: {}} if rest else {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        key = RENAMED.get(key, key) if RENAMED.get(key) in names else key
        if key not in names and rest is not None:  # a section its owner validates (build_section)
            if value is not None:
                if not isinstance(value, dict):
                    raise ConfigError(f"'{dotted}' must be a mapping", filename, lines.get(dotted))
                kwargs[rest][str(key)] = Section(str(key), value, dotted + ".", filename, lines)
            continue
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
        low, high = RANGES.get(dotted, (value, value))
        if not low <= value <= high:
            fail(f"from {low} to {high}")
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
