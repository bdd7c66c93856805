"""Nothing a hermes-fs process logs or prints carries a secret: every log record (any library's:
httpx logs each request's URL, and a Bot API puts the bot token in its path) and every write to
stdout/stderr (`daemon --detach` sends both to .hermes/daemon.out) goes through `redact_line`.

Two passes: the configured secret values themselves, literally (every value of .hermes/secrets.env and
of the environment variables a credential's name suggests, as written and percent-encoded), then the
commit scanner's patterns (store/secrets.py) for secrets nobody configured. The values are re-read when
secrets.env changes, so a token a person adds while the daemon runs is covered from its next line.
"""

from __future__ import annotations

import io
import logging
import os
import re
import sys
import threading
import urllib.parse
from pathlib import Path

from . import secrets as scanner

SECRETS_ENV_VAR = "HERMES_REDACT_SECRETS_ENV"  # tells a child process (the model worker) whose values to redact
MIN_LITERAL = 6  # shorter values ("true", a port) would blank out ordinary words
SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS)", re.I)
# a bot token in an API URL path (`/bot<id>:<secret>/method`, the colon maybe percent-encoded)
BOT_URL_TOKEN = re.compile(r"(/(?:file/)?bot)\d{5,}(?::|%3A)[A-Za-z0-9_-]{20,}", re.I)


class Redactor:
    def __init__(self, secrets_env: Path | None = None):
        self.secrets_env = secrets_env
        self._stamp: tuple | None = None
        self._literals: list[str] = []
        self._lock = threading.Lock()

    def literals(self) -> list[str]:
        """The values to take out literally, longest first (a value inside another goes after it)."""
        stamp = None
        if self.secrets_env is not None:
            try:
                st = self.secrets_env.stat()
                stamp = (st.st_mtime_ns, st.st_size)
            except OSError:
                stamp = None
        with self._lock:
            if stamp != self._stamp or not self._literals:
                self._literals = self._load()
                self._stamp = stamp
            return self._literals

    def _load(self) -> list[str]:
        values: set[str] = set()
        if self.secrets_env is not None and self.secrets_env.exists():
            from .notify import read_secrets_env

            try:
                values |= set(read_secrets_env(self.secrets_env).values())
            except Exception:  # noqa: BLE001 - an unreadable file: the patterns still apply
                pass
        values |= {v for k, v in os.environ.items() if SECRET_NAME.search(k) and k != SECRETS_ENV_VAR}
        out: set[str] = set()
        for v in values:
            v = (v or "").strip()
            if len(v) >= MIN_LITERAL:
                out |= {v, urllib.parse.quote(v, safe=""), urllib.parse.quote(v)}
        return sorted(out, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        if not text:
            return text
        for value in self.literals():
            if value in text:
                text = text.replace(value, "[REDACTED configured secret]")
        text = BOT_URL_TOKEN.sub(r"\1[REDACTED bot token]", text)
        if _maybe_secret(text):
            text, _n = scanner.redact(text)
        return text


def _maybe_secret(text: str) -> bool:
    """A quick look before the scanner's ~20 patterns: most log lines have nothing long enough."""
    return any(len(word) >= 12 for word in re.split(r"[\s\"'<>()\[\],;]+", text))


_redactor: Redactor | None = None
_install_lock = threading.Lock()


def redact_line(text: str) -> str:
    return _redactor(text) if _redactor is not None else scanner.redact(text)[0]


class RedactingStream(io.TextIOBase):
    """A text stream that redacts each whole line before passing it on (a secret is never split
    over two writes: a partial line waits for its end, or a flush)."""

    def __init__(self, inner):
        self.inner = inner
        self._buf = ""
        self._lock = threading.Lock()

    def write(self, s: str) -> int:
        with self._lock:
            self._buf += s
            if "\n" in self._buf:
                head, _, self._buf = self._buf.rpartition("\n")
                self.inner.write(redact_line(head + "\n"))
                self.inner.flush()
        return len(s)

    def flush(self) -> None:
        with self._lock:
            if self._buf:
                self.inner.write(redact_line(self._buf))
                self._buf = ""
            self.inner.flush()

    def fileno(self) -> int:
        return self.inner.fileno()

    def isatty(self) -> bool:
        return self.inner.isatty()

    @property
    def encoding(self):  # type: ignore[override]
        return getattr(self.inner, "encoding", "utf-8")

    def writable(self) -> bool:
        return True

    @property
    def buffer(self):
        """The stream's bytes (not redacted: what writes bytes there is not text a log holds)."""
        return self.inner.buffer

    def __getattr__(self, name: str):  # anything else a library asks of stdout/stderr
        return getattr(self.inner, name)


def install(secrets_env: Path | None, streams: tuple[str, ...] = ()) -> None:
    """From now on in this process: every log record is made redacted (message, arguments,
    traceback, stack), whichever logger and handler. `streams` ("stdout", "stderr") also redact
    what is written to them: for processes whose output goes to a file (`daemon --detach`'s
    daemon.out), never for a terminal that streams an answer word by word, nor MCP's stdio.
    Called once a command knows its vault; a later call points at the vault's secrets.env."""
    global _redactor
    with _install_lock:
        first = _redactor is None
        if secrets_env is not None or first:
            _redactor = Redactor(secrets_env)
        if secrets_env is not None:
            os.environ[SECRETS_ENV_VAR] = str(secrets_env)
        for name in streams:
            stream = getattr(sys, name)
            if stream is not None and not isinstance(stream, RedactingStream):
                setattr(sys, name, RedactingStream(stream))
        if not first:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args, **kwargs) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            try:
                _redact_record(record)
            except Exception:  # noqa: BLE001 - a record that cannot be rendered is logging's to report
                pass
            return record

        logging.setLogRecordFactory(factory)


def _redact_record(record: logging.LogRecord) -> None:
    message = record.getMessage()
    clean = redact_line(message)
    if clean != message or record.args:
        record.msg, record.args = clean, None
    if record.exc_info and not record.exc_text:
        record.exc_text = redact_line(logging.Formatter().formatException(record.exc_info))
    if record.stack_info:
        record.stack_info = redact_line(record.stack_info)
