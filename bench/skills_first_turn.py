"""The first turn of a 1,000-skill vault with `skills.embeddings: true` and a cold vector cache.

Before: the first ranking encoded every skill (about 3,800 texts) inside the turn. Now a turn never
encodes skills: it ranks by full-text while the vectors are built elsewhere (the daemon's thread,
or the detached `skills embed` a CLI turn without a daemon starts). Measured: `hermes-fs run` wall
time against the scripted model (the model answers at once, so the time is hermes-fs's own), then
how long until every skill has vectors, then a second turn, which ranks by meaning.

Modes: `cli` (HERMES_NO_DAEMON: the turn runs in the CLI process) and `daemon` (a daemon is started
with the cold cache and the turn runs warm in it at once). Run it against older code by putting that
code first on PYTHONPATH, and this code likewise (the turns run with the vault as working folder,
so PYTHONPATH decides which hermes_fs they import; the bench itself uses only the CLI, sqlite and
bench/routing_eval.py).

Usage: python bench/skills_first_turn.py [--mode cli|daemon] [--workdir DIR] [--label before|after]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import write_results  # noqa: E402
from harness import ModelServer, configure, start_daemon, stop_daemon  # noqa: E402
from routing_eval import build, real_skills  # noqa: E402

REQUEST = "replace the old rsa keys on all our servers"  # not from either routing set
SIZE = 1000


def vault(workdir: Path) -> Path:
    """The 1,000-skill vault of bench/routing_heldout.py (the sets' skills, other real ones, filler)."""
    root = workdir / f"v{SIZE}"
    if (root / "skills").is_dir():
        return root
    real = real_skills()
    needed = {c["skill"] for f in ("routing_heldout.yaml", "routing_dev.yaml") for c in yaml.safe_load((HERE / f).read_text())}
    chosen = [r for r in real if r[0] in needed]
    chosen += [r for r in real if r[0] not in needed][: max(0, min(len(real), SIZE // 2) - len(chosen))]
    return build(root, chosen, SIZE - len(chosen))


def vectors(root: Path) -> int:
    db = sqlite3.connect(root / ".hermes" / "index.sqlite", timeout=30)
    try:
        return db.execute("SELECT count(*) FROM skill_vectors").fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        db.close()


def turn(root: Path, env: dict) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "hermes_fs", "--vault", str(root), "run", REQUEST],
                          capture_output=True, text=True, env=env, cwd=root)  # not this repo: PYTHONPATH decides
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    return elapsed


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("cli", "daemon"), default="cli")
    p.add_argument("--workdir", help="build the vault here (and reuse it); its vector cache is emptied first")
    p.add_argument("--label", default="after")
    p.add_argument("--fill-timeout", type=float, default=3600)
    a = p.parse_args(argv)
    load = os.getloadavg()[0]
    workdir = Path(a.workdir or tempfile.mkdtemp(prefix="first-turn-"))
    root = vault(workdir)
    server = ModelServer(responder=lambda body: {"content": "ok"})
    configure(root, server)
    with open(root / "hermes.yaml", "a") as f:
        f.write("skills:\n  embeddings: true\n")
    db = sqlite3.connect(root / ".hermes" / "index.sqlite")
    db.execute("DROP TABLE IF EXISTS skill_vectors")  # a cold cache (the full-text index stays)
    db.commit()
    db.close()
    skills = sum(1 for d in (root / "skills").iterdir() if (d / "SKILL.md").exists())
    env = {**os.environ, "HERMES_TEST_KEY": "bench"}
    daemon = None
    if a.mode == "cli":
        env["HERMES_NO_DAEMON"] = "1"
    else:
        daemon = start_daemon(root)
    try:
        t0 = time.perf_counter()
        first = turn(root, env)
        print(f"first turn ({a.mode}, cold cache, {skills} skills): {first:.1f} s; vectors then: {vectors(root)}", flush=True)
        while vectors(root) < skills and time.perf_counter() - t0 < a.fill_timeout:
            time.sleep(2)
        filled = time.perf_counter() - t0
        print(f"every skill has vectors {filled:.0f} s after the first turn started", flush=True)
        second = turn(root, env)
        print(f"second turn (vectors ready): {second:.1f} s", flush=True)
    finally:
        if daemon is not None:
            stop_daemon(daemon)
        server.close()
    result = {"label": a.label, "mode": a.mode, "skills": skills, "first_turn_s": round(first, 1),
              "vectors_complete_after_s": round(filled, 0), "second_turn_s": round(second, 1),
              "load_average_at_start": load,
              "command": "python bench/skills_first_turn.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    write_results(f"skills_first_turn-{a.mode}-{a.label}", result)
    return result


if __name__ == "__main__":
    main()
