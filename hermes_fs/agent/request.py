"""A model request that can be abandoned: Ctrl-C closes its HTTP connection at once.

The request runs in a worker thread; the caller waits for what it sends back (text as it streams,
then the reply) and stays free to give up. Giving up shuts the connection's socket down (a local
server sees the client gone and stops generating) and returns at once; the worker, whose read
then fails, is left to end on its own and whatever it still produces is dropped. Text is handed
to `on_text` in the caller's thread, never the worker's, so nothing reaches the screen after the
caller has returned.
"""

from __future__ import annotations

import queue
import socket
import threading
from collections.abc import Callable
from typing import Any

POLL_S = 0.05  # how often the waiting caller looks at the cancel event


class Cancelled(Exception):
    """Raised in the caller when the request was abandoned."""


class Request:
    def __init__(self, cancel: threading.Event | None = None):
        self.cancel = cancel
        self.aborted = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    # -- the transport: knows the sockets of its connections, so it can shut them down ---------------
    def http_client(self, timeout_s: float):
        """An httpx client whose connections this request can shut down from another thread."""
        import httpx

        request = self

        class Transport(httpx.HTTPTransport):
            def handle_request(self, http_request):
                response = super().handle_request(http_request)
                stream = response.extensions.get("network_stream")
                sock = stream.get_extra_info("socket") if stream is not None else None
                if sock is not None:
                    request._track(sock)
                return response

        return httpx.Client(transport=Transport(), timeout=timeout_s)

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
        if self.aborted.is_set():
            self._shutdown()

    def _shutdown(self) -> None:
        """shutdown(), not close(): only shutdown wakes a thread blocked reading the socket."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed

    def abort(self) -> None:
        self.aborted.set()
        self._shutdown()

    # -- running it ---------------------------------------------------------------------------------
    def run(self, work: Callable[[Callable[[str], None]], Any], on_text: Callable[[str], None] | None = None) -> Any:
        """`work(emit)` in a worker; `emit(text)` reaches `on_text` here. Raises Cancelled when the
        cancel event is set (or KeyboardInterrupt arrives) before the work is done."""
        box: queue.Queue = queue.Queue()

        def worker() -> None:
            try:
                box.put(("done", work(lambda text: box.put(("text", text)))))
            except BaseException as exc:  # handed to the caller, who raises it in its own thread
                box.put(("error", exc))

        threading.Thread(target=worker, name="model-request", daemon=True).start()
        try:
            while True:
                try:
                    kind, value = box.get(timeout=POLL_S)
                except queue.Empty:
                    kind, value = "wait", None
                if self.cancel is not None and self.cancel.is_set():
                    raise Cancelled()
                if kind == "text":
                    if on_text is not None:
                        on_text(value)
                elif kind == "error":
                    raise value
                elif kind == "done":
                    return value
        except (Cancelled, KeyboardInterrupt):
            self.abort()
            raise
