"""Everything a refine costs except model time — snapshot, overlay edits, checks, the plumbing commit
and the merge into main — for a change of 3 files, on 100, 10,000 and 100,000-file vaults, beside the
same change done the usual way (`git worktree add` + commit + `git merge`) in the same run.

Targets: the 100,000-file vault within 1.5x of the 100-file vault; at least 20x faster than the
worktree route at 100,000 files. Usage: python bench/refine_overhead.py [SIZES...]
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import median, write_results  # noqa: E402
from gen_vault import generate  # noqa: E402

from hermes_fs.learning import pipeline  # noqa: E402
from hermes_fs.learning.pipeline import Description  # noqa: E402
from hermes_fs.learning.refine import snapshot  # noqa: E402
from hermes_fs.mind import memory, skills  # noqa: E402
from hermes_fs.mind.sessions import Transcript  # noqa: E402
from hermes_fs.store.vault import Vault  # noqa: E402

REPEAT = 5


def skill_text(name: str) -> str:
    return f"---\nname: {name}\ndescription: Bench skill {name}. Use when benchmarking.\n---\n# {name}\n\n1. Step.\n"


class ScriptedReviewer:
    """A refine proposer without a model: the reviewer's usual edits (two memory entries, one skill),
    so the pipeline's own cost is what gets timed."""

    kind = "refine"
    task = None

    def __init__(self, session_id: str, i: int):
        self.session_id, self.i = session_id, i

    def base(self, vault: Vault) -> str:
        self.vault = vault
        return snapshot(vault, self.session_id)  # step 1

    def propose(self, ov) -> None:  # step 2
        memory.add(ov, self.vault.config, "USER.md", f"Bench preference {self.i}.")
        memory.add(ov, self.vault.config, "MEMORY.md", f"Bench lesson {self.i}.")
        skills.create(ov, f"bench-skill-{self.i}", skill_text(f"bench-skill-{self.i}"))

    def describe(self, changes) -> Description:
        return Description(f"bench change {self.i}", ["- bench"], {"Refine-Session": self.session_id}, f"bench {self.i}")

    def context(self) -> dict:
        return {}


def hermes_route(vault: Vault, i: int) -> float:
    """One refine minus the model, through the real pipeline: snapshot, checks, plumbing commit, merge."""
    t = Transcript.start(vault.root, "bench", "cli", f"bench {i}")
    t.append({"role": "user", "content": f"remember fact {i}"})
    t0 = time.perf_counter()
    outcome = pipeline.run(vault, ScriptedReviewer(t.id, i), policy="auto")  # steps 1-5
    elapsed = time.perf_counter() - t0
    assert outcome.status == "merged", outcome.line()
    return elapsed


def worktree_route(root: Path, i: int) -> float:
    """The same change through a worktree checkout, a commit there, and a merge in the main tree."""
    def git(*args, cwd=root):
        subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)

    wt = Path(tempfile.mkdtemp(prefix="wt-")) / "w"
    branch = f"wt-bench-{i}-{time.time_ns()}"
    t0 = time.perf_counter()
    git("worktree", "add", "-q", "-b", branch, str(wt), "HEAD")
    with open(wt / "memory" / "USER.md", "a") as f:
        f.write(f"- Worktree preference {i}.\n")
    with open(wt / "memory" / "MEMORY.md", "a") as f:
        f.write(f"- Worktree lesson {i}.\n")
    (wt / "skills" / f"wt-skill-{i}").mkdir(parents=True)
    (wt / "skills" / f"wt-skill-{i}" / "SKILL.md").write_text(skill_text(f"wt-skill-{i}"))
    git("add", "-A", cwd=wt)
    git("commit", "-q", "-m", "worktree change", cwd=wt)
    git("worktree", "remove", "--force", str(wt))
    git("merge", "-q", "--no-ff", "-m", f"merge {branch}", branch)
    elapsed = time.perf_counter() - t0
    shutil.rmtree(wt.parent, ignore_errors=True)
    return elapsed


def main(sizes: list[int]) -> dict:
    rows = []
    for n in sizes:
        source = generate(n)
        work = Path(tempfile.mkdtemp(prefix=f"refine-{n}-")) / "vault"
        subprocess.run(["cp", "-a", str(source), str(work)], check=True)
        vault = Vault(work)
        hermes_route(vault, 999)  # warm caches (git index, GitPython's cat-file process)
        hermes = [hermes_route(vault, i) for i in range(REPEAT)]
        worktree = [worktree_route(work, i) for i in range(REPEAT)]
        fsck = subprocess.run(["git", "-C", str(work), "fsck"], capture_output=True).returncode == 0
        row = {"files": n, "hermes_median_s": median(hermes), "worktree_median_s": median(worktree),
               "speedup": median(worktree) / median(hermes), "fsck_clean": fsck}
        rows.append(row)
        print(f"{n:>7} files: hermes {row['hermes_median_s']:.3f}s  worktree {row['worktree_median_s']:.3f}s  "
              f"speedup {row['speedup']:.1f}x  fsck {'ok' if fsck else 'FAILED'}")
        shutil.rmtree(work.parent, ignore_errors=True)
    result = {"rows": rows, "repeat": REPEAT, "targets": {"largest_vs_smallest_max": 1.5, "speedup_at_largest_min": 20}}
    if len(rows) > 1:
        result["largest_vs_smallest"] = rows[-1]["hermes_median_s"] / rows[0]["hermes_median_s"]
        print(f"largest/smallest vault: {result['largest_vs_smallest']:.2f}x (target <= 1.5)")
    write_results("refine_overhead", result)
    return result


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [100, 10_000, 100_000])
