"""Agent work in the daemon (cron runs, inbox and chat requests) runs at a lower CPU priority than
the rest of it (sync rounds, the watcher, claims and leases), so that on a busy machine a model
call, or litellm's import (seconds of CPU, paid again by every restarted daemon), waits a
little while a sync round does not. Linux applies nice per thread, and to
the processes a thread starts (its git and shell commands); elsewhere nothing changes.

Nice decides between processes and threads on the CPU; inside the daemon's process the threads
also take turns holding Python's GIL. A thread that waits on a git command gets the GIL back only
when a busy thread lets it go, after Python's switch interval (5 ms by default), and one
`subprocess.run` waits several times. So the daemon switches every SWITCH_INTERVAL_S instead
(`favour_waiting_threads`).
"""

from __future__ import annotations

import os
import sys
import threading

AGENT_NICE = 5  # added to the daemon's own niceness; a weight of about a third under contention
SWITCH_INTERVAL_S = 0.001
"""Python's GIL switch interval in the daemon: a thread waiting on a git call gets the GIL back
sooner beside a busy thread, and a sync round makes dozens of such calls; the import beside it
takes no longer (`python bench/gil_switch.py` measures both)."""


def favour_waiting_threads() -> None:
    """Hand the GIL over every SWITCH_INTERVAL_S (see the module docstring); process-wide."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def lower_this_thread(by: int = AGENT_NICE) -> None:
    """Run the calling thread `by` nicer than the process (idempotent: pool threads are reused)."""
    if not sys.platform.startswith("linux"):
        return  # elsewhere PRIO_PROCESS names the whole process, not a thread
    try:
        base = os.getpriority(os.PRIO_PROCESS, os.getpid())  # the main thread's
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, base + by))
    except OSError:
        pass  # not permitted (a container's policy): the work runs at the daemon's priority
