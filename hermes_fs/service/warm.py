"""Warm turns: the daemon runs `run` and `chat` turns in its own process, where the agent's modules
are loaded and the model layer is warm in its worker (model_worker.py), and streams them back over
a Unix socket in .hermes/ (DESIGN section 14).

The socket is created with permissions 0600, and every connection's peer is checked
(SO_PEERCRED): only the user the daemon runs as may connect. Each connection is one conversation,
served by its own thread, so several sessions run at once beside the watcher, inbox and scheduler.

The protocol is JSON lines. The client sends {"op": "open", "options": {...}} and then
{"op": "ask", "text": ..., "stream": bool} as often as it likes, and {"op": "end"}; {"op": "interrupt"}
may come while a turn runs (the model request is closed and the running command killed at once).
The daemon answers each `open` with {"session": id}, streams {"tool": line} (and, when asked to
stream, {"text": piece} as the model writes the answer) while a turn runs, and ends it with
{"answer": text, ...} or {"error": message, "exit_code": n}.
A closed connection ends (and commits) the conversation, as the end of a CLI process would.
Or the client sends one {"op": "task", "task": "refine" | "learn" | "doctor" | "footprint", "args": {...}}
and gets one {"done": {...}} (or an error) back: `refine --wait`, `learn` and `doctor` run warm too;
`footprint` is what the daemon holds (`daemon status --memory`: heavy packages imported, memory).

A turn or task behaves as it would in the CLI's own process: its `environ` (the caller's model
key variables, see agent.model.caller_environment) is what keys are read from, never this
process's environment, and it is never logged or stored; hermes.yaml is re-read if it changed, and
an invalid one is the caller's error, not a turn on stale settings.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import HermesError
from ..store.vault import Vault

if TYPE_CHECKING:
    from ..agent.conversation import Conversation

SOCKET_NAME = "daemon.sock"
log = logging.getLogger(__name__)


def socket_path(vault: Vault) -> Path:
    return vault.state_dir / SOCKET_NAME


def peer_uid(conn: socket.socket) -> int | None:
    """The uid of the process at the other end (Linux SO_PEERCRED); None where unknown."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid


class WarmServer:
    def __init__(self, vault: Vault):
        self.vault = vault
        self.path = socket_path(vault)
        self.sock: socket.socket | None = None
        self.stopped = threading.Event()
        self.serving = 0  # connections open now (a chat waiting for its person counts as busy)
        self.last_active = time.monotonic()
        self.activity = threading.Lock()

    def start(self) -> None:
        self.path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # born 0600: no window in which another user could connect
        try:
            sock.bind(str(self.path))
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        sock.listen(16)
        self.sock = sock
        threading.Thread(target=self._accept, name="warm-accept", daemon=True).start()

    def stop(self) -> None:
        self.stopped.set()
        if self.sock:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.sock.close()
        self.path.unlink(missing_ok=True)

    def _accept(self) -> None:
        assert self.sock is not None
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), name="warm-session", daemon=True).start()

    def idle_s(self) -> float:
        """Seconds since the last connection closed; 0 while any is open."""
        with self.activity:
            return 0.0 if self.serving else time.monotonic() - self.last_active

    def _serve(self, conn: socket.socket) -> None:
        with self.activity:
            self.serving += 1
        try:
            with conn:
                uid = peer_uid(conn)
                if uid is not None and uid != os.getuid():
                    _send(conn, {"error": "refused: this daemon serves only its own user", "exit_code": 1})
                    return
                Session(self.vault, conn).serve()
        finally:
            with self.activity:
                self.serving -= 1
                self.last_active = time.monotonic()


