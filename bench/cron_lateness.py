"""Cron lateness in a running daemon: N one-shot jobs due over a couple of minutes; p50 and p99 of
(start time - due time). Target: p99 under 1 s (hermes-agent ticks every 60 s).

The model is a local scripted server answering at once, so what is measured is the scheduler.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]
os.environ.setdefault("HERMES_TEST_KEY", "bench")

from common import percentile, write_results  # noqa: E402
from model_server import ModelServer, configure_vault  # noqa: E402

from hermes_fs.store.vault import init_vault  # noqa: E402

JOBS = int(os.environ.get("JOBS", "30"))
SPREAD_S = 120


def main() -> dict:
    server = ModelServer(responder=lambda body: {"content": "ok [SILENT]"})
    root = init_vault(Path(tempfile.mkdtemp()) / "vault").vault.root
    configure_vault(root, server)
    proc = subprocess.Popen([sys.executable, "-m", "hermes_fs", "--vault", str(root), "daemon"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ)
    log = root / ".hermes" / "daemon.log"
    while not (log.exists() and "daemon started" in log.read_text()):
        time.sleep(0.05)
    start = datetime.now(UTC) + timedelta(seconds=10)
    dues = {}
    for i in range(JOBS):
        due = (start + timedelta(seconds=i * SPREAD_S / JOBS)).replace(microsecond=0)
        dues[f"job{i}"] = due
        (root / "cron" / f"job{i}.md").write_text(f"---\nschedule: \"at {due.isoformat()}\"\n---\nSay ok.\n")
    deadline = time.time() + SPREAD_S + 60
    pattern = re.compile(r"(\S+ \S+),(\d+) INFO cron started: (job\d+)")
    starts: dict[str, float] = {}
    while len(starts) < JOBS and time.time() < deadline:
        for m in pattern.finditer(log.read_text()):
            t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()
            starts[m.group(3)] = t + int(m.group(2)) / 1000
        time.sleep(0.5)
    proc.terminate()
    proc.wait(60)
    server.close()
    late = [starts[n] - dues[n].timestamp() for n in starts]
    result = {"jobs": JOBS, "started": len(starts), "p50_s": percentile(late, 50), "p99_s": percentile(late, 99),
              "max_s": max(late) if late else None, "target_p99_s": 1.0, "baseline_hermes_agent_tick_s": 60}
    print(f"{len(starts)}/{JOBS} jobs started; lateness p50 {result['p50_s']:.3f}s p99 {result['p99_s']:.3f}s "
          f"max {result['max_s']:.3f}s")
    write_results("cron_lateness", result)
    return result


if __name__ == "__main__":
    main()
