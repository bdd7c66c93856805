"""What a running process holds: which heavy packages it has imported and its resident memory.

The daemon answers this over its socket (`hermes-fs daemon status --memory`): the model layer
(litellm) and the embedding model's stack belong in the model worker, never in the daemon, and
this is how a person, a test or a bench sees that from outside without touching the process.
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass

# Packages that cost seconds of CPU or tens of MiB each once imported: the daily path needs none of
# them in the daemon (litellm, openai and torch stay in the model worker or out entirely).
HEAVY = ("litellm", "openai", "torch", "sentence_transformers", "onnxruntime", "tokenizers", "numpy", "tiktoken",
         "aiohttp", "pydantic")


@dataclass
class Footprint:
    pid: int
    rss_kib: int | None  # resident now (None where /proc is not there)
    peak_rss_kib: int | None
    heavy: list[str]  # the HEAVY packages imported in this process
    worker_pid: int | None = None  # the model worker, while one runs
    worker_rss_kib: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def memory_kib(pid: int) -> tuple[int | None, int | None]:
    """(VmRSS, VmHWM) of a process in KiB, from /proc; (None, None) if it is gone or not Linux."""
    found: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    found[key] = int(value.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return found.get("VmRSS"), found.get("VmHWM")


def heavy_imported() -> list[str]:
    return sorted(name for name in HEAVY if name in sys.modules)


def footprint(worker_pid: int | None = None) -> Footprint:
    rss, peak = memory_kib(os.getpid())
    worker_rss = memory_kib(worker_pid)[0] if worker_pid else None
    return Footprint(os.getpid(), rss, peak, heavy_imported(), worker_pid, worker_rss)


__all__ = ["HEAVY", "Footprint", "footprint", "heavy_imported", "memory_kib"]
