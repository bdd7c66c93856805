"""Automatic review: every `refine.every_turns` user turns, refine *that* session (never "the
latest", which with several conversations at once would be someone else's).

Two things are said once in the chat instead of running silently: past `refine.max_cost_per_day`
reviews stop for the day (learning/spend.py), and a refine model that `doctor` found unable to
call tools while refine.mode is still `tools` gets the setting to change (learning/structured.py).

One hook for every kind of session: the terminal chat, `run`, inbox requests and gateway chats
call `after_turn(session, turns)`; the review runs in a background thread and its one-line
outcome goes to `on_result` (or, for `run`, whose process ends at once, in a detached process). At most one review per session runs at a time: a turn that falls due
while the previous review of that session is still running starts none.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..store.vault import Vault

log = logging.getLogger(__name__)


def review_due(turns: int, every: int) -> bool:
    return every > 0 and turns > 0 and turns % every == 0


class AutoReview:
    def __init__(self, vault: Vault, on_result: Callable[[str, str], None] | None = None, detached: bool = False):
        self.vault = vault
        self.detached = detached  # a process about to exit (`run`): the review runs in a process of its own
        self.on_result = on_result or (lambda session, line: log.info("automatic review of %s: %s", session, line))
        self.running: dict[str, threading.Thread] = {}
        self.said: set[str] = set()  # notices given (a paused budget, an unsuited model): each once
        self.lock = threading.Lock()

    def after_turn(self, session: str, turns: int) -> bool:
        """Start a review of `session` if this turn makes one due; True when one was started."""
        if not review_due(turns, self.vault.config.refine.every_turns):
            return False
        from datetime import UTC, datetime

        from ..learning.spend import over_budget
        from ..learning.structured import unsuited_notice

        paused = over_budget(self.vault)
        if paused:  # said once a day, in the chat the review was due in
            self._say_once(f"budget {datetime.now(UTC).date()}", session, paused)
            return False
        cfg = self.vault.config
        unsuited = unsuited_notice(self.vault.state_dir, cfg.model_for("refine"), cfg.refine.mode)
        if unsuited:
            self._say_once("mode", session, unsuited)
        if self.detached:
            from ..learning.refine import RefineOptions
            from .background import refine_in_background

            refine_in_background(self.vault, RefineOptions(session=session))
            return True
        with self.lock:
            busy = self.running.get(session)
            if busy is not None and busy.is_alive():
                return False
            thread = threading.Thread(target=self._review, args=(session,), name=f"review-{session}", daemon=True)
            self.running[session] = thread
        thread.start()
        return True

    def _say_once(self, key: str, session: str, text: str) -> None:
        """A notice for the person, once per `key` for as long as this chat or gateway runs."""
        with self.lock:
            if key in self.said:
                return
            self.said.add(key)
        self.on_result(session, text)

    def _review(self, session: str) -> None:
        from ..learning.refine import RefineOptions, refine

        try:
            line = refine(self.vault, RefineOptions(session=session)).line()
        except Exception as exc:  # refine reports its own failures in the Outcome; this is a last resort
            log.exception("automatic review of %s failed", session)
            line = f"refine failed: {exc}"
        self.on_result(session, line)

    def join(self, timeout: float | None = None) -> None:
        """Wait for reviews in flight (a CLI process about to exit, a daemon stopping)."""
        with self.lock:
            threads = list(self.running.values())
        for thread in threads:
            thread.join(timeout)
