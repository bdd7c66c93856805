"""A small MCP server (the official SDK) that leaves processes behind on purpose, for the client tests:
before serving it starts a child in a session of its own (setsid) and a daemon (a double fork: its
parent exits, so it is no longer below the server by parent links). Their pids go to the files
ARGV[1] + ".child" and ARGV[1] + ".daemon"."""

import os
import subprocess
import sys

out = sys.argv[1]
child = subprocess.Popen(["sleep", "600"], start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL)
first = os.fork()
if first == 0:
    os.setsid()
    if os.fork() == 0:
        with open(out + ".daemon", "w") as f:
            f.write(str(os.getpid()))
        os.closerange(0, 3)
        os.execvp("sleep", ["sleep", "601"])
    os._exit(0)
os.waitpid(first, 0)
with open(out + ".child", "w") as f:
    f.write(str(child.pid))

from mcp.server.mcpserver import MCPServer  # noqa: E402

server = MCPServer("spawning")


@server.tool(description="Answer pong.")
def ping() -> str:
    return "pong"


server.run()
