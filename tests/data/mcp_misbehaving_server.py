"""A small MCP server (the official SDK) that misbehaves on purpose, for the client tests:
`echo` works, `pid` names the server's process, `crash` kills the process mid-call, `hang` never answers. With `garbage` as the
first argument it writes junk on stdout instead of speaking MCP."""

import os
import sys
import time

if sys.argv[1:] == ["garbage"]:
    sys.stdout.write("this is not JSON-RPC\n{broken\n")
    sys.stdout.flush()
    time.sleep(30)
    sys.exit(0)

import anyio  # noqa: E402
from mcp.server.mcpserver import MCPServer  # noqa: E402

server = MCPServer("misbehaving")


@server.tool(description="Echo the text back.")
def echo(text: str) -> str:
    return f"echo: {text}"


@server.tool(description="The server's process id.")
def pid() -> str:
    return f"pid: {os.getpid()}"


@server.tool(description="Crash the server mid-call.")
def crash() -> str:
    os._exit(3)


@server.tool(description="Never answer.")
async def hang() -> str:
    await anyio.sleep(3600)  # async, so a client's notifications/cancelled ends it
    return "late"


server.run()
