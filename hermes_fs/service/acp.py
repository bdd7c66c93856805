"""`hermes-fs acp`: the agent in an editor, over the Agent Client Protocol on stdio.

One ACP session is one hermes-fs Conversation (source `acp`): its transcript is in sessions/,
refine works on it, the vault's memory and skills are in its prompt, and the editor's folder
(session/new's cwd) is its workspace. A turn runs in a thread of its own; what it says reaches the
editor as it is written (agent_message_chunk), each tool call as tool_call / tool_call_update.
Every change a tool would make is put to the editor (session/request_permission) through the
tools' Permission seam, after the trust boundary has let it through: the editor can only narrow
what the agent may do, never widen it, and a "no" (or a cancelled turn) is a tool error the model
sees. session/cancel stops the turn at once, as Ctrl-C does in chat; session/close and the editor
hanging up stop it too, and commit the transcript. session/load continues a saved session by its
id (any source: a chat, an earlier editor session), its history replayed to the editor first.
stdout carries the protocol only: anything else this process prints goes to stderr.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
import sys
from concurrent.futures import CancelledError as FutureCancelled
from dataclasses import dataclass, field
from typing import Any

import acp
from acp import schema
from acp.helpers import update_available_commands

from ..agent.conversation import Conversation, ConversationOptions, describe_call
from ..agent.model import TurnCancelled
from ..agent.tools import READ_ONLY_TOOLS, ToolRequest
from ..errors import HermesError, InputError, SessionGone
from ..mind.sessions import session_path
from ..store.vault import Vault
from .auto_review import AutoReview

log = logging.getLogger(__name__)

RESULT_SHOWN = 4_000  # characters of a tool's result shown in the editor (the model gets it all)
ALLOW, ALLOW_ALWAYS, REJECT = "allow", "allow-always", "reject"
OPTIONS = [
    schema.PermissionOption(option_id=ALLOW, name="Allow", kind="allow_once"),
    schema.PermissionOption(option_id=ALLOW_ALWAYS, name="Allow for this session", kind="allow_always"),
    schema.PermissionOption(option_id=REJECT, name="Reject", kind="reject_once"),
]
COMMANDS = [schema.AvailableCommand(
    name="refine", description="review this session in the background (the result: a refine/ branch to review)",
    input=schema.AvailableCommandInput(root=schema.UnstructuredCommandInput(hint="focus (optional)")))]


def tool_kind(name: str) -> schema.ToolKind:
    """The ACP kind of a hermes tool, for the editor's icons (what it may do is decided elsewhere)."""
    if name in READ_ONLY_TOOLS:
        return "search" if name.endswith("_search") else "read"
    kinds: dict[str, schema.ToolKind] = {"shell": "execute", "write_file": "edit", "memory": "edit", "skill_manage": "edit"}
    return kinds.get(name, "other")


