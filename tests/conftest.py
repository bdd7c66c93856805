"""Shared fixtures: real vaults in temp dirs, a real HTTP receiver for Apprise, the real CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from deadlines import deadline as generous

from hermes_fs.store.provenance import Act
from hermes_fs.store.vault import Vault, init_vault

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HERMES_TEST_KEY", "sk-test-not-a-real-key")
os.environ.setdefault("HERMES_RETRY_BASE_S", "0.05")  # keep retry backoff short in tests
# daemons in tests import the model layer only when a turn needs it (tests/test_warm_up.py checks the warm-up)
os.environ.setdefault("HERMES_NO_WARM_UP", "1")
# `run` and `chat` never start a daemon by themselves in tests (tests/test_autostart.py turns it on)
os.environ.setdefault("HERMES_NO_AUTOSTART", "1")
# no installation's static token table (make install builds one into the venv): tests that want one
# put it in a folder of their own (mind/static_vectors.py installed_dir)
os.environ["HERMES_FS_SHARE"] = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".no-share")


SERVER_MARKS = ("docker", "synapse", "mail", "chromium", "gitdaemon", "sshd", "espeak")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: `-m "not server"` sees the mark added here
def pytest_collection_modifyitems(items):
    """A test marked with any real server's mark is also `server`, so `make test-fast` names one
    mark (`-m "not server and not slow"`) and a new server's mark joins by being listed here."""
    for item in items:
        if any(item.get_closest_marker(m) for m in SERVER_MARKS):
            item.add_marker(pytest.mark.server)


@pytest.fixture
def vault(tmp_path: Path) -> Vault:
    return init_vault(tmp_path / "vault").vault


def git(vault: Vault | Path, *args: str) -> str:
    root = vault.root if isinstance(vault, Vault) else vault
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def run_cli():
    """Run the real `hermes-fs` entry point in a subprocess."""

    def run(*args: str, env: dict | None = None, cwd: Path | None = None, input: str | None = None):
        return subprocess.run(
            [sys.executable, "-m", "hermes_fs", *args],
            capture_output=True, text=True, cwd=cwd, input=input,
            env={**os.environ, **(env or {})}, timeout=120,
        )

    return run


class Receiver:
    """A local HTTP server that records what Apprise's json:// and form:// plugins post."""

    def __init__(self):
        self.received: list[dict] = []
        self.status = 200
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"raw": raw.decode(errors="replace")}
                owner.received.append({"path": self.path, "body": body})
                self.send_response(owner.status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str = "notify") -> str:
        return f"json://127.0.0.1:{self.port}/{path}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def model_server():
    from model_server import ModelServer

    server = ModelServer()
    yield server
    server.close()


@pytest.fixture
def agent_vault(vault, model_server):
    """A vault whose hermes.yaml points at the scripted model server."""
    from model_server import configure_vault

    configure_vault(vault.root, model_server)
    vault.git.commit_paths(["hermes.yaml"], "test: point at the model server", Act.person())
    vault._config = None
    return vault


@pytest.fixture
def no_litellm(tmp_path_factory) -> dict:
    """Environment for a CLI process that cannot import litellm: a turn that succeeds with it can
    only have run in the daemon's warm process."""
    poison = tmp_path_factory.mktemp("no-litellm")
    (poison / "litellm").mkdir()
    (poison / "litellm" / "__init__.py").write_text("raise ImportError('litellm imported in the CLI process')\n")
    return {"PYTHONPATH": str(poison)}


# -- a real daemon process ----------------------------------------------------------------------
def wait_for(pred, timeout=30.0, interval=0.05):
    timeout = generous(timeout)  # tests/deadlines.py: a deadline, generous under load
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(interval)
    return pred()


class DaemonProc:
    def __init__(self, root: Path, debounce=0.5, env: dict | None = None):
        self.root = root
        # stdout and stderr go to a file beside the vault, never to a pipe nobody reads: a daemon
        # that fills a pipe's 64 KiB blocks on its next write (a log line, a warning) and never stops.
        self.console = root.parent / f"daemon-console-{time.time_ns()}.log"
        with open(self.console, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "hermes_fs", "--vault", str(root), "daemon", "--debounce", str(debounce)],
                stdout=out, stderr=subprocess.STDOUT, env=env)
        assert wait_for(self.started, 30), self.output()

    def started(self) -> bool:
        """This process (not a previous daemon whose state file is still there) said it started;
        a job due at once may already have logged after that line."""
        st = self.state()
        return st.get("pid") == self.proc.pid and any("daemon started" in e for e in st.get("last_events") or [])

    def state(self) -> dict:
        try:
            return json.loads((self.root / ".hermes" / "daemon.json").read_text())
        except (OSError, ValueError):
            return {}

    def output(self) -> str:
        """daemon.log, then what the process wrote to its console (tracebacks of a crash)."""
        log = self.root / ".hermes" / "daemon.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        console = self.console.read_text(errors="replace") if self.console.exists() else ""
        return f"{text}\n--- console ---\n{console}"

    def stop(self, sig=signal.SIGTERM, timeout: float = 180) -> int:
        """Signal the daemon and wait for it; one that does not stop fails with every thread's
        stack (the daemon writes them to daemon.log on SIGUSR1) and is then killed."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(2)  # the main thread writes them within a second
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the daemon did not stop within {timeout} s of signal {sig}:\n"
                                 + self.output()[-20000:]) from None


@pytest.fixture
def daemon(vault):
    procs = []

    def start(debounce=0.5):
        d = DaemonProc(vault.root, debounce)
        procs.append(d)
        return d

    yield start
    for d in procs:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()


@pytest.fixture
def daemons():
    """DaemonProc objects a test starts itself (several, or after a kill): none outlives the test."""
    made: list[DaemonProc] = []
    yield made
    for d in made:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()


@pytest.fixture(scope="session")
def static_table(tmp_path_factory) -> Path:
    """The static token table (mind/static_vectors.py), built once per test session by the real
    `hermes-fs skills embed --table` in a vault of its own (about a minute of CPU); tests copy it
    into their vault's .hermes/ with `copy_static_table` instead of building it again."""
    from hermes_fs.mind import embeddings, static_vectors

    if not embeddings.available():
        pytest.skip("the embeddings extra is not installed")
    root = init_vault(tmp_path_factory.mktemp("static-table") / "vault").vault.root
    proc = subprocess.run([sys.executable, "-m", "hermes_fs", "--vault", str(root), "skills", "embed", "--table"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert static_vectors.is_built(root / ".hermes")
    return root / ".hermes"


def copy_static_table(state_dir: Path, vault_root: Path) -> None:
    import shutil

    from hermes_fs.mind import static_vectors

    for name in (static_vectors.TABLE, static_vectors.META):
        shutil.copy(state_dir / name, vault_root / ".hermes" / name)
