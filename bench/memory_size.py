"""Warm `run` turns through the daemon with a normal memory file and with a 1 MB one, in one run,
plus the daemon's CPU seconds for each set of turns.

`--before TREE` measures an older source tree (e.g. `git archive` of the commit before issue 43)
the same way in the same run; `--peer PEER/bin/hermes` measures Hermes Agent 0.19's `hermes -z`
with its own MEMORY.md (its home's memories/, entries split by its "§" lines) empty and 1 MB, against the
same scripted model (its every call is a cold one: it has no daemon).

Target (issue: fast from the first call): a warm turn's time flat in the size of memory files.
Usage: python bench/memory_size.py [RUNS] [--before TREE] [--peer PEER/bin/hermes]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import cpu_seconds, median, write_results  # noqa: E402
from harness import ModelServer, configure, start_daemon, stop_daemon, wait_settled  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FACTS = 20_000  # about 1.2 MB of entries


def turns(root: Path, env: dict, runs: int, pid: int, tree: Path) -> tuple[float, float]:
    times = []
    cpu0 = cpu_seconds(pid)
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "hermes_fs", "--vault", str(root), "run", "hello"],
                              capture_output=True, text=True, env=env, cwd=tree)
        times.append(time.perf_counter() - t0)
        assert proc.returncode == 0, proc.stderr
    return median(times), (cpu_seconds(pid) - cpu0) / runs


def measure(tree: Path, runs: int) -> dict:
    """A tree's daemon: warm turns with the vault's own MEMORY.md, then with 1.2 MB of it."""
    server = ModelServer(responder=lambda body: {"content": "hello"})
    root = Path(tempfile.mkdtemp(prefix="memsize-")) / "vault"
    # `python -m` puts the working directory first on the path: each tree runs from its folder
    env = {**os.environ, "HERMES_TEST_KEY": "bench", "PYTHONPATH": str(tree)}
    for name in ("HERMES_NO_DAEMON", "HERMES_NO_WARM_UP"):
        env.pop(name, None)
    subprocess.run([sys.executable, "-m", "hermes_fs", "init", str(root)], check=True, capture_output=True, env=env,
                   cwd=tree)
    configure(root, server)
    mem = root / "memory" / "MEMORY.md"
    small = mem.read_text()
    here = os.getcwd()
    os.chdir(tree)
    try:
        proc = start_daemon(root, env=env)
    finally:
        os.chdir(here)
    try:
        subprocess.run([sys.executable, "-m", "hermes_fs", "--vault", str(root), "run", "warm up"],
                       capture_output=True, env=env, check=True, cwd=tree)
        small_s, small_cpu = turns(root, env, runs, proc.pid, tree)
        mem.write_text(small + "".join(f"- fact number {i}: the user likes thing {i} in context {i * 7}\n"
                                       for i in range(FACTS)))
        size = mem.stat().st_size
        wait_settled(root)  # the watcher commits the edit once (and scans it then); the turns after it are measured
        big_s, big_cpu = turns(root, env, runs, proc.pid, tree)
    finally:
        stop_daemon(proc)
        server.close()
    return {"tree": str(tree), "big_file_bytes": size,
            "warm_turn_small_memory_median_s": round(small_s, 3), "warm_turn_1mb_memory_median_s": round(big_s, 3),
            "slowdown": round(big_s / small_s, 2),
            "daemon_cpu_per_turn_small_s": round(small_cpu, 3), "daemon_cpu_per_turn_1mb_s": round(big_cpu, 3),
            "cpu_slowdown": round(big_cpu / small_cpu, 2) if small_cpu else None}


def peer_call(peer: str, env: dict) -> tuple[float, float]:
    """(wall s, CPU s) of one `hermes -z hello`, its children included."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([peer, "-z", "hello"], capture_output=True, text=True, env=env, timeout=600)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert proc.returncode == 0 and "hello" in proc.stdout, (proc.stdout[-300:], proc.stderr[-1500:])
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def measure_peer(peer: str, runs: int) -> dict:
    server = ModelServer(responder=lambda body: {"content": "hello"})
    home = Path(tempfile.mkdtemp(prefix="memsize-peer-"))
    (home / ".hermes" / "memories").mkdir(parents=True)
    (home / ".hermes" / "config.yaml").write_text(
        f"model:\n  provider: custom\n  base_url: {server.api_base}\n  default: test-model\n  api_key: bench\n")
    env = {**os.environ, "HOME": str(home)}
    mem = home / ".hermes" / "memories" / "MEMORY.md"
    try:
        mem.write_text("The user prefers short answers.")
        small = [peer_call(peer, env) for _ in range(runs)]
        mem.write_text("\n§\n".join(f"fact number {i}: the user likes thing {i} in context {i * 7}"
                                    for i in range(FACTS)))
        size = mem.stat().st_size
        big = [peer_call(peer, env) for _ in range(runs)]
        prompt_chars = max((len(str(r.get("messages"))) for r in server.requests), default=0)
    finally:
        server.close()
    sw, sc = median([w for w, _ in small]), median([c for _, c in small])
    bw, bc = median([w for w, _ in big]), median([c for _, c in big])
    return {"big_file_bytes": size, "call_small_memory_median_s": round(sw, 3), "call_1mb_memory_median_s": round(bw, 3),
            "slowdown": round(bw / sw, 2), "cpu_per_call_small_s": round(sc, 3), "cpu_per_call_1mb_s": round(bc, 3),
            "cpu_slowdown": round(bc / sc, 2), "largest_request_chars": prompt_chars}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="?", type=int, default=9)
    p.add_argument("--before", help="an older source tree measured the same way in the same run")
    p.add_argument("--peer", help="Hermes Agent's `hermes` executable (its own venv)")
    a = p.parse_args(argv)
    after = measure(ROOT, a.runs)
    result: dict = {"runs": a.runs, **{k: v for k, v in after.items() if k != "tree"},
                    "target": "slowdown close to 1.0", "rows": {"after": after}}
    if a.before:
        result["rows"]["before"] = measure(Path(a.before).resolve(), a.runs)
    if a.peer:
        result["rows"]["peer"] = measure_peer(a.peer, a.runs)
    result["load_average_at_end"] = os.getloadavg()[0]
    result["command"] = "python bench/memory_size.py " + " ".join(argv if argv is not None else sys.argv[1:])
    for name, row in result["rows"].items():
        print(name, " ".join(f"{k}={v}" for k, v in row.items() if k != "tree"))
    write_results("memory_size", result)
    return result


if __name__ == "__main__":
    main()
