"""What a sync round's remote calls cost over `git://` (a `git daemon` on 127.0.0.1), with git's
default wire protocol (v2) and with v0, which store/remote.py uses for git:// remotes: the
listing of the remote's refs, a fetch with nothing new, and one with a new commit. Each call is
made through store/remote.Remote, alternating the two protocols, `--rounds` times.

`python bench/git_protocol.py` writes bench/results/git_protocol.json.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from common import median, percentile, write_results  # noqa: E402
from gitserver import GitDaemon  # noqa: E402

from hermes_fs.store import remote as remote_module  # noqa: E402
from hermes_fs.store.remote import SHARED, Remote  # noqa: E402

CLAIMS = 300  # refs under refs/hermes/claims/ on the remote, as after a busy day


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def setup(work: Path) -> tuple[GitDaemon, Path, Path]:
    server = GitDaemon(work / "srv")
    server.bare()
    writer, reader = work / "writer", work / "reader"
    for repo in (writer, reader):
        _git(work, "init", "-q", "-b", "main", str(repo))
        _git(repo, "config", "user.name", "bench")
        _git(repo, "config", "user.email", "bench@example.org")
    (writer / "MEMORY.md").write_text("- one\n")
    _git(writer, "add", "MEMORY.md")
    _git(writer, "commit", "-qm", "first")
    head = _git(writer, "rev-parse", "HEAD")
    refs = "".join(f"create refs/hermes/claims/cron/job-{i:03d}/20261202T0000Z {head}\n" for i in range(CLAIMS))
    subprocess.run(["git", "update-ref", "--stdin"], cwd=writer, input=refs, text=True, check=True)
    _git(writer, "push", "-q", server.url(), "main", "refs/hermes/claims/*:refs/hermes/claims/*")
    return server, writer, reader


def run(rounds: int = 20) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        server, writer, reader = setup(Path(tmp))
        remote = Remote(reader, server.url())
        times: dict[str, dict[str, list[float]]] = {v: {"ls_remote": [], "fetch_nothing_new": [], "fetch_one_commit": []}
                                                    for v in ("2", "0")}
        try:
            remote.fetch()
            for n in range(rounds):
                for version in ("2", "0"):
                    remote_module.PLAIN_GIT_PROTOCOL = version
                    t = times[version]
                    t0 = time.perf_counter()
                    remote.refs()
                    t["ls_remote"].append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    remote.fetch(*SHARED)
                    t["fetch_nothing_new"].append(time.perf_counter() - t0)
                    (writer / "MEMORY.md").write_text((writer / "MEMORY.md").read_text() + f"- {version} {n}\n")
                    _git(writer, "commit", "-qam", "another")
                    _git(writer, "push", "-q", server.url(), "main")
                    t0 = time.perf_counter()
                    remote.fetch(*SHARED)
                    t["fetch_one_commit"].append(time.perf_counter() - t0)
        finally:
            remote_module.PLAIN_GIT_PROTOCOL = "0"
            server.close()
    git_version = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()
    result: dict = {"rounds": rounds, "claim_refs": CLAIMS, "git": git_version, "ms": {}}
    for version, calls in times.items():
        result["ms"][f"v{version}"] = {call: {"p50": round(median(xs) * 1000, 1), "p95": round(percentile(xs, 95) * 1000, 1)}
                                       for call, xs in calls.items()}
    for call in ("ls_remote", "fetch_nothing_new", "fetch_one_commit"):
        v2, v0 = result["ms"]["v2"][call]["p50"], result["ms"]["v0"][call]["p50"]
        print(f"{call:18} v2 p50 {v2:6.1f} ms   v0 p50 {v0:6.1f} ms")
    return result


def main() -> dict:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    result = run(args.rounds)
    write_results("git_protocol", result)
    return result


if __name__ == "__main__":
    main()
