"""Skill routing on real phrasing: requests written the way people ask (bench/routing_heldout.yaml),
sharing no word with the needed skill's name, description or body, against the 177 real skills of
Hermes Agent 0.19 (plus generic filler up to 150 and 1,000 skills). The figure is the one of
routing_eval.py: is the needed skill in the first request's skills index, within the same prompt
budget (skills.prompt_budget_chars, 4,000)? "Described" counts it only as a `- name: description`
line, "shown" also when it is named in the index's "Also:" line. Measured these ways: full-text
ranking alone (BM25 on name, description and body: the default without the `embeddings` extra),
full-text fused with words mined from the skills (SearchIndex.related), and with the `embeddings`
extra (description and body passages, fused with full-text's top hits): `static` (static token
vectors derived from all-MiniLM-L6-v2: what `skills.embeddings: auto`, the default, ranks by in a
CLI turn and until the daemon's model worker has the model loaded), `model` (the transformer
alone: the former `skills.embeddings: true`) and `both` (static and model fused: `auto` in the
daemon once the model is loaded, and `true`); BM25@10 on name + description beside them.

Settings were chosen on bench/routing_dev.yaml (`--dev`, other skills, the same rule); the held-out
set is only measured. `--test` measures bench/routing_test.yaml (issue 52: written apart, by symptom
and goal, never tuned on; its requests may name a tool, so the shared-word rule is reported, not
enforced) at 1,000 skills.

`static_first_turn` is the first turn after the skills arrive: no skill vectors cached (they are
emptied before every request), the token table built at install time (HERMES_FS_SHARE), so the
turn encodes the skills' static vectors itself (mind/search.py `semantic`); its
`seconds_per_request` is that first turn's ranking cost. With a real model, bench/skill_search_model.py measures what happens when the
index misses.

Usage: python bench/routing_heldout.py [--dev | --test] [--no-embeddings] [--static-only] [--sizes 150,1000] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import write_results  # noqa: E402
from routing_eval import bm25_name_description, build, real_skills  # noqa: E402
from skill_corpus import skill_library, skill_md  # noqa: E402

from hermes_fs.agent.prompt import DESCRIBED_SHARE, LEXICAL_TOP, SHORT_CHARS, skills_index  # noqa: E402
from hermes_fs.mind import embeddings, static_vectors  # noqa: E402
from hermes_fs.mind.search import fill_vectors  # noqa: E402
from hermes_fs.store.vault import Vault  # noqa: E402

REQUESTS = HERE / "routing_heldout.yaml"
DEV = HERE / "routing_dev.yaml"  # for choosing settings; the held-out set is only measured
TEST = HERE / "routing_test.yaml"  # issue 52's set, written apart: only measured
BUDGET = 4000
# Words that carry no topic ("how do I get my ... please"): sharing them is not sharing a word.
FUNCTION_WORDS = """a an the and or but if then so to of in on at by for with from into onto over under up down out off about
as is are was were be been being am do does did doing have has had having i me my mine we us our ours you your yours he
she it its they them their this that these those there here what which who whom whose when where why how can could will
would shall should may might must not no nor just also very too more most some any all each every both either neither
other such own same than please s want wants need needs let lets get got make made go going something anything thing
things one ones way really still again yet already now today tomorrow like""".split()


class Stems:
    """Porter stems as SQLite FTS5 makes them (the tokenizer of the skills index)."""

    def __init__(self):
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='porter unicode61')")
        self.db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'row')")
        self.function = self(" ".join(FUNCTION_WORDS))

    def __call__(self, text: str) -> set[str]:
        self.db.execute("DELETE FROM t")
        self.db.execute("INSERT INTO t VALUES (?)", (text,))
        return {term for (term,) in self.db.execute("SELECT term FROM v")}


def load_requests(path: Path = REQUESTS) -> list[tuple[str, str]]:
    return [(c["request"], c["skill"]) for c in yaml.safe_load(path.read_text())]


def shared_words(cases: list[tuple[str, str]], texts: dict[str, str]) -> dict[str, list[str]]:
    """skill -> the words its request shares with it (must be empty for every case)."""
    stems = Stems()
    out = {}
    for request, skill in cases:
        shared = (stems(request) - stems.function) & stems(skill.replace("-", " ") + " " + texts[skill])
        if shared:
            out[skill] = sorted(shared)
    return out


def vault_with(tmp: Path, real: list[tuple[str, str]], needed: set[str], size: int) -> Path:
    """The needed skills, then other real skills up to half of `size`, then filler up to `size`."""
    chosen = [r for r in real if r[0] in needed]
    chosen += [r for r in real if r[0] not in needed][: max(0, min(len(real), size // 2) - len(chosen))]
    return build(tmp, chosen, size - len(chosen))


METHODS = {  # name -> skills_index arguments
    "full_text": {"semantic": False},
    "full_text_related": {"semantic": False, "related": True},
    "static": {"semantic": "static"},
    "model": {"semantic": "model"},
    "both": {"semantic": "both"},
    "static_first_turn": {"semantic": "static"},
}
EMBEDDING_METHODS = ("static", "model", "both", "static_first_turn")
VECTOR_TABLES = tuple(embeddings.TABLES.values())


def forget_vectors(root: Path) -> None:
    """The skill vectors cache emptied, as right after skills arrive (the FTS rows stay: a turn
    refreshes them by (mtime, size) in milliseconds either way)."""
    db = sqlite3.connect(root / ".hermes" / "index.sqlite")
    try:
        with db:
            for table in VECTOR_TABLES:
                db.execute(f"DROP TABLE IF EXISTS {table}")
    finally:
        db.close()


def shown_rate(root: Path, cases, method: str, plain: set[str] | None = None) -> dict:
    """Of the requests, how often the needed skill is in the index: described (`- name: description`)
    or at least named ("Also: ..."). `plain`: the requests sharing no word with their skill,
    whose figure is given beside."""
    vault = Vault(root)
    described = shown = plain_shown = 0
    misses = []
    spent = 0.0
    for request, needed in cases:
        if method == "static_first_turn":
            forget_vectors(root)
        t0 = time.perf_counter()
        idx = skills_index(vault, request, BUDGET, **METHODS[method])
        spent += time.perf_counter() - t0
        if plain is not None and request in plain:
            plain_shown += needed in idx.shown
        shown += needed in idx.shown
        described += needed in (idx.described if idx.described is not None else idx.shown)
        if needed not in idx.shown:
            misses.append(needed)
    n = len(cases)
    out = {"shown": round(shown / n, 3), "described": round(described / n, 3), "misses": misses,
           "seconds_per_request": round(spent / n, 4)}
    if plain is not None:
        out["shown_sharing_no_word"] = f"{plain_shown}/{len(plain)}"
    return out


def first_turn(root: Path, cases, plain: set[str] | None) -> dict:
    """static_first_turn on a copy of the vault: its own table moved out to an installation's
    place (HERMES_FS_SHARE), its vectors emptied before each request."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "vault"
        shutil.copytree(root, copy, ignore=shutil.ignore_patterns(static_vectors.TABLE, static_vectors.META, "locks"))
        share = Path(tmp) / "share"
        share.mkdir()
        for name in (static_vectors.TABLE, static_vectors.META):
            try:
                os.link(root / ".hermes" / name, share / name)
            except OSError:  # another file system
                shutil.copy(root / ".hermes" / name, share / name)
        before = os.environ.get("HERMES_FS_SHARE")
        os.environ["HERMES_FS_SHARE"] = str(share)
        try:
            assert static_vectors.locate(copy / ".hermes") == share / static_vectors.TABLE
            return shown_rate(copy, cases, "static_first_turn", plain)
        finally:
            if before is None:
                os.environ.pop("HERMES_FS_SHARE", None)
            else:
                os.environ["HERMES_FS_SHARE"] = before


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--no-embeddings", action="store_true", help="skip the embedding measurement")
    p.add_argument("--static-only", action="store_true", help="of the embeddings, only the static vectors (no transformer)")
    p.add_argument("--dev", action="store_true", help="the development set (bench/routing_dev.yaml), not the held-out one")
    p.add_argument("--test", action="store_true", help="issue 52's test set (bench/routing_test.yaml), at 1,000 skills")
    p.add_argument("--sizes", default=None, help="default 150,1000 (--test: 1000)")
    p.add_argument("--workdir", help="build the vaults here and reuse them (and their cached vectors) next run")
    a = p.parse_args(argv)
    real = real_skills()
    texts = dict(real)
    which = "test" if a.test else "dev" if a.dev else "held-out"
    sizes = a.sizes or ("1000" if a.test else "150,1000")
    cases = load_requests({"test": TEST, "dev": DEV, "held-out": REQUESTS}[which])
    plain = None
    if a.test:  # skills of the filler too; the rule is reported: people name their tools
        texts.update({n: skill_md(n, d) for n, d in skill_library(1000)})
        leaks = shared_words(cases, texts)
        plain = {q for q, n in cases if n not in leaks}
    else:  # requests marked `free` (some of the development set's) are held to it loosely too
        free = {c["skill"] for c in yaml.safe_load((DEV if a.dev else REQUESTS).read_text()) if c.get("free")}
        texts.update({n: skill_md(n, d) for n, d in skill_library(1000) if n in free})
        leaks = {n: w for n, w in shared_words(cases, texts).items() if n not in free}
        if leaks:  # the set's one rule: a request that shares a word with its skill is not held out
            raise SystemExit(f"requests sharing words with their skill: {leaks}")
    use_emb = not a.no_embeddings and embeddings.available()
    methods = [m for m in METHODS if m not in EMBEDDING_METHODS or (use_emb and (m in ("static", "static_first_turn") or not a.static_only))]
    if not hasattr(static_vectors, "locate") and "static_first_turn" in methods:
        methods.remove("static_first_turn")  # an older tree: its first turn ranks by full-text alone
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        needed = {n for _q, n in load_requests(REQUESTS) + load_requests(DEV)}  # the same vaults for both sets
        for size in (int(x) for x in sizes.split(",")):
            root = Path(a.workdir or tmp) / f"v{size}"
            if not (root / "skills").is_dir():
                root = vault_with(root, real, needed, size)
            row: dict = {"skills": size, "requests": len(cases),
                         "bm25_name_description_at_10": round(sum(n in bm25_name_description(root, q) for q, n in cases) / len(cases), 3)}
            if use_emb:  # a turn never encodes skills (the daemon does, in the background): fill first
                t0 = time.perf_counter()
                row["vectors_encoded"] = fill_vectors(root, model=not a.static_only)
                row["vectors_fill_seconds"] = round(time.perf_counter() - t0, 1)
            for m in methods:
                if m == "static_first_turn":
                    row[m] = first_turn(root, cases, plain)
                else:
                    row[m] = shown_rate(root, cases, m, plain)
            rows.append(row)
            print(f"{size:>5} skills, {len(cases)} {which} requests: "
                  + "; ".join(f"{m} shown {row[m]['shown']:.3f} (described {row[m]['described']:.3f})" for m in methods)
                  + ("" if use_emb else "; embeddings not installed")
                  + f"; BM25@10 name+description {row['bm25_name_description_at_10']:.3f}", flush=True)
    result = {"set": which, "rows": rows, "load_average": [round(x, 2) for x in os.getloadavg()], "budget_chars": BUDGET,
              "embeddings_installed": embeddings.available(), "target": 0.95,
              "torch_imported": any(sys.modules.get(m) is not None for m in ("torch", "sentence_transformers")),
              "settings": {"described_share": DESCRIBED_SHARE, "short_description_chars": SHORT_CHARS,
                           "lexical_top": LEXICAL_TOP,
                           "body_weight": embeddings.BODY_WEIGHT, "static_body_weight": embeddings.STATIC_BODY_WEIGHT,
                           "static_sif": static_vectors.SIF, "body_chunks": embeddings.BODY_CHUNKS,
                           "chunk_words": embeddings.CHUNK_WORDS},
              "command": "python bench/routing_heldout.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    if a.test:
        result["requests_sharing_a_word"] = {n: w for n, w in leaks.items()}
    write_results({"test": "routing_test", "dev": "routing_dev", "held-out": "routing_heldout"}[which], result)
    return result


if __name__ == "__main__":
    main()
