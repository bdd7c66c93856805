"""Generate a synthetic vault of N files (memory, skills, sessions), committed, for benchmarks.

    python bench/gen_vault.py 10000 [DEST]

Shape, meant to look like a vault after years of use: about 20% skill files (at most 1,000 skills,
each a SKILL.md plus reference files), up to 200 project memory files, and the rest session
transcripts spread over months (about 500 per month folder). Folder widths matter: git rewrites a
whole tree object along a changed path, so one folder of 10,000 files would cost more than the
same files spread out. Vaults are cached under bench/.vaults/<N>/ and reused when complete.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hermes_fs.store.vault import init_vault  # noqa: E402

CACHE = Path(__file__).resolve().parent / ".vaults"
WORDS = ("deploy build test cache docker git python rust api token queue retry backoff index schema "
         "migrate backup restore monitor alert latency memory budget review merge branch skill cron").split()


def sentence(rng: random.Random, n: int = 12) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def skill_text(name: str, rng: random.Random) -> str:
    return (f"---\nname: {name}\ndescription: {sentence(rng, 18)} Use when the user mentions {rng.choice(WORDS)}.\n"
            f"metadata:\n  created-by: bench\n---\n# {name}\n\n" + "\n".join(f"{i}. {sentence(rng)}" for i in range(1, 8)) + "\n")


def session_text(i: int, rng: random.Random) -> str:
    turns = "\n\n".join(f"## user\n\n{sentence(rng)}\n\n## assistant\n\n{sentence(rng, 30)}" for _ in range(4))
    return f"---\nid: s{i:06d}\nstarted: 2026-01-01T00:00:00Z\nmodel: bench\nsource: cli\ntitle: bench {i}\n---\n\n{turns}\n"


def generate(n: int, dest: Path | None = None) -> Path:
    dest = dest or CACHE / str(n)
    marker = dest / ".hermes" / "generated"
    if marker.exists():
        return dest
    if dest.exists():
        subprocess.run(["rm", "-rf", str(dest)], check=True)
    init_vault(dest)
    rng = random.Random(n)
    n_skills = min(1000, max(1, n // 50))
    refs_per_skill = max(1, (n // 5) // n_skills - 1)
    n_projects = min(200, max(1, n // 100))
    n_sessions = max(1, n - n_skills * (1 + refs_per_skill) - n_projects)
    for i in range(n_skills):
        name = f"{rng.choice(WORDS)}-{rng.choice(WORDS)}-{i}"
        d = dest / "skills" / name
        (d / "references").mkdir(parents=True)
        (d / "SKILL.md").write_text(skill_text(name, rng))
        for r in range(refs_per_skill):
            (d / "references" / f"notes-{r}.md").write_text(sentence(rng, 60) + "\n")
    for i in range(n_projects):
        (dest / "memory" / "projects" / f"project-{i}.md").write_text(
            f"---\ntitle: project {i}\n---\n" + "".join(f"- {sentence(rng)}\n" for _ in range(5)))
    for i in range(n_sessions):
        month = i // 500
        d = dest / "sessions" / str(2016 + month // 12) / f"{month % 12 + 1:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"s{i:06d}.md").write_text(session_text(i, rng))
    git = ["git", "-C", str(dest)]
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", f"bench: {n} files"], check=True)
    marker.parent.mkdir(exist_ok=True)
    marker.write_text(str(n))
    return dest


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    print(generate(n, Path(sys.argv[2]) if len(sys.argv) > 2 else None))
