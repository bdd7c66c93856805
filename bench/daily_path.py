"""The daily path's imports: which heavy packages each everyday action imports, and in which process.

CLI actions run as real `hermes-fs` processes with a meta path finder that prints each watched
package the process asks for (even one a `try` would swallow, and before an `os._exit`); their CPU
is the child's own. The daemon's side is a real daemon (gateway on Telegram's emulator from tests/,
a hosted voice model and the chat model on the scripted server, the web page, a cron job not due)
asked after each event what it holds (`daemon status --memory`: its sys.modules and VmRSS), and
its model worker's resident size.

Usage: python bench/daily_path.py   (writes bench/results/daily_path.json)
"""

from __future__ import annotations

import datetime
import http.client
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent / "tests" / "learning"))  # web_helpers takes a skill text from test_refine

from common import write_results  # noqa: E402

from hermes_fs.store.vault import Vault, init_vault  # noqa: E402

WATCHED = ("litellm", "torch", "sentence_transformers", "openai", "numpy", "pydantic", "tokenizers", "onnxruntime",
           "tiktoken", "aiohttp")

HOOK = f"""
import sys

class Watch:
    seen = set()
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in {WATCHED!r} and top not in self.seen:
            self.seen.add(top)
            print("WATCHED-IMPORT", top, file=sys.stderr, flush=True)
        return None

sys.meta_path.insert(0, Watch())
from hermes_fs.cli.main import main
main(sys.argv[1:], prog_name="hermes-fs")
"""


def cli(root: Path, *args: str) -> dict:
    """One CLI action: its exit code, wall and CPU time, and the watched packages it imported."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", HOOK, "--vault", str(root), *args], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "HERMES_NO_AUTOSTART": "1"})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    imported = sorted({line.split()[1] for line in r.stderr.splitlines() if line.startswith("WATCHED-IMPORT ")})
    return {"args": list(args), "exit_code": r.returncode, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "imported": imported}


def footprint(root: Path) -> dict:
    r = subprocess.run([sys.executable, "-m", "hermes_fs", "--vault", str(root), "daemon", "status", "--memory",
                        "--json"], capture_output=True, text=True, timeout=120)
    return json.loads(r.stdout).get("footprint") or {}


def wait_for(pred, timeout: float) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False


def tone_wav(seconds: float = 1.0) -> bytes:
    import math
    from array import array

    from hermes_fs.agent.audio import Pcm

    samples = array("h", (int(8000 * math.sin(2 * math.pi * 440 * i / 16_000)) for i in range(int(16_000 * seconds))))
    return Pcm(samples.tobytes()).wav()


def cli_side(root: Path, server) -> list[dict]:
    from web_helpers import refine_change

    workspace = root.parent / "work"
    workspace.mkdir()
    branch = refine_change(Vault(root), server, workspace)  # a real pending change, for `review show`
    bare = root.parent / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    rows = []
    for args in (["--help"], ["status"], ["log"], ["review"], ["review", "show", branch], ["skills", "list"],
                 ["doctor", "--no-model"]):
        rows.append(cli(root, *args))
        print(f"  {' '.join(args):<28} {rows[-1]['cpu_s']:.3f} s CPU  imports: {rows[-1]['imported'] or 'none'}")
    config = root / "hermes.yaml"
    config.write_text(config.read_text() + f"remote:\n  url: {bare}\n")
    subprocess.run(["git", "-C", str(root), "commit", "-qam", "bench: a remote"], check=True)
    rows.append(cli(root, "sync"))
    print(f"  {'sync':<28} {rows[-1]['cpu_s']:.3f} s CPU  imports: {rows[-1]['imported'] or 'none'}")
    config.write_text(config.read_text().replace(f"remote:\n  url: {bare}\n", ""))
    subprocess.run(["git", "-C", str(root), "commit", "-qam", "bench: no remote"], check=True)
    return rows


def daemon_side(root: Path, server) -> list[dict]:
    from emulated_world import echo
    from model_server import configure_vault
    from telegram_emulator import TelegramEmulator

    from hermes_fs.service.web.security import TOKEN_NAME
    from hermes_fs.store.notify import read_secrets_env

    emu = TelegramEmulator()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    configure_vault(root, server, f"""refine:
  every_turns: 0
gateway:
  telegram:
    token_env: TELEGRAM_BOT_TOKEN
    api_base: {emu.url}
    allow: [1001]
