"""Which sessions get an MCP server's tools (`mcp.servers.<name>.unattended`, default false), and
what sub-agents get of their parent's MCP tools: a real MCP server (the SDK's, tests/data), the
scripted model server, real Conversations of each source."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from test_mcp import configure_mcp

from hermes_fs.agent.conversation import Conversation, ConversationOptions
from hermes_fs.mind.sessions import Transcript

MISBEHAVING = Path(__file__).parent / "data" / "mcp_misbehaving_server.py"


def server(name: str, unattended: bool | None = None) -> str:
    extra = "" if unattended is None else f", unattended: {str(unattended).lower()}"
    return f"    {name}: {{command: {sys.executable}, args: [{MISBEHAVING}], timeout_s: 20, tools: [echo]{extra}}}\n"


def offered(request: dict) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools") or []}


def results(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


@pytest.mark.parametrize("source", ["gateway", "inbox", "webhook"])
def test_unattended_sessions_get_only_servers_allowed_unattended(agent_vault, model_server, tmp_path, source):
    """Default deny: a server without `unattended: true` is not there at all for a gateway chat,
    a cron job, an inbox request or a source this code does not know; a call to it is refused."""
    configure_mcp(agent_vault, server("kept") + server("open", unattended=True))
    model_server.add({"tool_calls": [("kept__echo", {"text": "hi"}), ("open__echo", {"text": "hi"})]},
                     {"content": "done"})
    with Conversation(agent_vault, ConversationOptions(source=source, workspace=tmp_path)) as c:
        c.ask("use both")
    names = offered(model_server.requests[0])
    assert "open__echo" in names and "kept__echo" not in names
    kept, opened = results(model_server.requests[1])
    assert kept.startswith("error: unknown tool 'kept__echo'")
    assert opened == "echo: hi"


@pytest.mark.parametrize("source", ["run", "acp"])
def test_attended_sessions_get_every_server(agent_vault, model_server, tmp_path, source):
    configure_mcp(agent_vault, server("kept") + server("denied", unattended=False))
    model_server.add({"tool_calls": [("kept__echo", {"text": "a"}), ("denied__echo", {"text": "b"})]},
                     {"content": "done"})
    with Conversation(agent_vault, ConversationOptions(source=source, workspace=tmp_path)) as c:
        c.ask("use both")
    assert {"kept__echo", "denied__echo"} <= offered(model_server.requests[0])
    assert results(model_server.requests[1]) == ["echo: a", "echo: b"]


def test_a_cron_job_gets_no_server_unless_allowed_and_may_not_name_one(agent_vault, model_server):
    from hermes_fs.mind.jobs import load_jobs
    from hermes_fs.service.cron_runner import run_job

    configure_mcp(agent_vault, server("kept"))
    cron = agent_vault.root / "cron"
    (cron / "named.md").write_text("---\nschedule: every 1h\nmcp: [kept]\n---\nuse it\n")
    (cron / "plain.md").write_text("---\nschedule: every 1h\n---\nuse whatever you have\n")
    jobs, errors = load_jobs(agent_vault.files, agent_vault.config)
    assert len(errors) == 1 and "may not run unattended" in str(errors[0]) and "mcp.servers.kept" in str(errors[0])
    model_server.add({"content": "nothing to use"})
    meta = run_job(agent_vault, {j.name: j for j in jobs}["plain"], datetime.now(UTC))
    assert meta.status == "ok"
    assert not any(n.startswith("kept__") for n in offered(model_server.requests[0]))


def test_sub_agents_get_a_subset_of_the_parents_mcp_tools(agent_vault, model_server, tmp_path):
    """A sub-agent gets the MCP tools its task names (from its own copy of the server), none it
    does not name, and never one its parent lacks: in a gateway chat the server not allowed
    unattended is out of reach below as above."""
    configure_mcp(agent_vault, server("kept") + server("open", unattended=True))
    def sub(body):  # the two sub-agents ask in parallel, so in any order
        last = body["messages"][-1]
        if last["role"] == "tool":
            return {"content": "sub echoed"}
        if last["content"] == "echo it":
            return {"tool_calls": [("open__echo", {"text": "from below"})]}
        return {"content": "read nothing"}

    model_server.add(
        {"tool_calls": [("delegate", {"tasks": [{"goal": "echo it", "tools": ["open__echo"]},
                                                {"goal": "just read", "tools": ["read_file"]}]})]},
        sub, sub, sub, {"content": "echoed"},
        {"tool_calls": [("delegate", {"tasks": [{"goal": "sneak", "tools": ["kept__echo"]}]})]},
        {"content": "refused"})
    with Conversation(agent_vault, ConversationOptions(source="gateway", workspace=tmp_path)) as c:
        c.ask("split it")
        c.ask("now the other server")
        parent = c.transcript.messages
    subs = [r for r in model_server.requests if r["messages"][-1]["content"] in ("echo it", "just read")]
    by_goal = {r["messages"][-1]["content"]: offered(r) for r in subs}
    assert by_goal["echo it"] == {"open__echo"}
    assert by_goal["just read"] == {"read_file"}
    echoed = [r for r in model_server.requests if "echo: from below" in results(r)]
    assert echoed, "the sub-agent's MCP call reached the server"
    delegated = [m["content"] for m in parent if m["role"] == "tool"]
    assert "sub echoed" in delegated[0] and "read nothing" in delegated[0]
    assert delegated[1].startswith("error: task 1: kept__echo not available to a sub-agent")
    notes = [m["content"] for m in parent if m["role"] == "note" and m["content"].startswith("delegated")]
    assert len(notes) == 2  # the refused task never started
    sub = Transcript.load(agent_vault.root, next(n for n in notes if n.endswith("echo it")).split()[3])
    assert any(m["role"] == "tool" and m["content"] == "echo: from below" for m in sub.messages)


def test_a_sub_agent_of_an_attended_session_gets_the_mcp_tools_by_default(agent_vault, model_server, tmp_path):
    configure_mcp(agent_vault, server("kept"))
    model_server.add({"tool_calls": [("delegate", {"tasks": [{"goal": "anything"}]})]},
                     {"content": "sub done"}, {"content": "all done"})
    with Conversation(agent_vault, ConversationOptions(source="run", workspace=tmp_path)) as c:
        assert c.ask("go").answer == "all done"
    sub = next(r for r in model_server.requests if r["messages"][-1]["content"] == "anything")
    assert "kept__echo" in offered(sub) and "delegate" not in offered(sub)
