"""The agent's MCP servers (`mcp.servers` in hermes.yaml): their tools, named `<server>__<tool>`.

Servers start lazily, once per session (the first time the agent's tools are listed), and stop
with it. The official SDK is async; a hub runs one event loop in a thread of its own and the agent
calls into it with a timeout, so a server that fails to start, hangs, crashes mid-call or returns
garbage is a tool error the model can act on, never a crash or a hang of the session.

A stdio server runs in a session of its own (the SDK starts it so), so a terminal's Ctrl-C is for
the turn and never reaches it: the session's cancel event abandons the call in flight (the server
is told with notifications/cancelled) and the server stays up for the next turn. It ends with the
session (stdin closed, then its whole process tree killed), or, when our process is killed, when
it reads the end of its stdin. "Its whole process tree" is found two ways: by parent links, and by a
mark in the environment each stdio server is started with (HERMES_MCP_RUN), which its children
inherit, so a daemon it started (a double fork, adopted by init, in a session of its own) ends too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import threading
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from ..store.config import McpServerConfig
from ..store.notify import expand

log = logging.getLogger(__name__)
SEP = "__"
START_TIMEOUT_S = 20.0
POLL_S = 0.05  # how often a waiting call looks at the session's cancel event
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what providers accept (OpenAI, Anthropic)
MAX_SCHEMA_BYTES = 16_000  # one tool's parameters, sent with every request of the session
MAX_SCHEMAS_BYTES = 64_000  # all MCP tools together
MAX_RESULT_CHARS = 50_000  # one tool result, sent to the model and kept in the transcript
RUN_MARK = "HERMES_MCP_RUN"  # in each stdio server's environment: <hub id>; what carries it is the hub's


class Interrupted(Exception):
    """The session's cancel event was set while a call waited."""


@dataclass
class ServerState:
    name: str
    config: McpServerConfig
    client: Any = None
    tools: list[dict] = field(default_factory=list)  # OpenAI-style schemas, names prefixed
    names: dict[str, str] = field(default_factory=dict)  # the name the model sees -> the server's own
    notes: list[str] = field(default_factory=list)  # tools dropped or renamed, and why
    pids: list[int] = field(default_factory=list)  # the server's process (stdio), to stop its children too
    error: str | None = None
    task: Any = None  # the task that holds the connection open (anyio wants one task to enter and exit)
    stop: Any = None  # asyncio.Event: set to close the connection


