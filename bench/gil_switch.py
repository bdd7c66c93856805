"""What a git call costs the daemon's sync thread while another thread of the same process does
Python work (a restarted daemon's first request imports litellm: about 4 CPU-seconds of Python),
with Python's default GIL switch interval (5 ms) and with the daemon's (service/daemon.py,
SWITCH_INTERVAL_S). A thread that waits in a subprocess gets the GIL back only when the busy
thread lets it go, so each of the several waits of one `subprocess.run` can cost a switch interval.

Each case runs in a fresh process (litellm is imported once per process): git calls made the way
store/ makes them (`subprocess.run`, output captured) one after the other, alone, and while a
thread imports litellm. `python bench/gil_switch.py` writes bench/results/gil_switch.json.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from common import median, percentile, write_results  # noqa: E402

CHILD = r"""
import json, subprocess, sys, threading, time
sys.setswitchinterval(float(sys.argv[1]))
repo, busy = sys.argv[2], sys.argv[3] == "busy"
done = threading.Event()
def work():
    import litellm  # noqa: F401  (the agent's first model call in a fresh daemon)
    done.set()
if busy:
    threading.Thread(target=work, daemon=True).start()
    time.sleep(0.05)
calls = []
began = time.perf_counter()
while (not done.is_set()) if busy else len(calls) < 200:
    t = time.perf_counter()
    subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, check=True)
    calls.append(time.perf_counter() - t)
print(json.dumps({"calls": calls, "busy_s": time.perf_counter() - began}))
"""


def case(interval_s: float, busy: bool, repo: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(interval_s), str(repo), "busy" if busy else "alone"],
                         capture_output=True, text=True, check=True).stdout
    data = json.loads(out)
    ms = [c * 1000 for c in data["calls"]]
    return {"switch_interval_ms": interval_s * 1000, "beside": "import litellm" if busy else "nothing",
            "git_calls": len(ms), "mean_ms": round(sum(ms) / len(ms), 2), "p50_ms": round(median(ms), 2),
            "p95_ms": round(percentile(ms, 95), 2),
            "import_s": round(data["busy_s"], 2) if busy else None}


def main() -> dict:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="runs of each case, alternating the intervals")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hermes-gil-") as tmp:
        repo = Path(tmp)
        subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
        subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@x", "commit", "-q", "--allow-empty", "-m", "x"],
                       cwd=repo, check=True)
        runs = []
        for _ in range(args.rounds):
            for interval in (0.005, 0.001):
                for busy in (False, True):
                    runs.append(case(interval, busy, repo))
                    print(json.dumps(runs[-1]))
    summary = {}
    for interval in (5.0, 1.0):
        for beside in ("nothing", "import litellm"):
            these = [r for r in runs if r["switch_interval_ms"] == interval and r["beside"] == beside]
            summary[f"{interval:g} ms, beside {beside}"] = {
                k: round(median([r[k] for r in these]), 2) for k in ("mean_ms", "p50_ms", "p95_ms")}
    result = {"what": "one `git rev-parse` through subprocess.run on the calling thread; medians over the runs "
                      "of each case's mean, p50 and p95", "rounds": args.rounds, "summary": summary, "runs": runs}
    print(json.dumps(summary, indent=2))
    write_results("gil_switch", result)
    return result


if __name__ == "__main__":
    main()
