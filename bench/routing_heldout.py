"""Skill routing on real phrasing: requests written the way people ask (bench/routing_heldout.yaml),
sharing no word with the needed skill's name, description or body, against the 177 real skills of
Hermes Agent 0.19 (plus generic filler up to 150 and 1,000 skills). The figure is the one of
routing_eval.py: is the needed skill in the first request's skills index, within the same prompt
budget (skills.prompt_budget_chars, 4,000)? Measured both ways: full-text ranking alone (BM25 on
name, description and body) and fused with the optional embedding model (skills.embeddings: true,
the `embeddings` extra); BM25@10 on name + description beside them.

With --model M [--api-base URL]: for each request whose needed skill the full-text index missed,
one agent turn with that model, which sees the "N more skills: call skill_search" line: did it call
skill_search, did a search return the needed skill, did it open it (skill_view)?

Usage: python bench/routing_heldout.py [--no-embeddings] [--model M --api-base URL [--limit N]]
"""

from __future__ import annotations

import argparse
import os
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

from hermes_fs.agent.prompt import skills_index  # noqa: E402
from hermes_fs.mind import embeddings  # noqa: E402
from hermes_fs.store.vault import Vault  # noqa: E402

REQUESTS = HERE / "routing_heldout.yaml"
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


def load_requests() -> list[tuple[str, str]]:
    return [(c["request"], c["skill"]) for c in yaml.safe_load(REQUESTS.read_text())]


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


def shown_rate(root: Path, cases, semantic: bool) -> tuple[float, list[str], float]:
    vault = Vault(root)
    hits, misses = 0, []
    t0 = time.perf_counter()
    for request, needed in cases:
        ok = needed in skills_index(vault, request, BUDGET, semantic=semantic).shown
        hits += ok
        if not ok:
            misses.append(needed)
    return hits / len(cases), misses, (time.perf_counter() - t0) / len(cases)


def skill_search_with_model(root: Path, cases, model: str, api_base: str | None, limit: int) -> dict:
    """One turn per request the index missed: does the model reach the skill through skill_search?"""
    from hermes_fs.agent.conversation import Conversation, ConversationOptions
    from hermes_fs.agent.model import LiteLLMModel, ModelSettings

    vault = Vault(root)
    (root / "hermes.yaml").write_text(yaml.safe_dump({"model": model, **({"api_base": api_base} if api_base else {}),
                                                      "sandbox": {"backend": "none"}}))
    vault._config = None
    missed = [(q, n) for q, n in cases if n not in skills_index(vault, q, BUDGET, semantic=False).shown][:limit]
    rows = []
    for request, needed in missed:
        m = LiteLLMModel(ModelSettings(model, api_base, timeout_s=900, max_tokens=300))
        row = {"request": request, "needed": needed, "searched": False, "found": False, "opened": False, "error": ""}
        t0 = time.perf_counter()
        try:
            ws = root.parent / "ws"
            ws.mkdir(exist_ok=True)
            with Conversation(vault, ConversationOptions(source="run", workspace=ws, max_steps=4), model=m) as conv:
                conv.ask(request)
                for msg in conv.transcript.messages:
                    for call in msg.get("tool_calls") or []:
                        name, args = call["function"]["name"], call["function"]["arguments"]
                        row["searched"] |= name == "skill_search"
                        row["opened"] |= name == "skill_view" and needed in args
                    if msg["role"] == "tool" and msg.get("name") == "skill_search":
                        row["found"] |= f"- {needed}:" in msg["content"]
        except Exception as exc:  # a model error is a result here, not a crash of the benchmark
            row["error"] = str(exc)[:200]
        row["seconds"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        print(f"  {needed:<28} searched={row['searched']} found={row['found']} opened={row['opened']} {row['seconds']}s")
    n = max(1, len(rows))
    return {"model": model, "missed_requests": len(rows), "called_skill_search": sum(r["searched"] for r in rows) / n,
            "search_returned_needed": sum(r["found"] for r in rows) / n,
            "opened_needed": sum(r["opened"] for r in rows) / n, "rows": rows}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--no-embeddings", action="store_true", help="skip the embedding measurement")
    p.add_argument("--model", help="also measure skill_search with this model (litellm string)")
    p.add_argument("--api-base")
    p.add_argument("--limit", type=int, default=20, help="most missed requests to try with the model")
    a = p.parse_args(argv)
    if a.api_base:
        os.environ.setdefault("OPENAI_API_KEY", "local")
    real = real_skills()
    texts = dict(real)
    cases = load_requests()
    leaks = shared_words(cases, texts)
    if leaks:  # the set's one rule: a request that shares a word with its skill is not held out
        raise SystemExit(f"requests sharing words with their skill: {leaks}")
    use_emb = not a.no_embeddings and embeddings.available()
    rows = []
    search = None
    with tempfile.TemporaryDirectory() as tmp:
        needed = {n for _q, n in cases}
        for size in (150, 1000):
            root = vault_with(Path(tmp) / f"v{size}", real, needed, size)
            lexical, lex_miss, lex_s = shown_rate(root, cases, semantic=False)
            base = sum(n in bm25_name_description(root, q) for q, n in cases) / len(cases)
            row = {"skills": size, "requests": len(cases), "lexical": round(lexical, 3),
                   "lexical_misses": lex_miss, "lexical_seconds_per_request": round(lex_s, 4),
                   "bm25_name_description_at_10": round(base, 3)}
            if use_emb:
                sem, sem_miss, sem_s = shown_rate(root, cases, semantic=True)
                row.update(embeddings=round(sem, 3), embeddings_misses=sem_miss,
                           embeddings_seconds_per_request=round(sem_s, 4))
            rows.append(row)
            print(f"{size:>5} skills: needed skill shown, full-text {lexical:.3f}"
                  + (f", with embeddings {row['embeddings']:.3f}" if use_emb else ", embeddings not installed")
                  + f"; BM25@10 name+description {base:.3f} ({len(cases)} held-out requests)")
            if a.model and size == 1000:
                search = skill_search_with_model(root, cases, a.model, a.api_base, a.limit)
                print(f"  {a.model}: of {search['missed_requests']} requests the index missed, called skill_search "
                      f"{search['called_skill_search']:.2f}, search returned the skill {search['search_returned_needed']:.2f}, "
                      f"opened it {search['opened_needed']:.2f}")
    result = {"rows": rows, "budget_chars": BUDGET, "embeddings_installed": embeddings.available(),
              "target": 0.95, "skill_search": search}
    write_results("routing_heldout", result)
    return result


if __name__ == "__main__":
    main()
