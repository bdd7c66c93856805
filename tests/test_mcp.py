"""MCP both ways, with real parts: the official SDK's client against `hermes-fs mcp` (stdio and
streamable HTTP), and reference servers from PyPI (mcp-server-time, mcp-server-fetch fetching from
a local HTTP server) as the agent's servers, called by the scripted model."""

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import git, wait_for

from hermes_fs.agent.conversation import Conversation, ConversationOptions

BIN = Path(sys.executable).parent
MISBEHAVING = Path(__file__).parent / "data" / "mcp_misbehaving_server.py"


def sdk_call(target, steps, client_name="claude-code", headers=None):
    """Run `steps(client)` with the SDK's own Client against `target` (stdio params or a URL)."""
    from mcp import Client
    from mcp.types import Implementation

    async def main():
        transport = target
        if headers:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            transport = streamable_http_client(target, http_client=httpx2.AsyncClient(headers=headers))
        async with Client(transport, client_info=Implementation(name=client_name, version="1")) as c:
            return await steps(c)

    return asyncio.run(main())


def stdio(vault):
    from mcp import StdioServerParameters

    return StdioServerParameters(command=str(BIN / "hermes-fs"), args=["--vault", str(vault.root), "mcp"],
                                 env={**os.environ})


# -- the server ----------------------------------------------------------------------------------
def test_server_over_stdio_tools_resources_and_commits(vault):
    async def steps(c):
        names = sorted(t.name for t in (await c.list_tools()).tools)
        added = await c.call_tool("memory", {"action": "add", "file": "USER.md", "text": "Prefers tabs (via MCP)."})
        escape = await c.call_tool("memory", {"action": "add", "file": "../hermes.yaml", "text": "x"})
        secret = await c.call_tool("memory", {"action": "add", "file": "MEMORY.md",
                                              "text": "key sk-ant-api03-" + "m" * 30})
        view = await c.call_tool("skill_view", {"name": "writing-skills"})
        found = await c.call_tool("skill_search", {"query": "write a skill"})
        uris = sorted(str(r.uri) for r in (await c.list_resources()).resources)
        user = (await c.read_resource("hermes://memory/USER.md")).contents[0].text
        return names, added, escape, secret, view, found, uris, user

    names, added, escape, secret, view, found, uris, user = sdk_call(stdio(vault), steps)
    assert names == ["memory", "refine", "session_search", "skill_manage", "skill_search", "skill_view"]
    assert not added.is_error and "ok: add in memory/USER.md" in added.content[0].text
    assert escape.is_error and "path escapes the vault" in escape.content[0].text
    assert secret.is_error and "secret" in secret.content[0].text and "sk-ant" not in secret.content[0].text
    assert "name: writing-skills" in view.content[0].text and "writing-skills" in found.content[0].text
    assert "hermes://memory/USER.md" in uris and "hermes://skills/writing-skills/SKILL.md" in uris
    assert "- Prefers tabs (via MCP)." in user
    log = git(vault, "log", "-1", "--format=%an|%s|%(trailers:only,unfold)").strip()
    assert log == "hermes-fs|memory: add in memory/USER.md|Hermes-Client: claude-code"
    assert "sk-ant" not in git(vault, "log", "-p", "--all")


