"""`hermes-fs chat`: a REPL over a Conversation, with slash commands.

On a terminal: line editing and history (readline, history in .hermes/chat_history), the answer
streamed as Markdown while the model writes it, Ctrl-C stops the current turn at once (the model
request is closed, a running command killed) and the session goes on; Ctrl-C again at the prompt,
Ctrl-D or /exit ends it. The turn runs in a thread of its own so that the main thread, which is
where Python delivers Ctrl-C, only ever waits: an interrupt never lands inside a commit. With stdin
not a terminal: one message (or slash command) per line, each answer printed, so it can be scripted.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from .. import Conversation, ConversationOptions, Vault
from ..agent.model import TurnCancelled
from ..errors import HermesError
from ..mind import memory, skills
from ..service.auto_review import AutoReview
from .answer import AnswerView
from .remote import (
    RemoteConversation,
    RemoteError,
    options_for,
    vectors_in_background,
    warm_conversation,
    warm_environment,
)
from .term import plural, safe

PROMPT = "you> "

HELP = """/refine [focus]    review this conversation in the background (result: a refine/ branch)
/learn SOURCE      turn a document into skills in the background (result: a learn/ branch)
/review            list learned changes waiting for review
/memory            show memory files and sizes
/skills            list skills
/new               end this session (committed) and start a new one
/exit              end the session and leave
/help              this list"""


class Repl:
    def __init__(self, vault: Vault, options: ConversationOptions, out: Callable[[str], None] = print,
                 terminal: bool = False):
        self.vault = vault
        self.options = options
        self.out = lambda text: out(safe(text))  # model text never drives the terminal
        self.terminal = terminal  # a person at a screen: streamed Markdown, tool lines, prompt redrawn
        self.failed = 0  # turns that ended in an error (piped chat exits 1 when any did)
        self.status: Any = None  # the "thinking…" spinner while a turn runs on a terminal
        # streamed Markdown only when a person sees stdout too (`chat > log` prints answers whole)
        self.view: AnswerView | None = AnswerView() if terminal and sys.stdout.isatty() else None
        self.busy = False  # a turn is running: background lines wait for its end
        self.deferred: list[str] = []
        self._announce_lock = threading.Lock()
        self.interrupted_last = False  # the last thing the person did was Ctrl-C (a second one at the prompt exits)
        if self.view is not None:
            options.on_tool = lambda call: self.view.tool(f"  · {call}") if self.view else None
        self.conversation = self._open()
        self.background: list[threading.Thread] = []
        self.reviews = AutoReview(vault, lambda _session, line: self.announce(line))
        self.commands = {"/memory": self.cmd_memory, "/skills": self.cmd_skills, "/new": self.cmd_new,
                         "/exit": self.cmd_exit, "/quit": self.cmd_exit, "/help": self.cmd_help,
                         "/refine": self.cmd_refine, "/review": self.cmd_review, "/learn": self.cmd_learn}

    def _open(self) -> Conversation | RemoteConversation:
        """The daemon's warm process when one answers; this process otherwise (same behaviour)."""
        o = self.options
        environ = warm_environment(self.vault, o.model)
        remote = None if environ is None else warm_conversation(self.vault, options_for(
            o.source, o.model, o.workspace, o.max_steps, o.resume, environ), o.on_tool)
        if remote is not None:
            remote.on_interrupt = self.stopping
            return remote
        vectors_in_background(self.vault)
        return Conversation(self.vault, o)

    def stopping(self) -> None:
        """Ctrl-C during a warm turn: the daemon closes the request and kills the command."""
        if self.status is not None:
            self.status.stop()
            self.status = None

    # -- one line ------------------------------------------------------------------------------
    def handle(self, line: str) -> bool:
        """Process a line; False means the REPL should stop."""
        line = line.strip()
        if not line:
            return True
        if line.startswith("/"):
            word, _, rest = line.partition(" ")
            command = self.commands.get(word)
            if command is None:
                self.out(f"unknown command {word}; /help lists them")
                return True
            return command(rest.strip())
        try:
            if self.view is not None:
                self._turn_on_screen(line)
            else:
                with self.thinking():
                    result = self.conversation.ask(line)
                self.out(result.answer)
        except (KeyboardInterrupt, TurnCancelled):
            if self.view is not None:
                self.view.stop()
            self.out("(turn interrupted; the session goes on)")
            self.interrupted_last = True
        except HermesError as exc:
            if self.view is not None:
                self.view.stop()
            self.failed += 1
            self.out(f"error: {exc}")
            if isinstance(exc, RemoteError) and exc.gone:  # the daemon restarted: carry on with the same session
                self.options.resume = self.conversation.id
                self.conversation = self._open()
        finally:
            self._flush_deferred()
        if self.reviews.after_turn(self.conversation.id, self.conversation.user_turns):
            self.out(f"(automatic review after {self.vault.config.refine.every_turns} turns)")
        return True

    def _turn_on_screen(self, line: str) -> None:
        """Run the turn in a thread, its answer streamed to the view; this (main) thread waits, and a
        Ctrl-C here interrupts the turn, which then ends within a moment (raised here as TurnCancelled)."""
        view = self.view
        assert view is not None
        outcome: dict[str, Any] = {}
        done = threading.Event()  # not Thread.join: on 3.11 a Ctrl-C inside join() marks a running thread ended

        def work() -> None:
            try:
                outcome["answer"] = self.conversation.ask(line, view.text).answer
            except BaseException as exc:  # raised again in the main thread
                outcome["error"] = exc
            finally:
                done.set()

        self.busy = True
        view.thinking()
        threading.Thread(target=work, name="turn", daemon=True).start()
        interrupted = False
        while not done.is_set():
            try:
                done.wait(0.1)
            except KeyboardInterrupt:
                if not interrupted:
                    interrupted = True
                    view.stop()
                    self.conversation.interrupt()
        if "error" in outcome:
            error = outcome["error"]
            raise TurnCancelled("the turn was interrupted") if interrupted else error
        if interrupted:
            raise TurnCancelled("the turn was interrupted")
        view.finish(outcome["answer"])

    # -- slash commands ---------------------------------------------------------------------------
    def cmd_refine(self, focus: str) -> bool:
        """Review this conversation in a background thread; the chat goes on."""
        from .. import RefineOptions, refine

        options = RefineOptions(session=self.conversation.id, focus=focus or None)
        return self._background("refine", lambda: refine(self.vault, options))

    def cmd_learn(self, source: str) -> bool:
        from pathlib import Path

        from .. import LearnOptions, learn

        if not source:
            self.out("usage: /learn SOURCE (a file or folder)")
            return True
        options = LearnOptions([Path(source).expanduser().resolve()])
        return self._background("learn", lambda: learn(self.vault, options))

    def thinking(self):
        """A spinner on the terminal while the model works; nothing when piped."""
        if not self.terminal:
            return contextlib.nullcontext()
        from rich.console import Console

        self.status = Console(stderr=True).status("thinking…")
        return self.status

    def announce(self, text: str) -> None:
        """A line from a background job: printed above the prompt, which is then drawn again; while
        a turn runs it waits for the turn's end (no prompt is drawn into an answer)."""
        if not self.terminal:
            self.out(text)
            return
        with self._announce_lock:
            if self.busy:
                self.deferred.append(text)
                return
            try:
                import readline

                typed = readline.get_line_buffer()
            except ImportError:
                typed = ""
            sys.stdout.write("\r\x1b[K")  # clear the prompt line (our own sequence, not model text)
            self.out(text)
            sys.stdout.write(PROMPT + typed)
            sys.stdout.flush()

    def _flush_deferred(self) -> None:
        with self._announce_lock:
            self.busy = False
            lines, self.deferred = self.deferred, []
        for text in lines:
            self.out(text)

    def _background(self, name: str, job) -> bool:
        def work():
            try:
                self.announce(job().line())
            except Exception as exc:  # refine and learn report their own failures; this is a last resort
                self.announce(f"{name} failed: {exc}")

        thread = threading.Thread(target=work, name=name, daemon=True)
        self.background.append(thread)
        thread.start()
        self.out(f"{name} started in the background")
        return True

    def cmd_review(self, _arg: str) -> bool:
        from .. import review as learned

        rows = learned.pending(self.vault.git)
        if not rows:
            self.out("no pending changes")
        for p in rows:
            self.out(f"{p.branch} [{', '.join(p.files)}] {p.summary}")
        return True

    def cmd_memory(self, _arg: str) -> bool:
        for name in memory.list_memory(self.vault.files):
            m = memory.load(self.vault.files, name, self.vault.config)
            self.out(f"{m.path}: {plural(len(m.entries), 'entry', 'entries')}, {m.size}/{m.budget} chars")
        return True

    def cmd_skills(self, _arg: str) -> bool:
        loaded, errors = skills.load_all(self.vault.files)
        for s in loaded:
            self.out(f"{s.name}: {s.description}")
        for e in errors:
            self.out(f"error: {e}")
        return True

    def cmd_new(self, _arg: str) -> bool:
        self.conversation.end()
        self.options.resume = None
        self.options.resume = None
        self.conversation = self._open()
        self.out(f"new session {self.conversation.id}")
        return True

    def cmd_exit(self, _arg: str) -> bool:
        return False

    def cmd_help(self, _arg: str) -> bool:
        self.out(HELP)
        return True

    # -- loops -----------------------------------------------------------------------------------
    def run_lines(self, lines: Iterable[str]) -> None:
        try:
            for line in lines:
                if not self.handle(line):
                    break
        finally:
            self.close()

    def run_terminal(self) -> None:
        # Ctrl-C interrupts a turn even when the shell that started us ignored SIGINT (a job started
        # with `&` or nohup inherits SIG_IGN, and Python then installs no KeyboardInterrupt at all)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        history = self._setup_readline()
        self.out(f"session {self.conversation.id} · /help for commands · Ctrl-D to leave")
        try:
            while True:
                try:
                    line = input(PROMPT)
                except EOFError:
                    self.out("")
                    break
                except KeyboardInterrupt:
                    if self.interrupted_last:
                        self.out("")
                        break  # a second Ctrl-C at the prompt: leave
                    self.interrupted_last = True
                    self.out("\n(Ctrl-C again, Ctrl-D or /exit to leave)")
                    continue
                self.interrupted_last = False
                try:
                    if not self.handle(line):
                        break
                except KeyboardInterrupt:  # between turns (a slash command): the session goes on
                    self.interrupted_last = True
                    self.out("\n(interrupted; the session goes on)")
        finally:
            if history:
                import readline

                readline.write_history_file(history)
            self.close()

    def _setup_readline(self) -> str | None:
        try:
            import readline
        except ImportError:
            return None
        path = str(self.vault.state_dir / "chat_history")
        try:
            readline.read_history_file(path)
        except OSError:
            pass
        readline.set_history_length(1000)
        return path

    def close(self) -> None:
        for thread in self.background:
            thread.join()  # a review in flight finishes (and reports) before we leave
        self.reviews.join()
        sha = self.conversation.end()
        if sha:
            self.out(f"session {self.conversation.id} saved ({self.conversation.rel})")


def chat(vault: Vault, options: ConversationOptions, out: Callable[[str], None] = print) -> int:
    """Run the chat; returns the number of turns that failed."""
    repl = Repl(vault, options, out, terminal=sys.stdin.isatty())
    if repl.terminal:
        repl.run_terminal()
    else:
        repl.run_lines(sys.stdin)
    return repl.failed
