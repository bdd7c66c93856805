"""How long a test waits for something that should happen. A wait of 10 s or more is a deadline (a
reply, a daemon's start, a request): on a loaded machine (`make test` at load 8-10) it gets at least
DEADLINE_S, and a passing test never waits it out, it goes on when the event comes. A shorter wait
asserts that something does NOT happen within it, and keeps its length."""

from __future__ import annotations

import os

DEADLINE_S = float(os.environ.get("HERMES_TEST_DEADLINE_S", "180"))
SHORT_S = 10.0  # below this a wait is a check that nothing happens


def deadline(timeout: float) -> float:
    return timeout if timeout < SHORT_S else max(timeout, DEADLINE_S)
