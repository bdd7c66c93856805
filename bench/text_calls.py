"""Do tool-needing requests run their tool on a real (small, local) model, with `tools.text_calls`
off (before) and auto (after)? Each task is one agent turn in a fresh vault with `auto`, cut after its
first model call (the call that should use the tool; the tools it asks for still run). The same
reply is judged both ways: with `off` only a native tool call runs (a call written as text is
printed as the answer), so "before" counts the tasks whose needed tool ran through a native call and
"after" those whose needed tool ran at all. One model call per task instead of two: on a loaded
2-core machine the local model writes well under one token a second. Each first reply's raw text is
kept in the JSON (replayed by tests/test_text_calls.py).

Usage: python bench/text_calls.py [--model M] [--api-base URL] [--limit N] [--steps N] [--out FILE]
Defaults: the local Qwen2.5-Coder-1.5B on llama.cpp (tools/local-model.sh in the shared tools).
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

# (request, the tool it needs, a word the tool's call must carry in its arguments)
TASKS = [
    ("Read the file notes/todo.md and tell me what is on it.", "read_file", "todo"),
    ("Remember that I prefer tabs over spaces.", "memory", "tabs"),
    ("Search my skills for anything about writing skills.", "skill_search", ""),
    ("Write a file notes/ideas.md containing the line 'learn rust'.", "write_file", "ideas"),
    ("Show me the skill named writing-skills.", "skill_view", "writing-skills"),
    ("Search my past conversations for 'deploy'.", "session_search", "deploy"),
    ("Add to my memory that my cat is called Miso.", "memory", "Miso"),
    ("What does my file notes/shopping.md say?", "read_file", "shopping"),
    ("Create the file notes/hello.md with the text 'hello world'.", "write_file", "hello"),
    ("Find skills about reviewing learned changes.", "skill_search", ""),
    ("Open notes/todo.md and count the items in it.", "read_file", "todo"),
    ("Save in memory that I work at Acme Corp.", "memory", "Acme"),
]


@dataclass
class Row:
    request: str
    tool: str
    ran: bool = False  # text_calls auto: the needed tool ran without an error
    ran_native: bool = False  # ... through a native tool call: what runs with text_calls off too
    calls: list[str] = field(default_factory=list)
    first_reply: str = ""  # the model's first reply, raw, before any reading of text calls
    answer: str = ""
    error: str = ""
    seconds: float = 0.0


def make_vault(root: Path, model: str, api_base: str, mode: str):
    from hermes_fs import init_vault
    from hermes_fs.store.provenance import Act

    vault = init_vault(root).vault
    (root / "hermes.yaml").write_text(f"model: {model}\napi_base: {api_base}\nsandbox:\n  backend: none\n"
                                      f"tools:\n  text_calls: {mode}\n")
    (root / "notes").mkdir(exist_ok=True)
    (root / "notes/todo.md").write_text("- buy oat milk\n- call the plumber\n- renew the passport\n")
    (root / "notes/shopping.md").write_text("apples, rice, coffee\n")
    vault.git.commit_paths(["hermes.yaml", "notes/todo.md", "notes/shopping.md"], "bench: setup", Act.person())
    vault._config = None
    return vault


def one_task(vault, request: str, tool: str, word: str, model: str, api_base: str, ws: Path,
             steps: int = 1) -> Row:
    from hermes_fs.agent.conversation import Conversation, ConversationOptions
    from hermes_fs.agent.model import LiteLLMModel, ModelSettings

    class Recording(LiteLLMModel):
        replies: list[str] = []

        def complete(self, messages, tools, response_format=None, on_text=None):
            reply = super().complete(messages, tools, response_format, on_text)
            self.replies.append(reply.content or "" if not reply.tool_calls else
                                f"(native tool calls: {[c.name for c in reply.tool_calls]}) {reply.content or ''}")
            return reply

    row = Row(request, tool)
    t0 = time.perf_counter()
    model_obj = Recording(ModelSettings(model, api_base, timeout_s=900, max_tokens=120))
    model_obj.replies = []
    try:
        with Conversation(vault, ConversationOptions(source="run", workspace=ws, max_steps=steps), model=model_obj) as c:
            row.answer = c.ask(request).answer[:400]
            results = {m.get("tool_call_id"): m["content"] for m in c.transcript.messages if m["role"] == "tool"}
            for msg in c.transcript.messages:
                for call in msg.get("tool_calls") or []:
                    name, args = call["function"]["name"], call["function"]["arguments"]
                    row.calls.append(f"{name}({args[:120]})")
                    ok = not str(results.get(call["id"], "error")).startswith("error")
                    done = name == tool and ok and word.lower() in args.lower()
                    row.ran |= done
                    row.ran_native |= done and not call["id"].startswith("text_call_")
    except Exception as exc:  # a model error is a result here, not a crash of the benchmark
        row.error = str(exc)[:200]
    row.first_reply = (model_obj.replies or [""])[0][:1000]
    row.seconds = round(time.perf_counter() - t0, 1)
    return row


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="openai/qwen2.5-coder-1.5b-instruct")
    p.add_argument("--api-base", default="http://127.0.0.1:8090/v1")
    p.add_argument("--limit", type=int, default=len(TASKS))
    p.add_argument("--steps", type=int, default=1, help="model calls per task (1: the call that should use the tool)")
    p.add_argument("--out", default=str(HERE / "results" / "text_calls.json"))
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("OPENAI_API_KEY", "local")
    command = "python bench/text_calls.py " + " ".join(sys.argv[1:] if argv is None else argv)
    rows: list[Row] = []

    def write(done: bool) -> dict:
        data = {"model": a.model, "tasks": len(rows), "planned": min(a.limit, len(TASKS)),
                "ran_their_tool": {"off": sum(r.ran_native for r in rows), "auto": sum(r.ran for r in rows)},
                "errors": sum(bool(r.error) for r in rows), "complete": done, "command": command,
                "date": time.strftime("%Y-%m-%d"), "rows": [asdict(r) for r in rows]}
        Path(a.out).write_text(json.dumps(data, indent=2) + "\n")
        return data

    with tempfile.TemporaryDirectory() as tmp:
        for i, (request, tool, word) in enumerate(TASKS[: a.limit]):
            vault = make_vault(Path(tmp) / f"v{i}", a.model, a.api_base, "auto")
            ws = Path(tmp) / f"ws{i}"
            ws.mkdir()
            row = one_task(vault, request, tool, word, a.model, a.api_base, ws, a.steps)
            rows.append(row)
            print(f"  {tool:<14} off={row.ran_native!s:<5} auto={row.ran!s:<5} {row.seconds:>6}s {row.calls[:2]} "
                  f"{row.error[:80]}", flush=True)
            write(False)
    data = write(True)
    print(f"of {data['tasks']} tool-needing tasks, ran their tool: text_calls off {data['ran_their_tool']['off']}, "
          f"auto {data['ran_their_tool']['auto']}")
    return data


if __name__ == "__main__":
    main()