@dataclass
class EditorSession:
    """One editor session: its Conversation, and the bridge from the turn's thread to the event loop."""

    conversation: Conversation
    loop: asyncio.AbstractEventLoop
    conn: Any  # the editor (acp.Client)
    updates: asyncio.Queue = field(default_factory=asyncio.Queue)  # sent in order by one task
    running: list[str] = field(default_factory=list)  # this turn's tool calls not yet answered, in order
    always: set[str] = field(default_factory=set)  # kinds the person allowed for the whole session
    turn: int = 0
    busy: asyncio.Lock = field(default_factory=asyncio.Lock)  # one prompt at a time

    @property
    def id(self) -> str:
        return self.conversation.id

    # -- from the turn's thread ----------------------------------------------------------------------
    def send(self, update: Any) -> None:
        """Queue an update for the editor, from the turn's thread or from the loop itself."""
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is self.loop:
            self.updates.put_nowait(update)
        else:
            self.loop.call_soon_threadsafe(self.updates.put_nowait, update)

    def on_text(self, text: str) -> None:
        self.send(acp.update_agent_message_text(text))

    def on_message(self, message: dict) -> None:
        """Tool calls as the model makes them (before they run), their results once they have."""
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        for call in calls or []:
            fn = call["function"]
            call_id = f"{self.turn}-{call['id']}"
            self.running.append(call_id)
            self.send(acp.start_tool_call(call_id, describe_call(fn["name"], fn["arguments"]), kind=tool_kind(fn["name"]),
                                          status="pending", raw_input=_raw(fn["arguments"])))
        if message.get("role") == "tool":
            call_id = f"{self.turn}-{message.get('tool_call_id')}"
            if call_id in self.running:
                self.running.remove(call_id)
            content = str(message.get("content") or "")
            shown = content if len(content) <= RESULT_SHOWN else content[:RESULT_SHOWN] + "\n[… cut]"
            self.send(acp.update_tool_call(call_id, status="failed" if content.startswith("error:") else "completed",
                                           content=[acp.tool_content(acp.text_block(shown))]))

    def allow(self, request: ToolRequest) -> bool:
        """tools.Permission: ask the editor, and wait for its answer (or the turn's cancel: a no)."""
        if request.kind in self.always:
            return True
        call_id = self.running[0] if self.running else f"{self.turn}-{request.tool}"
        future = asyncio.run_coroutine_threadsafe(self._ask(call_id, request), self.loop)
        cancel = self.conversation.cancel
        while not cancel.is_set():
            try:
                return future.result(timeout=0.1)
            except TimeoutError:
                continue
            except FutureCancelled:
                return False
            except Exception:  # the editor is gone or answered nonsense: default deny
                log.warning("permission request failed", exc_info=True)
                return False
        future.cancel()
        return False

    # -- on the event loop ----------------------------------------------------------------------------
    async def _ask(self, call_id: str, request: ToolRequest) -> bool:
        await self.updates.join()  # the editor has the tool call before it is asked about it
        locations = [schema.ToolCallLocation(path=p) for p in request.paths if os.path.isabs(p)]
        content: list[Any] | None = ([acp.tool_diff_content(request.paths[0], request.content)]
                   if request.content is not None and locations else None)
        update = schema.ToolCallUpdate(tool_call_id=call_id, title=request.title, kind=request.kind,  # type: ignore[arg-type]
                                       status="pending", locations=locations or None, content=content)
        answer = await self.conn.request_permission(session_id=self.id, tool_call=update, options=OPTIONS)
        outcome = answer.outcome
        if not isinstance(outcome, schema.AllowedOutcome):
            return False
        if outcome.option_id == ALLOW_ALWAYS:
            self.always.add(request.kind)
        return outcome.option_id in (ALLOW, ALLOW_ALWAYS)

    async def pump(self) -> None:
        """Send the queued updates in order, for as long as the session lives."""
        while True:
            update = await self.updates.get()
            try:
                await self.conn.session_update(session_id=self.id, update=update)
            except Exception:  # a closed editor: the turn still ends and the transcript is kept
                log.warning("could not send an update to the editor", exc_info=True)
            finally:
                self.updates.task_done()


def _raw(arguments: str) -> Any:
    try:
        return json.loads(arguments or "{}")
    except ValueError:
        return arguments


