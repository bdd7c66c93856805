"""What ranking skills by meaning costs a cold CLI call: `hermes-fs run` with no daemon
(HERMES_NO_DAEMON=1), wall and CPU time (user + sys) of the whole process, with
`skills.embeddings: auto` (the default) against `false` (full-text, the default before), in
alternating rounds, on two vaults: a fresh one (its skills fit the index's budget, so nothing is
ranked) and one of 1,000 skills whose static vectors are built (`--skills-from`, e.g. a vault
made by bench/routing_heldout.py --workdir; its caches are copied with their mtimes).

Usage: python bench/routing_cold.py --skills-from VAULT [--rounds N] [--order false,auto]
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import median, write_results  # noqa: E402
from daemon_memory import add_skills  # noqa: E402
from harness import ModelServer, configure  # noqa: E402

REQUEST = "replace the old rsa credentials on all our machines"


def one_call(root: Path, env: dict) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "hermes_fs", "--vault", str(root), "run", REQUEST],
                          capture_output=True, text=True, env=env, timeout=600)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert proc.returncode == 0, proc.stderr
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def vault(tmp: Path, name: str, server: ModelServer, setting: str, env: dict, skills_from: Path | None) -> Path:
    root = tmp / name
    subprocess.run([sys.executable, "-m", "hermes_fs", "init", str(root)], check=True, capture_output=True, env=env)
    configure(root, server)
    with open(root / "hermes.yaml", "a") as f:
        f.write(f"skills:\n  embeddings: {setting}\n")
    if skills_from is not None:
        add_skills(root, skills_from)
    return root


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--skills-from", required=True)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--order", default="false,auto", help="the settings in the order each round calls them")
    a = p.parse_args(argv)
    server = ModelServer(responder=lambda body: {"content": "hello"})
    env = {**os.environ, "HERMES_TEST_KEY": "bench", "HERMES_NO_DAEMON": "1", "HERMES_NO_AUTOSTART": "1"}
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            for label, source in (("fresh vault (fits the budget)", None), ("1,000 skills, vectors built", Path(a.skills_from))):
                roots = {s: vault(tmp, f"{s}-{len(rows)}", server, s, env, source) for s in a.order.split(",")}
                for root in roots.values():
                    one_call(root, env)  # the first call of each vault: caches, the index
                times: dict[str, list[tuple[float, float]]] = {s: [] for s in roots}
                for _ in range(a.rounds):
                    for s, root in roots.items():
                        times[s].append(one_call(root, env))
                row = {"vault": label, **{s: {"wall_s": round(median([w for w, _ in t]), 3),
                                              "cpu_s": round(median([c for _, c in t]), 3)} for s, t in times.items()}}
                row["cpu_ratio_auto_vs_false"] = round(row["auto"]["cpu_s"] / row["false"]["cpu_s"], 2)
                rows.append(row)
                print(f"{label}: false {row['false']['wall_s']} s wall, {row['false']['cpu_s']} s CPU; "
                      f"auto {row['auto']['wall_s']} s wall, {row['auto']['cpu_s']} s CPU "
                      f"(CPU ratio {row['cpu_ratio_auto_vs_false']})", flush=True)
    finally:
        server.close()
    result = {"rounds": a.rounds, "rows": rows, "load_average_at_end": os.getloadavg()[0],
              "command": "python bench/routing_cold.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    write_results("routing_cold", result)
    return result


if __name__ == "__main__":
    main()
