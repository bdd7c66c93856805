"""Median wall time of `hermes-fs --help` and `hermes-fs status` on a 10,000-file vault.

Target: both under 0.3 s. Also status on 100- and 10,000-file vaults with twice the sessions,
to show status does not grow with session count.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import median, timed, write_results  # noqa: E402
from gen_vault import generate  # noqa: E402

EXE = str(Path(sys.executable).with_name("hermes-fs"))
RUNS = 15


def wall(args: list[str]) -> float:
    times = []
    for _ in range(RUNS):
        t, proc = timed(subprocess.run, [EXE, *args], capture_output=True)
        assert proc.returncode == 0, proc.stderr
        times.append(t)
    return median(times)


def main() -> dict:
    v10k = generate(10_000)
    v100 = generate(100)
    results = {
        "help_median_s": wall(["--help"]),
        "status_10k_median_s": wall(["--vault", str(v10k), "status"]),
        "status_100_median_s": wall(["--vault", str(v100), "status"]),
        "target_s": 0.3,
        "runs": RUNS,
    }
    # More sessions, same everything else: status must stay flat.
    extra = v10k.parent / "10000-more-sessions"
    if not (extra / ".hermes" / "generated").exists():
        subprocess.run(["rm", "-rf", str(extra)], check=True)
        subprocess.run(["cp", "-a", str(v10k), str(extra)], check=True)
        d = extra / "sessions" / "2027" / "01"
        d.mkdir(parents=True)
        for i in range(10_000):
            (d / f"x{i}.md").write_text("---\nid: x\n---\nhi\n")
    results["status_10k_plus_10k_sessions_median_s"] = wall(["--vault", str(extra), "status"])
    for k, v in results.items():
        print(f"{k:<40} {v:.3f}" if isinstance(v, float) else f"{k:<40} {v}")
    write_results("startup", results)
    return results


if __name__ == "__main__":
    main()
