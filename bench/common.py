"""Helpers shared by the benchmarks: timing, CPU time, percentiles, JSON results."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def timed(fn, *args, **kwargs) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t0, out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a running process so far (Linux /proc), in seconds: what a daemon
    or server spent on the work measured, read before and after it."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def percentile(xs: list[float], p: float) -> float:
    s = sorted(xs)
    k = max(0, min(len(s) - 1, round(p / 100 * (len(s) - 1))))
    return s[k]


def write_results(name: str, data: dict) -> Path:
    """bench/results/<name>.json; a --quick run_all writes <name>.quick.json so full runs are kept."""
    import os

    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}{os.environ.get('HERMES_BENCH_SUFFIX', '')}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {path}")
    return path
