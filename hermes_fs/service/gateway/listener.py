"""Paths a channel serves on the gateway's one HTTP listener (the signed webhooks' `listen:`).

A platform that pushes its messages by HTTP (its own webhook format, signed its own way) needs
no port of its own: the channel mounts a path here, and the channel that owns the listener hands
every request under a mounted path to it. Mounts are kept per vault (a test process may run
several gateways), survive the listener's restart on a settings reload, and say which listener
serves them, so a channel can refuse to start when nothing listens.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any

from ...errors import ConfigError

Handler = Callable[[Any], Awaitable[Any]]  # a Starlette request -> its response

_lock = threading.Lock()
_serving: dict[str, str] = {}  # vault state folder -> the listener's host:port
_mounts: dict[str, dict[str, Handler]] = {}  # vault state folder -> path -> handler


def _key(vault: Any) -> str:
    return str(vault.state_dir.resolve())


def serve(vault: Any, listen: str) -> None:
    """The listener of this vault's gateway is up on `listen` (its owner calls this)."""
    with _lock:
        _serving[_key(vault)] = listen


def unserve(vault: Any) -> None:
    with _lock:
        _serving.pop(_key(vault), None)


def serving(vault: Any) -> str | None:
    """host:port the vault's listener is on, None when none runs in this process."""
    with _lock:
        return _serving.get(_key(vault))


def mount(vault: Any, path: str, handler: Handler) -> None:
    """Serve `path` (GET and POST) with `handler`. A path is one channel's: mounting it twice is a
    settings error (two channels would read each other's messages)."""
    if not path.startswith("/") or path.startswith("/hooks/") or path == "/hooks" or len(path) < 2:
        raise ConfigError(f"path {path!r} must start with / and be outside /hooks/ (the signed webhooks')")
    with _lock:
        paths = _mounts.setdefault(_key(vault), {})
        if path in paths and paths[path] is not handler:
            raise ConfigError(f"path {path} is already served by another channel")
        paths[path] = handler


def unmount(vault: Any, path: str) -> None:
    with _lock:
        _mounts.get(_key(vault), {}).pop(path, None)


def handler(vault: Any, path: str) -> Handler | None:
    """The handler mounted at `path` exactly (None: nothing is served there)."""
    with _lock:
        return _mounts.get(_key(vault), {}).get(path.rstrip("/") or "/")


__all__ = ["Handler", "handler", "mount", "serve", "serving", "unmount", "unserve"]


async def read_body(request: Any, limit: int) -> bytes | None:
    """A request's body, read as it streams in; None once it passes `limit` bytes (the caller
    answers 413), so a huge body is never held whole."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)

