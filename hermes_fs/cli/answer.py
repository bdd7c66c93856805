"""An answer on a terminal: Markdown (rich) drawn as the model writes it, tool lines between.

Only for a person at a terminal; piped output is printed plain, exactly as it comes. Model text is
made safe (`term.safe`) before rich sees it, so it can never move the cursor or drive the terminal.
While a turn runs, the text of the current message is redrawn in place (rich Live); when the
message ends (a tool call follows, or the answer is complete) it stays on the screen as drawn.
"""

from __future__ import annotations

import threading
from typing import Any

from .term import safe

REFRESH_PER_SECOND = 8


class AnswerView:
    def __init__(self, console: Any = None, status_console: Any = None):
        from rich.console import Console

        self.console = console or Console()
        self.status_console = status_console or Console(stderr=True)
        self.live: Any = None
        self.status: Any = None
        self.block = ""  # the current message's text, as streamed
        self.last_block = ""  # the last message drawn (to know whether the answer was already shown)
        self.stopped = False  # stop() was called: late text from the turn is not drawn
        self._lock = threading.Lock()  # text comes from the turn's thread; stop() from the main one

    # -- what a turn reports ------------------------------------------------------------------------
    def thinking(self) -> None:
        with self._lock:
            self.stopped = False
            self._end_block()
            if self.status is None:
                self.status = self.status_console.status("thinking…")
                self.status.start()

    def text(self, piece: str) -> None:
        with self._lock:
            if self.stopped:
                return
            self._stop_status()
            self.block += piece
            if self.live is None:
                from rich.live import Live

                self.live = Live(self._markdown(self.block), console=self.console,
                                 refresh_per_second=REFRESH_PER_SECOND)  # taller than the screen: cut, then drawn whole at stop()
                self.live.start()
            else:
                self.live.update(self._markdown(self.block))

    def tool(self, line: str) -> None:
        with self._lock:
            if self.stopped:
                return
            self._end_block()
            self._stop_status()
            self.console.print(safe(line), markup=False, highlight=False)
        self.thinking()

    def finish(self, answer: str) -> None:
        """The turn's answer: drawn now unless it was just streamed."""
        with self._lock:
            self._end_block()
            self._stop_status()
            if answer.strip() and answer.strip() != self.last_block.strip():
                self.console.print(self._markdown(answer))
            self.last_block = ""

    def stop(self) -> None:
        """The turn ended early (Ctrl-C, an error): leave what was drawn, stop drawing."""
        with self._lock:
            self.stopped = True
            self._end_block()
            self._stop_status()
            self.last_block = ""

    # -- drawing -----------------------------------------------------------------------------------
    @staticmethod
    def _markdown(text: str):
        from rich.markdown import Markdown

        return Markdown(safe(text))

    def _end_block(self) -> None:
        if self.live is not None:
            self.live.update(self._markdown(self.block))
            self.live.stop()
            self.live = None
        if self.block:
            self.last_block = self.block
        self.block = ""

    def _stop_status(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None


def render(text: str, console: Any = None) -> None:
    """A whole answer drawn as Markdown (no streaming: a warm turn from an older daemon)."""
    view = AnswerView(console)
    view.finish(text)
