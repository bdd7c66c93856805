"""How fast a standby machine takes a gateway channel over (the lease of service/gateway/holder.py).

Against a real `git daemon` remote on 127.0.0.1, two holders of one channel account (two clones'
worth of lease writers, hosts a and b). Each round: a holds the lease and renews it; then a stops
dead (its thread ends with no hand-over: what `kill -9` leaves behind on the remote), and the time
until b holds it is measured, from a's last renewal and from the "kill". Then the same with a clean
stop (hand-over). The issue's target: taken over within the lease + 5 s of the kill.

Usage: python bench/gateway_lease.py [--rounds 10] [--lease 3]
Writes bench/results/gateway_lease.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from gitserver import GitDaemon  # noqa: E402

from hermes_fs.service.gateway.holder import ChannelHolder  # noqa: E402
from hermes_fs.store.lease import RefLease  # noqa: E402
from hermes_fs.store.remote import Remote  # noqa: E402
from hermes_fs.store.vault import init_vault  # noqa: E402


def holder(vault, url: str, name: str, host: str, lease_s: float, got: threading.Event) -> ChannelHolder:
    lease = RefLease(vault.git, Remote(vault.root, url), name, host)
    return ChannelHolder(lease, lease_s, lambda: "0", lambda journal: got.set(), lambda why: got.clear())


def one_round(vault, url: str, n: int, lease_s: float, clean: bool) -> dict:
    name = f"email/bench-{n}-{'clean' if clean else 'kill'}"
    got_a, got_b = threading.Event(), threading.Event()
    a = holder(vault, url, name, "a", lease_s, got_a)
    b = holder(vault, url, name, "b", lease_s, got_b)
    a.start()
    assert got_a.wait(30)
    b.start()
    time.sleep(lease_s * (0.4 + 0.5 * (n % 3) / 2))  # the kill lands at a different point of a's renewal cycle
    last_renewal = a.written
    t0 = time.time()
    if clean:
        a.stop()
        a.hand_over()
    else:
        a.stopped.set()
        a.wake.set()
        assert a.thread is not None
        a.thread.join(30)
    assert got_b.wait(lease_s + 60)
    took = time.time() - t0
    b.stop()
    b.hand_over()
    return {"after_stop_s": round(took, 3), "after_last_renewal_s": round(time.time() - last_renewal, 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--lease", type=float, default=3.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = GitDaemon(Path(tmp) / "srv")
        try:
            server.bare()
            vault = init_vault(Path(tmp) / "a").vault
            kills = [one_round(vault, server.url(), n, args.lease, clean=False) for n in range(args.rounds)]
            cleans = [one_round(vault, server.url(), n, args.lease, clean=True) for n in range(max(3, args.rounds // 3))]
        finally:
            server.close()
    after = sorted(r["after_stop_s"] for r in kills)
    result = {
        "lease_s": args.lease, "rounds": args.rounds,
        "takeover_after_kill_s": {"median": statistics.median(after), "max": after[-1]},
        "target_s": args.lease + 5,
        "within_target": sum(1 for t in after if t <= args.lease + 5),
        "handover_after_clean_stop_s": {"median": statistics.median(r["after_stop_s"] for r in cleans),
                                        "max": max(r["after_stop_s"] for r in cleans)},
        "kill_rounds": kills, "clean_rounds": cleans,
    }
    out = HERE / "results" / "gateway_lease.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"lease {args.lease} s, {args.rounds} kills: taken over after the kill in median "
          f"{result['takeover_after_kill_s']['median']:.2f} s, max {after[-1]:.2f} s "
          f"({result['within_target']}/{args.rounds} within lease + 5 s); after a clean stop: median "
          f"{result['handover_after_clean_stop_s']['median']:.2f} s")


if __name__ == "__main__":
    main()
