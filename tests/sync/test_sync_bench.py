"""The sync chaos bench's own bookkeeping (bench/sync.py): what it records is what happened. Two
of its mistakes made every edit figure worse than the product: a sampler that stalled for seconds
on a loaded machine, and partitions it never recorded."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from locations import BENCH

sys.path.insert(0, str(BENCH))

import sync as chaos  # noqa: E402  (bench/sync.py)
from gitserver import Proxy, free_port  # noqa: E402

pytestmark = pytest.mark.gitdaemon


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _commit_line(repo: Path, line: str) -> str:
    path = repo / chaos.MEMORY
    path.parent.mkdir(exist_ok=True)
    with open(path, "a") as f:
        f.write(line + "\n")
    _git(repo, "add", chaos.MEMORY)
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", line)
    return _git(repo, "rev-parse", "HEAD")


def test_a_line_is_timed_by_the_move_of_main_that_brought_it_packed_refs_or_loose(tmp_path):
    repo, bare = tmp_path / "a", tmp_path / "remote.git"
    _git(tmp_path, "init", "-q", "-b", "main", str(repo))
    _git(tmp_path, "init", "-q", "--bare", str(bare))
    _commit_line(repo, "- chaos a 0")
    moves = chaos.RefMoves({"a": repo / ".git", chaos.REMOTE: bare})
    stop = threading.Event()
    watcher = threading.Thread(target=moves.watch, args=(stop,))
    watcher.start()
    try:
        time.sleep(0.3)
        between = time.time()
        _git(repo, "pack-refs", "--all")  # main in packed-refs only: git gc does this
        sha = _commit_line(repo, "- chaos a 1")
        time.sleep(0.3)
        _git(repo, "push", "-q", str(bare), f"{sha}:refs/hermes/hosts/vm-a/main")
        _git(bare, "pack-refs", "--all")
        time.sleep(0.3)
        pushed = time.time()
    finally:
        stop.set()
        watcher.join()
    written = {"- chaos a 0": ("a", 0.0), "- chaos a 1": ("a", 0.0)}
    seen, remote_seen = moves.lines(written)
    assert seen["- chaos a 0"]["a"] < between <= seen["- chaos a 1"]["a"] < pushed
    assert seen["- chaos a 1"]["a"] < remote_seen["- chaos a 1"] < pushed  # a host ref on the remote counts
    assert moves.max_gap_s < 5  # the sampler did look, all along


def test_a_machine_cut_again_the_moment_its_cut_ends_has_both_cuts_recorded(tmp_path):
    proxy = Proxy(free_port())
    try:
        m = chaos.Machine("c", vault=None, proxy=proxy)  # type: ignore[arg-type]  (partitions need no vault)
        events = chaos.Events()
        rng = random.Random(3)
        next_cut = chaos.partition_step([m], events, 100.0, 100.0, rng, (4, 10), (2, 10))
        first_end = m.cut_until
        assert m.cut_since == 100.0 and first_end > 100.0 and not proxy.up.is_set()
        # the tick in which that cut ends also cuts the same machine again
        chaos.partition_step([m], events, first_end, first_end, rng, (4, 10), (2, 10))
        assert events.cuts == [(100.0, first_end, "c")]  # the first cut is on record
        assert m.cut_since == first_end and m.cut_until > first_end and not proxy.up.is_set()
        second_end = m.cut_until
        chaos.partition_step([m], events, second_end, next_cut + 1000, rng, (4, 10), (2, 10))
        assert events.cuts == [(100.0, first_end, "c"), (first_end, second_end, "c")] and proxy.up.is_set()
        assert events.free_at("c", 100.0) == second_end  # cut the whole time, as far as the floor knows
    finally:
        proxy.close()
