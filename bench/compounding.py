"""Does learning pay? Task families repeated, learning on vs off: model turns, tokens and success per task.

Each family is a task a person asks for again and again in other words ("publish the docs", "push
the docs site out"). A small tool in the workspace fails until it is called with the right flags,
and says which one is missing, one at a time: an agent that does not know the way learns it by
failing. With learning on, every finished task is reviewed (`refine`, lessons first, the default
structured path) and the change merged, so the procedure that worked is a skill the next task of
the family can open; with learning off the agent starts from nothing each time.

The model is either the scripted one (`--model scripted`, the default: the mechanics, the same
every run): as the agent, it opens a skill the index shows for the task and runs the command the
skill holds, else runs the tool bare and adds each flag the error asks for; as the reviewer, it
proposes the commands that ran as a procedure, exactly as lessons first asks. Or a real model
(`--model M --api-base URL`, e.g. the packaged 1.5B model): its own turns and its own proposals.

Usage: python bench/compounding.py [--model scripted|M] [--api-base URL] [--families 3] [--repeats 4] [--out FILE]
Writes bench/results/compounding.json (or --out); prints per family and mode: turns and tokens per
task, first task vs the rest, success.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]
os.environ.setdefault("HERMES_TEST_KEY", "bench")
os.environ.setdefault("HERMES_NO_AUTOSTART", "1")

import yaml  # noqa: E402
from model_server import ModelServer  # noqa: E402

from hermes_fs.agent.conversation import Conversation, ConversationOptions  # noqa: E402
from hermes_fs.learning import changes  # noqa: E402
from hermes_fs.learning.refine import RefineOptions, refine  # noqa: E402
from hermes_fs.store.provenance import Act  # noqa: E402
from hermes_fs.store.vault import init_vault  # noqa: E402


@dataclass
class Family:
    name: str  # the tool's subcommand
    flags: list[str]  # what the tool asks for, one at a time
    asks: list[str]  # the same task in other words, one per repeat


FAMILIES = [
    Family("publish-docs", ["--profile docs", "--region eu-west-3", "--delete"],
           ["Publish the docs site.", "Push the documentation out to the bucket again please.",
            "The docs changed, get them live.", "Can you ship the new docs?", "Docs need publishing."]),
    Family("db-backup", ["--no-owner", "--format custom", "--compress 9"],
           ["Back up the orders database.", "Take a fresh dump of the orders db.",
            "I need a backup of orders before the migration.", "Snapshot the orders database.", "Dump orders."]),
    Family("rotate-logs", ["--keep 7", "--gzip"],
           ["Rotate the app logs.", "The log folder is huge, rotate it.", "Do the log rotation.",
            "Logs again: rotate them.", "Rotate logs please."]),
]

TOOL = r'''#!/usr/bin/env python3
"""The workspace's task tool: fails until called with every flag its task needs, naming one at a time."""
import json, sys
need = json.loads(open(__file__ + ".json").read())
args = " ".join(sys.argv[1:])
task = sys.argv[1] if len(sys.argv) > 1 else ""
if task not in need:
    print(f"error: unknown task {task!r}"); sys.exit(2)
for flag in need[task]:
    if flag not in args:
        print(f"error: {task} refused: add {flag}"); sys.exit(1)
