"""Warm `run` turns through the daemon with a normal memory file and with a 1 MB one, in one run,
plus the daemon's CPU seconds for each set of turns.

Target (issue: fast from the first call): a warm turn's time flat in the size of memory files.
Usage: python bench/memory_size.py [RUNS]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import cpu_seconds, median, write_results  # noqa: E402
from harness import ModelServer, configure, start_daemon, stop_daemon, wait_settled  # noqa: E402

EXE = str(Path(sys.executable).with_name("hermes-fs"))


def turns(root: Path, env: dict, runs: int, pid: int) -> tuple[float, float]:
    times = []
    cpu0 = cpu_seconds(pid)
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run([EXE, "--vault", str(root), "run", "hello"], capture_output=True, text=True, env=env)
        times.append(time.perf_counter() - t0)
        assert proc.returncode == 0, proc.stderr
    return median(times), (cpu_seconds(pid) - cpu0) / runs


def main(runs: int = 9) -> dict:
    server = ModelServer(responder=lambda body: {"content": "hello"})
    root = Path(tempfile.mkdtemp(prefix="memsize-")) / "vault"
    subprocess.run([EXE, "init", str(root)], check=True, capture_output=True)
    configure(root, server)
    env = {**os.environ, "HERMES_TEST_KEY": "bench"}
    mem = root / "memory" / "MEMORY.md"
    small = mem.read_text()
    proc = start_daemon(root)
    try:
        subprocess.run([EXE, "--vault", str(root), "run", "warm up"], capture_output=True, env=env, check=True)
        small_s, small_cpu = turns(root, env, runs, proc.pid)
        mem.write_text(small + "".join(f"- fact number {i}: the user likes thing {i} in context {i * 7}\n"
                                       for i in range(20_000)))  # about 1.2 MB
        size = mem.stat().st_size
        wait_settled(root)  # the watcher commits the edit once (and scans it then); the turns after it are measured
        big_s, big_cpu = turns(root, env, runs, proc.pid)
    finally:
        stop_daemon(proc)
        server.close()
    result = {
        "runs": runs, "big_file_bytes": size,
        "warm_turn_small_memory_median_s": small_s, "warm_turn_1mb_memory_median_s": big_s,
        "slowdown": big_s / small_s,
        "daemon_cpu_per_turn_small_s": small_cpu, "daemon_cpu_per_turn_1mb_s": big_cpu,
        "target": "slowdown close to 1.0",
    }
    for k, v in result.items():
        print(f"{k:<36} {v:.3f}" if isinstance(v, float) else f"{k:<36} {v}")
    write_results("memory_size", result)
    return result


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 9)
