"""`hermes-fs run "say hello"` side by side with Hermes Agent's `hermes -z "say hello"`, in one run,
against the same scripted streaming model server: wall time and CPU time (user + sys) of each whole
call, in rounds (peer, then each hermes-fs way) so a drifting machine weighs on all alike.

hermes-fs is measured three ways:
- `cold`: no daemon (HERMES_NO_DAEMON=1): every call imports litellm itself (before autostart);
- `first`: the first call with `daemon.autostart` on: it starts a turns-only daemon that serves it
  (CPU = the CLI process + the daemon's CPU up to the answer);
- `later`: calls 2..N through that daemon (CPU = the CLI process + the daemon's CPU for the turn).
The daemon is stopped after each round, so every round's `first` is a true first call.
With `--before TREE` (a copy of another hermes-fs tree, e.g. `git archive` of main), that tree's
`cold` and `first` calls are measured in the same rounds, alternated with this tree's.

hermes-fs's modules are byte-compiled first (`compileall`), as an installed package's are: with
PYTHONDONTWRITEBYTECODE set and no __pycache__ in the tree, every process would compile each module
it imports from source, a cost no installed copy pays (the peer's site-packages are compiled).
`--no-compile` measures the tree as it is.
Also: `hermes-fs --help` CPU, and what Python, click and `import litellm` alone cost (plain, with
the garbage collector paused, and through hermes-fs's `import_litellm`, which pauses it).

The peer is Hermes Agent 0.19 installed in a venv of its own (`python3 -m venv PEER &&
PEER/bin/pip install hermes-agent==0.19.0`); pass its `hermes` with --peer. Its configuration is
written to a temporary HOME (provider `custom`, the server's base_url).

Usage: python bench/cold_start.py --peer PEER/bin/hermes [ROUNDS] [--calls N] [--before TREE] [--no-compile]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import median, write_results  # noqa: E402
from harness import byte_compile, hello_vault  # noqa: E402

EXE = str(Path(sys.executable).with_name("hermes-fs"))
TREE = Path(__file__).resolve().parent.parent  # the hermes-fs measured (first on PYTHONPATH)


def child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def measure(cmd: list[str], env: dict) -> tuple[float, float]:
    """(wall s, cpu s) of one whole process and its children."""
    before = child_cpu()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    assert proc.returncode == 0 and "hello" in proc.stdout, (cmd, proc.stdout[-500:], proc.stderr[-2000:])
    return wall, child_cpu() - before


def cpu_of(cmd: list[str], env: dict, runs: int) -> float:
    """Median CPU of a short command."""
    out = []
    for _ in range(runs):
        before = child_cpu()
        subprocess.run(cmd, capture_output=True, env=env, check=True)
        out.append(child_cpu() - before)
    return median(out)


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def daemon_cpu_s(pid: int) -> float:
    """The daemon's CPU so far: its own, its ended children's (the git commands that commit a
    turn) and its live children's with theirs (the model worker, which imports litellm)."""
    total = sum(int(f) for f in _stat(pid)[11:15])
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = _stat(int(entry.name))
        except OSError:
            continue  # ended meanwhile
        if int(fields[1]) == pid:
            total += sum(int(f) for f in fields[11:15])
    return total / os.sysconf("SC_CLK_TCK")


def daemon_pid(root: Path) -> int:
    return int(json.loads((root / ".hermes" / "daemon.json").read_text())["pid"])


def summary(rows: list[tuple[float, float]]) -> dict:
    return {"wall_median_s": median([r[0] for r in rows]), "cpu_median_s": median([r[1] for r in rows]),
            "runs": len(rows), "wall_s": [round(r[0], 3) for r in rows], "cpu_s": [round(r[1], 3) for r in rows]}


def per_round(ours: list[tuple[float, float]], peer: list[tuple[float, float]]) -> dict:
    """Each round's call over the same round's peer call: how often it was at most the peer's."""
    walls = [o[0] / p[0] for o, p in zip(ours, peer, strict=True)]
    cpus = [o[1] / p[1] for o, p in zip(ours, peer, strict=True)]
    return {"wall": [round(r, 3) for r in walls], "cpu": [round(r, 3) for r in cpus],
            "rounds_at_most_peer_wall": sum(r <= 1.0 for r in walls),
            "rounds_at_most_peer_cpu": sum(r <= 1.0 for r in cpus), "rounds": len(walls)}