print(f"ok: {task} done")
'''


@dataclass
class Task:
    family: str
    learning: bool
    repeat: int
    ok: bool
    turns: int  # model calls the task took
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    skill_opened: bool
    learned: list[str] = field(default_factory=list)  # files the review after it changed


# -- the scripted model ---------------------------------------------------------------------------------
def scripted(body: dict) -> dict:
    msgs = body["messages"]
    system = msgs[0]["content"]
    if system.startswith("You read a conversation"):  # lessons first: the commands that ran, as a procedure
        convo = msgs[1]["content"]
        ran = re.findall(r'"command": "([^"]+)"', convo)
        asked = re.search(r"^USER: (.*)$", convo, re.M)
        if not ran or not asked:
            return {"content": json.dumps({"lessons": []})}
        lesson = {"quote": asked.group(1).strip(), "kind": "procedure",
                  "lesson": f"{asked.group(1).strip().rstrip('.?!')}: run {ran[-1]}"[:160], "steps": ran[-1:]}
        return {"content": json.dumps({"lessons": [lesson]})}
    if system.startswith(("A memory entry", "What a person said")):
        return {"content": json.dumps({"replaces": False, "still_holds": True})}
    last = msgs[-1]
    if last["role"] == "tool" and re.search(r"^\s*\|?\s*ok: ", str(last["content"]), re.M):
        return {"content": "Done."}
    ran = [json.loads(c["function"]["arguments"]).get("command", "") for m in msgs if m["role"] == "assistant"
           for c in m.get("tool_calls") or [] if c["function"]["name"] == "shell"]
    viewed = [m for m in msgs if m["role"] == "tool" and "## Steps" in str(m.get("content"))]
    if viewed:
        cmd = re.search(r"`(\./tasktool [^`]+)`", str(viewed[-1]["content"]))
        if cmd and cmd.group(1) not in ran:
            return {"tool_calls": [("shell", {"command": cmd.group(1)})]}
    task = _task_of(msgs)
    index = system.split("# Skills", 1)[1] if "# Skills" in system else ""
    skill = next((n for n, d in re.findall(r"^- ([a-z0-9-]+): (.*)$", index, re.M) if task and task in d), None)
    if skill and not any(m["role"] == "tool" and m.get("name") == "skill_view" for m in msgs):
        return {"tool_calls": [("skill_view", {"name": skill})]}
    if not ran:
        return {"tool_calls": [("shell", {"command": f"./tasktool {task}"})]}
    err = re.search(r"add (--\S+(?: \S+)?)", str(last.get("content")))
    if last["role"] == "tool" and err:
        return {"tool_calls": [("shell", {"command": f"{ran[-1]} {err.group(1)}"})]}
    return {"content": "I could not finish it."}


def _task_of(msgs: list[dict]) -> str:
    user = next(m["content"] for m in msgs if m["role"] == "user")
    for f in FAMILIES:
        if any(a == user.strip() for a in f.asks):
            return f.name
    return ""


# -- one run -------------------------------------------------------------------------------------------
def make_vault(root: Path, model: str, api_base: str, workspace: Path) -> object:
    vault = init_vault(root).vault
    (root / "hermes.yaml").write_text(yaml.safe_dump({
        "model": model, "api_base": api_base, "api_key_env": "HERMES_TEST_KEY",
        "sandbox": {"backend": "local"}, "refine": {"mode": "structured", "policy": "review", "every_turns": 0}}))
    vault.git.commit_paths(["hermes.yaml"], "bench: compounding", Act.person())
    vault._config = None
    tool = workspace / "tasktool"
    tool.write_text(TOOL)
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    (workspace / "tasktool.json").write_text(json.dumps({f.name: f.flags for f in FAMILIES}))
    return vault


def run(model: str, api_base: str, families: list[Family], repeats: int, learning: bool, server) -> list[Task]:
    out = []
    with tempfile.TemporaryDirectory(prefix="hermes-compounding-") as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        vault = make_vault(Path(tmp) / "vault", model, api_base, ws)
        for r in range(repeats):
            for f in families:
                n0 = len(server.requests) if server else 0
                t0 = time.perf_counter()
                with Conversation(vault, ConversationOptions(source="run", workspace=ws, max_steps=12)) as c:
                    result = c.ask(f.asks[r % len(f.asks)])
                    sid = c.id
                seconds = time.perf_counter() - t0
                usage = result.usage if hasattr(result, "usage") else None
                reqs = server.requests[n0:] if server else []
                transcript = next((vault.root / "sessions").rglob(f"{sid}.md")).read_text()
                task = Task(f.name, learning, r + 1, f"ok: {f.name} done" in transcript,
                            len(reqs) or transcript.count("<!-- hermes:assistant -->"),
                            sum(_tokens(q) for q in reqs) if reqs else getattr(usage, "prompt_tokens", 0),
                            getattr(usage, "completion_tokens", 0), round(seconds, 2),
                            "skill_view" in transcript)
                if learning:
                    outcome = refine(vault, RefineOptions(session=sid, mode="structured", policy="review"))
                    if outcome.branch:
                        changes.merge(vault.git, outcome.branch)
                        task.learned = outcome.files
                out.append(task)
                print(f"{f.name:<14} learning {'on ' if learning else 'off'} #{r + 1}: ok {task.ok} turns {task.turns} "
                      f"prompt tokens {task.prompt_tokens} skill {task.skill_opened} learned {task.learned}", flush=True)
    return out


def _tokens(request: dict) -> int:
    """The prompt's size in tokens, estimated (4 characters a token) when the server reports none."""
    return sum(len(str(m.get("content") or "")) for m in request["messages"]) // 4


def summarize(tasks: list[Task]) -> dict:
    def avg(xs):
        return round(sum(xs) / len(xs), 2) if xs else None

    out = {}
    for learning in (False, True):
        mine = [t for t in tasks if t.learning is learning]
        later = [t for t in mine if t.repeat > 1]
        out["on" if learning else "off"] = {
            "tasks": len(mine), "success": avg([t.ok for t in mine]),
            "turns_per_task": avg([t.turns for t in mine]), "turns_first": avg([t.turns for t in mine if t.repeat == 1]),
            "turns_later": avg([t.turns for t in later]), "prompt_tokens_per_task": avg([t.prompt_tokens for t in mine]),
            "prompt_tokens_later": avg([t.prompt_tokens for t in later]),
            "skills_opened_later": avg([t.skill_opened for t in later])}
    off, on = out["off"], out["on"]
    if off["turns_later"] and on["turns_later"]:
        out["later_turns_ratio_on_vs_off"] = round(on["turns_later"] / off["turns_later"], 3)
    if off["prompt_tokens_later"] and on["prompt_tokens_later"]:
        out["later_tokens_ratio_on_vs_off"] = round(on["prompt_tokens_later"] / off["prompt_tokens_later"], 3)
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="scripted", help="scripted, or a litellm model string")
    p.add_argument("--api-base", help="the real model's OpenAI-compatible server")
    p.add_argument("--families", type=int, default=3)
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--out")
    a = p.parse_args(argv)
    families = FAMILIES[: a.families]
    server = ModelServer(responder=scripted) if a.model == "scripted" else None
    model, base = ("openai/test-model", server.api_base) if server else (a.model, a.api_base)
    try:
        tasks = run(model, base, families, a.repeats, False, server) + run(model, base, families, a.repeats, True, server)
    finally:
        if server:
            server.close()
    data = {"summary": summarize(tasks), "tasks": [asdict(t) for t in tasks], "model": a.model,
            "load_average": list(os.getloadavg()),
            "command": "python bench/compounding.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    out = Path(a.out) if a.out else HERE / "results" / "compounding.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")
    print(json.dumps(data["summary"], indent=2))
    return data


if __name__ == "__main__":
    main()