class McpHub:
    """The MCP servers of one session."""

    def __init__(self, servers: dict[str, McpServerConfig], secrets: dict[str, str] | None = None,
                 only: set[str] | None = None, cancel: threading.Event | None = None):
        self.servers = {name: ServerState(name, cfg) for name, cfg in servers.items()}
        self.secrets = secrets or {}
        self.only = only  # offer only these names (`<server>__<tool>`, a sub-agent's subset); None: all
        self.cancel = cancel  # the session's: set (Ctrl-C), a tool call in flight is abandoned at once
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.started = False
        self.lock = threading.Lock()
        self.mark = f"{os.getpid()}-{id(self):x}-{time.monotonic_ns():x}"  # RUN_MARK's value for this hub

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start every server (once); a server that fails is remembered with its error."""
        with self.lock:
            if self.started or not self.servers:
                return
            self.started = True
            self.loop = asyncio.new_event_loop()
            self.thread = threading.Thread(target=self.loop.run_forever, name="mcp", daemon=True)
            self.thread.start()
            self._run(self._open(), START_TIMEOUT_S * max(1, len(self.servers)))

    async def _open(self) -> None:
        for state in self.servers.values():
            ready = asyncio.Event()
            state.stop = asyncio.Event()
            state.task = asyncio.create_task(self._hold(state, ready))
            try:
                await asyncio.wait_for(ready.wait(), state.config.timeout_s or START_TIMEOUT_S)
            except TimeoutError:
                state.error = f"did not start within {state.config.timeout_s:g} s"
                state.task.cancel()
            if state.error:
                log.warning("MCP server %s did not start: %s", state.name, state.error)

    async def _hold(self, state: ServerState, ready: asyncio.Event) -> None:
        """Open the connection, report ready, keep it until told to stop, close it (one task)."""
        try:
            async with AsyncExitStack() as stack:
                await self._connect(state, stack)
                ready.set()
                await state.stop.wait()
        except BaseException as exc:  # noqa: BLE001 - any failure of one server is that server's error
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            state.error = state.error or _one_line(exc) or type(exc).__name__
        finally:
            state.client = None
            ready.set()

    async def _connect(self, state: ServerState, stack: AsyncExitStack) -> None:
        from mcp import Client, StdioServerParameters
        from mcp.types import Implementation

        if not valid_server_name(state.name):
            raise ValueError("a server name may use letters, digits, - and _ (not __), at most 40")
        cfg = state.config
        if bool(cfg.command) == bool(cfg.url):
            raise ValueError("give either `command` (stdio) or `url` (HTTP), not both or neither")
        info = Implementation(name="hermes-fs", version="0.1.0")
        if cfg.command:
            env = {**_base_env(), **{k: expand(v, self.secrets) for k, v in cfg.env.items()}, RUN_MARK: self.mark}
            target: Any = StdioServerParameters(command=cfg.command, args=list(cfg.args), env=env, cwd=cfg.cwd)
        else:
            target = _http_transport(cfg, self.secrets)
        before = _children(os.getpid())
        client = await stack.enter_async_context(Client(target, client_info=info, read_timeout_seconds=cfg.timeout_s))
        state.pids = sorted(_children(os.getpid()) - before)
        listed = await client.list_tools()
        allowed = set(cfg.tools) if cfg.tools is not None else None
        self._offer(state, [t for t in listed.tools if allowed is None or t.name in allowed])
        state.client = client

    def _offer(self, state: ServerState, tools: list) -> None:
        """The server's tools as the model may see them: names reduced to what providers accept
        (one name each; a duplicate is dropped), schemas within the caps. What is cut is noted."""
        total = sum(len(json.dumps(t)) for s in self.servers.values() for t in s.tools)
        for tool in tools:
            raw = str(getattr(tool, "name", "") or "")
            name = safe_tool_name(state.name, raw)
            if self.only is not None and name not in self.only:
                continue
            schema = _schema(name, tool)
            size = len(json.dumps(schema))
            why = None
            if name in state.names or any(name in s.names for s in self.servers.values()):
                why = "its name is the same as another tool's once made safe"
            elif json.dumps(schema["function"]["parameters"]).__len__() > MAX_SCHEMA_BYTES:
                why = f"its schema is {size // 1000} KB, over the {MAX_SCHEMA_BYTES // 1000} KB sent per tool"
            elif total + size > MAX_SCHEMAS_BYTES:
                why = f"the MCP tools already take {total // 1000} KB of each request (at most {MAX_SCHEMAS_BYTES // 1000} KB)"
            if why:
                state.notes.append(f"tool {raw[:80]!r} of MCP server {state.name!r} not offered: {why}")
                log.warning("%s", state.notes[-1])
                continue
            if f"{state.name}{SEP}{raw}" != name:
                state.notes.append(f"tool {raw[:80]!r} of MCP server {state.name!r} offered as {name}")
            state.names[name] = raw
            state.tools.append(schema)
            total += size

    def stop(self) -> None:
        with self.lock:
            if not self.loop:
                return
            try:
                self._run(self._close(), 10)
            except Exception:  # a server that will not stop: its process ends with ours
                log.warning("MCP servers did not stop cleanly", exc_info=True)
            self.loop.call_soon_threadsafe(self.loop.stop)
            if self.thread:
                self.thread.join(5)
            self.loop = None

    async def _close(self) -> None:
        tasks = [s.task for s in self.servers.values() if s.task is not None]
        family = _family([pid for s in self.servers.values() for pid in s.pids])
        family.update(_marked(self.mark))
        for s in self.servers.values():
            if s.stop is not None:
                s.stop.set()
        if tasks:
            await asyncio.wait(tasks, timeout=8)
        family.update(_marked(self.mark))  # started while the servers stopped
        _kill(family)  # what a server started (even in a session of its own, or adopted by init) ends with it

    def _run(self, coro, timeout: float, cancel: threading.Event | None = None):
        """The coroutine's result, run on the hub's loop; on a timeout or `cancel` the coroutine is
        cancelled (the connection stays open for later calls) and TimeoutError/Interrupted raised."""
        assert self.loop is not None
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        deadline = time.monotonic() + timeout
        try:
            while True:
                if cancel is not None and cancel.is_set():
                    raise Interrupted()
                try:
                    return future.result(max(0.0, min(POLL_S, deadline - time.monotonic())))
                except TimeoutError:
                    if time.monotonic() >= deadline:
                        raise
        except (TimeoutError, Interrupted):
            future.cancel()
            raise

    # -- the agent's view ------------------------------------------------------------------------
    def schemas(self) -> list[dict]:
        self.start()
        return [t for s in self.servers.values() for t in s.tools]

    def owns(self, name: str) -> bool:
        return SEP in name and name.split(SEP, 1)[0] in self.servers

    def server_of(self, name: str) -> str | None:
        """The server a tool name belongs to (None: not an MCP tool of this hub)."""
        return name.split(SEP, 1)[0] if self.owns(name) else None

    def tool_names(self) -> list[str]:
        """The names offered to the model (starting the servers if need be)."""
        return [t["function"]["name"] for t in self.schemas()]

    def call(self, name: str, arguments: dict) -> str:
        """The result as text for the model, or `error: ...` (never raises)."""
        server, tool = name.split(SEP, 1)
        state = self.servers[server]
        self.start()
        if state.client is None:
            return f"error: MCP server {server!r} is not available ({state.error or 'not started'})"
        if name not in state.names:
            return f"error: {tool!r} is not a tool of MCP server {server!r} (or not allowed in hermes.yaml)"
        timeout = state.config.timeout_s or START_TIMEOUT_S
        if self.cancel is not None and self.cancel.is_set():
            return "error: interrupted by the user"
        try:
            result = self._run(state.client.call_tool(state.names[name], arguments), timeout, self.cancel)
        except TimeoutError:
            return f"error: MCP server {server!r} did not answer within {timeout:g} s"
        except Interrupted:
            return "error: interrupted by the user"
        except Exception as exc:  # a crash, a broken pipe, garbage on the wire
            return f"error: MCP server {server!r} failed: {_one_line(exc) or type(exc).__name__}"
        return _render(result)

    def status(self) -> list[tuple[str, bool, str]]:
        """For `doctor`: each server, whether it started, and its tool count or error."""
        self.start()
        return [(s.name, s.client is not None,
                 (f"{len(s.tools)} tool(s)" + "".join(f"; {n}" for n in s.notes)) if s.client is not None
                 else (s.error or "?"))
                for s in self.servers.values()]


def safe_tool_name(server: str, tool: str) -> str:
    """`<server>__<tool>` in the characters providers accept, at most 64: a name holding a line
    break, spaces or markup would make a provider refuse every request of the session."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", f"{server}{SEP}{tool}")[:64]
    return name if TOOL_NAME.match(name) else f"{server}{SEP}tool"


