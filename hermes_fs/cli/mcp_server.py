"""`hermes-fs mcp`: the vault served over MCP with the official SDK, so other agents (Claude Code,
Cursor, any MCP client) use the memory and skills curated here and send their sessions to refine.

Tools have the names and arguments of the agent's own (`memory`, `skill_search`, `skill_view`,
`skill_manage`, `session_search`) and run through the same ToolBox, so the same trust boundary
holds: an MCP client writes only memory/ and skills/, never a secret. Writes are committed on main
like the agent's, with the trailer `Hermes-Client: <client name>`. `refine` takes a transcript and
an optional focus and makes a refine branch, reviewed like any other (trailer `Refine-Client`).
Resources: each memory file and each skill file. Over HTTP every request must carry
`Authorization: Bearer <HERMES_MCP_TOKEN>` (from .hermes/secrets.env).
"""

from __future__ import annotations

import copy
import hmac
import json
import math
from collections import Counter
from functools import partial
from typing import Any

from mcp.server.mcpserver import Context, MCPServer  # this module is loaded only to serve MCP
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from .. import Act, Vault
from ..errors import HermesError

TOKEN_NAME = "HERMES_MCP_TOKEN"
INSTRUCTIONS = ("hermes-fs: a person's curated memory (USER.md, MEMORY.md, projects/) and skills, in a git "
                "repository they review. Read memory and skills before you work; write lasting lessons with "
                "`memory` and procedures with `skill_manage`; send a finished conversation to `refine`.")


def client_name(ctx: Any) -> str:
    """The client's name from its initialize request (`unknown` when it gave none)."""
    try:
        params = ctx.session.client_params
        info = getattr(params, "client_info", None) or getattr(params, "clientInfo", None)
        name = str(getattr(info, "name", "") or "unknown")
    except Exception:  # no session info on this transport
        name = "unknown"
    return "".join(c if c.isalnum() or c in "-_. " else "_" for c in name)[:60] or "unknown"


