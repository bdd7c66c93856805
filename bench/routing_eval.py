"""Skill routing on real skills: is the skill a request needs shown in the first request's skills
index? Real skills are the 177 of Hermes Agent 0.19's source package (PyPI, MIT); requests are
written from each skill's body (a sentence of its instructions, with the skill's own name words
taken out), never from its description; the rest of the library is generic filler whose names
share verbs with the requests (review, configure, monitor, ...). Beside it, in the same run, the
baseline: plain BM25 on name + description, top 10.

Targets: >= 0.95 at 150 and at 1,000 skills, and never below the baseline.
Usage: python bench/routing_eval.py
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import write_results  # noqa: E402
from skill_corpus import skill_library, skill_md  # noqa: E402

from hermes_fs.agent.prompt import skills_index  # noqa: E402
from hermes_fs.mind.search import SearchIndex, fts_query  # noqa: E402
from hermes_fs.mind.skills import normal_name, reference_form  # noqa: E402
from hermes_fs.store.vault import init_vault  # noqa: E402

CACHE = HERE / ".cache"
SDIST = "hermes_agent-0.19.0.tar.gz"


def real_skills() -> list[tuple[str, str]]:
    """(name, SKILL.md text in the reference form) for the real skills of the sdist."""
    CACHE.mkdir(exist_ok=True)
    if not (CACHE / SDIST).exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "hermes-agent==0.19.0", "--no-deps",
                        "--no-binary", ":all:", "-d", str(CACHE)], check=True)
    out = {}
    with tarfile.open(CACHE / SDIST) as tar:
        for m in tar.getmembers():
            if m.name.endswith("/SKILL.md") and "skills/" in m.name and m.isfile():
                folder = m.name.rsplit("/", 2)[-2]
                name = normal_name(folder)
                text = tar.extractfile(m).read().decode("utf-8", "replace")
                try:
                    out.setdefault(name, reference_form(text, name))
                except Exception:
                    continue
    return sorted(out.items())


def request_from_body(name: str, text: str) -> str | None:
    """A sentence of the skill's instructions, without the words of its name: what a person who
    needs it might say, without naming it."""
    body = text.split("\n---\n", 1)[-1]
    name_words = {w for w in name.split("-") if len(w) > 2}
    in_code = False
    for line in body.splitlines():
        if line.strip().startswith("```"):
            in_code = not in_code
            continue
        s = line.strip().lstrip("-*0123456789. ").strip()
        if in_code or not s or s.startswith(("#", "|", ">", "<", "!", "[")) or len(s.split()) < 8:
            continue
        words = [w for w in re.findall(r"[A-Za-z][A-Za-z0-9'-]*", s)
                 if not any(w.lower().startswith(n) or n.startswith(w.lower()) for n in name_words)]
        if len(words) >= 6:
            return " ".join(words[:30])
    return None


def build(tmp: Path, real: list[tuple[str, str]], filler: int) -> Path:
    vault = init_vault(tmp).vault
    for n in ("writing-skills", "reviewing-learned-changes"):
        for f in (vault.root / "skills" / n).iterdir():
            f.unlink()
        (vault.root / "skills" / n).rmdir()
    for name, text in real:
        (vault.root / "skills" / name).mkdir()
        (vault.root / "skills" / name / "SKILL.md").write_text(text)
    for name, desc in skill_library(filler):
        if not (vault.root / "skills" / name).exists():
            (vault.root / "skills" / name).mkdir()
            (vault.root / "skills" / name / "SKILL.md").write_text(skill_md(name, desc))
    return vault.root


def bm25_name_description(root: Path, query: str, k: int = 10) -> list[str]:
    index = SearchIndex(root)
    try:
        index.refresh("skills")
        rows = index.db.execute("SELECT path FROM fts WHERE fts MATCH ? AND kind='skills' "
                                "ORDER BY bm25(fts, 0, 0, 1.0, 1.0, 0) LIMIT ?", (fts_query(query), k)).fetchall()
    finally:
        index.close()
    return [p.split("/")[1] for (p,) in rows]


def evaluate(root: Path, cases: list[tuple[str, str]], budget: int = 4000) -> dict:
    from hermes_fs.store.vault import Vault

    vault = Vault(root)
    ours = base = 0
    misses = []
    for request, needed in cases:
        shown = skills_index(vault, request, budget).shown
        ours += needed in shown
        base += needed in bm25_name_description(root, request)
        if needed not in shown:
            misses.append(needed)
    n = len(cases)
    return {"requests": n, "hermes_fs": ours / n, "bm25_name_description_at_10": base / n, "misses": misses[:20]}


def main() -> dict:
    real = real_skills()
    cases_all = [(q, name) for name, text in real if (q := request_from_body(name, text))]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size, n_real in ((150, 75), (1000, len(real))):
            chosen = real[:: max(1, len(real) // n_real)][:n_real]
            names = {n for n, _ in chosen}
            root = build(Path(tmp) / f"v{size}", chosen, size - len(chosen))
            cases = [(q, n) for q, n in cases_all if n in names]
            row = {"skills": size, "real_skills": len(chosen), **evaluate(root, cases)}
            rows.append(row)
            print(f"{size:>5} skills ({len(chosen)} real): needed skill shown {row['hermes_fs']:.3f}, "
                  f"BM25@10 on name+description {row['bm25_name_description_at_10']:.3f} ({row['requests']} requests)")
    result = {"rows": rows, "targets": {"shown_min": 0.95, "not_below_baseline": True},
              "real_skills_total": len(real), "example_requests": cases_all[:5]}
    write_results("routing_eval", result)
    return result


if __name__ == "__main__":
    main()