voice:
  engine: api
  model: openai/whisper-1
  api_base: {server.api_base}
  api_key_env: HERMES_TEST_KEY
web:
  enabled: true
  listen: 127.0.0.1:{port}
""")
    later = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=2)).replace(microsecond=0)
    (root / "cron" / "later.md").write_text(f"---\nschedule: \"at {later.isoformat()}\"\n---\nNot yet.\n")
    secrets = root / ".hermes" / "secrets.env"
    secrets.write_text(secrets.read_text() + f"TELEGRAM_BOT_TOKEN={emu.token}\n" if secrets.exists()
                       else f"TELEGRAM_BOT_TOKEN={emu.token}\n")
    secrets.chmod(0o600)
    subprocess.run(["git", "-C", str(root), "add", "hermes.yaml", "cron/later.md"], check=True)
    subprocess.run(["git", "-C", str(root), "commit", "-qm", "bench: the daily daemon"], check=True)
    server.responder = echo
    server.transcripts.append("what is on today")
    log = root.parent / "daemon-console.log"
    with open(log, "wb") as out:
        daemon = subprocess.Popen([sys.executable, "-m", "hermes_fs", "--vault", str(root), "daemon"], stdout=out,
                                  stderr=subprocess.STDOUT)
    rows: list[dict] = []

    def step(name: str) -> None:
        f = footprint(root)
        rows.append({"after": name, **f})
        worker = f"{(f.get('worker_rss_kib') or 0) / 1024:.0f} MiB" if f.get("worker_pid") else "none"
        print(f"  {name:<44} daemon {(f.get('rss_kib') or 0) / 1024:6.1f} MiB  imports: "
              f"{', '.join(f.get('heavy') or []) or 'none'}  worker: {worker}")

    try:
        daemon_log = root / ".hermes" / "daemon.log"
        assert wait_for(lambda: daemon_log.exists() and "gateway telegram: connected" in daemon_log.read_text(), 120)
        assert wait_for(lambda: "web page started" in daemon_log.read_text(), 60)
        assert wait_for(lambda: "model layer warm" in daemon_log.read_text(), 300)
        step("start, warm-up (worker started)")
        (root / "notes.md").write_text("A person's edit.\n")
        assert wait_for(lambda: "notes.md" in subprocess.run(["git", "-C", str(root), "log", "--name-only", "--format="],
                                                             capture_output=True, text=True).stdout, 60)
        step("a watcher event (an edit committed)")
        time.sleep(5)
        step("cron ticks and the inbox, nothing due")
        token = read_secrets_env(secrets)[TOKEN_NAME]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for page in ("/", "/status", "/memory", "/skills", "/jobs", "/history"):
            conn.request("GET", page, headers={"Authorization": f"Bearer {token}"})
            conn.getresponse().read()
        step("web page requests")
        emu.say(1001, "hello there")
        emu.wait_sent(1, chat_id=1001, timeout=300)
        step("a gateway message (answered through the worker)")
        emu.say_voice(1001, tone_wav(), duration=1, kind="audio", file_name="note.wav", mime_type="audio/wav")
        emu.wait_sent(2, chat_id=1001, timeout=300)
        step("a voice note, `voice.engine: api`")
    finally:
        daemon.terminate()
        daemon.wait(60)
        emu.close()
    return rows


def main() -> dict:
    from model_server import ModelServer, configure_vault

    from hermes_fs.store.provenance import Act

    os.environ.setdefault("HERMES_TEST_KEY", "sk-bench-not-a-real-key")
    server = ModelServer()
    try:
        with tempfile.TemporaryDirectory(prefix="hermes-daily-") as tmp:
            root = init_vault(Path(tmp) / "vault").vault.root
            configure_vault(root, server)
            Vault(root).git.commit_paths(["hermes.yaml"], "bench: the scripted model", Act.person())
            print("CLI actions (each a process of its own):")
            cli_rows = cli_side(root, server)
            print("the daemon, after each event:")
            daemon_rows = daemon_side(root, server)
    finally:
        server.close()
    result = {"date": datetime.date.today().isoformat(), "load_avg": os.getloadavg(), "watched": list(WATCHED),
              "cli": cli_rows, "daemon": daemon_rows}
    write_results("daily_path", result)
    return result


if __name__ == "__main__":
    main()
