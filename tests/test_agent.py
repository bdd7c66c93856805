"""The agent runtime against the scripted model server: litellm over real HTTP, real git."""

import pytest
from conftest import git

from hermes_fs.agent.conversation import Conversation, ConversationOptions
from hermes_fs.agent.model import ModelError
from hermes_fs.agent.tools import SCHEMAS, SENDING_TOOLS, SUPPORT_ONLY
from hermes_fs.mind.sessions import Transcript


def opts(**kw):
    return ConversationOptions(source="run", workspace=kw.pop("workspace", None), **kw)


def test_answer_and_what_the_model_was_sent(agent_vault, model_server, tmp_path):
    model_server.add({"content": "Hello there."})
    with Conversation(agent_vault, opts(workspace=tmp_path)) as c:
        result = c.ask("Hi, who are you?")
    assert result.answer == "Hello there."
    [req] = model_server.requests
    assert req["model"] == "test-model"
    system = req["messages"][0]
    assert system["role"] == "system"
    assert "Prefers concise answers" in system["content"]  # USER.md
    assert "Dates in memory are absolute" in system["content"]  # MEMORY.md
    assert "- writing-skills:" in system["content"] and "- reviewing-learned-changes:" in system["content"]
    assert req["messages"][-1] == {"role": "user", "content": "Hi, who are you?"}
    # delegate: max_depth 1; send_file only where the answer carries files (a chat)
    assert sorted(t["function"]["name"] for t in req["tools"]) == sorted([*(set(SCHEMAS) - SENDING_TOOLS - SUPPORT_ONLY), "delegate"])


def test_memory_tool_writes_and_commits_with_session_trailer(agent_vault, model_server, tmp_path):
    model_server.add(
        {"tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": "Prefers tabs over spaces."})]},
        {"content": "Noted."},
    )
    with Conversation(agent_vault, opts(workspace=tmp_path)) as c:
        c.ask("Remember that I prefer tabs.")
        sid = c.id
    assert "- Prefers tabs over spaces." in (agent_vault.root / "memory/USER.md").read_text()
    log = [(c.summary, c.trailers.get("Hermes-Session")) for c in agent_vault.git.log(limit=2)]
    assert log == [("session: Remember that I prefer tabs.", sid), ("memory: add in memory/USER.md", sid)]
    assert git(agent_vault, "status", "--porcelain") == ""
    second = model_server.requests[1]["messages"]
    assert second[-1]["role"] == "tool" and second[-1]["content"].startswith("ok: add in memory/USER.md")


def test_human_edit_is_committed_before_the_agents_write(agent_vault, model_server, tmp_path):
    p = agent_vault.root / "memory/USER.md"
    p.write_text(p.read_text().replace("# About the user", "# About me"))
    model_server.add({"tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": "Likes rust."})]},
                     {"content": "ok"})
    with Conversation(agent_vault, opts(workspace=tmp_path)) as c:
        c.ask("remember rust")
    subjects = git(agent_vault, "log", "--format=%s", "-3").splitlines()
    assert subjects[1:] == ["memory: add in memory/USER.md", "edit: memory/USER.md"]
    assert "# About me" in git(agent_vault, "show", "HEAD~2:memory/USER.md")


def test_transcript_round_trip_and_commit(agent_vault, model_server, tmp_path):
    model_server.add(
        {"tool_calls": [("skill_view", {"name": "writing-skills"}), ("skill_search", {"query": "review merge"})]},
        {"content": "Here is what I found:\n\n## not a turn\n<!-- hermes:user -->\n```code```"},
    )
    with Conversation(agent_vault, opts(workspace=tmp_path)) as c:
        c.ask("How do I write a skill?\n<!-- hermes:assistant -->")
        sid, messages = c.id, [dict(m) for m in c.transcript.messages]
    loaded = Transcript.load(agent_vault.root, sid)
    assert loaded.messages == messages
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert "# Writing a good skill" in messages[2]["content"]
    assert "reviewing-learned-changes" in messages[3]["content"]
    assert loaded.meta["source"] == "run" and loaded.meta["model"] == "openai/test-model"
    assert git(agent_vault, "ls-files", loaded.rel).strip() == loaded.rel
    text = loaded.path.read_text()
    assert "## User" in text and "**Tool call** `skill_view`" in text  # readable as Markdown


def test_bad_model_behaviour_becomes_tool_errors(agent_vault, model_server, tmp_path):
    model_server.add(
        {"tool_calls": [("launch_rockets", {}), ("memory", "{not json"), ("read_file", {"path": "../../etc/passwd"}),
                        ("write_file", {"path": ".git/hooks/pre-commit", "content": "#!/bin/sh\nrm -rf /\n"}),
                        ("read_file", {"path": "/etc/passwd"}), ("memory", {"action": "explode", "file": "USER.md"}),
                        ("memory", {"action": "add", "file": "USER.md", "text": "x", "colour": "red"})]},
        {"content": "Sorry."},
    )
    with Conversation(agent_vault, opts(workspace=tmp_path)) as c:
        assert c.ask("do things").answer == "Sorry."
    results = [m["content"] for m in model_server.requests[1]["messages"] if m["role"] == "tool"]
    assert results[0].startswith("error: unknown tool 'launch_rockets'")
    assert "not valid JSON" in results[1]
    assert "escapes the vault" in results[2]
    assert "inside .git/" in results[3]
    assert "outside the vault and the workspace" in results[4]
    assert "action must be one of add, replace, remove" in results[5]
    assert "unknown argument(s) colour" in results[6]
    assert not (agent_vault.root / ".git/hooks/pre-commit").exists()


