"""Tool calls models write as text (tools.text_calls): recorded raw answers (tests/data/text_calls/)
replayed through the scripted model server over HTTP, whole and streamed, into a real Conversation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hermes_fs.agent.conversation import Conversation, ConversationOptions
from hermes_fs.agent.text_calls import HoldBack, read
from hermes_fs.agent.tools import SCHEMAS
from hermes_fs.store.provenance import Act

DATA = Path(__file__).parent / "data" / "text_calls"
CALLS = ["hermes_qwen_tagged", "fenced_json", "bare_json_arguments", "llama3_bare_json", "llama3_python_tag",
         "mistral_v3", "mistral_v11"]
RECORDED = sorted(p.stem for p in DATA.glob("qwen_local_*.txt"))  # from the real local model


def raw(name: str) -> str:
    return (DATA / f"{name}.txt").read_text(encoding="utf-8")


@pytest.fixture
def notes(agent_vault):
    (agent_vault.root / "notes").mkdir(exist_ok=True)
    (agent_vault.root / "notes/todo.md").write_text("- buy oat milk\n")
    agent_vault.git.commit_paths(["notes/todo.md"], "test: a note", Act.person())
    return agent_vault


def ask(vault, text: str, tmp_path, stream: bool = False) -> tuple[str, list[str]]:
    pieces: list[str] = []
    with Conversation(vault, ConversationOptions(source="run", workspace=tmp_path)) as c:
        answer = c.ask(text, pieces.append if stream else None).answer
    return answer, pieces


def tool_messages(request: dict) -> list[dict]:
    return [m for m in request["messages"] if m["role"] == "tool"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("name", CALLS + RECORDED)
@pytest.mark.slow
def test_a_text_call_runs_its_tool_and_is_not_the_answer(notes, model_server, tmp_path, name, stream):
    model_server.add({"content": raw(name)}, {"content": "Your todo list says: buy oat milk."})
    answer, pieces = ask(notes, "what is on my todo list?", tmp_path, stream)
    assert answer == "Your todo list says: buy oat milk."
    assert len(model_server.requests) == 2
    second = model_server.requests[1]["messages"]
    call_message = second[-2]
    assert call_message["role"] == "assistant"
    [call] = call_message["tool_calls"]
    assert call["function"]["name"] == "read_file"
    assert json.loads(call["function"]["arguments"])["path"].endswith("todo.md")
    assert "read_file" not in (call_message["content"] or "")  # the call was taken out of the text
    [result] = tool_messages(model_server.requests[1])
    assert result["tool_call_id"] == call["id"] and "buy oat milk" in result["content"]
    if stream:
        assert model_server.requests[0]["stream"] is True
        shown = "".join(pieces)
        assert "read_file" not in shown and "{" not in shown  # never shown as an answer, not even in pieces
        assert shown.endswith("Your todo list says: buy oat milk.")


@pytest.mark.parametrize("name", CALLS[:3])
def test_with_text_calls_off_the_text_is_the_answer(notes, model_server, tmp_path, name):
    (notes.root / "hermes.yaml").write_text((notes.root / "hermes.yaml").read_text() + "tools:\n  text_calls: off\n")
    notes._config = None
    model_server.add({"content": raw(name)})
    answer, _ = ask(notes, "what is on my todo list?", tmp_path)
    assert answer == raw(name)
    assert len(model_server.requests) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_call_to_a_tool_not_offered_is_a_tool_error_the_model_corrects(notes, model_server, tmp_path, stream):
    model_server.add({"content": raw("unknown_tool_fenced")},
                     {"content": raw("hermes_qwen_tagged")}, {"content": "It says: buy oat milk."})
    answer, pieces = ask(notes, "say hello, then read my todo", tmp_path, stream)
    assert answer == "It says: buy oat milk."
    [error] = tool_messages(model_server.requests[1])
    assert error["name"] == "say_hello"
    assert error["content"].startswith("error: there is no tool 'say_hello'; the tools you can call are:")
    assert "read_file" in error["content"]
    assert "buy oat milk" in tool_messages(model_server.requests[2])[-1]["content"]
    assert "say_hello" not in "".join(pieces)


def test_arguments_that_do_not_fit_the_schema_are_an_error_and_nothing_runs(notes, model_server, tmp_path):
    model_server.add({"content": raw("bad_arguments_tagged")}, {"content": "Sorry."})
    ask(notes, "read my todo", tmp_path)
    [error] = tool_messages(model_server.requests[1])
    assert error["content"] == "error: the arguments of 'read_file' do not fit its schema: 'path' is a required property"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_prose_that_shows_a_call_as_an_example_stays_prose(notes, model_server, tmp_path, stream):
    model_server.add({"content": raw("prose_with_example")})
    answer, pieces = ask(notes, "how do tool calls work?", tmp_path, stream)
    assert answer == raw("prose_with_example")
    assert len(model_server.requests) == 1
    if stream:
        assert "".join(pieces) == raw("prose_with_example")


def test_only_tools_offered_in_that_request_run(notes, model_server, tmp_path):
    """A review (refine) offers a few tools: a text call to `shell` there is refused, not run."""
    review_tools = [SCHEMAS[n] for n in ("memory", "read_file")]
    text = '<tool_call>\n{"name": "shell", "arguments": {"command": "touch /tmp/pwned"}}\n</tool_call>'
    shown, calls = read(text, review_tools)
    assert shown is None
    assert [(c.name, c.error) for c in calls] == [("shell", "there is no tool 'shell'; the tools you can call are: "
                                                   "memory, read_file")]


def test_no_tools_offered_means_no_calls(notes):
    assert read(raw("hermes_qwen_tagged"), []) == (raw("hermes_qwen_tagged"), [])


@pytest.mark.parametrize("text", [
    "<tool_call>" + "[" * 100_000 + "</tool_call>",  # deep nesting: not a crash
    "<tool_call>\x00\x01\xff binary junk</tool_call>",
    "[TOOL_CALLS] not json at all",
    "\n".join(["{"] * 20_000),
    '{"name": ' * 50_000,
])
def test_malformed_text_calls_are_errors_or_prose_never_a_crash(text):
    shown, calls = read(text, [SCHEMAS["read_file"]])
    for call in calls:
        assert call.error  # a tagged call that cannot be read is answered with an error
    assert shown is None or isinstance(shown, str)
    pieces: list[str] = []
    hold = HoldBack(pieces.append)
    for i in range(0, len(text), 4096):
        hold.feed(text[i:i + 4096])
    hold.finish(shown if calls else text)
    assert "".join(pieces) == (text if not calls else (shown or ""))


def test_a_huge_answer_is_not_scanned():
    text = "<tool_call>" + "x" * 300_000
    assert read(text, [SCHEMAS["read_file"]]) == (text, [])


def test_streamed_prose_and_code_are_passed_on_as_they_come():
    """Text that cannot be a call is not held back: code blocks once closed, lines of prose at once."""
    pieces: list[str] = []
    hold = HoldBack(pieces.append)
    for piece in ["Here", " is code:\n", "```python\n", "print(1)\n", "```\n", "and [a link](x) ", "done."]:
        hold.feed(piece)
    assert "".join(pieces) == "Here is code:\n```python\nprint(1)\n```\nand [a link](x) done."
    hold.finish("Here is code:\n```python\nprint(1)\n```\nand [a link](x) done.")
    assert "".join(pieces) == "Here is code:\n```python\nprint(1)\n```\nand [a link](x) done."
