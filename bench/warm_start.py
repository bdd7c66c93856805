"""`hermes-fs run hello` and a piped `chat` first answer against the scripted model: cold (no
daemon: the CLI imports litellm itself) and warm (the daemon serves the turn over its socket), in
one run, plus the resident memory of a cold run and what importing litellm costs.

Targets (issue: warm start): warm <= 0.3 s median and >= 10x faster than cold; the daemon's first
turn (after its background warm-up) as fast as its later ones.
Usage: python bench/warm_start.py [RUNS]
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import median, write_results  # noqa: E402
from harness import ModelServer, configure, start_daemon, stop_daemon, wait_logged  # noqa: E402

EXE = str(Path(sys.executable).with_name("hermes-fs"))


def timed_run(args: list[str], env: dict, input: str | None = None) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([EXE, *args], capture_output=True, text=True, env=env, input=input)
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr
    return elapsed


def litellm_import_s() -> float:
    code = ("import os,time;os.environ['LITELLM_LOCAL_MODEL_COST_MAP']='True';t=time.perf_counter();"
            "import litellm;print(time.perf_counter()-t)")
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout)


def main(runs: int = 9) -> dict:
    server = ModelServer(responder=lambda body: {"content": "hello"})
    root = Path(tempfile.mkdtemp(prefix="warm-")) / "vault"
    subprocess.run([EXE, "init", str(root)], check=True, capture_output=True)
    configure(root, server)
    env = {**os.environ, "HERMES_TEST_KEY": "bench"}
    run_args = ["--vault", str(root), "run", "hello"]
    chat_args = ["--vault", str(root), "chat"]
    cold_env = {**env, "HERMES_NO_DAEMON": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    cold_run = [timed_run(run_args, cold_env) for _ in range(runs)]
    cold_rss_mb = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    cold_chat = [timed_run(chat_args, cold_env, "hello\n") for _ in range(runs)]
    # The daemon's first turn: without the warm-up it imports litellm itself; with it, the daemon
    # imported it in the background after starting (the turn is sent once the daemon says so).
    proc = start_daemon(root, env={**env, "HERMES_NO_WARM_UP": "1"})
    try:
        first_turn_no_warm_up = timed_run(run_args, env)
    finally:
        stop_daemon(proc)
    proc = start_daemon(root, env=env)
    try:
        assert wait_logged(root, "model layer warm"), "the daemon never said its model layer was warm"
        first_turn_warmed_up = timed_run(run_args, env)
        warm_run = [timed_run(run_args, env) for _ in range(runs * 2)]
        warm_chat = [timed_run(chat_args, env, "hello\n") for _ in range(runs * 2)]
    finally:
        stop_daemon(proc)
        server.close()
    result = {
        "runs": runs,
        "run_cold_median_s": median(cold_run), "run_warm_median_s": median(warm_run),
        "chat_first_answer_cold_median_s": median(cold_chat), "chat_first_answer_warm_median_s": median(warm_chat),
        "daemon_first_turn_without_warm_up_s": first_turn_no_warm_up,
        "daemon_first_turn_after_warm_up_s": first_turn_warmed_up,
        "cold_run_max_rss_mb": round(cold_rss_mb, 1),
        "litellm_import_s": litellm_import_s(),
        "peer": "hermes-agent is not installed here; not measured",
        "targets": {"warm_median_s_max": 0.3, "speedup_min": 10},
    }
    result["run_speedup"] = result["run_cold_median_s"] / result["run_warm_median_s"]
    result["chat_speedup"] = result["chat_first_answer_cold_median_s"] / result["chat_first_answer_warm_median_s"]
    for k, v in result.items():
        print(f"{k:<36} {v:.3f}" if isinstance(v, float) else f"{k:<36} {v}")
    write_results("warm_start", result)
    return result


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 9)
