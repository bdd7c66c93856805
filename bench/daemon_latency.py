"""Daemon latency and footprint: over N trials, the time from an inbox file's rename into place to
its job starting, and from a save to its commit minus the debounce (p50, p95); then the idle
daemon's CPU over 60 s and its resident memory.

Targets: p95 under 0.3 s for both (beyond the debounce); idle CPU under 0.5% of a core; RSS under
80 MB. Inbox trials use malformed requests, so the job itself is instant and no model is needed:
what is measured is the daemon noticing and starting the job.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import percentile, write_results  # noqa: E402

from hermes_fs.store.vault import init_vault  # noqa: E402

TRIALS = int(os.environ.get("TRIALS", "50"))
DEBOUNCE = 1.0
IDLE_S = 60


def head(root: Path) -> str:
    return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


def started_times(log: Path) -> dict[str, float]:
    out = {}
    for line in log.read_text().splitlines():
        m = re.match(r"(\S+ \S+),(\d+) INFO request started: (\S+)", line)
        if m:
            t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(m.group(2)) / 1000
            out[m.group(3)] = t
    return out


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> dict:
    root = init_vault(Path(tempfile.mkdtemp()) / "vault").vault.root
    proc = subprocess.Popen([sys.executable, "-m", "hermes_fs", "--vault", str(root), "daemon", "--debounce", str(DEBOUNCE)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = root / ".hermes" / "daemon.log"
    while not (log.exists() and "daemon started" in log.read_text()):
        time.sleep(0.05)
    # save -> commit
    commit_lat = []
    user = root / "memory" / "USER.md"
    for i in range(TRIALS):
        before = head(root)
        user.write_text(user.read_text() + f"- trial {i}\n")
        t0 = time.time()
        while head(root) == before:
            time.sleep(0.005)
        commit_lat.append(time.time() - t0 - DEBOUNCE)
    # inbox rename -> job start
    renamed = {}
    for i in range(TRIALS):
        name = f"req{i}.md"
        tmp = root / "inbox" / f".{name}.tmp"
        tmp.write_text("---\ntype: nonsense\n---\nbench\n")
        t0 = time.time()
        os.replace(tmp, root / "inbox" / name)
        renamed[name] = t0
        time.sleep(0.3)
    deadline = time.time() + 60
    while len(started_times(log)) < TRIALS and time.time() < deadline:
        time.sleep(0.1)
    starts = started_times(log)
    inbox_lat = [starts[n] - t for n, t in renamed.items() if n in starts]
    time.sleep(3)  # let the last commits land
    cpu0, t0 = proc_cpu_s(proc.pid), time.time()
    time.sleep(IDLE_S)
    idle_cpu = (proc_cpu_s(proc.pid) - cpu0) / (time.time() - t0) * 100
    rss = rss_mb(proc.pid)
    proc.terminate()
    proc.wait(60)
    result = {
        "trials": TRIALS, "debounce_s": DEBOUNCE,
        "save_to_commit_beyond_debounce_s": {"p50": percentile(commit_lat, 50), "p95": percentile(commit_lat, 95)},
        "inbox_rename_to_job_start_s": {"p50": percentile(inbox_lat, 50), "p95": percentile(inbox_lat, 95),
                                         "measured": len(inbox_lat)},
        "idle_cpu_percent_of_core": idle_cpu, "idle_seconds": IDLE_S, "rss_mb": rss,
        "targets": {"p95_s": 0.3, "idle_cpu_percent": 0.5, "rss_mb": 80},
    }
    print(f"save->commit beyond debounce: p50 {result['save_to_commit_beyond_debounce_s']['p50']:.3f}s "
          f"p95 {result['save_to_commit_beyond_debounce_s']['p95']:.3f}s")
    print(f"inbox rename->job start: p50 {result['inbox_rename_to_job_start_s']['p50']:.3f}s "
          f"p95 {result['inbox_rename_to_job_start_s']['p95']:.3f}s ({len(inbox_lat)}/{TRIALS})")
    print(f"idle CPU {idle_cpu:.3f}% of a core over {IDLE_S}s; RSS {rss:.1f} MB")
    write_results("daemon_latency", result)
    return result


if __name__ == "__main__":
    main()
