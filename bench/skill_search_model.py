"""Does a real model find the skill it needs through `skill_search` when the prompt's skills index
missed it? For each held-out request (bench/routing_heldout.yaml) whose needed skill is not in the
first prompt's index of a 1,000-skill vault (full-text ranking, the default), one agent turn with the
model (up to 4 steps): did it call skill_search, did a search return the needed skill, did it open it
with skill_view? The JSON is written after every request, so a slow model's partial run survives.

Usage: python bench/skill_search_model.py --model M [--api-base URL] [--limit N] [--part START:END] [--out FILE]
       python bench/skill_search_model.py --combine PART.json... [--out FILE]   (one result of a run in parts)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from routing_eval import real_skills  # noqa: E402
from routing_heldout import BUDGET, load_requests, vault_with  # noqa: E402

from hermes_fs.agent.prompt import skills_index  # noqa: E402
from hermes_fs.store.vault import Vault  # noqa: E402


@dataclass
class Row:
    request: str
    needed: str
    searched: bool = False
    queries: list[str] = field(default_factory=list)
    found: bool = False  # a skill_search result listed the needed skill
    opened: bool = False  # skill_view of the needed skill
    viewed: list[str] = field(default_factory=list)
    answer: str = ""
    error: str = ""
    seconds: float = 0.0


def one_turn(vault: Vault, request: str, needed: str, model: str, api_base: str | None, ws: Path) -> Row:
    from hermes_fs.agent.conversation import Conversation, ConversationOptions
    from hermes_fs.agent.model import LiteLLMModel, ModelSettings

    row = Row(request, needed)
    t0 = time.perf_counter()
    try:
        m = LiteLLMModel(ModelSettings(model, api_base, timeout_s=900, max_tokens=300))
        with Conversation(vault, ConversationOptions(source="run", workspace=ws, max_steps=4), model=m) as conv:
            turn = conv.ask(request)
            row.answer = turn.answer[:400]
            for msg in conv.transcript.messages:
                for call in msg.get("tool_calls") or []:
                    name, args = call["function"]["name"], call["function"]["arguments"]
                    if name == "skill_search":
                        row.searched = True
                        row.queries.append(args[:200])
                    if name == "skill_view":
                        row.viewed.append(args[:200])
                        row.opened |= needed in args
                if msg["role"] == "tool" and msg.get("name") == "skill_search":
                    row.found |= f"- {needed}:" in msg["content"]
    except Exception as exc:  # a model error is a result here, not a crash of the benchmark
        row.error = str(exc)[:200]
    row.seconds = round(time.perf_counter() - t0, 1)
    return row


def totals(rows: list[Row]) -> dict:
    n = max(1, len(rows))
    return {"requests": len(rows), "called_skill_search": sum(r.searched for r in rows),
            "search_returned_needed": sum(r.found for r in rows), "opened_needed": sum(r.opened for r in rows),
            "errors": sum(bool(r.error) for r in rows),
            "rates": {"called_skill_search": round(sum(r.searched for r in rows) / n, 3),
                      "opened_needed": round(sum(r.opened for r in rows) / n, 3)}}


def combine(paths: list[str], out: str) -> dict:
    """The parts of one run (`--part`) as one result; a request measured twice counts once, its latest."""
    parts = [json.loads(Path(p).read_text()) for p in paths]
    by_request = {r["request"]: r for part in parts for r in part["rows"]}
    rows = [Row(**r) for r in by_request.values()]
    data = {"model": parts[0]["model"], "skills": parts[0]["skills"], "budget_chars": parts[0]["budget_chars"],
            **totals(rows), "planned": parts[0]["planned"], "complete": len(rows) == parts[0]["planned"],
            "command": "python bench/skill_search_model.py --combine " + " ".join(paths),
            "parts": [part["command"] for part in parts], "rows": [asdict(r) for r in rows]}
    Path(out).write_text(json.dumps(data, indent=2) + "\n")
    print(f"of {len(rows)} requests the index missed: called skill_search {data['called_skill_search']}, "
          f"a search returned the skill {data['search_returned_needed']}, opened it {data['opened_needed']}")
    return data


def main(argv: list[str] | None = None) -> dict:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--combine"]:
        rest = args[1:]
        out = rest[rest.index("--out") + 1] if "--out" in rest else str(HERE / "results" / "skill_search_model.json")
        return combine([a for i, a in enumerate(rest) if a != "--out" and (i == 0 or rest[i - 1] != "--out")], out)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--api-base")
    p.add_argument("--limit", type=int, default=20, help="most missed requests to try")
    p.add_argument("--part", help="START:END, the requests of this part (0-based, of the missed ones): a slow "
                   "model's run in parts, joined with --combine")
    p.add_argument("--out", default=str(HERE / "results" / "skill_search_model.json"))
    a = p.parse_args(args)
    if a.api_base:
        os.environ.setdefault("OPENAI_API_KEY", "local")
    real = real_skills()
    cases = load_requests()
    command = "python bench/skill_search_model.py " + " ".join(args)
    rows: list[Row] = []

    def write(done: bool) -> dict:
        data = {"model": a.model, "skills": 1000, "budget_chars": BUDGET, **totals(rows),
                "planned": planned, "part": a.part, "complete": done, "command": command, "rows": [asdict(r) for r in rows]}
        Path(a.out).write_text(json.dumps(data, indent=2) + "\n")
        return data

    with tempfile.TemporaryDirectory() as tmp:
        root = vault_with(Path(tmp) / "v1000", real, {n for _q, n in cases}, 1000)
        (root / "hermes.yaml").write_text(yaml.safe_dump({"model": a.model, **({"api_base": a.api_base} if a.api_base else {}),
                                                          "sandbox": {"backend": "none"}}))
        vault = Vault(root)
        missed = [(q, n) for q, n in cases if n not in skills_index(vault, q, BUDGET, semantic=False).shown][: a.limit]
        planned = len(missed)
        if a.part:
            start, end = (int(x) if x else None for x in a.part.split(":"))
            missed = missed[start:end]
        ws = Path(tmp) / "ws"
        ws.mkdir()
        for request, needed in missed:
            rows.append(one_turn(vault, request, needed, a.model, a.api_base, ws))
            r = rows[-1]
            print(f"  {needed:<28} searched={r.searched} found={r.found} opened={r.opened} {r.seconds}s {r.queries[:2]}",
                  flush=True)
            write(False)
    data = write(True)
    print(f"of {len(rows)} requests the index missed: called skill_search {data['called_skill_search']}, "
          f"a search returned the skill {data['search_returned_needed']}, opened it {data['opened_needed']}")
    return data


if __name__ == "__main__":
    main()