class VaultServer(MCPServer):
    """The SDK's server, with resources listed from the vault as it is now (a skill created during a
    session is offered at once; a deleted one is gone), not as it was at start."""

    def __init__(self, vault: Vault, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.vault = vault
        self.offered: set[str] = set()

    def sync_resources(self) -> None:
        wanted = dict(_resource_files(self.vault))
        registry = getattr(self._resource_manager, "_resources", None)
        for uri in self.offered - set(wanted):
            if isinstance(registry, dict):
                registry.pop(uri, None)
        for uri, rel in wanted.items():
            if uri not in self.offered:
                self.resource(uri, name=rel, mime_type="text/markdown" if rel.endswith(".md") else "text/plain")(
                    _reader(self.vault, rel))
        self.offered = set(wanted)

    async def list_resources(self):
        self.sync_resources()
        return await super().list_resources()

    async def read_resource(self, uri, context=None):
        self.sync_resources()
        return await super().read_resource(uri, context)


REFINE_PARAMETERS = {"type": "object", "properties": {
    "transcript": {"type": "string", "description": "the conversation's text, as the client has it"},
    "focus": {"type": "string", "description": "what to capture from it (optional)"}}, "required": ["transcript"]}
REFINE_DESCRIPTION = ("Review a conversation (its transcript) into memory and skill improvements on a refine branch "
                      "the person reviews. focus: what to capture.")


def annotations_for(name: str) -> ToolAnnotations:
    """Hints a client shows or acts on: the agent's read-only tools change nothing; the others
    write the vault (refine only proposes, on a branch the person reviews)."""
    from ..agent.tools import READ_ONLY_TOOLS

    if name in READ_ONLY_TOOLS:
        return ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
    return ToolAnnotations(read_only_hint=False, destructive_hint=name != "refine", idempotent_hint=False,
                           open_world_hint=False)


def build_server(vault: Vault) -> MCPServer:
    from .. import __version__
    from ..agent.tools import SCHEMAS

    server = VaultServer(vault, "hermes-fs", instructions=INSTRUCTIONS, version=__version__)

    def run(ctx: Context, tool: str, **args) -> str:
        """The agent's own tool, committed like the agent's writes but naming the client."""
        from ..agent.tools import ToolBox, VaultCommitter
        from ..mind.search import search

        client = client_name(ctx)
        committer = VaultCommitter(vault.git, Act.client(client))
        box = ToolBox(files=vault.files, config=vault.config, enabled=[tool], vault_root=vault.root,
                      committer=committer, searcher=partial(search, vault.root), created_by=f"mcp:{client}")
        result = box.call(tool, json.dumps({k: v for k, v in args.items() if v is not None}))
        if result.startswith("error:"):
            raise ToolError(result[len("error:"):].strip())  # the client sees it as a tool error, with the reason
        return result

    def memory(action: str, file: str, ctx: Context, text: str = "", old_text: str = "") -> str:
        return run(ctx, "memory", action=action, file=file, text=text, old_text=old_text)

    def skill_search(query: str, ctx: Context) -> str:
        return run(ctx, "skill_search", query=query)

    def skill_view(name: str, ctx: Context, file: str | None = None) -> str:
        return run(ctx, "skill_view", name=name, file=file)

    def skill_manage(action: str, name: str, ctx: Context, content: str = "", old_text: str = "", new_text: str = "",
                     file: str | None = None, merged_into: str | None = None) -> str:
        return run(ctx, "skill_manage", action=action, name=name, content=content, old_text=old_text,
                   new_text=new_text, file=file, merged_into=merged_into)

    def session_search(query: str, ctx: Context) -> str:
        return run(ctx, "session_search", query=query)

    def refine(transcript: str, ctx: Context, focus: str | None = None) -> str:
        return refine_transcript(vault, transcript, focus, client_name(ctx))

    for fn in (memory, skill_search, skill_view, skill_manage, session_search):
        agent = SCHEMAS[fn.__name__]["function"]
        _offer(server, fn, agent["description"], agent["parameters"])
    _offer(server, refine, REFINE_DESCRIPTION, REFINE_PARAMETERS)
    server.sync_resources()
    return server


def _offer(server: MCPServer, fn, description: str, parameters: dict) -> None:
    """A tool whose schema is the agent's own (enums, descriptions, required), not the one the SDK
    would derive from the bridging function's signature; the ToolBox checks the arguments again."""
    server.add_tool(fn, name=fn.__name__, description=description, annotations=annotations_for(fn.__name__))
    tool = server._tool_manager.get_tool(fn.__name__)
    assert tool is not None
    tool.parameters = copy.deepcopy(parameters)


def refine_transcript(vault: Vault, transcript: str, focus: str | None, client: str) -> str:
    """A client's conversation as a session (source mcp), then a refine of it under the vault's policy."""
    from .. import RefineOptions
    from .. import refine as run_refine
    from ..mind.sessions import Transcript

    if not transcript.strip():
        raise ToolError("the transcript is empty")
    t = Transcript.start(vault.root, client, "mcp", f"from {client}")
    t.append({"role": "note", "content": f"conversation sent by the MCP client {client}"})
    t.append({"role": "user", "content": transcript.strip()})
    vault.git.commit_paths([t.rel], f"session: from {client}", Act.client(client, t.id))
    outcome = run_refine(vault, RefineOptions(session=t.id, focus=focus, client=client))
    if not outcome.ok:
        raise ToolError(outcome.line())
    return outcome.line()


def _resource_files(vault: Vault) -> list[tuple[str, str]]:
    """(uri, vault path) of every memory file and every skill file."""
    from ..mind import memory, skills

    rels = [f"memory/{name}" for name in memory.list_memory(vault.files)]
    rels += [rel for name in skills.names(vault.files) for rel in vault.files.list(f"skills/{name}")]
    return [(f"hermes://{rel}", rel) for rel in rels]


def _reader(vault: Vault, rel: str):
    def read() -> str:
        data = vault.files.read(rel)
        if data is None:
            raise ValueError(f"{rel} no longer exists")
        return data.decode("utf-8", errors="replace")
    return read


# -- running ---------------------------------------------------------------------------------------
def serve_stdio(vault: Vault) -> None:
    import anyio

    anyio.run(build_server(vault).run_stdio_async)


def serve_http(vault: Vault, host: str, port: int) -> None:
    token = vault.secrets().get(TOKEN_NAME)
    problem = weak_token(token)
    if problem:
        raise HermesError(f"--http needs a strong bearer token: {TOKEN_NAME} {problem}. Put "
                          f"{TOKEN_NAME}=<token> in {vault.secrets_env}, made with e.g. "
                          "`python3 -c 'import secrets; print(secrets.token_urlsafe(32))'` "
                          "(clients send it as `Authorization: Bearer ...`)")
    assert token is not None
    import uvicorn

    app = BearerAuth(build_server(vault).streamable_http_app(host=host), token)
    uvicorn.run(app, host=host, port=port, log_level="warning")


MIN_TOKEN_CHARS = 32
MIN_TOKEN_BITS = 96.0


def weak_token(token: str | None) -> str | None:
    """Why a token could be guessed (None when it is strong enough): at least 32 characters whose
    character frequencies carry at least 96 bits (Shannon), so `aaaa...` or `abab...` is refused."""
    if not token:
        return "is not set"
    if len(token) < MIN_TOKEN_CHARS:
        return f"has {len(token)} characters; at least {MIN_TOKEN_CHARS} random ones are needed"
    counts = Counter(token)
    bits = -sum(n * math.log2(n / len(token)) for n in counts.values())
    if bits < MIN_TOKEN_BITS:
        return f"is too regular ({bits:.0f} bits of entropy, at least {MIN_TOKEN_BITS:.0f} needed)"
    return None


class BearerAuth:
    """ASGI middleware: every HTTP request must carry the vault's token, or gets 401."""

    def __init__(self, app, token: str):
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": b"missing or wrong bearer token\n"})
                return
        await self.app(scope, receive, send)
