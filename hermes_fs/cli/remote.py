"""The CLI's side of warm turns: a conversation served by the running daemon (service/warm.py).

`connect` returns None (and the CLI runs the turn in its own process, as without a daemon) when no
daemon answers within a short time; everything else behaves like `Conversation`: the same answers,
errors, exit codes, transcripts and commits, because the daemon runs the very same code.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..agent.model import TurnCancelled
from ..errors import HermesError

CONNECT_TIMEOUT_S = 2.0  # a daemon that has not opened the conversation by then is not used
FRESH_CONNECT_TIMEOUT_S = 60.0  # the same for a daemon that has just started (its first open imports the agent)


def daemon_socket(state_dir: Path, timeout: float = CONNECT_TIMEOUT_S) -> socket.socket | None:
    """A connection to the running daemon, with `timeout` set; None when there is none (no
    socket, a stale one, HERMES_NO_DAEMON)."""
    path = state_dir / "daemon.sock"
    if os.environ.get("HERMES_NO_DAEMON") or not path.exists():
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    return sock


class RemoteError(HermesError):
    """An error the daemon reported for a turn, with the exit code the CLI would have used."""

    def __init__(self, message: str, exit_code: int = 1, gone: bool = False):
        super().__init__(message)
        self.exit_code = exit_code
        self.gone = gone  # the daemon itself went away (not an error of the turn)


@dataclass
class RemoteAnswer:
    answer: str


class RemoteConversation:
    def __init__(self, sock: socket.socket, session: str, rel: str, on_tool: Callable[[str], None] | None):
        self.on_interrupt: Callable[[], None] = lambda: None  # Ctrl-C seen: the screen says so at once
        self.sock = sock
        self.reader = sock.makefile("r", encoding="utf-8")
        self.id = session
        self.rel = rel
        self.on_tool = on_tool
        self.user_turns = 0
        self.ended = False
        self.interrupted = False  # Ctrl-C sent during the turn now running

    @classmethod
    def connect(cls, state_dir: Path, options: dict, on_tool: Callable[[str], None] | None = None,
                timeout: float = CONNECT_TIMEOUT_S) -> RemoteConversation | None:
        sock = daemon_socket(state_dir, timeout)
        if sock is None:
            return None
        try:
            sock.sendall((json.dumps({"op": "open", "options": options}) + "\n").encode())
            reply = json.loads(sock.makefile("r", encoding="utf-8").readline() or "{}")
        except (OSError, ValueError):
            sock.close()
            return None  # no daemon, a stale socket, another user's daemon, too slow: run here
        if "session" not in reply:
            sock.close()
            if "exit_code" in reply and not str(reply.get("error", "")).startswith("refused"):
                raise RemoteError(reply["error"], reply["exit_code"])
            return None
        sock.settimeout(None)
        return cls(sock, reply["session"], reply.get("rel", ""), on_tool)

    def _send(self, message: dict) -> None:
        self.sock.sendall((json.dumps(message) + "\n").encode())

    def _read(self) -> dict:
        line = self.reader.readline()
        if not line:
            raise RemoteError("the daemon went away during the turn (it may have been restarted); "
                              "the transcript so far is kept", gone=True)
        return json.loads(line)

    def ask(self, text: str, on_text: Callable[[str], None] | None = None) -> RemoteAnswer:
        """One turn in the daemon; with `on_text` its answer streams back as the model writes it."""
        self.interrupted = False
        try:
            self._send({"op": "ask", "text": text, "stream": on_text is not None})
        except OSError:
            raise RemoteError("the daemon went away (it may have been restarted)", gone=True) from None
        while True:
            try:
                msg = self._read()
            except KeyboardInterrupt:  # Ctrl-C here (not in a chat's turn thread): stop the turn
                self.interrupt()
                continue
            if "text" in msg:
                if on_text is not None:
                    on_text(str(msg["text"]))
            elif "tool" in msg:
                if self.on_tool:
                    self.on_tool(msg["tool"])
            elif "answer" in msg:
                self.user_turns = msg.get("user_turns", self.user_turns + 1)
                return RemoteAnswer(msg["answer"])
            elif "error" in msg:
                self.user_turns += 1
                if self.interrupted:
                    raise TurnCancelled("the turn was interrupted")
                raise RemoteError(msg["error"], msg.get("exit_code", 1))

    def interrupt(self) -> None:
        """Ctrl-C: the daemon closes the model request, kills the running command, stops the turn."""
        first = not self.interrupted
        self.interrupted = True
        try:
            self._send({"op": "interrupt"})
        except OSError:
            pass  # the daemon is gone: the turn is over anyway
        if first:
            self.on_interrupt()

    def end(self) -> bool:
        """End the conversation (the daemon commits its transcript); True when a commit was made."""
        if self.ended:
            return False
        self.ended = True
        try:
            self._send({"op": "end"})
            while True:
                msg = self._read()
                if "saved" in msg:
                    return bool(msg["saved"])
        except (OSError, RemoteError, ValueError):
            return False
        finally:
            self.sock.close()


def warm_conversation(vault, options: dict, on_tool: Callable[[str], None] | None = None
                      ) -> RemoteConversation | None:
    """The conversation in the vault's daemon, which is started first when none runs and
    daemon.autostart is on (service/autostart.py); None: run it in this process."""
    from ..service.autostart import ensure_daemon

    started = ensure_daemon(vault)
    if started is not None and started.pid is not None:
        import click

        minutes = vault.config.daemon.idle_stop_min
        click.echo(f"hermes-fs: started a daemon for this vault (pid {started.pid}) so that later calls are fast; "
                   "it serves run and chat only" + (f" and stops after {minutes:g} min without a turn" if minutes else "")
                   + " (`hermes-fs daemon stop`; `daemon: {autostart: false}` in hermes.yaml turns this off)",
                   err=True)
    fresh = started is not None and started.fresh
    return RemoteConversation.connect(vault.state_dir, options, on_tool,
                                      FRESH_CONNECT_TIMEOUT_S if fresh else CONNECT_TIMEOUT_S)


def options_for(source: str, model: str | None = None, workspace: Path | None = None, max_steps: int | None = None,
                resume: str | None = None, environ: dict[str, str] | None = None) -> dict:
    return {"source": source, "model": model, "workspace": str(workspace) if workspace else None,
            "max_steps": max_steps, "resume": resume, "cwd": os.getcwd(), "environ": environ}


def warm_environment(vault, model: str | None = None) -> dict[str, str] | None:
    """hermes.yaml checked here first (a file the cold path refuses is refused the same way, never
    run on the daemon's older settings), then the model key variables the turn must carry; None
    when only an in-process turn would read the keys as a cold one does (run here, then)."""
    from ..agent.model import caller_environment

    return caller_environment(vault.config, model)


def run_task(state_dir: Path, task: str, args: dict, environ: dict[str, str]) -> dict | None:
    """`refine --wait`, `learn` or doctor's model check in the daemon's warm process; None when no
    daemon answers (the CLI then does it itself). An error of the task raises RemoteError."""
    sock = daemon_socket(state_dir)
    if sock is None:
        return None
    try:
        sock.settimeout(None)  # a refine takes as long as the model does
        sock.sendall((json.dumps({"op": "task", "task": task, "args": args, "environ": environ}) + "\n").encode())
        line = sock.makefile("r", encoding="utf-8").readline()
    except OSError:
        line = ""
    finally:
        sock.close()
    if not line:
        raise RemoteError(f"the daemon went away during `{task}` (it may have been restarted)", gone=True)
    reply = json.loads(line)
    if "done" in reply:
        return reply["done"]
    if str(reply.get("error", "")).startswith("refused"):
        return None  # another user's daemon
    raise RemoteError(reply.get("error") or "the daemon failed", reply.get("exit_code", 1))


def warm_task(vault, task: str, args: dict) -> dict | None:
    """The task done by the running daemon (litellm already imported there), or None: do it here."""
    environ = warm_environment(vault)
    return None if environ is None else run_task(vault.state_dir, task, args, environ)


def vectors_in_background(vault) -> None:
    """A turn about to run in this process (no daemon): if skill vectors are missing, build them
    in a detached process and say so; the turn ranks skills by full-text meanwhile."""
    from ..service.background import embed_in_background

    started = embed_in_background(vault)
    if started:
        import click

        click.echo(f"hermes-fs: building skill vectors in the background (pid {started[0]}, log {started[1]}); "
                   "until they are ready, skills are ranked by full-text", err=True)
