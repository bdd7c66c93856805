"""Bytes and tokens of system prompt + tool schemas sent with a first user message, for 0, 150 and
1,000 skills, as received by a local OpenAI-compatible server; and routing: how often the skill a
question needs is shown in that first request.

Targets: <= 8 KB with no skills, <= 12 KB at 150 and 1,000 skills (full descriptions), routing
>= 0.95. For scale: hermes-agent 0.19 sends ~46 KB with no skills and ~59 KB with 150.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HERMES_TEST_KEY", "bench")

from common import write_results  # noqa: E402
from model_server import ModelServer, configure_vault  # noqa: E402
from skill_corpus import questions, skill_library, skill_md  # noqa: E402

from hermes_fs.agent.conversation import Conversation, ConversationOptions  # noqa: E402
from hermes_fs.agent.model import import_litellm  # noqa: E402
from hermes_fs.store.vault import init_vault  # noqa: E402


def make_vault(tmp: Path, n_skills: int, server: ModelServer):
    tmp.mkdir(parents=True, exist_ok=True)
    vault = init_vault(tmp / f"v{n_skills}").vault
    for name in ("writing-skills", "reviewing-learned-changes"):
        for f in (vault.root / "skills" / name).iterdir():
            f.unlink()
        (vault.root / "skills" / name).rmdir()
    for name, desc in skill_library(n_skills):
        d = vault.root / "skills" / name
        d.mkdir(parents=True)
        (d / "SKILL.md").write_text(skill_md(name, desc))
    configure_vault(vault.root, server)
    vault._config = None
    return vault


def first_request(vault, server: ModelServer, question: str) -> dict:
    server.add({"content": "ok"})
    with Conversation(vault, ConversationOptions(source="run", workspace=vault.root.parent)) as c:
        c.ask(question)
    return server.requests[-1]


BIN = Path(sys.executable).parent
MCP_SERVERS = (f"mcp:\n  servers:\n    time: {{command: {BIN / 'mcp-server-time'}, args: [--local-timezone, UTC]}}\n"
               f"    fetch: {{command: {BIN / 'mcp-server-fetch'}}}\n")


def measure(n_skills: int, server: ModelServer, tmp: Path, mcp: bool = False) -> dict:
    litellm = import_litellm()
    vault = make_vault(tmp / ("mcp" if mcp else "plain"), n_skills, server)
    if mcp:  # two reference MCP servers: their tool schemas go out with every turn
        (vault.root / "hermes.yaml").write_text((vault.root / "hermes.yaml").read_text() + MCP_SERVERS)
        vault._config = None
    req = first_request(vault, server, "Hello, what can you do?")
    system = req["messages"][0]["content"]
    overhead = {"system": system, "tools": req["tools"]}
    size = len(json.dumps(overhead).encode())
    tokens = litellm.token_counter(model="gpt-4o-mini", messages=[req["messages"][0]]) + \
        litellm.token_counter(model="gpt-4o-mini", text=json.dumps(req["tools"]))
    row = {"skills": n_skills, "mcp_servers": 2 if mcp else 0, "bytes": size, "system_bytes": len(system.encode()),
           "tool_schema_bytes": len(json.dumps(req["tools"]).encode()), "tokens": tokens}
    if n_skills and not mcp:
        lib = skill_library(n_skills)
        qs = questions(lib)
        hits = 0
        misses = []
        for q, needed in qs:
            req = first_request(vault, server, q)
            shown = f"- {needed}:" in req["messages"][0]["content"]
            hits += shown
            if not shown:
                misses.append(needed)
        row.update(routing_questions=len(qs), routing_hits=hits, routing=hits / len(qs), routing_misses=misses)
        skills_part = req["messages"][0]["content"].split("# Skills", 1)[1]
        descs = [ln for ln in skills_part.splitlines() if ln.startswith("- ")]
        row["skills_shown"] = len(descs)
        row["full_descriptions"] = all(any(ln == f"- {n}: {d}" for n, d in lib) for ln in descs)
    return row


def main() -> dict:
    server = ModelServer()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (0, 150, 1000):
            row = measure(n, server, Path(tmp))
            rows.append(row)
            print(f"skills={n:<5} bytes={row['bytes']:<6} tokens={row['tokens']:<5} "
                  + (f"routing={row['routing']:.3f} ({row['routing_hits']}/{row['routing_questions']}) full_desc={row['full_descriptions']}" if n else ""))
        for n in (0, 150):
            row = measure(n, server, Path(tmp), mcp=True)
            rows.append(row)
            print(f"skills={n:<5} + 2 MCP servers (time, fetch): bytes={row['bytes']:<6} tokens={row['tokens']:<5} "
                  f"(tool schemas {row['tool_schema_bytes']} B)")
    server.close()
    result = {"rows": rows, "targets": {"bytes_no_skills": 8192, "bytes_with_skills": 12288, "routing": 0.95},
              "baseline_hermes_agent_0_19": {"bytes_no_skills": 46000, "bytes_150_skills": 59000}}
    write_results("prompt_overhead", result)
    return result


if __name__ == "__main__":
    main()
