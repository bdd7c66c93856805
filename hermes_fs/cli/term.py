"""Printing text that a model (or a file) may have written: control characters are shown, not obeyed.

An ESC sequence in a reviewer's summary, a file or an answer could otherwise move the cursor,
rewrite what is shown, or set the clipboard (OSC 52). Newlines and tabs pass; every other C0/C1
control character is printed as `\\xNN`.
"""

from __future__ import annotations

import re
import sys
from typing import Any

import click

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def safe(text: str) -> str:
    """Control characters shown, and the credentials of any URL hidden (a remote's password)."""
    from ..store.remote import redact_credentials

    return redact_credentials(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text))


def echo(text: object = "", **kwargs) -> None:
    click.echo(safe(str(text)), **kwargs)


def emit_json(data) -> None:
    import json

    echo(json.dumps(data, indent=2, default=str))


def shorten(text: str, width: int) -> str:
    """At most `width` characters, cut at a word, with an ellipsis when cut."""
    import textwrap

    return textwrap.shorten(text, width, placeholder=" …")


class Spinner:
    """A spinner on a terminal; silent when piped."""

    def __init__(self, text: str):
        self.text = text
        self.status: Any = None

    def __enter__(self):
        if sys.stderr.isatty():
            from rich.console import Console

            self.status = Console(stderr=True).status(self.text)
            self.status.__enter__()
        return self

    def __exit__(self, *exc):
        if self.status:
            self.status.__exit__(*exc)


def colorize_diff(text: str) -> str:
    """Colour a diff we have already made safe (git's own colouring would pass raw bytes through)."""
    out = []
    for line in text.splitlines(keepends=True):
        if line.startswith(("+++", "---", "diff --git", "index ")):
            out.append(click.style(line, bold=True))
        elif line.startswith("+"):
            out.append(click.style(line, fg="green"))
        elif line.startswith("-"):
            out.append(click.style(line, fg="red"))
        elif line.startswith("@@"):
            out.append(click.style(line, fg="cyan"))
        else:
            out.append(line)
    return "".join(out)


class Progress:
    """`what: done/total` on one rewritten line of stderr, for work that takes more than a second
    or two; silent when stderr is not a terminal (piped, a log), so scripts see only the result."""

    def __init__(self, after_s: float | None = None, stream=None):
        import os
        import sys
        import time

        self._time = time.monotonic
        self.stream = stream or sys.stderr
        self.after_s = float(os.environ.get("HERMES_PROGRESS_AFTER_S", "1.5")) if after_s is None else after_s
        self.start = self._time()
        self.enabled = self.stream.isatty()
        self.shown = False
        self.last = 0.0

    def __call__(self, what: str, done: int, total: int) -> None:
        now = self._time()
        if not self.enabled or now - self.start < self.after_s or (now - self.last < 0.1 and done < total):
            return
        self.last = now
        self.stream.write(f"\r{safe(what)}: {done}/{total}\x1b[K")
        self.stream.flush()
        self.shown = True

    def done(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def columns(rows: list[list[str]]) -> list[str]:
    """Rows as aligned columns as wide as their longest cell (a long name never shifts the rest)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))] if rows else []
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def plural(n: int, word: str, many: str | None = None) -> str:
    """`1 entry`, `2 entries`: a count with its noun."""
    return f"{n} {word if n == 1 else many or word + 's'}"
