"""Faults the full chaos bench (bench/sync.py) found, one test each, on real git and real
processes. Nothing is timed: each test shows the wrong behaviour itself, not its cost."""

from __future__ import annotations

import subprocess
import threading

from hermes_fs.service.sync import watch_main
from hermes_fs.store.vault import init_vault


def test_reading_main_does_not_start_a_sync_round(tmp_path):
    """Every git command opens refs/heads/main; a round poked by those reads started the next
    round at once, for ever (a third of a core per idle daemon). Only a move of main pokes."""
    v = init_vault(tmp_path / "v").vault
    before = v.git.head()
    seen: list[str | None] = []  # main as it was at each poke
    woke = threading.Event()

    def poke() -> None:
        seen.append(v.git.head())
        woke.set()

    observer = watch_main(v.root, poke)
    try:
        for args in (["rev-parse", "main"], ["log", "-1", "main"], ["for-each-ref"], ["status", "--short"]):
            subprocess.run(["git", "-C", str(v.root), *args], check=True, capture_output=True)
        p = v.root / "memory" / "USER.md"
        p.write_text(p.read_text() + "- a line\n")
        assert v.git.commit_human_edits(["memory/USER.md"]).sha
        assert woke.wait(30), "a commit on main did not poke the sync loop"
    finally:
        observer.stop()
        observer.join(5)
    # one inotify queue, in order: a poke for a read would come before the one for the move
    assert seen[0] != before, "reading main poked the sync loop"
