"""`hermes-fs acp` driven by the Agent Client Protocol SDK's own client side (a client this project
did not write), as an editor would: the real CLI in a subprocess on stdio, the scripted model
server streaming its answers. Initialize, sessions, streamed chunks, tool calls reported and put
to the editor (yes and no), cancel mid-turn, /refine, and the transcripts kept in sessions/."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest
from conftest import git, wait_for

from hermes_fs.mind import memory
from hermes_fs.mind.sessions import session_path
from hermes_fs.store.provenance import Act

acp = pytest.importorskip("acp")
from acp import schema  # noqa: E402

STORY = " ".join(f"w{i}" for i in range(300)) + " THE-END"
REFINE = [{"tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": "Edits in Zed."})]},
          {"content": "Summary: editor\n- memory/USER.md: added that the person edits in Zed "
                       "(because they said \"I use Zed\")"}]


class Editor:
    """acp.Client: records what the agent sends and answers permission requests from a script."""

    def __init__(self, answers: list[str] | None = None):
        self.answers = list(answers or [])  # option ids, one per request ("allow", "reject", …)
        self.asked: list[schema.ToolCallUpdate] = []
        self.updates: list[tuple[str, object]] = []
        self.first_chunk = asyncio.Event()

    async def request_permission(self, options, session_id, tool_call, **kwargs):
        self.asked.append(tool_call)
        assert {o.option_id for o in options} >= {"allow", "reject"}
        choice = self.answers.pop(0)
        return schema.RequestPermissionResponse(outcome=schema.AllowedOutcome(option_id=choice, outcome="selected"))

    async def session_update(self, session_id, update, **kwargs):
        self.updates.append((session_id, update))
        if isinstance(update, schema.AgentMessageChunk):
            self.first_chunk.set()

    def chunks(self, session_id: str) -> list[str]:
        return [u.content.text for s, u in self.updates if s == session_id and isinstance(u, schema.AgentMessageChunk)]

    def of_kind(self, session_id: str, kind: type) -> list:
        return [u for s, u in self.updates if s == session_id and isinstance(u, kind)]

    def take(self) -> None:
        self.updates.clear()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


async def start(editor: Editor, vault, *, cwd, hang_up_wait_s: float = 2.0):
    """The agent process; leaving the context hangs up (stdin closed), then waits `hang_up_wait_s`
    for the agent to exit before terminating it, as an editor closing a project does."""
    env = {**os.environ, "HERMES_NO_DAEMON": "1", "HERMES_TEST_KEY": "sk-test-not-a-real-key"}
    return acp.spawn_agent_process(editor, sys.executable, "-m", "hermes_fs", "--vault", str(vault.root), "acp",
                                   env=env, cwd=cwd, transport_kwargs={"shutdown_timeout": hang_up_wait_s})


def text(words: str) -> list:
    return [acp.text_block(words)]


@pytest.mark.slow
def test_an_editor_session_streams_asks_before_changes_and_keeps_its_transcript(agent_vault, model_server, tmp_path):
    workspace = tmp_path / "project"
    workspace.mkdir()
    target = workspace / "notes.txt"
    memory.add(agent_vault.files, agent_vault.config, "USER.md", "Prefers tabs over spaces.")
    agent_vault.git.commit_paths(["memory/USER.md"], "memory: a fact", Act.person())
    model_server.stream_delay = 0.01
    model_server.add(
        {"content": "Hello from the vault, streamed word by word."},
        {"tool_calls": [("write_file", {"path": str(target), "content": "written by hermes\n"})]},
        {"content": "I wrote notes.txt."},
        {"tool_calls": [("shell", {"command": "touch refused.txt"})]},
        {"content": "You said no, so I did not run it."},
        {"tool_calls": [("write_file", {"path": "hermes.yaml", "content": "model: evil\n"}),
                        ("memory", {"action": "add", "file": "USER.md", "text": "Uses Zed."})]},
        {"content": "Noted."},
        {"tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": "Likes dark themes."})]},
        {"content": "Noted again."},
        {"content": "A second session answers."},
    )
    settings = (agent_vault.root / "hermes.yaml").read_text()
    editor = Editor(answers=["allow", "reject", "allow-always"])

    async def scenario():
        async with await start(editor, agent_vault, cwd=tmp_path) as (conn, _proc):
            init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            assert init.protocol_version == acp.PROTOCOL_VERSION and init.agent_info.name == "hermes-fs"
            first = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id

            done = await conn.prompt(session_id=first, prompt=text("say hello"))
            assert done.stop_reason == "end_turn"
            chunks = editor.chunks(first)
            assert len(chunks) > 3 and "".join(chunks) == "Hello from the vault, streamed word by word."
            editor.take()

            done = await conn.prompt(session_id=first, prompt=text("write notes.txt"))
            assert done.stop_reason == "end_turn"
            started = editor.of_kind(first, schema.ToolCallStart)
            assert [(s.kind, s.status) for s in started] == [("edit", "pending")]
            assert editor.asked[0].tool_call_id == started[0].tool_call_id and editor.asked[0].kind == "edit"
            assert editor.asked[0].locations[0].path == str(target)
            progress = editor.of_kind(first, schema.ToolCallProgress)
            assert [p.status for p in progress] == ["completed"]
            assert target.read_text() == "written by hermes\n"
            editor.take()

            done = await conn.prompt(session_id=first, prompt=text("touch a file"))
            assert done.stop_reason == "end_turn"
            assert editor.asked[1].kind == "execute" and "touch refused.txt" in editor.asked[1].title
            assert [p.status for p in editor.of_kind(first, schema.ToolCallProgress)] == ["failed"]
            assert "".join(editor.chunks(first)) == "You said no, so I did not run it."
            editor.take()

            await conn.prompt(session_id=first, prompt=text("remember I use Zed"))
            assert len(editor.asked) == 3 and "memory/USER.md" in editor.asked[2].title  # hermes.yaml: never asked
            assert [p.status for p in editor.of_kind(first, schema.ToolCallProgress)] == ["failed", "completed"]
            await conn.prompt(session_id=first, prompt=text("and dark themes"))
            assert len(editor.asked) == 3  # "allow for this session": edits are not asked about again
            assert [p.status for p in editor.of_kind(first, schema.ToolCallProgress)][-1] == "completed"

            second = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            assert second != first
            done = await conn.prompt(session_id=second, prompt=text("again"))
            assert "".join(editor.chunks(second)) == "A second session answers."
            return first, second

    first, second = run(scenario())
    assert not (workspace / "refused.txt").exists()  # the shell never ran it
    assert (agent_vault.root / "hermes.yaml").read_text() == settings  # the boundary refused it first
    assert "Uses Zed." in (agent_vault.root / "memory" / "USER.md").read_text()
    assert "Likes dark themes." in (agent_vault.root / "memory" / "USER.md").read_text()
    refused = model_server.requests[4]["messages"][-1]
    assert refused["role"] == "tool" and refused["content"].startswith("error: the person did not allow")
    assert "Prefers tabs over spaces." in model_server.requests[0]["messages"][0]["content"]  # memory, as in chat
    kept = git(agent_vault, "ls-files", "sessions").split()
    assert session_path(first) in kept and session_path(second) in kept  # committed when the editor hung up
    transcript = (agent_vault.root / session_path(first)).read_text()
    assert "write notes.txt" in transcript and "did not allow" in transcript


@pytest.mark.slow
def test_cancel_stops_the_turn_at_once_and_refine_works_on_the_session(agent_vault, model_server, tmp_path):
    workspace = tmp_path / "project"
    workspace.mkdir()
    model_server.stream_delay = 0.02
    model_server.add({"content": STORY, "chunk_delay": 0.1}, {"content": "Short, as you like it."}, *REFINE)
    editor = Editor()

    async def scenario():
        async with await start(editor, agent_vault, cwd=tmp_path) as (conn, _proc):
            await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            turn = asyncio.create_task(conn.prompt(session_id=sid, prompt=text("tell me a long story")))
            await editor.first_chunk.wait()
            await conn.cancel(session_id=sid)
            done = await turn
            assert done.stop_reason == "cancelled"
            assert "THE-END" not in "".join(editor.chunks(sid))
            editor.take()

            done = await conn.prompt(session_id=sid, prompt=text("I use Zed; keep it short"))
            assert done.stop_reason == "end_turn" and "".join(editor.chunks(sid)) == "Short, as you like it."
            editor.take()

            done = await conn.prompt(session_id=sid, prompt=text("/refine editor habits"))
            assert done.stop_reason == "end_turn"
            return sid, "".join(editor.chunks(sid))

    sid, said = run(scenario())
    assert model_server.closed_early == [0]  # the streamed request was closed, not read to its end
    assert "refine started" in said and "refine/" in said
    assert editor.asked == []  # refine's own writes go to its branch, not through the editor
    assert any(b.strip().startswith("refine/") for b in git(agent_vault, "branch", "--list", "refine/*").splitlines())
    assert "turn interrupted by the user" in (agent_vault.root / session_path(sid)).read_text()


def test_bad_requests_are_clear_errors_and_sub_agents_ask_the_same_editor(agent_vault, model_server, tmp_path):
    workspace = tmp_path / "project"
    workspace.mkdir()
    model_server.add(
        {"tool_calls": [("delegate", {"tasks": [{"goal": "make a file", "tools": ["shell"]}]})]},
        {"tool_calls": [("shell", {"command": "touch sub.txt"})]},  # the sub-agent
        {"content": "I was not allowed to."},
        {"content": "The sub-agent was refused."})
    editor = Editor(answers=["reject"])

    async def scenario():
        async with await start(editor, agent_vault, cwd=tmp_path) as (conn, _proc):
            await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            with pytest.raises(acp.RequestError):
                await conn.prompt(session_id="no-such-session", prompt=text("hi"))
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            done = await conn.prompt(session_id=sid, prompt=[])
            assert done.stop_reason == "end_turn" and "empty" in "".join(editor.chunks(sid))
            assert model_server.requests == []  # nothing reached the model
            done = await conn.prompt(session_id=sid, prompt=text("delegate it"))
            assert done.stop_reason == "end_turn" and "".join(editor.chunks(sid)).endswith("The sub-agent was refused.")

    run(scenario())
    assert [a.kind for a in editor.asked] == ["execute"] and "touch sub.txt" in editor.asked[0].title
    assert not (workspace / "sub.txt").exists()


@pytest.mark.slow
def test_the_editor_hanging_up_mid_turn_stops_the_turn_and_commits_the_transcript(agent_vault, model_server, tmp_path):
    workspace = tmp_path / "project"
    workspace.mkdir()
    model_server.stream_delay = 0.02
    # a story of about 30 minutes at this pace: whatever the machine's load, the hang-up comes first
    long_story = " ".join(f"w{i}" for i in range(18_000)) + " THE-END"
    model_server.add({"content": "First answer."}, {"content": long_story, "chunk_delay": 0.1})
    editor = Editor()

    async def scenario():
        async with await start(editor, agent_vault, cwd=tmp_path, hang_up_wait_s=60) as (conn, proc):
            await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            assert (await conn.prompt(session_id=sid, prompt=text("hello"))).stop_reason == "end_turn"
            editor.first_chunk.clear()
            asyncio.create_task(conn.prompt(session_id=sid, prompt=text("tell me a long story")))
            await editor.first_chunk.wait()
        return sid, proc.returncode  # the editor is gone: stdin closed, the agent exited by itself

    sid, code = run(scenario())
    assert code == 0
    # the long answer's request was closed, not read to its end (the server sees it at its next write)
    assert wait_for(lambda: model_server.closed_early == [1], 180), model_server.closed_early
    assert session_path(sid) in git(agent_vault, "ls-files", "sessions").split()
    assert git(agent_vault, "status", "--porcelain", "sessions") == ""  # committed as it is on disk
    transcript = (agent_vault.root / session_path(sid)).read_text()
    assert "tell me a long story" in transcript and "turn interrupted by the user" in transcript
    assert "THE-END" not in transcript


@pytest.mark.slow
def test_close_session_commits_it_and_load_session_continues_it(agent_vault, model_server, tmp_path):
    """session/close (mid-turn too) ends the session and commits its transcript at once; a closed
    session takes no prompt; session/load brings it back, its history replayed to the editor and
    sent to the model with the next prompt. Ids that are no session are clear errors."""
    workspace = tmp_path / "project"
    workspace.mkdir()
    model_server.stream_delay = 0.02
    model_server.add({"content": "Tabs, noted."}, {"content": "Ready."}, {"content": STORY, "chunk_delay": 0.1},
                     {"content": "You prefer tabs."})
    editor = Editor()

    async def scenario():
        async with await start(editor, agent_vault, cwd=tmp_path) as (conn, _proc):
            init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            assert init.agent_capabilities.load_session and init.agent_capabilities.session_capabilities.close is not None
            first = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            assert (await conn.prompt(session_id=first, prompt=text("I prefer tabs"))).stop_reason == "end_turn"
            await conn.close_session(session_id=first)
            assert session_path(first) in git(agent_vault, "ls-files", "sessions").split()  # before the hang-up
            with pytest.raises(acp.RequestError):
                await conn.prompt(session_id=first, prompt=text("still there?"))

            second = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            assert (await conn.prompt(session_id=second, prompt=text("ready?"))).stop_reason == "end_turn"
            editor.first_chunk.clear()
            turn = asyncio.create_task(conn.prompt(session_id=second, prompt=text("a story")))
            await editor.first_chunk.wait()
            await conn.close_session(session_id=second)
            assert (await turn).stop_reason == "cancelled"

            editor.take()
            await conn.load_session(cwd=str(workspace), session_id=first, mcp_servers=[])
            replayed = [(type(u).__name__, u.content.text) for s, u in editor.updates if s == first
                        and isinstance(u, (schema.UserMessageChunk, schema.AgentMessageChunk))]
            assert replayed == [("UserMessageChunk", "I prefer tabs"), ("AgentMessageChunk", "Tabs, noted.")]
            editor.take()
            done = await conn.prompt(session_id=first, prompt=text("what do I prefer?"))
            assert done.stop_reason == "end_turn" and "".join(editor.chunks(first)) == "You prefer tabs."
            for bad in ("../../hermes", "20261203-000000-abc", ""):
                with pytest.raises(acp.RequestError):
                    await conn.load_session(cwd=str(workspace), session_id=bad, mcp_servers=[])
            return first, second

    first, second = run(scenario())
    asked = [m["content"] for m in model_server.requests[-1]["messages"] if m["role"] in ("user", "assistant")]
    assert asked == ["I prefer tabs", "Tabs, noted.", "what do I prefer?"]
    assert "turn interrupted by the user" in (agent_vault.root / session_path(second)).read_text()
    transcript = (agent_vault.root / session_path(first)).read_text()
    body = transcript.split("\n---\n", 1)[1]  # after the frontmatter (whose title is the first message)
    assert body.count("I prefer tabs") == 1 and "You prefer tabs." in body  # continued, not copied
    assert git(agent_vault, "status", "--porcelain", "sessions") == ""
