"""Real parts for sync tests: a bare remote served by `git daemon` on 127.0.0.1, and a loopback
TCP proxy between a vault and that remote which a test can cut (connections refused and the open
ones reset) and heal, to play a network partition."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GitDaemon:
    """`git daemon` serving bare repositories under `base`, pushes allowed."""

    def __init__(self, base: Path):
        self.base = Path(base)
        self.base.mkdir(parents=True, exist_ok=True)
        for _attempt in range(5):
            self.port = free_port()
            self.proc = subprocess.Popen(
                ["git", "daemon", "--reuseaddr", f"--base-path={self.base}", "--export-all", "--enable=receive-pack",
                 "--listen=127.0.0.1", f"--port={self.port}", "--informative-errors", str(self.base)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if self._wait_listening():
                return
            self.proc.kill()
            self.proc.wait()
        raise RuntimeError("git daemon did not start")

    def _wait_listening(self, timeout: float = 10.0) -> bool:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return True
            except OSError:
                time.sleep(0.05)
        return False

    def bare(self, name: str = "vault.git") -> str:
        """Create an empty bare repository; returns its name."""
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(self.base / name)], check=True)
        return name

    def url(self, name: str = "vault.git", port: int | None = None) -> str:
        return f"git://127.0.0.1:{port or self.port}/{name}"

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Proxy:
    """A loopback TCP proxy to `port`; `cut()` refuses new connections and resets open ones."""

    def __init__(self, target_port: int):
        self.target = target_port
        self.port = free_port()
        self.up = threading.Event()
        self.up.set()
        self.closed = threading.Event()
        self.conns: set[socket.socket] = set()
        self.lock = threading.Lock()
        self.listener: socket.socket | None = None
        self._listen()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _listen(self) -> None:
        """Listen on the proxy's port again. A listener closed while the accept thread was polling
        it lives on until that poll's 0.2 s timeout, and binding meanwhile fails: wait it out."""
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        for attempt in range(20):
            try:
                s.bind(("127.0.0.1", self.port))
                break
            except OSError:
                if attempt == 19:
                    s.close()
                    raise
                time.sleep(0.05)
        s.listen(64)
        s.settimeout(0.2)
        self.listener = s

    def _accept(self) -> None:
        while not self.closed.is_set():
            if not self.up.is_set():
                time.sleep(0.05)
                continue
            listener = self.listener
            if listener is None:
                time.sleep(0.05)
                continue
            try:
                client, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            try:
                server = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns |= {client, server}
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            with self.lock:
                self.conns -= {a, b}

    def cut(self) -> None:
        """A partition: the port refuses connections and every open one is reset."""
        self.up.clear()
        with self.lock:
            if self.listener is not None:
                self.listener.close()
                self.listener = None
            for s in list(self.conns):
                try:  # shutdown first: a close alone leaves a recv blocked in a pipe thread holding the
                    # socket open, and the client waits on a connection nobody resets (a sync round hung
                    # for its whole 30 s timeout in the chaos bench); then the close resets it (linger 0)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                try:
                    s.close()
                except OSError:
                    pass
            self.conns.clear()

    def heal(self) -> None:
        with self.lock:
            if self.listener is None:
                self._listen()
        self.up.set()

    def close(self) -> None:
        self.closed.set()
        self.cut()
