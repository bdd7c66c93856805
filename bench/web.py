"""The web page's figures: server time of the pending page with 200 pending changes, and of the
change page of a change to a 1,000-entry memory file (targets: 300 ms each); `hermes-fs web`
start time, from the process start to its first answer (target: 1 s; it must not import litellm).

Server time is the `Server-Timing: app;dur=` header the page sets (request in -> response out,
inside the server), read over real HTTP from a real `hermes-fs web` process.

    python bench/web.py [--quick]
"""

from __future__ import annotations

import http.client
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import cpu_seconds, median, percentile, write_results  # noqa: E402

from hermes_fs.store.git import format_message  # noqa: E402
from hermes_fs.store.provenance import Act  # noqa: E402
from hermes_fs.store.vault import Vault, init_vault  # noqa: E402

PENDING = 200
ENTRIES = 1000
SKILL = "---\nname: bench-{i}\ndescription: Bench skill {i}. Use when benchmarking the page.\n---\n# Bench {i}\n\n1. Step.\n"


def pending_vault(root: Path, n: int = PENDING) -> Vault:
    """A vault with `n` pending refine branches (each a memory entry and a skill), made by plumbing."""
    v = init_vault(root).vault
    head = v.git.head()
    user = (v.root / "memory/USER.md").read_bytes()
    for i in range(n):
        msg = format_message(f"bench change {i}: remember preference {i}",
                             [f"- memory/USER.md: preference {i} (because the user said so)",
                              f"- skills/bench-{i}/SKILL.md: new skill (because it worked)"],
                             {"Refine-Session": "20261201-000000-abcd", "Refine-Snapshot": head})
        v.git.commit_overlay(head, f"refine/20261201-{i:06d}-bench-{i}",
                             {"memory/USER.md": user + f"- Bench preference {i}.\n".encode(),
                              f"skills/bench-{i}/SKILL.md": SKILL.format(i=i).encode()}, msg, Act.learned())
    return v


def big_memory_vault(root: Path, entries: int = ENTRIES) -> tuple[Vault, str]:
    """A 1,000-entry MEMORY.md on main, and a change that adds 10, replaces 10 and removes 10 entries."""
    v = init_vault(root).vault
    head_text = "---\ntitle: Memory\nbudget: 50000\n---\n# Notes\n\n"
    body = [f"- Lesson {i}: deploys of service {i} need the rolling strategy and a health check." for i in range(entries)]
    (v.root / "memory/MEMORY.md").write_text(head_text + "\n".join(body) + "\n")
    v.git.commit_paths(["memory/MEMORY.md"], "bench: a big memory file", Act.person())
    head = v.git.head()
    changed = list(body)
    for k in range(10):
        changed[100 * k + 5] = f"- Lesson {100 * k + 5}: replaced by the reviewer, with a longer reason attached."
    removed = {100 * k + 50 for k in range(10)}
    changed = [e for i, e in enumerate(changed) if i not in removed]
    changed += [f"- New lesson {k} learned in the bench conversation." for k in range(10)]
    lines = [f"- memory/MEMORY.md: lesson {100 * k + 5} replaced (because it was stale)" for k in range(10)]
    lines += [f"- memory/MEMORY.md: new lesson {k} (because the user said so)" for k in range(10)]
    branch = "refine/20261201-000000-big-memory"
    v.git.commit_overlay(head, branch, {"memory/MEMORY.md": (head_text + "\n".join(changed) + "\n").encode()},
                         format_message("consolidate memory", lines, {"Refine-Session": "20261201-000000-abcd",
                                                                       "Refine-Snapshot": head}), Act.learned())
    return v, branch


