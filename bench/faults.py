"""kill -9 the daemon at random moments while it commits edits, runs inbox requests (run and
refine, merged under the auto policy) and cron jobs; restart it each time and check the promises.

Prints trials, corrupt repositories (must be 0), lost edits (0), double-run jobs (0), requests
lost (0). Usage: python bench/faults.py [TRIALS]
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from common import write_results  # noqa: E402
from harness import ModelServer, configure, fsck_clean, git, responder, start_daemon, stop_daemon, wait_settled  # noqa: E402

from hermes_fs.store.vault import init_vault  # noqa: E402


def main(trials: int = 50) -> dict:
    rng = random.Random(7)
    server = ModelServer(responder=responder)
    root = init_vault(Path(tempfile.mkdtemp()) / "vault").vault.root
    configure(root, server)
    stats = Counter()
    edits, requests = [], []
    proc = start_daemon(root)
    # one session for refine requests to review
    (root / "inbox" / "seed.md").write_text("---\ntype: run\n---\nHello, remember that I like tea.\n")
    requests.append("seed.md")
    wait_settled(root)
    for t in range(trials):
        kind = ("edit", "request", "refine", "cron")[t % 4]
        edit = f"- fault edit {t}"
        user = root / "memory" / "USER.md"
        user.write_text(user.read_text() + edit + "\n")
        edits.append(edit)
        if kind in ("request", "refine"):
            name = f"t{t}.md"
            body = "---\ntype: run\n---\nSay ok.\n" if kind == "request" else "---\ntype: refine\nsession: latest\n---\n"
            (root / "inbox" / name).write_text(body)
            requests.append(name)
        if kind == "cron":
            due = (datetime.now(UTC) + timedelta(seconds=rng.uniform(0.2, 1.0))).replace(microsecond=0) + timedelta(seconds=1)
            (root / "cron" / f"job{t}.md").write_text(f"---\nschedule: \"at {due.isoformat()}\"\n---\nSay ok.\n")
        time.sleep(rng.uniform(0.05, 2.0))
        stop_daemon(proc, sig=9)  # kill -9 at a random moment
        stats["kills"] += 1
        stats["corrupt"] += not fsck_clean(root)
        proc = start_daemon(root)
        if not wait_settled(root, 120):
            stats["not_settled"] += 1
    stop_daemon(proc)
    # checks
    head_user = git(root, "show", "HEAD:memory/USER.md")
    lost_edits = [e for e in edits if e not in head_user]
    results = [p.name for p in (root / "outputs" / "requests").glob("*.md")] if (root / "outputs" / "requests").exists() else []
    per_request = Counter(r.split("-", 3)[-1] for r in results)
    lost_requests = [r for r in requests if per_request[r] == 0]
    double_requests = [r for r in requests if per_request[r] > 1]
    cron_outputs = Counter()
    for d in (root / "outputs" / "cron").glob("*") if (root / "outputs" / "cron").exists() else []:
        cron_outputs[d.name] = len(list(d.glob("*.md")))
    double_jobs = [j for j, n in cron_outputs.items() if n > 1]
    result = {
        "trials": trials, "kills": stats["kills"], "corrupt_repositories": stats["corrupt"],
        "lost_edits": len(lost_edits), "double_run_jobs": len(double_jobs), "requests_lost": len(lost_requests),
        "requests_answered_twice": len(double_requests), "not_settled_after_restart": stats["not_settled"],
        "cron_jobs_run": len(cron_outputs), "cron_jobs_scheduled": trials // 4,
        "merged_refines": len(git(root, "log", "--first-parent", "--grep=^merge refine/", "--format=%H").split()),
        "final_fsck_clean": fsck_clean(root),
    }
    for k, v in result.items():
        print(f"{k:<28} {v}")
    write_results("faults", result)
    server.close()
    return result


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50)
