"""Run every benchmark, then write bench/results.json and bench/results.md (figure, target,
measured, ratio to the baseline where there is one). Usage:
python bench/run_all.py [--quick] [--peer PEER/bin/hermes] [--before TREE] [--no-issue-43 | --only-issue-43]

--quick shortens the long ones (fewer fault trials, a shorter stress run, no 100,000-file vault).
Then the first call's benchmarks (issue 43) run, each in its own process: with --peer beside
Hermes Agent 0.19, with --before beside an older source tree (`git archive` of a commit). Last, every
figure measured beside Hermes Agent is printed with its ratio, whether that is ahead or only at
parity (within 10 %), and the load average of its run. `make reference` puts all of it on
docs/benchmarks/results.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cron_lateness  # noqa: E402
import daemon_latency  # noqa: E402
import faults  # noqa: E402
import gateway  # noqa: E402
import prompt_overhead  # noqa: E402
import refine_overhead  # noqa: E402
import startup  # noqa: E402
import stress  # noqa: E402
import web  # noqa: E402
from results_table import beside_peer, rows  # noqa: E402


def issue_43(quick: bool, peer: str | None, before: str | None) -> dict[str, int]:
    """The first call's benchmarks (issues 43 and 52), each in a process of its own (they parse their
    own arguments and start daemons of other trees): cold start and `--help` beside Hermes Agent
    (`peer`), the daemon's memory and first turn, memory-file size, the daily path's imports,
    routing at 1,000 skills (the held-out set, and the test set with the first turn before any
    vector exists). Each writes its own bench/results/*.json; the exit codes come back."""
    import subprocess

    peer_args = ["--peer", peer] if peer else []
    before_args = ["--before", before] if before else []
    runs = {
        "cold_start": ["2" if quick else "3", *peer_args],  # its --before needs a tree that starts a daemon itself
        "warm_start": ["3" if quick else "7"],
        "daemon_memory": ["--turns", "5" if quick else "10", *before_args, *peer_args],
        "memory_size": ["3" if quick else "5", *before_args, *peer_args],
        "daily_path": ["--rounds", "5" if quick else "9", *before_args, *peer_args],
        "routing_heldout": ["--sizes", "150,1000", *(["--no-embeddings"] if quick else [])],  # encoding takes minutes
        # issue 52's test set (written apart, never tuned on), in the 1,000-skill vault; the first turn included
        "routing_heldout --test": ["--test", *(["--static-only"] if quick else [])],
    }
    codes = {}
    for name, args in runs.items():
        script = name.split()[0]
        print(f"== bench/{script}.py {' '.join(args)}", flush=True)
        codes[name] = subprocess.run([sys.executable, str(HERE / f"{script}.py"), *args], cwd=HERE.parent).returncode
    return codes


def print_beside_peer() -> list[tuple]:
    """Each figure measured beside Hermes Agent, its ratio, whether it is ahead or only at parity,
    and the load average of the run that measured it (from bench/results/*.json)."""
    body = beside_peer(HERE / "results")
    if not body:
        print("no figure measured beside Hermes Agent (pass --peer PEER/bin/hermes)")
        return body
    head = ("figure", "hermes-fs", "Hermes Agent 0.19", "ratio", "standing", "load average")
    widths = [max(len(str(r[i])) for r in [head, *body]) for i in range(len(head))]
    for r in [head, *body]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)))
    return body


def main(quick: bool = False) -> dict:
    results = {
        "startup": startup.main(),
        "prompt_overhead": prompt_overhead.main(),
        "refine_overhead": refine_overhead.main([100, 10_000] if quick else [100, 10_000, 100_000]),
        "daemon_latency": daemon_latency.main(),
        "cron_lateness": cron_lateness.main(),
        "faults": faults.main(12 if quick else 50),
        "stress": stress.main(60 if quick else 180),
        "web": web.main(quick),
        "gateway": gateway.main(quick),
    }
    import email_channel  # Dovecot from Debian (scripts/mail-test-env.sh); without it the rows are left out

    if not email_channel.dovecot_missing():
        results["email"] = email_channel.main(quick=quick)
    results["quick"] = quick
    (HERE / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    mode = "`python bench/run_all.py --quick`" if quick else "`python bench/run_all.py`"
    table = [f"Made by {mode}.", "", "| figure | target | measured | ratio to baseline |", "|---|---|---|---|"]
    table += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows(results)]
    (HERE / "results.md").write_text("\n".join(table) + "\n")
    print("\n".join(table))
    return results


def option(name: str) -> str | None:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv[:-1] else None


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    if quick:
        import os

        os.environ["HERMES_BENCH_SUFFIX"] = ".quick"  # keep the full runs' per-benchmark files
    if "--only-issue-43" not in sys.argv:
        main(quick=quick)
    if "--no-issue-43" not in sys.argv:
        print(issue_43(quick, option("--peer"), option("--before")))
    print_beside_peer()