@pytest.mark.slow
def test_server_refine_makes_a_branch_naming_the_client(agent_vault, model_server):
    model_server.add({"tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": "Deploys on Fridays are banned."})]},
                     {"content": "Summary: remember the deploy rule\n- memory/USER.md: no Friday deploys (because the user said so)"})

    async def steps(c):
        return await c.call_tool("refine", {"transcript": "USER: never deploy on Fridays\nASSISTANT: noted",
                                            "focus": "deploy rules"})

    r = sdk_call(stdio(agent_vault), steps, client_name="cursor")
    assert not r.is_error, r.content[0].text
    [branch] = agent_vault.git.branches("refine/")
    info = agent_vault.git.commit_info(branch.sha)
    assert info.trailers["Refine-Client"] == "cursor" and info.trailers["Refine-Focus"] == "deploy rules"
    reviewer_saw = model_server.requests[0]["messages"][1]["content"]
    assert "never deploy on Fridays" in reviewer_saw


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_over_http_needs_the_token(vault, run_cli):
    r = run_cli("--vault", str(vault.root), "mcp", "--http", "127.0.0.1:1")
    assert r.returncode == 1 and "HERMES_MCP_TOKEN" in r.stderr
    (vault.root / ".hermes" / "secrets.env").write_text("HERMES_MCP_TOKEN=Xq7pL2vR9sK4mN8tW3yB6hJ1cF5gD0zA-uE\n")
    port = free_port()
    proc = subprocess.Popen([str(BIN / "hermes-fs"), "--vault", str(vault.root), "mcp", "--http", f"127.0.0.1:{port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        import httpx2

        assert wait_for(lambda: _answers(port), 30)
        assert httpx2.post(url, json={}).status_code == 401  # no token: refused before MCP is spoken
        assert httpx2.post(url, json={}, headers={"Authorization": "Bearer wrong"}).status_code == 401

        async def steps(c):
            return sorted(t.name for t in (await c.list_tools()).tools)

        names = sdk_call(url, steps, headers={"Authorization": "Bearer Xq7pL2vR9sK4mN8tW3yB6hJ1cF5gD0zA-uE"})
        assert "memory" in names and "refine" in names
    finally:
        proc.terminate()
        proc.wait(10)


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


# -- the client ----------------------------------------------------------------------------------
class Page:
    """A local web page for mcp-server-fetch (never a host off this machine)."""

    def __init__(self, body: str):
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/release-notes"


def configure_mcp(vault, servers: str) -> None:
    text = (vault.root / "hermes.yaml").read_text() + f"mcp:\n  servers:\n{servers}"
    (vault.root / "hermes.yaml").write_text(text)
    vault._config = None


TIME = f"    time: {{command: {BIN / 'mcp-server-time'}, args: [--local-timezone, UTC]}}\n"
FETCH = f"    fetch: {{command: {BIN / 'mcp-server-fetch'}, args: [--ignore-robots-txt, --allow-private-ips], timeout_s: 30}}\n"


def test_agent_uses_reference_servers_time_and_fetch(agent_vault, model_server, tmp_path):
    page = Page("<html><body><h1>Release 4.2</h1><p>Adds entry-aware merges.</p></body></html>")
    configure_mcp(agent_vault, TIME + FETCH)
    model_server.add({"tool_calls": [("time__get_current_time", {"timezone": "UTC"}),
                                     ("fetch__fetch", {"url": page.url})]},
                     {"content": "Done."})
    with Conversation(agent_vault, ConversationOptions(source="run", workspace=tmp_path)) as c:
        assert c.ask("what time is it, and what is new?").answer == "Done."
    first = model_server.requests[0]
    names = {t["function"]["name"] for t in first["tools"]}
    assert {"time__get_current_time", "time__convert_time", "fetch__fetch", "memory"} <= names
    results = [m["content"] for m in model_server.requests[1]["messages"] if m["role"] == "tool"]
    assert '"timezone": "UTC"' in results[0]
    assert "Release 4.2" in results[1] and "entry-aware merges" in results[1]
    page.server.shutdown()


def test_allow_list_and_misbehaving_servers_are_tool_errors(agent_vault, model_server, tmp_path):
    py = sys.executable
    configure_mcp(agent_vault,
                  f"    odd: {{command: {py}, args: [{MISBEHAVING}], timeout_s: 5, tools: [echo, crash, hang]}}\n"
                  f"    junk: {{command: {py}, args: [{MISBEHAVING}, garbage], timeout_s: 3}}\n"
                  "    missing: {command: /nonexistent/mcp-server, timeout_s: 3}\n"
                  f"    limited: {{command: {BIN / 'mcp-server-time'}, tools: [convert_time]}}\n")
    model_server.add({"tool_calls": [("odd__echo", {"text": "hi"}), ("odd__hang", {}), ("junk__anything", {}),
                                     ("missing__x", {}), ("limited__get_current_time", {}), ("odd__crash", {}),
                                     ("odd__echo", {"text": "after the crash"})]},
                     {"content": "The session goes on."})
    t0 = time.monotonic()
    with Conversation(agent_vault, ConversationOptions(source="run", workspace=tmp_path)) as c:
        assert c.ask("try them all").answer == "The session goes on."
    assert time.monotonic() - t0 < 120  # bounded by the timeouts, never a hang (not a timing figure)
    names = {t["function"]["name"] for t in model_server.requests[0]["tools"]}
    assert "limited__convert_time" in names and "limited__get_current_time" not in names
    r = [m["content"] for m in model_server.requests[1]["messages"] if m["role"] == "tool"]
    assert r[0] == "echo: hi"
    assert r[1].startswith("error:") and "did not answer within 5 s" in r[1]
    assert r[2].startswith("error: MCP server 'junk' is not available")
    assert r[3].startswith("error: MCP server 'missing' is not available")
    assert r[4].startswith("error:") and "not allowed" in r[4]
    assert r[5].startswith("error: MCP server 'odd' failed")
    assert r[6].startswith("error:")  # the server is gone; the session still answers


def test_a_cron_job_uses_an_mcp_tool_end_to_end(agent_vault, model_server):
    from datetime import UTC, datetime

    from hermes_fs.mind.jobs import load_jobs
    from hermes_fs.service.cron_runner import run_job

    configure_mcp(agent_vault, TIME.replace("UTC]}", "UTC], unattended: true}"))
    (agent_vault.root / "cron" / "clock.md").write_text("---\nschedule: every day at 07:00\nmcp: [time]\n---\n"
                                                        "Tell me the time in UTC.\n")
    jobs, errors = load_jobs(agent_vault.files, agent_vault.config)
    assert errors == []
    model_server.add({"tool_calls": [("time__get_current_time", {"timezone": "UTC"})]},
                     lambda body: {"content": "It is " + json.loads(
                         [m for m in body["messages"] if m["role"] == "tool"][-1]["content"])["datetime"]})
    meta = run_job(agent_vault, {j.name: j for j in jobs}["clock"], datetime.now(UTC))
    assert meta.status == "ok"
    out = next((agent_vault.root / "outputs" / "cron" / "clock").glob("*.md")).read_text()
    assert "It is 20" in out


def test_a_job_naming_an_unknown_server_is_reported(agent_vault):
    from hermes_fs.mind.jobs import load_jobs

    (agent_vault.root / "cron" / "bad.md").write_text("---\nschedule: every 1h\nmcp: [nope]\n---\nx\n")
    _jobs, errors = load_jobs(agent_vault.files, agent_vault.config)
    assert any("nope" in str(e) for e in errors)


def test_doctor_lists_the_servers(agent_vault, run_cli):
    configure_mcp(agent_vault, TIME + "    missing: {command: /nonexistent/server, timeout_s: 3}\n")
    r = run_cli("--vault", str(agent_vault.root), "doctor", "--no-model")
    assert "ok  mcp server time: 2 tool(s)" in r.stdout
    assert "BAD mcp server missing:" in r.stdout and r.returncode == 1


def test_server_env_expands_only_secrets_env_names(agent_vault, model_server, tmp_path):
    (agent_vault.root / ".hermes" / "secrets.env").write_text("ECHO_PREFIX=from-secrets\n")
    py = sys.executable
    configure_mcp(agent_vault, f"    odd: {{command: {py}, args: [{MISBEHAVING}], env: {{X: '${{ECHO_PREFIX}}'}}}}\n"
                               f"    leak: {{command: {py}, args: [{MISBEHAVING}], env: {{X: '${{HOME}}'}}, timeout_s: 3}}\n")
    model_server.add({"tool_calls": [("odd__echo", {"text": "a"}), ("leak__echo", {"text": "b"})]}, {"content": "ok"})
    with Conversation(agent_vault, ConversationOptions(source="run", workspace=tmp_path)) as c:
        c.ask("go")
    r = [m["content"] for m in model_server.requests[1]["messages"] if m["role"] == "tool"]
    assert r[0] == "echo: a"
    assert r[1].startswith("error: MCP server 'leak' is not available") and "HOME" in r[1]



def _server_everything() -> Path | None:
    """The npm reference server `@modelcontextprotocol/server-everything`, installed once into
    tests/.npm (gitignored) where Node and the npm registry are at hand; None otherwise."""
    import shutil

    prefix = Path(__file__).parent / ".npm"
    exe = prefix / "node_modules" / ".bin" / "mcp-server-everything"
    if exe.exists():
        return exe
    if not shutil.which("npm"):
        return None
    prefix.mkdir(exist_ok=True)
    r = subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(prefix),
                        "@modelcontextprotocol/server-everything"], capture_output=True, timeout=300)
    return exe if r.returncode == 0 and exe.exists() else None