def main() -> dict:
    p = argparse.ArgumentParser()
    p.add_argument("rounds", nargs="?", type=int, default=3)
    p.add_argument("--calls", type=int, default=4, help="calls per autostart round (the first and N-1 later ones)")
    p.add_argument("--peer", help="Hermes Agent's `hermes` executable (its own venv)")
    p.add_argument("--before", type=Path, help="another hermes-fs tree, measured in the same rounds")
    p.add_argument("--no-compile", action="store_true", help="leave the trees without byte-compiled modules")
    a = p.parse_args()
    trees = {"": TREE, **({"before ": a.before.resolve()} if a.before else {})}
    if not a.no_compile:
        byte_compile(trees.values())
    work = Path(tempfile.mkdtemp(prefix="cold-"))
    server, root, env = hello_vault(work, EXE)
    env["PYTHONPATH"] = os.pathsep.join([str(TREE), *filter(None, [os.environ.get("PYTHONPATH")])])
    ours = [EXE, "--vault", str(root), "run", "say hello"]
    peer_env = None
    if a.peer:
        home = work / "peer-home"
        (home / ".hermes").mkdir(parents=True)
        (home / ".hermes" / "config.yaml").write_text(
            f"model:\n  provider: custom\n  base_url: {server.api_base}\n  default: test-model\n  api_key: bench\n")
        peer_env = {**env, "HOME": str(home)}
    peer: list = []
    cold: dict[str, list] = {name: [] for name in trees}
    first: dict[str, list] = {name: [] for name in trees}
    later: list = []
    try:
        for i in range(a.rounds):  # each round: peer, then per tree cold and a fresh autostart session
            if a.peer:
                peer.append(measure([a.peer, "-z", "say hello"], peer_env))
            for name, tree in list(trees.items())[:: -1 if i % 2 else 1]:  # the trees' order alternates
                tree_env = {**env, "PYTHONPATH": os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])}
                cold[name].append(measure(ours, {**tree_env, "HERMES_NO_DAEMON": "1"}))
                wall, cpu = measure(ours, tree_env)  # starts the daemon, which serves it
                pid = daemon_pid(root)
                first[name].append((wall, cpu + daemon_cpu_s(pid)))
                for _ in range(a.calls - 1 if not name else 0):
                    before = daemon_cpu_s(pid)
                    wall, cpu = measure(ours, tree_env)
                    later.append((wall, cpu + daemon_cpu_s(pid) - before))
                subprocess.run([EXE, "--vault", str(root), "daemon", "stop"], check=True, capture_output=True,
                               env=tree_env)
    finally:
        subprocess.run([EXE, "--vault", str(root), "daemon", "stop"], capture_output=True, env=env)
        server.close()
    py = sys.executable
    result = {
        "load_average": os.getloadavg(),
        "byte_compiled": not a.no_compile,
        "peer": summary(peer) if peer else "not measured (pass --peer)",
        **{f"{name}cold_run (no daemon, before autostart)": summary(cold[name]) for name in trees},
        **{f"{name}first_call (autostart; CLI + daemon CPU)": summary(first[name]) for name in trees},
        "later_calls (2..N through the daemon it started; CLI + daemon CPU)": summary(later),
        "calls_per_session": a.calls,
        "help_cpu_median_s": cpu_of([EXE, "--help"], env, 15),
        "python_startup_cpu_s": cpu_of([py, "-c", "pass"], env, 15),
        "import_click_cpu_s": cpu_of([py, "-c", "import click"], env, 15),
        "import_litellm_cpu_s": cpu_of([py, "-c", "import litellm"], {**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}, 3),
        "import_litellm_gc_paused_cpu_s": cpu_of([py, "-c", "import gc; gc.disable(); import litellm"],
                                                 {**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}, 3),
        "import_litellm_via_hermes_cpu_s": cpu_of(
            [py, "-c", "from hermes_fs.agent.model import import_litellm; import_litellm()"], env, 3),
    }
    if peer:
        pw, pc = result["peer"]["wall_median_s"], result["peer"]["cpu_median_s"]
        for key, short in (*((f"{name}cold_run (no daemon, before autostart)", f"{name}cold") for name in trees),
                           *((f"{name}first_call (autostart; CLI + daemon CPU)", f"{name}first_call") for name in trees),
                           ("later_calls (2..N through the daemon it started; CLI + daemon CPU)", "later_calls")):
            result[f"{short}_over_peer_wall"] = result[key]["wall_median_s"] / pw
            result[f"{short}_over_peer_cpu"] = result[key]["cpu_median_s"] / pc
        for name in trees:
            result[f"{name}first_call_over_peer_per_round"] = per_round(first[name], peer)
        n = a.calls
        result["session_mean_over_peer_cpu"] = (result["first_call_over_peer_cpu"]
                                                + (n - 1) * result["later_calls_over_peer_cpu"]) / n
    result["targets"] = {"over_peer_wall_max": 1.0, "over_peer_cpu_max": 1.0, "help_cpu_max_s": 0.1}
    for k, v in result.items():
        print(f"{k:<44} {v:.3f}" if isinstance(v, float) else f"{k:<44} {v}")
    write_results("cold_start", result)
    return result


if __name__ == "__main__":
    main()
