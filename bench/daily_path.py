"""The daily path's imports: which heavy packages each everyday action imports, and in which process.

CLI actions run as real `hermes-fs` processes with a meta path finder that prints each watched
package the process asks for (even one a `try` would swallow, and before an `os._exit`); their CPU
is the child's own. The daemon's side is a real daemon (gateway on Telegram's emulator from tests/,
a hosted voice model and the chat model on the scripted server, the web page, a cron job not due)
asked after each event what it holds (`daemon status --memory`: its sys.modules and VmRSS), and
its model worker's resident size.

Also `--help`'s CPU, median of alternated runs, beside an older tree (`--before TREE`, e.g. `git
archive` of the commit before issue 43) and Hermes Agent's `hermes --help` (`--peer`).

`--before-daemon TREE` puts an older tree's daemon through the same events (seen from /proc: its
VmRSS and whether litellm's native code is mapped into it).

Usage: python bench/daily_path.py [--before TREE] [--peer PEER/bin/hermes] [--rounds N] [--before-daemon TREE]
(writes bench/results/daily_path.json)
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
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent / "tests" / "learning"))  # web_helpers takes a skill text from test_refine

from common import median, write_results  # noqa: E402

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


def footprint(root: Path, tree: Path) -> dict:
    """What the daemon says it holds (`daemon status --memory`; an older tree has no such answer)."""
    r = subprocess.run([sys.executable, "-m", "hermes_fs", "--vault", str(root), "daemon", "status", "--memory",
                        "--json"], capture_output=True, text=True, timeout=120, cwd=tree,
                       env={**os.environ, "PYTHONPATH": str(tree)})
    try:
        return json.loads(r.stdout).get("footprint") or {}
    except ValueError:
        return {}


def from_proc(pid: int) -> dict:
    """Seen from outside, whatever the tree: VmRSS, and the installed packages whose native code is
    mapped into the process (/proc/PID/maps: litellm maps its own, torch its libtorch)."""
    rss = None
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    mapped = set()
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        path = line.split()[-1] if len(line.split()) >= 6 else ""
        if "site-packages/" in path:
            mapped.add(path.split("site-packages/", 1)[1].split("/")[0].split(".")[0])
    return {"rss_mib": round(rss / 1024, 1) if rss else None, "mapped": sorted(mapped)}


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


def web_alone(root: Path) -> dict:
    """`hermes-fs web` on its own (no daemon), five pages requested: what its process imported."""
    from web_helpers import read_every_page, start_web

    web = start_web(root, timeout=60, program=HOOK)
    try:
        read_every_page(web)
    finally:
        web.stop()
    imported = sorted({line.split()[1] for line in web.output().splitlines() if line.startswith("WATCHED-IMPORT ")})
    return {"args": ["web", "(five pages)"], "exit_code": 0, "imported": imported}


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
    rows.append(web_alone(root))
    print(f"  {'web (five pages)':<28} imports: {rows[-1]['imported'] or 'none'}")
    config = root / "hermes.yaml"
    config.write_text(config.read_text() + f"remote:\n  url: {bare}\n")
    subprocess.run(["git", "-C", str(root), "commit", "-qam", "bench: a remote"], check=True)
    rows.append(cli(root, "sync"))
    print(f"  {'sync':<28} {rows[-1]['cpu_s']:.3f} s CPU  imports: {rows[-1]['imported'] or 'none'}")
    config.write_text(config.read_text().replace(f"remote:\n  url: {bare}\n", ""))
    subprocess.run(["git", "-C", str(root), "commit", "-qam", "bench: no remote"], check=True)
    return rows


def daemon_side(root: Path, server, tree: Path = ROOT) -> list[dict]:
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
        env = {k: v for k, v in os.environ.items() if k != "HERMES_NO_WARM_UP"}  # tests/conftest sets it
        env["PYTHONPATH"] = str(tree)  # and `python -m` from the tree's folder: its code, not ours
        daemon = subprocess.Popen([sys.executable, "-m", "hermes_fs", "--vault", str(root), "daemon"], stdout=out,
                                  stderr=subprocess.STDOUT, env=env, cwd=tree)
    rows: list[dict] = []

    def step(name: str) -> None:
        f = footprint(root, tree)
        seen = from_proc(daemon.pid)
        rows.append({"after": name, **f, **seen})
        worker = f"{(f.get('worker_rss_kib') or 0) / 1024:.0f} MiB" if f.get("worker_pid") else "none"
        heavy = ", ".join(f.get("heavy") or []) or "none" if f else "(not told)"
        print(f"  {name:<48} daemon {seen['rss_mib']:6.1f} MiB  imports: {heavy}; litellm mapped: "
              f"{'litellm' in seen['mapped']}; worker: {worker}")

    try:
        daemon_log = root / ".hermes" / "daemon.log"
        assert wait_for(lambda: daemon_log.exists() and "gateway telegram: connected" in daemon_log.read_text(), 120)
        assert wait_for(lambda: "web page started" in daemon_log.read_text(), 60)
        if "model layer warm" in (tree / "hermes_fs" / "service" / "daemon.py").read_text():
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


def child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def help_cpu(before: Path | None, peer: str | None, rounds: int) -> dict:
    """`--help` CPU, median of `rounds` alternated runs: this tree, the `before` tree (its own
    hermes_fs on the path, run from its folder) and Hermes Agent's `hermes --help`."""
    ways: dict[str, tuple[list[str], dict, Path | None]] = {
        "after": ([sys.executable, "-m", "hermes_fs", "--help"], {**os.environ, "PYTHONPATH": str(ROOT)}, ROOT)}
    if before is not None:
        ways["before"] = ([sys.executable, "-m", "hermes_fs", "--help"], {**os.environ, "PYTHONPATH": str(before)},
                          before)
    if peer:
        ways["peer"] = ([peer, "--help"], dict(os.environ), None)
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, (cmd, env, cwd) in ways.items():
            start = child_cpu()
            subprocess.run(cmd, capture_output=True, env=env, cwd=cwd, check=True, timeout=120)
            times[name].append(child_cpu() - start)
    out = {name: round(median(xs), 3) for name, xs in times.items()}
    if "peer" in out:
        out["after_over_peer"] = round(out["after"] / out["peer"], 2)
    if "before" in out:
        out["after_over_before"] = round(out["after"] / out["before"], 2)
    print(f"--help CPU, median of {rounds}: " + ", ".join(f"{k} {v}" for k, v in out.items()))
    return {"rounds": rounds, **out}


