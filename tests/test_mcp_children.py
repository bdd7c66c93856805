"""Processes an MCP server starts end with the run, also those in a session of their own (setsid)
and a daemon whose parent already exited (no longer below the server by parent links): the real
client (agent/mcp_client.py) against tests/data/mcp_spawning_server.py."""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import wait_for

from hermes_fs.agent.mcp_client import McpHub
from hermes_fs.store.config import McpServerConfig

SERVER = Path(__file__).parent / "data" / "mcp_spawning_server.py"


def running(pid: int) -> bool:
    """Alive and not a zombie (one whose parent has not reaped it yet is already gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_servers_setsid_child_and_daemon_end_with_the_run(tmp_path):
    out = tmp_path / "pids"
    hub = McpHub({"spawning": McpServerConfig(command=sys.executable, args=[str(SERVER), str(out)])})
    pids: list[int] = []
    try:
        hub.start()
        assert "spawning__ping" in hub.tool_names(), hub.status()
        assert hub.call("spawning__ping", {}) == "pong"
        assert wait_for(lambda: Path(f"{out}.child").exists() and Path(f"{out}.daemon").exists(), 60)
        pids = [int(Path(f"{out}.{kind}").read_text()) for kind in ("child", "daemon")]
        assert all(running(p) for p in pids)
    finally:
        hub.stop()
    assert wait_for(lambda: not any(running(p) for p in pids), 60), [p for p in pids if running(p)]
