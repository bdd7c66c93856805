"""A conversation with the agent: the pieces wired together for `run`, `chat`, inbox and cron.

It owns the transcript (written as it goes, committed when the conversation ends), builds the
system prompt afresh each turn (memory may have changed), and gives the agent its tools.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from ..mind.search import search
from ..mind.sessions import Transcript
from ..store.provenance import Act
from ..store.vault import Vault
from .boundary import choose_workspace, customer_tools, mcp_servers_for, sandbox_for
from .delegate import Delegator, SubTask
from .loop import Agent, AgentConfig, TurnCancelled, TurnResult
from .model import LiteLLMModel, Model, ModelError, ModelSettings, OnText
from .outgoing import OUTBOX_DIR
from .prompt import current_project, system_prompt
from .sandbox import make_sandbox
from .text_calls import TextCallModel
from .tools import Permission, ToolBox, VaultCommitter

MODEL_ROLES = ("user", "assistant", "tool")
log = logging.getLogger(__name__)


@dataclass
class ConversationOptions:
    source: str = "cli"  # a boundary.Source: cli | run | acp | cron | inbox | mcp | gateway (unknown = unattended)
    task: str | None = None  # picks a per-task model (refine, cron, learn)
    model: str | None = None  # explicit model override
    workspace: Path | None = None
    project: str | None = None
    skills: list[str] = field(default_factory=list)  # loaded in full (cron jobs)
    max_steps: int = AgentConfig.max_steps  # the one default: the agent loop's
    resume: str | None = None  # a session id to continue
    on_tool: Callable[[str], None] | None = None  # told of each tool call as it is made (the chat screen)
    on_message: Callable[[dict], None] | None = None  # each message as recorded: calls before they run, results after
    permission: Permission | None = None  # asked before each change a tool makes (an editor); None: never asked
    commit_on_end: bool = True  # False: the caller commits the transcript with its own files (a cron run)
    cwd: Path | None = None  # the person's current folder (a daemon serving a CLI is elsewhere)
    mcp_servers: list[str] | None = None  # which of hermes.yaml's mcp.servers (None: all of them)
    environ: dict[str, str] | None = None  # model key variables of a CLI served by the daemon (None: ours)
    depth: int = 0  # 0: the session a person or job started; n: a sub-agent n `delegate` calls below it
    tools: list[str] | None = None  # only these of the agent's tools (a sub-agent's subset); None: all
    parent: str | None = None  # the session that delegated this one (a sub-agent's)
    send_files: bool = False  # offer send_file: the answer goes somewhere that carries files (a chat)
    destinations: tuple[str, ...] = ()  # gateway.destinations this session's sender may send files to
    customer: bool = False  # a customer's chat (gateway `customers: true`): support.tools only, nothing else
    handoff: Callable[[str, str], str] | None = None  # the `handoff` tool's action (a customer's chat to its owner)


def describe_call(name: str, arguments: str) -> str:
    """`memory(action=add, file=USER.md)`: a tool call in one short line for people."""
    try:
        args = json.loads(arguments or "{}")
        shown = ", ".join(f"{k}={str(v)[:40]}" for k, v in args.items() if k not in ("content", "text", "new_text"))
    except (ValueError, AttributeError):
        shown = "…"
    return f"{name}({shown})"


class Conversation:
    def __init__(self, vault: Vault, options: ConversationOptions | None = None, model: Model | None = None):
        self.vault = vault
        self.options = options or ConversationOptions()
        self.cancel = threading.Event()  # set from another thread: the model request is closed, the turn stops
        self.model = model or LiteLLMModel(
            ModelSettings.for_vault(vault, self.options.task, self.options.model, self.options.environ), self.cancel)
        if self.options.resume:
            self.transcript = Transcript.load(vault.root, self.options.resume)
        else:
            self.transcript = Transcript.start(vault.root, self.model.name, str(self.options.source))
        self.workspace = self.options.workspace or choose_workspace(
            self.options.cwd or Path.cwd(), vault.root, vault.state_dir / "workspace", self.options.source)
        self.project = self.options.project or current_project(vault, self.workspace)
        sandbox = sandbox_for(vault.config.sandbox, self.options.source, vault.config.gateway.allow_local_shell)
        self.sandbox = make_sandbox(sandbox, self.workspace, self.transcript.id)
        self.tools = ToolBox(
            files=vault.files, config=vault.config, committer=VaultCommitter(vault.git, Act.session(self.transcript.id)),
            vault_root=vault.root, workspace=self.workspace,
            sandbox=self.sandbox, searcher=partial(search, vault.root),
            mcp=None if self.options.customer else self._mcp_hub(), permission=self.options.permission,
        )
        if self.options.customer:  # decided here, where the turn's tools are built: nothing else is offered
            self.tools.enabled = customer_tools(vault.config.support.tools)
            self.tools.handoff = self.options.handoff
        elif self.options.send_files:
            self.tools.outbox = vault.state_dir / OUTBOX_DIR / self.transcript.id
            self.tools.enabled.append("send_file")
            self.tools.destinations = self.options.destinations
        if self.options.tools is not None:  # a sub-agent: never more than its parent chose for it
            self.tools.enabled = [t for t in self.tools.enabled if t in self.options.tools]
        if self.options.parent:
            self.transcript.set_parent(self.options.parent)
        self._note_lock = threading.Lock()  # sub-agents' threads note into this transcript too
        self.delegator: Delegator | None = None
        if self.options.depth < vault.config.delegation.max_depth and not self.options.customer:
            self.delegator = Delegator(vault.config.delegation, self._own_tools, self._start_child)
            self.tools.delegator = self.delegator
        asked: Model = TextCallModel(self.model) if vault.config.tools.read_text_calls else self.model
        self.agent = Agent(asked, self.tools, AgentConfig(self.options.max_steps), self._record, self.cancel)
        self.ended = False

    def _own_tools(self) -> list[str]:
        """Every tool this session is offered (its MCP servers' too): what a sub-agent may ask for."""
        return list(self.tools.enabled) + (self.tools.mcp.tool_names() if self.tools.mcp is not None else [])

    def _start_child(self, task: SubTask) -> Conversation:
        """A sub-agent for one delegated task: a session of its own linked both ways, the parent's
        model, sandbox kind and workspace, its own step budget, the task's tools. The MCP tools it
        names come from copies of the parent's servers started for it alone (its own browser,
        say), chosen by the same rules as the parent's."""
        o = self.options
        mcp = self.tools.mcp
        servers = sorted({s for s in (mcp.server_of(t) for t in task.tools) if s} if mcp is not None else set())
        child = Conversation(self.vault, ConversationOptions(
            source=o.source, task=o.task, model=o.model, workspace=self.workspace, project=self.project,
            max_steps=self.vault.config.delegation.max_steps, cwd=o.cwd, mcp_servers=servers, environ=o.environ,
            depth=o.depth + 1, tools=list(task.tools), parent=self.id,
            permission=o.permission))  # a sub-agent's changes are put to the same person
        self.note(f"delegated to session {child.id} ({', '.join(task.tools) or 'no tools'}): {task.goal[:200]}")
        return child

    def _mcp_hub(self):
        """The session's MCP servers (started on first use, stopped when the session ends): those
        the options name that this kind of session may use (boundary.mcp_servers_for); a
        sub-agent's offer only the tools its task names."""
        chosen = mcp_servers_for(self.vault.config.mcp.servers, self.options.source, self.options.mcp_servers)
        if not chosen:
            return None
        from .mcp_client import McpHub

        only = set(self.options.tools) if self.options.tools is not None else None
        return McpHub(chosen, self.vault.secrets(), only=only, cancel=self.cancel)

    @property
    def id(self) -> str:
        return self.transcript.id

    @property
    def user_turns(self) -> int:
        return self.transcript.user_turns

    @property
    def rel(self) -> str:
        return self.transcript.rel

    def ask(self, text: str, on_text: OnText | None = None) -> TurnResult:
        """One turn; with `on_text` the answer's text is streamed to it as the model writes it."""
        if not self.transcript.user_turns and self.transcript.meta.get("title") in (None, "", "untitled"):
            self.transcript.set_title(text)
        system = system_prompt(self.vault, text, self.project, self.options.skills, customer=self.options.customer)
        history = [m for m in self.transcript.messages if m["role"] in MODEL_ROLES]
        user = {"role": "user", "content": text}
        self.transcript.append(user)
        messages = [{"role": "system", "content": system}, *history, user]
        self.cancel.clear()
        self.tools.take_outgoing()  # files staged by an interrupted turn never ride on the next answer
        try:
            turn = self.agent.run(messages, on_text)
        except ModelError as exc:
            self.note(f"model error: {exc}")
            raise
        except (KeyboardInterrupt, TurnCancelled):
            self._close_open_calls("interrupted by the user")
            self.note("turn interrupted by the user")
            raise
        turn.files = self.tools.take_outgoing()
        for f in turn.files:
            self.note(f"file sent with the answer: {f.name} ({f.size} bytes)")
        return turn

    def interrupt(self) -> None:
        """From another thread (Ctrl-C in a warm chat): stop the turn before its next step and kill
        the command it is running now, so the person is not kept waiting for it."""
        self.cancel.set()
        if self.delegator is not None:
            self.delegator.stop()  # every sub-agent stops too
        try:
            self.sandbox.interrupt()
        except Exception:  # the turn still stops at its next step
            log.warning("could not stop the running command", exc_info=True)

    def _record(self, message: dict) -> None:
        self.transcript.append(message)
        if self.options.on_message:
            self.options.on_message(message)
        if self.options.on_tool:
            for call in message.get("tool_calls") or []:
                self.options.on_tool(describe_call(call["function"]["name"], call["function"]["arguments"]))

    def note(self, text: str) -> None:
        """A line for people reading the transcript; never sent to the model."""
        with self._note_lock:
            self.transcript.append({"role": "note", "content": text})

    def _close_open_calls(self, reason: str) -> None:
        """Answer tool calls left without a result, so the history stays valid for the next turn."""
        answered = {m.get("tool_call_id") for m in self.transcript.messages if m["role"] == "tool"}
        for m in list(self.transcript.messages):
            for call in m.get("tool_calls") or []:
                if call["id"] not in answered:
                    self.transcript.append({"role": "tool", "tool_call_id": call["id"],
                                            "name": call["function"]["name"], "content": f"error: {reason}"})

    def end(self) -> str | None:
        """Commit the transcript (and only it) on main; close the sandbox. Safe to call twice."""
        if self.ended:
            return None
        self.ended = True
        self.sandbox.close()
        if self.tools.mcp is not None:
            self.tools.mcp.stop()
        if not any(m["role"] == "assistant" for m in self.transcript.messages):
            # no turn got an answer (a missing key, a dead server): nothing worth a commit
            self.transcript.path.unlink(missing_ok=True)
            return None
        if not self.options.commit_on_end:
            return None
        title = self.transcript.meta.get("title") or self.id
        return self.vault.git.commit_paths([self.transcript.rel], f"session: {title}", Act.session(self.id))

    def __enter__(self) -> Conversation:
        return self

    def __exit__(self, *exc) -> None:
        self.end()
