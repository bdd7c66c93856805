"""The daemon's resident memory before and after turns, and what its model worker costs in time.

Starts the real daemon on a fresh vault against the scripted model server, waits for its
background warm-up, then sends `hermes-fs run` turns through it, reading VmRSS and VmHWM from
/proc for the daemon and for its model worker (a child process whose command names
model_worker). With `daemon.model_worker_idle_s` set short, it then waits for the worker to be let
go, reads the daemon again, and times the turn that starts a new worker.

`--before TREE` runs the same against another source tree (e.g. `git archive` of the commit
before the worker, where litellm lived in the daemon) in the same run, for the side-by-side
figures: RSS, the first turn after warm-up, and the warm turn's time (ratio worker / in-process).

Target (issue 43): the daemon's resident memory after turns <= 120 MiB, or the model layer in a
worker that is let go when idle.
`--calls N` also times N streamed model calls in this process and through a worker (the pipe's
cost alone); `--calls-only` measures just that and keeps the daemon rows of the last run.
`--peer PEER/bin/hermes` times as many `hermes -z hello` calls of Hermes Agent 0.19 in the same run
(it has no daemon: each call is a first one), with each process's peak RSS. A tree without the
background warm-up (before issue 43) is measured without waiting for one: its first turn imports.
`--skills-from VAULT` copies VAULT's skills, with its skills index and vectors (.hermes/index.sqlite,
the static token table), into the vault first, so every turn ranks skills past the index's budget
(skills.embeddings at its default, auto); its figures go to daemon_memory_skills.json.
Usage: python bench/daemon_memory.py [--turns N] [--idle S] [--before TREE] [--peer HERMES] [--calls N] [--calls-only]
       [--skills-from VAULT]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import median, write_results  # noqa: E402
from harness import ModelServer, configure, start_daemon, stop_daemon, wait_logged  # noqa: E402

ROOT = HERE.parent


def status_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process, in KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def workers_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and b"model_worker" in cmd:
            found.append(int(entry.name))
    return found


def mib(kib: int) -> float:
    return round(kib / 1024, 1)


def snapshot(pid: int) -> dict:
    daemon = status_kib(pid)
    workers = [status_kib(w) for w in workers_of(pid)]
    return {"daemon_rss_mib": mib(daemon["VmRSS"]), "daemon_peak_mib": mib(daemon["VmHWM"]),
            "worker_rss_mib": mib(sum(w["VmRSS"] for w in workers)) if workers else None,
            "total_rss_mib": mib(daemon["VmRSS"] + sum(w["VmRSS"] for w in workers))}


def turn(root: Path, env: dict) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "hermes_fs", "--vault", str(root), "run", "hello"],
                          capture_output=True, text=True, env=env, timeout=600)
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 0 and "hello" in proc.stdout, proc.stderr
    return round(elapsed, 3)


def add_skills(root: Path, source: Path) -> int:
    """The skills of `source` and its caches (mtimes kept, so its vectors stay fresh), committed."""
    import shutil

    for skill in (source / "skills").iterdir():
        if skill.is_dir() and not (root / "skills" / skill.name).exists():
            shutil.copytree(skill, root / "skills" / skill.name, copy_function=shutil.copy2)
    for name in ("index.sqlite", "static-vectors.npy", "static-vectors.json"):
        if (source / ".hermes" / name).exists():
            shutil.copy2(source / ".hermes" / name, root / ".hermes" / name)
    subprocess.run(["git", "-C", str(root), "add", "-A", "skills"], check=True, capture_output=True)
    subprocess.run(["git", "-C", str(root), "commit", "-qm", "bench: skills"], check=True, capture_output=True)
    return sum(1 for _ in (root / "skills").iterdir())


def measure(tree: Path, turns: int, idle_s: float, skills_from: Path | None = None) -> dict:
    os.chdir(tree)  # `python -m` puts the working directory first on the path: the tree's code, not ours
    server = ModelServer(responder=lambda body: {"content": "hello"})
    root = Path(tempfile.mkdtemp(prefix="daemon-memory-")) / "vault"
    env = {**os.environ, "HERMES_TEST_KEY": "bench", "PYTHONPATH": str(tree)}
    env.pop("HERMES_NO_WARM_UP", None)
    env.pop("HERMES_NO_DAEMON", None)
    subprocess.run([sys.executable, "-m", "hermes_fs", "init", str(root)], check=True, capture_output=True, env=env)
    configure(root, server)
    with open(root / "hermes.yaml", "a") as f:  # an older tree refuses the key it does not know
        f.write(f"daemon:\n  model_worker_idle_s: {idle_s}\n" if (tree / "hermes_fs/service/model_worker.py").exists() else "")
    row: dict = {"tree": str(tree)}
    if skills_from is not None:
        row["skills"] = add_skills(root, skills_from)
    proc = start_daemon(root, env=env)
    try:
        row["started"] = snapshot(proc.pid)
        row["warm_up"] = "model layer warm" in (tree / "hermes_fs" / "service" / "daemon.py").read_text()
        if row["warm_up"]:  # an older tree has none: its first turn imports the model layer itself
            assert wait_logged(root, "model layer warm", 600), "the daemon never said its model layer was warm"
        row["warm"] = snapshot(proc.pid)
        row["first_turn_s"] = turn(root, env)
        times = [turn(root, env) for _ in range(turns)]
        row["after_turns"] = snapshot(proc.pid)
        row["warm_turn_median_s"] = median(times)
        row["warm_turn_times_s"] = times
        row["worker"] = bool(workers_of(proc.pid))
        if row["worker"]:
            deadline = time.time() + idle_s + 60
            while workers_of(proc.pid) and time.time() < deadline:
                time.sleep(0.5)
            row["after_idle_release"] = snapshot(proc.pid)
            row["turn_after_release_s"] = turn(root, env)  # starts a new worker
            row["after_restart"] = snapshot(proc.pid)
    finally:
        stop_daemon(proc)
        server.close()
        os.chdir(ROOT)  # this process's own model worker (call_overhead) runs this tree's code
    return row


def peer_calls(peer: str, calls: int) -> dict:
    """Hermes Agent 0.19's `hermes -z hello` against the same scripted model, `calls` times: it has
    no daemon, so each call is its first; wall, CPU and peak RSS of each whole process."""
    server = ModelServer(responder=lambda body: {"content": "hello"})
    home = Path(tempfile.mkdtemp(prefix="daemon-memory-peer-"))
    (home / ".hermes").mkdir(parents=True)
    (home / ".hermes" / "config.yaml").write_text(
        f"model:\n  provider: custom\n  base_url: {server.api_base}\n  default: test-model\n  api_key: bench\n")
    env = {**os.environ, "HOME": str(home)}
    walls, cpus, peaks = [], [], []
    try:
        for _ in range(calls):
            t0 = time.perf_counter()
            proc = subprocess.Popen([peer, "-z", "hello"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
            out = proc.stdout.read() if proc.stdout else b""
            _, status, usage = os.wait4(proc.pid, 0)
            walls.append(round(time.perf_counter() - t0, 3))
            assert status == 0 and b"hello" in out, out[-300:]
            cpus.append(usage.ru_utime + usage.ru_stime)
            peaks.append(usage.ru_maxrss)  # KiB, the largest of the process and its waited-for children
    finally:
        server.close()
    return {"calls": calls, "first_call_s": walls[0], "call_median_s": median(walls), "call_times_s": walls,
            "cpu_median_s": round(median(cpus), 3), "peak_rss_mib": mib(max(peaks))}


def call_overhead(calls: int) -> dict:
    """One streamed model call, in this process and through a model worker, against the scripted
    server: what the pipe adds to a call, without a CLI or a turn around it."""
    from hermes_fs.agent.model import LiteLLMModel, ModelSettings, serve_from
    from hermes_fs.service.model_worker import ModelWorker

    server = ModelServer(responder=lambda body: {"content": "hello from the scripted model"})
    settings = ModelSettings("openai/test-model", api_base=server.api_base, api_key_env="HERMES_TEST_KEY",
                             retries=0, environ={"HERMES_TEST_KEY": "bench"})
    messages = [{"role": "system", "content": "You are hermes-fs. " * 200}, {"role": "user", "content": "hello"}]

    def timed_calls() -> list[float]:
        model = LiteLLMModel(settings)
        model.complete(messages, [], on_text=lambda _p: None)  # first call: connections, lazy imports
        out = []
        for _ in range(calls):
            t0 = time.perf_counter()
            model.complete(messages, [], on_text=lambda _p: None)
            out.append(time.perf_counter() - t0)
        return out

    worker = ModelWorker(lambda: 0, nice=0)  # at this process's priority: the pipe's cost, not the nice's
    try:
        in_process = timed_calls()
        worker.start()
        worker.wait_ready()
        serve_from(worker)
        through_worker = timed_calls()
    finally:
        serve_from(None)
        worker.stop()
        server.close()
    a, b = median(in_process), median(through_worker)
    return {"calls": calls, "in_process_median_ms": round(a * 1000, 1), "worker_median_ms": round(b * 1000, 1),
            "ratio_worker_vs_in_process": round(b / a, 2)}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--turns", type=int, default=10)
    p.add_argument("--idle", type=float, default=20.0, help="daemon.model_worker_idle_s for the run")
    p.add_argument("--before", help="a source tree to measure beside this one (its hermes_fs/ in PYTHONPATH)")
    p.add_argument("--calls", type=int, default=30, help="model calls timed in-process and through a worker")
    p.add_argument("--calls-only", action="store_true", help="only the per-call figure (keeps the daemon rows)")
    p.add_argument("--peer", help="Hermes Agent's `hermes`: as many `hermes -z` calls as turns, in the same run")
    p.add_argument("--skills-from", help="a vault whose skills (and their vectors) are copied in first")
    a = p.parse_args(argv)
    if a.calls_only:
        import json

        from common import RESULTS

        result = json.loads((RESULTS / "daemon_memory.json").read_text())
        result["model_call"] = call_overhead(a.calls)
        result["model_call"]["command"] = "python bench/daemon_memory.py " + " ".join(argv if argv is not None else sys.argv[1:])
        print(f"model call: in-process {result['model_call']['in_process_median_ms']} ms, through the worker "
              f"{result['model_call']['worker_median_ms']} ms (ratio {result['model_call']['ratio_worker_vs_in_process']})")
        write_results("daemon_memory", result)
        return result
    rows = {}
    trees = [("after", ROOT)] + ([("before", Path(a.before).resolve())] if a.before else [])
    for name, tree in trees:
        rows[name] = measure(tree, a.turns, a.idle, Path(a.skills_from) if a.skills_from else None)
        r = rows[name]
        print(f"{name}: daemon RSS started {r['started']['daemon_rss_mib']} MiB, warm {r['warm']['daemon_rss_mib']}, "
              f"after {a.turns + 1} turns {r['after_turns']['daemon_rss_mib']} (peak {r['after_turns']['daemon_peak_mib']}), "
              f"worker {r['after_turns']['worker_rss_mib']}; first turn {r['first_turn_s']} s, warm median "
              f"{r['warm_turn_median_s']} s" + (f"; after idle release {r['after_idle_release']['daemon_rss_mib']} MiB, "
                                                f"turn that restarts the worker {r['turn_after_release_s']} s"
                                                if r.get("worker") else ""), flush=True)
    if a.peer:
        result_peer = peer_calls(a.peer, a.turns + 1)
        print(f"peer: first call {result_peer['first_call_s']} s, median {result_peer['call_median_s']} s, "
              f"CPU {result_peer['cpu_median_s']} s, peak RSS {result_peer['peak_rss_mib']} MiB", flush=True)
    result: dict = {"turns": a.turns + 1, "idle_s": a.idle, "rows": rows, "target_daemon_rss_mib": 120,
                    **({"peer": result_peer} if a.peer else {}),
                    "load_average_at_end": os.getloadavg()[0],
                    "command": "python bench/daemon_memory.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    if "before" in rows:
        result["warm_turn_ratio_worker_vs_in_process"] = round(
            rows["after"]["warm_turn_median_s"] / rows["before"]["warm_turn_median_s"], 2)
        print(f"warm turn, worker / in-process: {result['warm_turn_ratio_worker_vs_in_process']}")
    result["model_call"] = call_overhead(a.calls)
    print(f"model call: in-process {result['model_call']['in_process_median_ms']} ms, through the worker "
          f"{result['model_call']['worker_median_ms']} ms (ratio {result['model_call']['ratio_worker_vs_in_process']})")
    write_results("daemon_memory_skills" if a.skills_from else "daemon_memory", result)
    return result


if __name__ == "__main__":
    main()