def main(argv: list[str] | None = None) -> dict:
    import argparse

    from model_server import ModelServer, configure_vault

    from hermes_fs.store.provenance import Act

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", help="a source tree whose `--help` CPU is measured beside this one's")
    p.add_argument("--peer", help="Hermes Agent's `hermes` executable: its `--help` CPU beside ours")
    p.add_argument("--rounds", type=int, default=9, help="alternated `--help` runs")
    p.add_argument("--before-daemon", help="a source tree whose daemon goes through the same events after ours")
    a = p.parse_args(argv)
    os.environ.setdefault("HERMES_TEST_KEY", "sk-bench-not-a-real-key")
    help_figures = help_cpu(Path(a.before).resolve() if a.before else None, a.peer, a.rounds)
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
        before_rows = None
        if a.before_daemon:
            with tempfile.TemporaryDirectory(prefix="hermes-daily-before-") as tmp:
                root = init_vault(Path(tmp) / "vault").vault.root
                configure_vault(root, server)
                Vault(root).git.commit_paths(["hermes.yaml"], "bench: the scripted model", Act.person())
                print(f"the daemon of {a.before_daemon}, after each event:")
                before_rows = daemon_side(root, server, Path(a.before_daemon).resolve())
    finally:
        server.close()
    result = {"date": datetime.date.today().isoformat(), "load_avg": os.getloadavg(), "watched": list(WATCHED),
              "help_cpu_s": help_figures, "cli": cli_rows, "daemon": daemon_rows,
              "daemon_before": before_rows, "daemon_before_tree": a.before_daemon,
              "command": "python bench/daily_path.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    write_results("daily_path", result)
    return result


if __name__ == "__main__":
    main()
