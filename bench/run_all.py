"""Run every benchmark, then write bench/results.json and bench/results.md (figure, target,
measured, ratio to the baseline where there is one). Usage: python bench/run_all.py [--quick]

--quick shortens the long ones (fewer fault trials, a shorter stress run, no 100,000-file vault).
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
from results_table import rows  # noqa: E402


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


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    if quick:
        import os

        os.environ["HERMES_BENCH_SUFFIX"] = ".quick"  # keep the full runs' per-benchmark files
    main(quick=quick)