class Session:
    """One client connection: one conversation, turns run in a worker so `interrupt` is heard."""

    def __init__(self, vault: Vault, conn: socket.socket):
        self.vault = vault
        self.conn = conn
        self.send_lock = threading.Lock()
        self.conversation: Conversation | None = None
        self.turn: threading.Thread | None = None

    def send(self, message: dict) -> None:
        with self.send_lock:
            _send(self.conn, message)

    def serve(self) -> None:
        reader = self.conn.makefile("r", encoding="utf-8")
        try:
            for line in reader:
                request = json.loads(line)
                op = request.get("op")
                if op == "open":
                    self._open(request.get("options") or {})
                elif op == "task" and self.conversation is None:
                    self._task(request)
                    break
                elif op == "ask" and self.conversation is not None:
                    self._wait_turn()
                    self.turn = threading.Thread(target=self._ask, args=(request.get("text") or "",
                                                                         bool(request.get("stream"))), daemon=True)
                    self.turn.start()
                elif op == "interrupt" and self.conversation is not None:
                    self.conversation.interrupt()
                elif op == "end":
                    break
        except (OSError, ValueError):
            pass  # the client went away (Ctrl-C, a crash): end the conversation as it would have
        finally:
            if self.conversation is not None:
                self.conversation.cancel.set()
                self._wait_turn()
                self._end()

    def _open(self, options: dict) -> None:
        from ..agent.conversation import Conversation, ConversationOptions
        from ..agent.loop import AgentConfig

        try:
            self.vault.current_config()  # changed since the daemon loaded it: re-read (or refuse, as cold would)
            opts = ConversationOptions(
                source=options.get("source", "cli"), model=options.get("model"),
                max_steps=int(options.get("max_steps") or AgentConfig.max_steps), resume=options.get("resume"),
                workspace=Path(options["workspace"]) if options.get("workspace") else None,
                cwd=Path(options["cwd"]) if options.get("cwd") else None,
                on_tool=lambda line: self.send({"tool": line}), environ=_environ(options.get("environ")))
            conversation = Conversation(self.vault, opts)
            self.conversation = conversation
            self.send({"session": conversation.id, "rel": conversation.rel})
        except HermesError as exc:
            self.send({"error": str(exc), "exit_code": exc.exit_code})

    def _task(self, request: dict) -> None:
        """One `refine --wait`, `learn` or `doctor` model check for the CLI, in this warm process."""
        try:
            self.vault.current_config()
            done = run_task(self.vault, str(request.get("task")), request.get("args") or {},
                            _environ(request.get("environ")))
            self.send({"done": done})
        except HermesError as exc:
            self.send({"error": str(exc), "exit_code": exc.exit_code})
        except Exception as exc:  # a bug: the client gets one line, the log the traceback
            log.exception("warm task failed")
            self.send({"error": f"unexpected {type(exc).__name__}: {exc} (traceback in daemon.log)", "exit_code": 1})

    def _ask(self, text: str, stream: bool = False) -> None:
        assert self.conversation is not None
        on_text = (lambda piece: self.send({"text": piece})) if stream else None
        try:
            result = self.conversation.ask(text, on_text)
            self.send({"answer": result.answer, "user_turns": self.conversation.transcript.user_turns})
        except HermesError as exc:
            self.send({"error": str(exc), "exit_code": exc.exit_code})
        except Exception as exc:  # a bug: the client gets one line, the log the traceback
            log.exception("warm turn failed")
            self.send({"error": f"unexpected {type(exc).__name__}: {exc} (traceback in daemon.log)", "exit_code": 1})

    def _wait_turn(self) -> None:
        if self.turn is not None:
            self.turn.join()
            self.turn = None

    def _end(self) -> None:
        assert self.conversation is not None
        try:
            sha = self.conversation.end()
            self.send({"saved": bool(sha)})
        except (HermesError, OSError):
            log.exception("ending a warm conversation failed")


def run_task(vault: Vault, task: str, args: dict, environ: dict[str, str] | None) -> dict:
    """Run a CLI command's work here; what the CLI prints comes back as plain data."""
    if task == "refine":
        from ..learning.refine import RefineOptions, refine

        r = refine(vault, RefineOptions(session=args.get("session"), focus=args.get("focus"),
                                        policy=args.get("policy"), environ=environ))
        return {"line": r.line(), "ok": r.ok}
    if task == "learn":
        from ..learning.learn import LearnOptions, learn

        r = learn(vault, LearnOptions([Path(p) for p in args.get("sources") or []], focus=args.get("focus"),
                                      update=args.get("update"), policy=args.get("policy"), environ=environ))
        return {"line": r.line(), "ok": r.ok}
    if task == "doctor":
        from ..agent.model import check_model
        from ..learning.structured import check_mode

        ok, detail = check_model(vault, environ)
        done: dict = {"ok": ok, "detail": detail}
        if ok:  # the review-mode probe, warm too: the advice a small model's user needs
            done["mode_ok"], done["mode_detail"] = check_mode(vault, environ)
        return done
    if task == "footprint":
        from ..agent.model import remote
        from .footprint import footprint
        from .model_worker import ModelWorker

        worker = remote()
        return footprint(worker.pid() if isinstance(worker, ModelWorker) else None).as_dict()
    raise HermesError(f"unknown task {task!r}")


def _environ(value) -> dict[str, str] | None:
    """The caller's variables as sent (names and values are text), or None: a client that sends
    none (an older CLI) gets this process's environment."""
    if not isinstance(value, dict):
        return None
    return {str(k): str(v) for k, v in value.items()}


def _send(conn: socket.socket, message: dict) -> None:
    try:
        conn.sendall((json.dumps(message) + "\n").encode("utf-8"))
    except OSError:
        pass  # the client is gone; the conversation still ends and commits