def test_the_npm_reference_server_everything(agent_vault, model_server, tmp_path):
    import pytest

    exe = _server_everything()
    if exe is None:
        pytest.skip("Node/npm or the npm registry is not available for @modelcontextprotocol/server-everything")
    configure_mcp(agent_vault, f"    everything: {{command: {exe}, args: [stdio], timeout_s: 30}}\n")
    model_server.add({"tool_calls": [("everything__echo", {"message": "hello from hermes"}),
                                     ("everything__get-sum", {"a": 2, "b": 40}),
                                     ("everything__get-tiny-image", {})]},
                     {"content": "ok"})
    with Conversation(agent_vault, ConversationOptions(source="run", workspace=tmp_path)) as c:
        c.ask("use the everything server")
    r = [m["content"] for m in model_server.requests[1]["messages"] if m["role"] == "tool"]
    assert r[0] == "Echo: hello from hermes" and "42" in r[1]
    assert "[image omitted]" in r[2]  # binary content is never pasted into the model's context


def test_clients_get_the_agents_own_tool_schemas(vault):
    """The SDK's own client sees what the agent sees: enums, descriptions, required arguments, the
    server's version, and which tools change nothing; a value outside an enum is a tool error."""
    from hermes_fs import __version__
    from hermes_fs.agent.tools import SCHEMAS

    async def steps(c):
        listed = (await c.list_tools()).tools
        bad = await c.call_tool("memory", {"action": "erase", "file": "USER.md", "text": "x"})
        return c.server_info, listed, bad

    init, listed, bad = sdk_call(stdio(vault), steps)
    assert init.name == "hermes-fs" and init.version == __version__
    tools = {t.name: t for t in listed}
    for name in ("memory", "skill_search", "skill_view", "skill_manage", "session_search"):
        agent = SCHEMAS[name]["function"]
        assert tools[name].description == agent["description"]
        assert tools[name].input_schema["properties"] == agent["parameters"]["properties"], name
        assert sorted(tools[name].input_schema["required"]) == sorted(agent["parameters"]["required"])
        assert all(p.get("description") for p in tools[name].input_schema["properties"].values()), name
    assert tools["memory"].input_schema["properties"]["action"]["enum"] == ["add", "replace", "remove"]
    assert "write_file" in tools["skill_manage"].input_schema["properties"]["action"]["enum"]
    assert tools["refine"].input_schema["required"] == ["transcript"]
    for name in ("skill_search", "skill_view", "session_search"):
        assert tools[name].annotations.read_only_hint is True, name
    for name in ("memory", "skill_manage", "refine"):
        assert tools[name].annotations.read_only_hint is False, name
    assert bad.is_error and "add" in bad.content[0].text
    assert "erase" not in (vault.root / "memory/USER.md").read_text()