def prompt_text(blocks: list) -> str:
    """The person's message: its text blocks, and any resource the editor embedded (a file, a
    selection) as a fenced block under its URI; other kinds (images, audio) are not sent on."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, schema.TextContentBlock):
            parts.append(block.text)
        elif isinstance(block, schema.EmbeddedResourceContentBlock):
            res = block.resource
            if isinstance(res, schema.TextResourceContents):
                parts.append(f"{res.uri}:\n```\n{res.text}\n```")
        elif isinstance(block, schema.ResourceContentBlock):
            parts.append(f"(see {block.uri})")
    return "\n\n".join(p for p in parts if p)


class HermesAgent:
    """acp.Agent: the editor's requests, each session a Conversation on the vault."""

    def __init__(self, vault: Vault, version: str):
        self.vault = vault
        self.version = version  # the package's, told to the editor
        self.conn: Any = None
        self.sessions: dict[str, EditorSession] = {}
        self.pumps: list[asyncio.Task] = []
        self.reviews = AutoReview(vault, self._reviewed)

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, client_capabilities: Any = None, client_info: Any = None,
                         **kwargs: Any) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=min(protocol_version, acp.PROTOCOL_VERSION),
            agent_capabilities=schema.AgentCapabilities(
                load_session=True, prompt_capabilities=schema.PromptCapabilities(embedded_context=True),
                session_capabilities=schema.SessionCapabilities(close=schema.SessionCloseCapabilities())),
            agent_info=schema.Implementation(name="hermes-fs", title="hermes-fs", version=self.version))

    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        return None  # model keys come from the vault's settings and environment, as in chat

    async def new_session(self, cwd: str, additional_directories: Any = None, mcp_servers: Any = None,
                          **kwargs: Any) -> schema.NewSessionResponse:
        session = await self._open(cwd)
        return schema.NewSessionResponse(session_id=session.id)

    async def load_session(self, cwd: str, session_id: str, mcp_servers: Any = None, additional_directories: Any = None,
                           **kwargs: Any) -> schema.LoadSessionResponse:
        """Continue a saved session: its messages and answers are replayed to the editor (before
        this returns, as the protocol asks), and the next prompt goes on from them. A session open
        here already is not opened twice: two Conversations would both append to its file."""
        session = self.sessions.get(session_id)
        if session is None:
            try:
                session_path(session_id)  # an id, never a path (nor empty: that would start a new session)
                session = await self._open(cwd, resume=session_id)
            except (InputError, SessionGone) as exc:  # not a session id, or no such session here
                raise acp.RequestError.invalid_params({"sessionId": session_id, "message": str(exc)}) from exc
        async with session.busy:
            for message in session.conversation.transcript.messages:
                content = message.get("content")
                if message["role"] == "user" and isinstance(content, str):
                    session.send(acp.update_user_message_text(content))
                elif message["role"] == "assistant" and isinstance(content, str) and content:
                    session.send(acp.update_agent_message_text(content))
            await session.updates.join()
        return schema.LoadSessionResponse()

    async def _open(self, cwd: str, resume: str | None = None) -> EditorSession:
        loop = asyncio.get_running_loop()
        session: EditorSession | None = None

        def open_conversation() -> Conversation:
            options = ConversationOptions(source="acp", cwd=_folder(cwd), resume=resume,
                                          on_message=lambda m: session.on_message(m) if session else None,
                                          permission=_Deferred(lambda: session))
            return Conversation(self.vault, options)

        conversation = await asyncio.to_thread(open_conversation)
        session = EditorSession(conversation, loop, self.conn)
        self.sessions[session.id] = session
        self.pumps.append(asyncio.create_task(session.pump()))
        session.send(update_available_commands(COMMANDS))
        return session

    async def prompt(self, session_id: str, prompt: list, **kwargs: Any) -> schema.PromptResponse:
        session = self._session(session_id)
        text = prompt_text(prompt).strip()
        async with session.busy:
            session.turn += 1
            session.running.clear()
            if text.split(" ", 1)[0] == "/refine":
                reason = await self._refine(session, text[len("/refine"):].strip())
            else:
                reason = await self._turn(session, text)
            await session.updates.join()  # every chunk of this turn reaches the editor before its end
            return schema.PromptResponse(stop_reason=reason)  # type: ignore[arg-type]

    async def _turn(self, session: EditorSession, text: str) -> str:
        if not text:
            session.send(acp.update_agent_message_text("(an empty message: nothing to do)"))
            return "end_turn"
        try:
            result = await asyncio.to_thread(session.conversation.ask, text, session.on_text)
        except TurnCancelled:
            return "cancelled"
        except HermesError as exc:
            if session.conversation.cancel.is_set():
                return "cancelled"
            raise acp.RequestError.internal_error({"message": str(exc)}) from exc
        if self.reviews.after_turn(session.id, session.conversation.user_turns):
            session.send(acp.update_agent_message_text("\n\n(automatic review of this session started)"))
        return "max_turn_requests" if result.stopped else "end_turn"

    async def _refine(self, session: EditorSession, focus: str) -> str:
        """`/refine [focus]`: review this session now; its outcome is the answer (the turn waits for
        it, and a cancel leaves it running in the background)."""
        from ..learning.refine import RefineOptions, refine

        options = RefineOptions(session=session.id, focus=focus or None)
        session.send(acp.update_agent_message_text("refine started…\n"))
        job = asyncio.ensure_future(asyncio.to_thread(lambda: refine(self.vault, options).line()))
        session.conversation.cancel.clear()
        stop = asyncio.ensure_future(asyncio.to_thread(session.conversation.cancel.wait))
        done, _ = await asyncio.wait({job, stop}, return_when=asyncio.FIRST_COMPLETED)
        if job not in done:
            session.send(acp.update_agent_message_text("(refine goes on in the background: see `hermes-fs review`)"))
            return "cancelled"
        session.conversation.cancel.set()  # lets the waiting thread go
        try:
            line = job.result()
        except HermesError as exc:
            line = f"refine failed: {exc}"
        session.send(acp.update_agent_message_text(line))
        return "end_turn"

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self.sessions.get(session_id)
        if session is not None:
            session.conversation.interrupt()

    async def close_session(self, session_id: str, **kwargs: Any) -> schema.CloseSessionResponse:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            session.conversation.interrupt()
            async with session.busy:
                await asyncio.to_thread(session.conversation.end)
        return schema.CloseSessionResponse()

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise acp.RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    def end(self) -> None:
        """The editor hung up: stop what runs, commit every session's transcript."""
        for session in self.sessions.values():
            session.conversation.interrupt()
        for session in self.sessions.values():
            try:
                session.conversation.end()
            except Exception:
                log.warning("could not save session %s", session.id, exc_info=True)
        self.reviews.join()

    def _session(self, session_id: str) -> EditorSession:
        session = self.sessions.get(session_id)
        if session is None:
            raise acp.RequestError.invalid_params({"sessionId": session_id, "message": "no such session"})
        return session

    def _reviewed(self, session_id: str, line: str) -> None:
        session = self.sessions.get(session_id)
        if session is not None:
            session.send(acp.update_agent_message_text(f"\n\n({line})"))


