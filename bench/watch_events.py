"""How many file events the daemon's watcher is handed while git works in the vault: with a
recursive watch of the whole vault asking for every event (the daemon before 89ba618), asking for
writes only (89ba618), and as the daemon watches now: writes only, `.git/` and `.hermes/` not
watched at all (service/watcher.py, 42d333a). Every event was queued by the kernel (16,384 at most
by default) and read by the daemon's Python with the GIL held, even those it then ignored.

Two workloads in a vault with some history (200 notes, each committed on its own): 90 read-only
git commands (status, log, rev-parse), and 20 edits each committed with `git add` and `git commit`. `python bench/watch_events.py` writes
bench/results/watch_events.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from common import write_results  # noqa: E402

from hermes_fs.service.watcher import IGNORED_DIRS, Watcher, written_events  # noqa: E402
from hermes_fs.store.vault import init_vault  # noqa: E402


class Count:
    def __init__(self, root: Path):
        self.root = root
        self.where = {"under .git/": 0, "under .hermes/": 0, "elsewhere": 0}

    def add(self, abs_or_rel: str) -> None:
        rel = os.path.relpath(abs_or_rel, self.root) if os.path.isabs(abs_or_rel) else abs_or_rel
        top = rel.split(os.sep, 1)[0]
        self.where["under .git/" if top == ".git" else "under .hermes/" if top == ".hermes" else "elsewhere"] += 1


def watch(root: Path, how: str, count: Count):
    """A started watch of `root` as the daemon had it (`how`), counting the file events handed over."""
    if how == "now":
        w = Watcher(root, lambda rel, _kind: count.add(rel), keep=lambda _rel: True, skip=IGNORED_DIRS)
        w.start()
        return w.stop
    from watchdog.events import FileSystemEventHandler
    from watchdog.observers import Observer

    class Counting(FileSystemEventHandler):
        def on_any_event(self, event):
            if not event.is_directory:
                count.add(os.fsdecode(event.src_path))

    observer = Observer()
    observer.schedule(Counting(), str(root), recursive=True,
                      **({"event_filter": written_events()} if how == "writes only" else {}))
    observer.start()
    return lambda: (observer.stop(), observer.join(5))


def history(root: Path, notes: int = 200) -> None:
    (root / "notes").mkdir()
    for i in range(notes):
        (root / "notes" / f"n{i}.md").write_text(f"note {i}\n")
        subprocess.run(["git", "add", f"notes/n{i}.md"], cwd=root, capture_output=True, check=True)
        subprocess.run(["git", "commit", "-q", "-m", f"note {i}"], cwd=root, capture_output=True, check=True)


def reads(root: Path) -> None:
    for _ in range(30):
        for args in (("status", "--porcelain"), ("log", "-3", "--format=%H"), ("rev-parse", "HEAD")):
            subprocess.run(["git", *args], cwd=root, capture_output=True, check=True)


def commits(root: Path) -> None:
    for i in range(20):
        with open(root / "memory" / "MEMORY.md", "a", encoding="utf-8") as f:
            f.write(f"- bench entry {i}\n")
        subprocess.run(["git", "add", "memory/MEMORY.md"], cwd=root, capture_output=True, check=True)
        subprocess.run(["git", "commit", "-q", "-m", f"bench {i}"], cwd=root, capture_output=True, check=True)


def main() -> dict:
    rows = []
    for workload, run in (("90 read-only git commands", reads), ("20 edits, each git add + git commit", commits)):
        for how in ("every event, whole vault", "writes only", "now"):
            with tempfile.TemporaryDirectory(prefix="hermes-watch-") as tmp:
                root = Path(tmp) / "vault"
                init_vault(root)
                history(root)
                count = Count(root.resolve())
                stop = watch(root.resolve(), how, count)
                time.sleep(0.3)
                run(root)
                time.sleep(1.0)  # the last events are read
                stop()
                rows.append({"workload": workload, "watch": how, "events": sum(count.where.values()), **count.where})
                print(json.dumps(rows[-1]))
    result = {"what": "file events handed to the watcher's handler (directory events left out)", "runs": rows}
    write_results("watch_events", result)
    return result


if __name__ == "__main__":
    main()
