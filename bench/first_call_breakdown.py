"""Where the true first call's CPU goes: `hermes-fs run "say hello"` with `daemon.autostart` on and
no daemon running, split by process (the CLI, the turns-only daemon it starts, the daemon's
ended children: the git commands that commit the turn, and the model worker) and, for the worker
and the daemon, by phase: before the worker said it was ready (its Python start and litellm's
import) and after (the first model call).

The daemon and its worker are sampled from /proc every few milliseconds while the call runs; the
worker's "ready" moment is the daemon log's line (`model worker ready`). Each round uses a fresh
vault state (the daemon stopped), against the scripted streaming model server. The tree's modules
are byte-compiled first, as an installed package's are (see bench/cold_start.py).

With `--before TREE` (another hermes-fs tree, e.g. `git archive` of main) that tree's first calls
are measured in the same rounds, alternated with this tree's.

Usage: python bench/first_call_breakdown.py [ROUNDS] [--label NAME] [--before TREE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

from common import median, write_results  # noqa: E402
from harness import byte_compile, hello_vault  # noqa: E402

EXE = str(Path(sys.executable).with_name("hermes-fs"))
TICK = os.sysconf("SC_CLK_TCK")
SAMPLE_S = 0.005


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields and int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


class Sampler:
    """The daemon's own CPU, its ended children's, and its worker's, every SAMPLE_S, with the time."""

    def __init__(self, root: Path):
        self.state = root / ".hermes" / "daemon.json"
        self.samples: list[tuple[float, float, float, float]] = []  # (time, own, ended children, worker)
        self.stop = threading.Event()
        self.worker_pid: int | None = None
        self.daemon_pid: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        worker_cpu = 0.0
        while not self.stop.wait(SAMPLE_S):
            if self.daemon_pid is None:
                try:
                    self.daemon_pid = int(json.loads(self.state.read_text())["pid"])
                except (OSError, ValueError, KeyError):
                    continue
            d = _stat(self.daemon_pid)
            if d is None:
                continue
            if self.worker_pid is None:
                kids = [k for k in _children(self.daemon_pid)
                        if "model_worker" in Path(f"/proc/{k}/cmdline").read_text(errors="replace")]
                self.worker_pid = kids[0] if kids else None
            if self.worker_pid is not None:
                w = _stat(self.worker_pid)
                if w is not None:
                    worker_cpu = sum(int(f) for f in w[11:15]) / TICK
            self.samples.append((time.time(), (int(d[11]) + int(d[12])) / TICK,
                                 (int(d[13]) + int(d[14])) / TICK, worker_cpu))

    def at(self, when: float) -> tuple[float, float, float, float]:
        best = self.samples[0]
        for s in self.samples:
            if s[0] <= when:
                best = s
        return best


def ready_time(root: Path) -> float | None:
    for line in (root / ".hermes" / "daemon.log").read_text().splitlines():
        if "model worker ready" in line:
            stamp = line[:23]  # "2026-12-03 19:50:01,123"
            return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return None


def one_round(root: Path, env: dict) -> dict:
    (root / ".hermes" / "daemon.log").unlink(missing_ok=True)
    sampler = Sampler(root)
    (root / ".hermes" / "daemon.json").unlink(missing_ok=True)
    sampler.thread.start()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    proc = subprocess.run([EXE, "--vault", str(root), "run", "say hello"], capture_output=True, text=True, env=env)
    t1 = time.time()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    time.sleep(3 * SAMPLE_S)
    sampler.stop.set()
    sampler.thread.join()
    assert proc.returncode == 0 and "hello" in proc.stdout, (proc.stdout[-500:], proc.stderr[-2000:])
    end = sampler.samples[-1]
    ready = ready_time(root)
    at_ready = sampler.at(ready) if ready else end
    subprocess.run([EXE, "--vault", str(root), "daemon", "stop"], check=True, capture_output=True, env=env)
    cli = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    row = {"wall_s": t1 - t0, "cli_cpu_s": cli, "daemon_cpu_s": end[1], "daemon_git_children_cpu_s": end[2],
           "worker_cpu_s": end[3], "worker_until_ready_cpu_s": at_ready[3],
           "worker_first_call_cpu_s": end[3] - at_ready[3], "daemon_until_worker_ready_cpu_s": at_ready[1],
           "worker_ready_after_s": (ready - t0) if ready else None}
    row["total_cpu_s"] = cli + end[1] + end[2] + end[3]
    return row


def main() -> dict:
    p = argparse.ArgumentParser()
    p.add_argument("rounds", nargs="?", type=int, default=5)
    p.add_argument("--label", default="", help="suffix of the JSON file (bench/results/first_call_breakdown-LABEL.json)")
    p.add_argument("--before", type=Path, help="another hermes-fs tree, measured in the same rounds")
    a = p.parse_args()
    trees = {"after": Path(__file__).resolve().parent.parent, **({"before": a.before.resolve()} if a.before else {})}
    byte_compile(trees.values())
    work = Path(tempfile.mkdtemp(prefix="first-call-"))
    server, root, env = hello_vault(work, EXE)
    rows: dict[str, list[dict]] = {name: [] for name in trees}
    try:
        for i in range(a.rounds):
            for name, tree in list(trees.items())[:: -1 if i % 2 else 1]:  # the order alternates
                tree_env = {**env, "PYTHONPATH": os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])}
                rows[name].append(one_round(root, tree_env))
    finally:
        subprocess.run([EXE, "--vault", str(root), "daemon", "stop"], capture_output=True, env=env)
        server.close()
    result: dict = {"rounds": a.rounds, "load_average": os.getloadavg(), "trees": {k: str(v) for k, v in trees.items()},
                    "medians": {name: {k: median([r[k] for r in rs if r[k] is not None]) for k in rs[0]}
                                for name, rs in rows.items()},
                    "rows": rows}
    names = list(trees)
    print(f"{'median':<36} " + " ".join(f"{n:>8}" for n in names))
    for k in result["medians"]["after"]:
        print(f"{k:<36} " + " ".join(f"{result['medians'][n][k]:8.3f}" for n in names))
    print(f"load average {result['load_average']}")
    write_results("first_call_breakdown" + (f"-{a.label}" if a.label else ""), result)
    return result


if __name__ == "__main__":
    main()