class Web:
    def __init__(self, root: Path):
        self.err = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
        self.started = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, "-m", "hermes_fs", "--vault", str(root), "web", "--listen",
                                      "127.0.0.1:0"], stdout=subprocess.DEVNULL, stderr=self.err)
        while True:
            m = re.search(r"open http://(127\.0\.0\.1:(\d+))/\?token=(\S+)", Path(self.err.name).read_text())
            if m:
                break
            if self.proc.poll() is not None:
                raise SystemExit(Path(self.err.name).read_text())
            time.sleep(0.005)
        self.host, self.port, self.token = m.group(1), int(m.group(2)), m.group(3)

    def get(self, path: str) -> tuple[int, float, int]:
        """(status, server time in seconds, bytes)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        conn.request("GET", path, headers={"Host": self.host, "Authorization": f"Bearer {self.token}"})
        r = conn.getresponse()
        body = r.read()
        conn.close()
        dur = float(re.search(r"dur=([\d.]+)", r.getheader("server-timing") or "dur=nan").group(1)) / 1000
        return r.status, dur, len(body)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(15)


def serve_times(root: Path, path: str, runs: int) -> dict:
    w = Web(root)
    time.sleep(2)  # as a person would: the page is opened after the URL is printed (the server warms up meanwhile)
    try:
        _status, first, _size = w.get(path)  # first request: templates compiled, caches filled
        times, size = [], 0
        for _ in range(runs):
            status, dur, size = w.get(path)
            assert status == 200, (path, status)
            times.append(dur)
    finally:
        w.stop()
    return {"first_s": first, "median_s": median(times), "p95_s": percentile(times, 95), "runs": runs, "bytes": size}


def start_times(root: Path, runs: int) -> dict:
    """Process start -> first HTTP answer (401 without the token is an answer)."""
    times, cpu = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        w = Web(root)
        conn = http.client.HTTPConnection("127.0.0.1", w.port, timeout=30)
        conn.request("GET", "/", headers={"Host": w.host})
        assert conn.getresponse().status == 401
        times.append(time.perf_counter() - t0)
        cpu.append(cpu_seconds(w.proc.pid))  # what the start cost, whatever else the machine is doing
        w.stop()
    imported = subprocess.run([sys.executable, "-c", "import sys, hermes_fs.cli.main, hermes_fs.service.web.server; "
                               "print('litellm' in sys.modules)"], capture_output=True, text=True).stdout.strip()
    return {"median_s": median(times), "p95_s": percentile(times, 95), "cpu_median_s": median(cpu), "runs": runs,
            "imports_litellm": imported == "True", "load_average": os.getloadavg()[0]}


def main(quick: bool = False) -> dict:
    runs = 5 if quick else 20
    with tempfile.TemporaryDirectory(prefix="hermes-bench-web-") as d:
        pv = pending_vault(Path(d) / "pending")
        big, branch = big_memory_vault(Path(d) / "big")
        results = {
            "pending_200": serve_times(pv.root, "/", runs),
            "change_1000_entries": serve_times(big.root, f"/changes/{branch}", runs),
            "start": start_times(pv.root, 5 if quick else 10),
            "target_page_s": 0.3,
            "target_start_s": 1.0,
        }
    p, c, s = results["pending_200"], results["change_1000_entries"], results["start"]
    print(f"pending page, {PENDING} pending changes: server time median {p['median_s'] * 1000:.0f} ms, "
          f"p95 {p['p95_s'] * 1000:.0f} ms, first request {p['first_s'] * 1000:.0f} ms ({p['bytes'] // 1024} KB)")
    print(f"change page, {ENTRIES}-entry memory file (30 entries changed): median {c['median_s'] * 1000:.0f} ms, "
          f"p95 {c['p95_s'] * 1000:.0f} ms, first request {c['first_s'] * 1000:.0f} ms ({c['bytes'] // 1024} KB)")
    print(f"hermes-fs web start -> first answer: median {s['median_s']:.2f} s, p95 {s['p95_s']:.2f} s, CPU time "
          f"{s['cpu_median_s']:.2f} s (load average {s['load_average']:.1f} on {os.cpu_count()} cores); "
          f"imports litellm: {s['imports_litellm']}")
    write_results("web", results)
    return results


if __name__ == "__main__":
    main("--quick" in sys.argv)