def _schema(name: str, tool) -> dict:
    schema = getattr(tool, "input_schema", None)
    params = schema if isinstance(schema, dict) else {"type": "object", "properties": {}}
    description = " ".join(str(getattr(tool, "description", "") or "").split())[:300]
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


def _render(result) -> str:
    parts = []
    for item in getattr(result, "content", None) or []:
        text = getattr(item, "text", None)
        parts.append(text if isinstance(text, str) else f"[{getattr(item, 'type', 'content')} omitted]")
    structured = getattr(result, "structured_content", None)
    text = "\n".join(parts) or (json.dumps(structured) if structured else "")
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"\n[... cut: the tool returned {len(text)} characters, the first {MAX_RESULT_CHARS} are kept]"
    if getattr(result, "is_error", False):
        return f"error: {text or 'the tool reported an error'}"
    return text or "(no output)"


def _children(pid: int) -> set[int]:
    return {p for p, (parent, _start) in _procs().items() if parent == pid}


def _descendants(pid: int) -> set[int]:
    """Every process below `pid` (by parent links in /proc; empty where there is no /proc)."""
    procs = _procs()
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, (parent, _start) in procs.items() if parent in frontier} - found
        found |= frontier
    return found


def _procs() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time): the start time tells a process from a later one given its pid."""
    out: dict[int, tuple[int, str]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    fields = f.read().decode(errors="replace").rsplit(")", 1)[1].split()
                out[int(entry)] = (int(fields[1]), fields[19])
            except (OSError, IndexError, ValueError):
                continue
    return out


def _family(pids: list[int]) -> dict[int, str]:
    procs = _procs()
    return {p: procs[p][1] for pid in pids for p in (pid, *_descendants(pid)) if p in procs}


def _marked(mark: str) -> dict[int, str]:
    """pid -> start time of every process whose environment carries RUN_MARK=mark (ours only: another
    user's environ is not readable)."""
    needle = f"{RUN_MARK}={mark}".encode()
    found: dict[int, str] = {}
    for pid, (_parent, start) in _procs().items():
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found[pid] = start
        except OSError:
            continue
    return found


def _kill(family: dict[int, str]) -> None:
    """SIGKILL each process still running with the start time it had (never a pid reused since)."""
    import signal

    procs = _procs()
    for pid, start in family.items():
        if pid in procs and procs[pid][1] == start:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_one_line(e) for e in exc.exceptions)
    return " ".join(str(exc).split())[:300]


def _base_env() -> dict[str, str]:
    """What a stdio server inherits: a minimal environment, not every secret of ours."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "SYSTEMROOT")
    return {k: v for k, v in os.environ.items() if k in keep}


def _http_transport(cfg: McpServerConfig, secrets: dict[str, str]):
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    assert cfg.url is not None
    headers = {k: expand(v, secrets) for k, v in cfg.headers.items()}
    if not headers:
        return cfg.url
    return streamable_http_client(cfg.url, http_client=httpx2.AsyncClient(headers=headers, timeout=cfg.timeout_s))


def valid_server_name(name: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9_-]{1,40}", name)) and SEP not in name