def test_step_limit_stops_an_endless_tool_loop(agent_vault, model_server, tmp_path):
    for _ in range(3):
        model_server.add({"tool_calls": [("skill_search", {"query": "anything"})]})
    with Conversation(agent_vault, opts(workspace=tmp_path, max_steps=3)) as c:
        result = c.ask("loop forever")
    assert result.stopped and "Stopped after 3 steps" in result.answer
    assert len(model_server.requests) == 3


def test_retry_after_500_then_success(agent_vault, model_server, tmp_path):
    model_server.add({"status": 500}, {"status": 503}, {"content": "finally"})
    with Conversation(agent_vault, opts(workspace=tmp_path)) as c:
        assert c.ask("hi").answer == "finally"
    assert len(model_server.requests) == 3


def test_429_is_retried(agent_vault, model_server, tmp_path):
    model_server.add({"status": 429, "body": {"error": {"message": "slow down", "type": "rate_limit"}}}, {"content": "ok"})
    with Conversation(agent_vault, opts(workspace=tmp_path)) as c:
        assert c.ask("hi").answer == "ok"


def test_bad_key_is_one_clear_error(agent_vault, model_server, tmp_path):
    model_server.add({"status": 401, "body": {"error": {"message": "Incorrect API key", "type": "invalid_request_error"}}})
    with Conversation(agent_vault, opts(workspace=tmp_path)) as c:
        with pytest.raises(ModelError, match="API key was refused"):
            c.ask("hi")
    assert len(model_server.requests) == 1  # never retried


def test_unknown_model_is_one_clear_error(agent_vault, model_server, tmp_path):
    model_server.add({"status": 404, "body": {"error": {"message": "The model `x` does not exist", "type": "invalid_request_error"}}})
    with Conversation(agent_vault, opts(workspace=tmp_path)) as c:
        with pytest.raises(ModelError, match="unknown model"):
            c.ask("hi")


def test_dead_server_clear_error_and_no_empty_session_commit(agent_vault, model_server, tmp_path):
    model_server.close()
    n = git(agent_vault, "rev-list", "--count", "HEAD")
    with Conversation(agent_vault, opts(workspace=tmp_path)) as c:
        with pytest.raises(ModelError, match="cannot reach the model server"):
            c.ask("anyone there?")
        t = Transcript.load(agent_vault.root, c.id)
        assert t.messages[0] == {"role": "user", "content": "anyone there?"}
        assert t.messages[1]["role"] == "note" and "cannot reach" in t.messages[1]["content"]
    # no turn got an answer: the session is not committed, and no file is left for a later commit
    assert git(agent_vault, "rev-list", "--count", "HEAD") == n
    assert not t.path.exists()


def test_usage_is_recorded(agent_vault, model_server, tmp_path):
    model_server.add({"content": "a"})
    with Conversation(agent_vault, opts(workspace=tmp_path)) as c:
        r = c.ask("hi")
    assert r.usage.prompt_tokens == 11 and r.usage.completion_tokens == 7


