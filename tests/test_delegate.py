"""The `delegate` tool with the scripted model server: sub-agents in sessions of their own linked
from the parent's, tool subsets never wider than the parent's, no delegate below max_depth, a
timeout that stops them all."""

from __future__ import annotations

import threading

from hermes_fs.agent.conversation import Conversation, ConversationOptions
from hermes_fs.mind.sessions import Transcript


def tool_names(request: dict) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools") or []}


def set_delegation(vault, text: str) -> None:
    with open(vault.root / "hermes.yaml", "a") as f:
        f.write(text)
    vault._config = None


def test_sub_agents_run_in_their_own_sessions_with_a_tool_subset(agent_vault, model_server, tmp_path):
    v = agent_vault
    model_server.add(
        {"tool_calls": [("delegate", {"tasks": [{"goal": "read the notes", "tools": ["read_file"]},
                                                {"goal": "summarise the plan"}]})]},
        {"content": "sub-agent answer"}, {"content": "sub-agent answer"},
        {"content": "both done"})
    with Conversation(v, ConversationOptions(source="run", workspace=tmp_path)) as c:
        result = c.ask("do two things at once")
        parent = c.id
    assert result.answer == "both done"
    first, subs, last = model_server.requests[0], model_server.requests[1:3], model_server.requests[3]
    assert "delegate" in tool_names(first)
    assert sorted(len(tool_names(r)) for r in subs)[0] == 1  # the read_file-only sub-agent
    assert {"read_file"} in [tool_names(r) for r in subs]
    assert all("delegate" not in tool_names(r) for r in subs)  # max_depth 1: no delegate below the top
    assert all(r["messages"][-1]["content"] in ("read the notes", "summarise the plan") for r in subs)
    tool_result = next(m for m in last["messages"] if m["role"] == "tool")["content"]
    assert "task 1 (session " in tool_result and "task 2 (session " in tool_result
    assert tool_result.count("sub-agent answer") == 2
    t = Transcript.load(v.root, parent)
    linked = [m["content"].split()[3] for m in t.messages if m["role"] == "note" and m["content"].startswith("delegated")]
    assert len(linked) == 2
    for sid in linked:
        sub = Transcript.load(v.root, sid)
        assert sub.meta["parent"] == parent
        assert [m["content"] for m in sub.messages if m["role"] == "assistant"] == ["sub-agent answer"]
        assert v.git.log(grep="^session: ", limit=20)  # committed like any session
        assert sid in tool_result


def test_a_task_asking_for_more_tools_than_the_parent_has_is_refused(agent_vault, model_server, tmp_path):
    model_server.add({"tool_calls": [("delegate", {"tasks": [{"goal": "run it", "tools": ["shell"]}]})]},
                     {"content": "could not"})
    with Conversation(agent_vault, ConversationOptions(source="run", workspace=tmp_path,
                                                       tools=["read_file", "memory"])) as c:
        c.ask("go")
        messages = c.transcript.messages
    refusal = next(m for m in messages if m["role"] == "tool")["content"]
    assert refusal.startswith("error") and "shell not available" in refusal
    assert len(model_server.requests) == 2  # no sub-agent ever asked the model
    assert tool_names(model_server.requests[0]) == {"read_file", "memory", "delegate"}


def test_malformed_task_lists_are_refused(agent_vault, model_server, tmp_path):
    set_delegation(agent_vault, "delegation:\n  max_tasks: 2\n")
    model_server.add({"tool_calls": [("delegate", {"tasks": "do everything"})]},
                     {"tool_calls": [("delegate", {"tasks": [{"goal": "a"}, {"goal": "b"}, {"goal": "c"}]})]},
                     {"tool_calls": [("delegate", {"tasks": [{"tools": ["memory"]}]})]},
                     {"content": "gave up"})
    with Conversation(agent_vault, ConversationOptions(source="run", workspace=tmp_path)) as c:
        c.ask("go")
        results = [m["content"] for m in c.transcript.messages if m["role"] == "tool"]
    assert [r.split(":")[0] for r in results] == ["error"] * 3
    assert "at most 2" in results[1] and "needs a goal" in results[2]
    assert len(model_server.requests) == 4


def test_no_delegate_at_max_depth_zero(agent_vault, model_server, tmp_path):
    set_delegation(agent_vault, "delegation:\n  max_depth: 0\n")
    model_server.add({"content": "alone"})
    with Conversation(agent_vault, ConversationOptions(source="run", workspace=tmp_path)) as c:
        c.ask("go")
    assert "delegate" not in tool_names(model_server.requests[0])


def test_the_timeout_stops_every_sub_agent(agent_vault, model_server, tmp_path):
    set_delegation(agent_vault, "delegation:\n  timeout_s: 1\n")
    hold = threading.Event()
    model_server.add({"tool_calls": [("delegate", {"tasks": [{"goal": "slow one"}]})]},
                     {"content": "too late", "wait": hold}, {"content": "stopped them"})
    try:
        with Conversation(agent_vault, ConversationOptions(source="run", workspace=tmp_path)) as c:
            result = c.ask("go")
            tool_result = next(m for m in c.transcript.messages if m["role"] == "tool")["content"]
    finally:
        hold.set()
    assert result.answer == "stopped them"
    assert "FAILED" in tool_result and "stopped" in tool_result and "too late" not in tool_result


def test_refine_sees_the_sub_agents_sessions(agent_vault, model_server, tmp_path):
    from hermes_fs import RefineOptions, refine

    model_server.add({"tool_calls": [("delegate", {"tasks": [{"goal": "check the deploy notes"}]})]},
                     {"content": "the deploy uses blue-green switching"}, {"content": "done"})
    with Conversation(agent_vault, ConversationOptions(source="run", workspace=tmp_path)) as c:
        c.ask("look into the deploy")
        parent = c.id
    seen = len(model_server.requests)
    model_server.add({"content": "Summary: nothing to keep"})
    refine(agent_vault, RefineOptions(session=parent))
    brief = "\n".join(str(m.get("content")) for m in model_server.requests[seen]["messages"])
    assert "A sub-agent's session" in brief and "blue-green switching" in brief
    assert "TASK: check the deploy notes" in brief and "USER: check the deploy notes" not in brief


def test_interrupting_the_parent_stops_its_sub_agents(agent_vault, model_server, tmp_path):
    hold = threading.Event()
    model_server.add({"tool_calls": [("delegate", {"tasks": [{"goal": "slow one"}, {"goal": "slow two"}]})]},
                     {"content": "too late", "wait": hold}, {"content": "too late", "wait": hold})
    outcome: list = []
    try:
        with Conversation(agent_vault, ConversationOptions(source="run", workspace=tmp_path)) as c:
            worker = threading.Thread(target=lambda: outcome.append(_ask(c, "go")))
            worker.start()
            for _ in range(400):  # both sub-agents are waiting on the model
                if len(model_server.requests) >= 3:
                    break
                threading.Event().wait(0.05)
            c.interrupt()
            worker.join(60)
            tool_result = next(m for m in c.transcript.messages if m["role"] == "tool")["content"]
    finally:
        hold.set()
    assert not worker.is_alive() and outcome == ["cancelled"]
    assert tool_result.count("FAILED") == 2 and "too late" not in tool_result


def _ask(c, text):
    from hermes_fs.agent.loop import TurnCancelled

    try:
        c.ask(text)
        return "answered"
    except TurnCancelled:
        return "cancelled"