class _Deferred:
    """tools.Permission for a session not yet built when its Conversation is (the id comes first);
    with no session yet, nothing is allowed."""

    def __init__(self, session):
        self.session = session

    def allow(self, request: ToolRequest) -> bool:
        session = self.session()
        return bool(session is not None and session.allow(request))


def _folder(cwd: str):
    from pathlib import Path

    return Path(cwd) if cwd and os.path.isabs(cwd) else None


def serve_stdio(vault: Vault, version: str) -> None:
    """Serve ACP on this process's stdin/stdout until the editor closes them."""
    for stream in (sys.stdin, sys.stdout):
        mode = os.fstat(stream.fileno()).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
            raise InputError("hermes-fs acp talks to an editor over a pipe: start it from the editor "
                             "(docs: the editors guide), not with a file as its input or output")
    protocol_out = os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a stray print can never corrupt the protocol
    sys.stdout = sys.stderr
    agent = HermesAgent(vault, version)
    try:
        asyncio.run(_serve(agent, protocol_out))
    finally:
        agent.end()


async def _serve(agent: HermesAgent, protocol_out: int) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=50 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin,
                                                        os.fdopen(protocol_out, "wb", buffering=0))
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    try:
        # session/close is in the SDK's unstable set (0.12): without the flag it answers "method not
        # found" before reaching close_session; the other unstable methods are not implemented here,
        # so they still are not found
        await acp.run_agent(agent, writer, reader, use_unstable_protocol=True)  # type: ignore[arg-type]  # HermesAgent implements what it serves
    finally:  # the editor hung up: turns still running stop now (asyncio.run waits for their threads)
        for session in agent.sessions.values():
            session.conversation.interrupt()
