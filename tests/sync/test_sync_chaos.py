"""The chaos bench (bench/sync.py) in a short form: three daemons on one `git daemon` remote,
kill -9 every few seconds, partitions through loopback proxies, a phone pushing plain commits,
edits on every machine, one-shot cron jobs and inbox requests. Nothing is timed here: what is
checked is that nothing is lost, duplicated or left with conflict markers, and that every job and
request is done exactly once once the network is whole again."""

from __future__ import annotations

import sys

import pytest
from locations import BENCH

sys.path.insert(0, str(BENCH))

import sync as chaos  # noqa: E402  (bench/sync.py)

pytestmark = pytest.mark.gitdaemon


@pytest.mark.slow
def test_chaos_short(tmp_path):
    r = chaos.run(duration_s=40, jobs=5, requests=8, interval_s=1.0, ttl_s=20.0, seed=7, settle_s=240,
                  kill_every=(4, 8), cut_every=(5, 10), cut_for=(2, 6), work=tmp_path, say=lambda line: None)
    assert r["kills"] >= 1 and r["partitions"] >= 1, r  # the chaos really happened
    assert r["heads_agree"], r
    assert r["lost_lines"] == 0 and r["duplicated_lines"] == 0, r
    assert r["conflict_markers"] == 0, r
    assert r["fsck_clean"], r["fsck"]
    assert r["cron"]["with_one_output"] == r["cron"]["due_times"], r["cron"]
    assert r["cron"]["with_more_claims"] == 0, r["cron"]
    assert r["inbox"]["answered_once"] == r["inbox"]["requests"], r["inbox"]
    assert r["takeovers"]["within_expiry_plus_5s"], r["takeovers"]
