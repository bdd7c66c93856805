"""`hermes-fs run "say hello"` side by side with Hermes Agent's `hermes -z "say hello"`, in one run,
against the same scripted streaming model server: wall time, CPU time (user + sys) and peak memory
of each whole process, alternated A B A B so a drifting machine affects both alike; plus hermes-fs
warm (through a running daemon) and `hermes-fs --help`.

The peer is Hermes Agent 0.19 installed in a venv of its own (`python3 -m venv PEER &&
PEER/bin/pip install hermes-agent==0.19.0`); pass its `hermes` with --peer. Its configuration is
written to a temporary HOME (provider `custom`, the server's base_url).

Usage: python bench/cold_start.py --peer PEER/bin/hermes [RUNS]
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
from harness import ModelServer, start_daemon, stop_daemon  # noqa: E402

EXE = str(Path(sys.executable).with_name("hermes-fs"))


def measure(cmd: list[str], env: dict) -> tuple[float, float, float]:
    """(wall s, cpu s, peak RSS MiB) of one whole process and its children."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert proc.returncode == 0 and "hello" in proc.stdout, (cmd, proc.stdout[-500:], proc.stderr[-2000:])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, after.ru_maxrss / 1024


def summary(rows: list[tuple[float, float, float]]) -> dict:
    return {"wall_median_s": median([r[0] for r in rows]), "cpu_median_s": median([r[1] for r in rows]),
            "runs": len(rows)}


def main() -> dict:
    p = argparse.ArgumentParser()
    p.add_argument("runs", nargs="?", type=int, default=5)
    p.add_argument("--peer", help="Hermes Agent's `hermes` executable (its own venv)")
    a = p.parse_args()
    server = ModelServer(responder=lambda body: {"content": "hello"})
    work = Path(tempfile.mkdtemp(prefix="cold-"))
    root = work / "vault"
    subprocess.run([EXE, "init", str(root)], check=True, capture_output=True)
    (root / "hermes.yaml").write_text(f"model: openai/test-model\napi_base: {server.api_base}\n"
                                      "api_key_env: HERMES_TEST_KEY\nsandbox:\n  backend: none\n")
    subprocess.run(["git", "-C", str(root), "commit", "-qam", "bench config"], check=True)
    env = {**os.environ, "HERMES_TEST_KEY": "bench"}
    ours = [EXE, "--vault", str(root), "run", "say hello"]
    cold_env = {**env, "HERMES_NO_DAEMON": "1"}
    peer_env = None
    if a.peer:
        home = work / "peer-home"
        (home / ".hermes").mkdir(parents=True)
        (home / ".hermes" / "config.yaml").write_text(
            f"model:\n  provider: custom\n  base_url: {server.api_base}\n  default: test-model\n  api_key: bench\n")
        peer_env = {**env, "HOME": str(home)}
    cold, peer = [], []
    for _ in range(a.runs):  # A B A B: a drifting machine weighs on both
        cold.append(measure(ours, cold_env))
        if a.peer:
            peer.append(measure([a.peer, "-z", "say hello"], peer_env))
    help_cpu = []
    for _ in range(a.runs * 2):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([EXE, "--help"], capture_output=True, env=env, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        help_cpu.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    proc = start_daemon(root, env=env)
    try:
        measure(ours, env)
        cpu0 = cpu_seconds(proc.pid)
        warm = [measure(ours, env) for _ in range(a.runs)]
        daemon_cpu_per_turn = (cpu_seconds(proc.pid) - cpu0) / a.runs
    finally:
        stop_daemon(proc)
        server.close()
    result = {"cold_run": summary(cold), "warm_run (client process only)": summary(warm),
              "warm_daemon_cpu_per_turn_s": daemon_cpu_per_turn, "help_cpu_median_s": median(help_cpu),
              "peer": summary(peer) if peer else "not measured (pass --peer)"}
    if peer:
        result["cold_over_peer_wall"] = result["cold_run"]["wall_median_s"] / result["peer"]["wall_median_s"]
        result["cold_over_peer_cpu"] = result["cold_run"]["cpu_median_s"] / result["peer"]["cpu_median_s"]
        warm_row = result["warm_run (client process only)"]
        result["warm_over_peer_wall"] = warm_row["wall_median_s"] / result["peer"]["wall_median_s"]
        result["warm_over_peer_cpu"] = (warm_row["cpu_median_s"] + daemon_cpu_per_turn) / result["peer"]["cpu_median_s"]
    result["targets"] = {"cold_over_peer_wall_max": 1.0, "cold_over_peer_cpu_max": 1.0, "help_cpu_max_s": 0.1}
    for k, v in result.items():
        print(f"{k:<24} {v:.3f}" if isinstance(v, float) else f"{k:<24} {v}")
    write_results("cold_start", result)
    return result


if __name__ == "__main__":
    main()
