"""Shared pieces for the reliability benchmarks: a daemon process, a scripted model, checks."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]
os.environ.setdefault("HERMES_TEST_KEY", "bench")
os.environ.setdefault("HERMES_RETRY_BASE_S", "0.05")
# a benchmark measures the daemon it starts itself (cold_start.py measures the autostart: it clears this)
os.environ.setdefault("HERMES_NO_AUTOSTART", "1")

from model_server import ModelServer  # noqa: E402

_counter = itertools.count()


def responder(body: dict) -> dict:
    """Reviewer: add one unique lesson to MEMORY.md, then report. Anything else: a short answer."""
    system = body["messages"][0]["content"]
    if "You review one conversation" in system:
        if any(m["role"] == "tool" for m in body["messages"]):
            return {"content": "Summary: a lesson\n- memory/MEMORY.md: lesson (because bench)"}
        return {"delay": 0.2, "tool_calls": [("memory", {"action": "add", "file": "MEMORY.md",
                                                           "text": f"Bench lesson {next(_counter)}."})]}
    return {"delay": 0.1, "content": "ok [SILENT]"}


def configure(root: Path, server: ModelServer, policy: str = "auto") -> None:
    (root / "hermes.yaml").write_text(
        f"model: openai/test-model\napi_base: {server.api_base}\napi_key_env: HERMES_TEST_KEY\n"
        f"sandbox:\n  backend: none\nrefine:\n  policy: {policy}\n  every_turns: 0\n")
    subprocess.run(["git", "-C", str(root), "add", "hermes.yaml"], check=True)
    subprocess.run(["git", "-C", str(root), "commit", "-qm", "bench config"], check=True)


def start_daemon(root: Path, debounce: float = 0.5, env: dict | None = None) -> subprocess.Popen:
    log = root / ".hermes" / "daemon.log"
    size = log.stat().st_size if log.exists() else 0
    proc = subprocess.Popen([sys.executable, "-m", "hermes_fs", "--vault", str(root), "daemon", "--debounce", str(debounce)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.time() + 30
    while time.time() < deadline:
        if log.exists() and "daemon started" in log.read_text()[size:]:
            return proc
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited with {proc.returncode}")
        time.sleep(0.05)
    raise RuntimeError("daemon did not start")


def wait_logged(root: Path, text: str, timeout: float = 300) -> bool:
    """True once daemon.log holds `text` (the daemon's own account of a step)."""
    log = root / ".hermes" / "daemon.log"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if log.exists() and text in log.read_text():
            return True
        time.sleep(0.1)
    return False


def stop_daemon(proc: subprocess.Popen, sig=signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
    proc.wait(120)


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True).stdout


def fsck_clean(root: Path) -> bool:
    return subprocess.run(["git", "-C", str(root), "fsck", "--no-dangling"], capture_output=True).returncode == 0


def settled(root: Path) -> bool:
    """No request waiting or claimed, nothing uncommitted outside ignored files."""
    inbox = [p for p in (root / "inbox").glob("*.md") if p.name != "README.md"]
    claims = list((root / ".hermes" / "inbox").glob("*")) if (root / ".hermes" / "inbox").exists() else []
    return not inbox and not claims and git(root, "status", "--porcelain").strip() == ""


def wait_settled(root: Path, timeout: float = 120) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if settled(root):
            time.sleep(0.8)
            if settled(root):
                return True
        time.sleep(0.2)
    return False


def daemon_state(root: Path) -> dict:
    try:
        return json.loads((root / ".hermes" / "daemon.json").read_text())
    except (OSError, ValueError):
        return {}


def byte_compile(trees) -> None:
    """Compile each hermes-fs tree's modules, as an installed package is, so a tree run from source
    does not pay for compiling them on every start."""
    for tree in trees:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(tree) / "hermes_fs")], check=True)


def hello_vault(work: Path, exe: str) -> tuple[ModelServer, Path, dict[str, str]]:
    """A fresh vault the scripted model answers "hello" in, and the environment a call to it needs:
    the daemon-disabling switches of the test suite are removed, so calls start the daemon as a
    user's would."""
    server = ModelServer(responder=lambda body: {"content": "hello"})
    root = work / "vault"
    subprocess.run([exe, "init", str(root)], check=True, capture_output=True)
    (root / "hermes.yaml").write_text(f"model: openai/test-model\napi_base: {server.api_base}\n"
                                      "api_key_env: HERMES_TEST_KEY\nsandbox:\n  backend: none\n")
    subprocess.run(["git", "-C", str(root), "commit", "-qam", "bench config"], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("HERMES_NO_DAEMON", "HERMES_NO_AUTOSTART")}
    env["HERMES_TEST_KEY"] = "bench"
    return server, root, env
