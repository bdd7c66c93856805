"""A running daemon on a 10,000-file vault for a few minutes: a simulated person edits memory and
skill files (including the files refines change) while refines (scripted model, auto policy) and
a cron job run and merge. At the end: every human edit is in main, git fsck is clean, no lock is
left, no branch is stranded. Usage: python bench/stress.py [SECONDS] [FILES]
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import write_results  # noqa: E402
from gen_vault import generate  # noqa: E402
from harness import (  # noqa: E402
    ModelServer,
    configure,
    daemon_state,
    fsck_clean,
    git,
    responder,
    start_daemon,
    stop_daemon,
    wait_settled,
)

from hermes_fs.store.lock import VaultLock  # noqa: E402


def main(seconds: float = 180, files: int = 10_000) -> dict:
    rng = random.Random(11)
    src = generate(files)
    root = Path(tempfile.mkdtemp(prefix="stress-")) / "vault"
    subprocess.run(["cp", "-a", str(src), str(root)], check=True)
    server = ModelServer(responder=responder)
    configure(root, server)
    skill_files = sorted(str(p.relative_to(root)) for p in (root / "skills").glob("*/SKILL.md"))[:5]
    targets = ["memory/USER.md", "memory/MEMORY.md", *skill_files]
    (root / "cron" / "tick.md").write_text("---\nschedule: every 1m\n---\nSay ok.\n")
    proc = start_daemon(root)
    (root / "inbox" / "seed.md").write_text("---\ntype: run\n---\nHello there.\n")
    wait_settled(root)
    edits: dict[str, list[str]] = {t: [] for t in targets}
    n_edit = n_refine = 0
    t_end = time.time() + seconds
    next_refine = time.time() + 3
    while time.time() < t_end:
        target = rng.choice(targets)
        line = f"- stress edit {n_edit}"
        p = root / target
        p.write_text(p.read_text() + line + "\n")
        edits[target].append(line)
        n_edit += 1
        if time.time() >= next_refine:
            (root / "inbox" / f"refine-{n_refine}.md").write_text("---\ntype: refine\nsession: latest\n---\n")
            n_refine += 1
            next_refine = time.time() + rng.uniform(3, 8)
        time.sleep(rng.uniform(0.1, 0.8))
    settled = wait_settled(root, 180)
    errors = daemon_state(root).get("last_errors", [])
    stop_daemon(proc)
    missing = []
    for target, lines in edits.items():
        final = git(root, "show", f"HEAD:{target}")
        missing += [(target, ln) for ln in lines if ln not in final]
    branches = [b for b in git(root, "for-each-ref", "--format=%(refname:short)", "refs/heads/refine/").split() if b]
    stranded = [b for b in branches if "Refine-Session:" not in git(root, "log", "-1", "--format=%B", b)]
    locks_free = all(_free(root / ".hermes" / name) for name in ("daemon.lock", "locks/main.lock"))
    merged = len(git(root, "log", "--first-parent", "--grep=^merge refine/", "--format=%H").split())
    conflicted = sum(1 for p in (root / "outputs" / "requests").glob("*refine-*.md") if "conflict" in p.read_text())
    cron_runs = len(list((root / "outputs" / "cron" / "tick").glob("*.md"))) if (root / "outputs" / "cron" / "tick").exists() else 0
    result = {
        "seconds": seconds, "vault_files": files, "edits_made": n_edit, "edits_found": n_edit - len(missing),
        "refines_requested": n_refine, "refines_merged": merged, "refines_pending": len(branches),
        "refines_conflicted": conflicted, "cron_runs": cron_runs, "fsck_clean": fsck_clean(root),
        "locks_free": locks_free, "stranded_branches": len(stranded), "settled": settled,
        "daemon_errors": len(errors),
    }
    for k, v in result.items():
        print(f"{k:<20} {v}")
    write_results("stress", result)
    server.close()
    shutil.rmtree(root.parent, ignore_errors=True)
    return result


def _free(path: Path) -> bool:
    if not path.exists():
        return True
    lock = VaultLock(path)
    try:
        lock.acquire(timeout=0)
        lock.release()
        return True
    except Exception:
        return False


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 180, int(sys.argv[2]) if len(sys.argv) > 2 else 10_000)
