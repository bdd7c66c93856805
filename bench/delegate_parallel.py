"""Wall time of one `delegate` call handing out 3 tasks whose sub-agents each wait 1 s for the
(scripted, local) model, with delegation.max_parallel 1 and 3: the sub-agents run in parallel
when allowed (the figure the tests never assert). Usage: python bench/delegate_parallel.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HERMES_TEST_KEY", "bench")

from common import write_results  # noqa: E402
from model_server import ModelServer, configure_vault  # noqa: E402

from hermes_fs.agent.conversation import Conversation, ConversationOptions  # noqa: E402
from hermes_fs.store.vault import init_vault  # noqa: E402

TASKS = 3
MODEL_WAIT_S = 1.0


def responder(request: dict) -> dict:
    """The top session delegates, then answers; each sub-agent's one request waits MODEL_WAIT_S."""
    messages = request["messages"]
    offered = {t["function"]["name"] for t in request.get("tools") or []}
    if "delegate" in offered:
        if any(m["role"] == "tool" for m in messages):
            return {"content": "all done"}
        tasks = [{"goal": f"part {i}"} for i in range(TASKS)]
        return {"tool_calls": [("delegate", {"tasks": tasks})]}
    return {"content": "sub-agent done", "delay": MODEL_WAIT_S}


def one_call(tmp: Path, parallel: int) -> float:
    server = ModelServer(responder=responder)
    try:
        vault = init_vault(tmp / f"v{parallel}").vault
        configure_vault(vault.root, server, f"delegation:\n  max_parallel: {parallel}\n")
        vault._config = None
        with Conversation(vault, ConversationOptions(source="run", workspace=tmp / "ws")) as c:
            t0 = time.monotonic()
            c.ask("three things")
            return time.monotonic() - t0
    finally:
        server.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        one_call(Path(tmp) / "warm", 3)  # litellm's import and first connection, not timed
        figures = {f"max_parallel_{p}_s": round(one_call(Path(tmp), p), 2) for p in (1, 3)}
    figures.update(tasks=TASKS, model_wait_s=MODEL_WAIT_S)
    print(json.dumps(figures, indent=2))
    write_results("delegate_parallel", figures)


if __name__ == "__main__":
    main()