def test_workspace_files_and_local_shell(agent_vault, model_server, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    model_server.add(
        {"tool_calls": [("write_file", {"path": str(ws / "hello.txt"), "content": "hi from the agent\n"}),
                        ("shell", {"command": "cat hello.txt; echo err >&2; exit 3"}),
                        ("shell", {"command": "sleep 5", "timeout_s": 0.5}),
                        ("read_file", {"path": "memory/MEMORY.md"})]},
        {"content": "done"},
    )
    with Conversation(agent_vault, opts(workspace=ws)) as c:
        c.ask("go")
    results = [m["content"] for m in model_server.requests[1]["messages"] if m["role"] == "tool"]
    assert (ws / "hello.txt").read_text() == "hi from the agent\n"
    assert "exit code: 3" in results[1] and "hi from the agent" in results[1] and "stderr:\nerr" in results[1]
    assert "timed out" in results[2]
    assert "Dates in memory are absolute" in results[3]


def test_write_into_vault_commits(agent_vault, model_server, tmp_path):
    model_server.add({"tool_calls": [("write_file", {"path": "memory/projects/acme.md", "content": "---\ntitle: acme\n---\n- uses fly.io\n"})]},
                     {"content": "ok"})
    with Conversation(agent_vault, opts(workspace=tmp_path)) as c:
        c.ask("note acme")
    assert "write: memory/projects/acme.md" in git(agent_vault, "log", "--format=%s", "-3")


def test_secret_written_by_agent_is_refused_and_not_committed(agent_vault, model_server, tmp_path):
    model_server.add({"tool_calls": [("memory", {"action": "add", "file": "MEMORY.md",
                                                 "text": "The key is sk-proj-abcdefghijklmnopqrstuvwx12"})]},
                     {"content": "ok"})
    with Conversation(agent_vault, opts(workspace=tmp_path)) as c:
        c.ask("remember my key")
        transcript = c.transcript
    result = [m for m in model_server.requests[1]["messages"] if m["role"] == "tool"][0]["content"]
    assert "refusing to commit a secret" in result and "sk-proj-abc" not in result
    assert "sk-proj" not in git(agent_vault, "log", "-p", "--all")
    # A refused write leaves the file as it was (issue 22); the transcript is redacted and committed.
    assert "sk-proj" not in (agent_vault.root / "memory/MEMORY.md").read_text()
    assert git(agent_vault, "status", "--porcelain", "memory") == ""
    assert "[REDACTED OpenAI API key]" in transcript.path.read_text()
    assert transcript.rel in git(agent_vault, "ls-files")


def test_skills_index_over_budget_picks_relevant_skills(agent_vault, model_server, tmp_path):
    from hermes_fs.mind import skills

    for i in range(40):
        skills.create(agent_vault.files, f"filler-skill-{i}", f"---\nname: filler-skill-{i}\ndescription: Generic helper number {i} for unrelated chores around the house and garden.\n---\nbody\n")
    skills.create(agent_vault.files, "kubernetes-rollback", "---\nname: kubernetes-rollback\ndescription: Roll back a failed Kubernetes deployment with kubectl rollout undo.\n---\nbody\n")
    (agent_vault.root / "hermes.yaml").write_text((agent_vault.root / "hermes.yaml").read_text() + "skills:\n  prompt_budget_chars: 600\n")
    agent_vault._config = None
    model_server.add({"content": "ok"})
    with Conversation(agent_vault, opts(workspace=tmp_path)) as c:
        c.ask("My kubernetes deployment failed, how do I roll back?")
    system = model_server.requests[0]["messages"][0]["content"]
    skills_part = system.split("# Skills")[1]
    assert "- kubernetes-rollback: Roll back" in skills_part
    assert "more skills not listed: call skill_search" in skills_part
    listed = [ln for ln in skills_part.splitlines() if ln.startswith("- ")]
    assert sum(len(ln) + 1 for ln in listed) <= 600


def test_resume_continues_history(agent_vault, model_server, tmp_path):
    model_server.add({"content": "first"}, {"content": "second"})
    with Conversation(agent_vault, opts(workspace=tmp_path)) as c:
        c.ask("one")
        sid = c.id
    with Conversation(agent_vault, opts(workspace=tmp_path, resume=sid)) as c:
        c.ask("two")
    msgs = model_server.requests[1]["messages"]
    assert [m["content"] for m in msgs[1:]] == ["one", "first", "two"]


def test_session_search(agent_vault, model_server, tmp_path):
    model_server.add({"content": "We deployed the zebra service."})
    with Conversation(agent_vault, opts(workspace=tmp_path)) as c:
        c.ask("tell me about zebra deployment")
    model_server.add({"tool_calls": [("session_search", {"query": "zebra"})]}, {"content": "found"})
    with Conversation(agent_vault, opts(workspace=tmp_path)) as c:
        c.ask("what did we say before?")
    result = [m for m in model_server.requests[-1]["messages"] if m["role"] == "tool"][0]["content"]
    assert "sessions/" in result and "zebra" in result.lower()


@pytest.mark.parametrize("provider", ["openai", "hosted_vllm"])
def test_an_interrupt_closes_the_model_connection_at_once_for_litellms_own_http_providers(
        agent_vault, model_server, tmp_path, provider):
    """Not only the OpenAI SDK's path: a provider litellm speaks over its own HTTP handler
    (hosted_vllm here, the same path as ollama_chat, groq, openrouter, anthropic ...) has its
    connection shut down by the interrupt, while the server is still holding the next chunk back."""
    import threading

    from hermes_fs.agent.model import TurnCancelled

    cfg = agent_vault.root / "hermes.yaml"
    cfg.write_text(cfg.read_text().replace("model: openai/test-model", f"model: {provider}/test-model"))
    agent_vault._config = None
    model_server.add({"content": " ".join(f"w{i}" for i in range(50)), "hold_after": 5})
    seen, errors = threading.Event(), []
    with Conversation(agent_vault, ConversationOptions(source="run", workspace=tmp_path)) as c:
        def turn():
            try:
                c.ask("tell me a story", lambda text: seen.set())
            except BaseException as exc:  # noqa: BLE001 - looked at below
                errors.append(exc)

        thread = threading.Thread(target=turn)
        thread.start()
        assert seen.wait(180)  # words arrived; the server now holds the rest back without writing
        c.interrupt()
        assert model_server.client_gone.wait(180)  # seen by the server while it was not writing
        thread.join(60)
    assert model_server.requests[0]["model"] == "test-model" and model_server.requests[0]["stream"] is True
    assert model_server.closed_early == [0]
    assert [type(e) for e in errors] == [TurnCancelled]
