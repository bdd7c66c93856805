"""Tool calls a model writes as text, read as the real tool calls they are (`tools.text_calls: auto`).

Many local models and servers put a call in the answer's text instead of the API's `tool_calls`:
Hermes/Qwen `<tool_call>{...}</tool_call>`, Llama 3.x bare JSON `{"name": ..., "parameters": ...}`
or `<|python_tag|>{...}`, Mistral `[TOOL_CALLS] [...]`, or a fenced JSON block. Printed, such a
call is a broken answer and no tool runs.

What is read is decided here, never by the model: only the tools offered in that very request run,
with arguments checked against the tool's JSON schema. A call in a tagged form (the tags exist for
nothing else) that names no offered tool, or whose arguments do not fit, becomes a call answered
with an error the model can correct. An untagged JSON object is read as a call only when it has a
call's shape; one naming no offered tool counts only when it is (nearly) all the message says, so
prose that shows a JSON example stays prose. Calls read are removed from the text shown.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from .model import Model, OnText, Reply, ToolCall

SCAN_LIMIT = 200_000  # longer answers are not searched for calls (a call is short; the scan is not free)
UNREADABLE = "unreadable_tool_call"  # the name given to a tagged call that is not a readable JSON call
LOOSE_PROSE_LIMIT = 200  # a call naming no offered tool counts if the rest of the message is this short

_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.S)
_PYTHON_TAG = re.compile(r"<\|python_tag\|>(.*?)(?:<\|eom_id\|>|<\|eot_id\|>|\Z)", re.S)
_MISTRAL = re.compile(r"\[TOOL_CALLS\]")
_MISTRAL_V11 = re.compile(r"([A-Za-z0-9_.-]+)(?:\[CALL_ID\][A-Za-z0-9]*)?\[ARGS\]")
_FENCE = re.compile(r"```[ \t]*(?:json|tool_call|tool_code|javascript|js)?[ \t]*\n(.*?)\n?[ \t]*```", re.S | re.I)
_JSON_FENCES = ("", "json", "tool_call", "tool_code", "javascript", "js")
_CLOSE_FENCE = re.compile(r"\n[ \t]*```")
_UNREADABLE_JSON = (ValueError, RecursionError)  # RecursionError: nesting deep enough to exhaust the stack
_STRAY_TOKENS = re.compile(r"<\|(?:eom_id|eot_id|im_end)\|>")
# Where a call may begin: text from here on is held back while streaming until the message ends.
_MARKERS = ("<tool_call>", "<|python_tag|>", "[TOOL_CALLS]", "```")


@dataclass
class Found:
    start: int
    end: int
    calls: list[ToolCall]


def read(content: str | None, tools: list[dict]) -> tuple[str | None, list[ToolCall]]:
    """(the text to show, the calls read) from a reply's text and the tools offered with it."""
    if not content or not tools or len(content) > SCAN_LIMIT:
        return content, []
    offered = {t["function"]["name"]: t["function"].get("parameters") or {} for t in tools if "function" in t}
    found = _tagged(content, offered)
    taken = [(f.start, f.end) for f in found]
    loose = _loose(content, offered, taken)
    rest = _without(content, [(f.start, f.end) for f in found + loose])
    for f in loose:
        if any(c.name in offered for c in f.calls) or len(rest) <= LOOSE_PROSE_LIMIT:
            found.append(f)
    if not found:
        return content, []
    found.sort(key=lambda f: f.start)
    shown = _without(content, [(f.start, f.end) for f in found])
    calls = [replace(c, id=f"text_call_{i}") for i, c in enumerate(c for f in found for c in f.calls)]
    return shown or None, calls


def _tagged(content: str, offered: dict[str, dict]) -> list[Found]:
    found = []
    for m in _TAGGED.finditer(content):
        values = _json_values(m.group(1)) or [_Unreadable()]
        found.append(Found(m.start(), m.end(), _calls(values, offered, strict=True)))
    for m in _PYTHON_TAG.finditer(content):
        body = m.group(1).strip()
        values = _json_values(body.replace(";", "\n")) or [_Unreadable()]  # Llama 3.1 separates calls with `;`
        found.append(Found(m.start(), m.end(), _calls(values, offered, strict=True)))
    for m in _MISTRAL.finditer(content):
        end, values = _mistral(content, m.end())
        found.append(Found(m.start(), end, _calls(values, offered, strict=True)))
    return [f for f in found if f.calls]


def _mistral(content: str, at: int) -> tuple[int, list]:
    """After `[TOOL_CALLS]`: a JSON list of calls (v3 templates), or `name[ARGS]{...}` (v11)."""
    decoder = json.JSONDecoder()
    i = _skip_space(content, at)
    if i < len(content) and content[i] in "[{":
        try:
            value, end = decoder.raw_decode(content, i)
        except _UNREADABLE_JSON:
            return len(content), [_Unreadable()]
        return end, value if isinstance(value, list) else [value]
    m = _MISTRAL_V11.match(content, i)
    if not m:
        return len(content), [_Unreadable()]
    try:
        args, end = decoder.raw_decode(content, m.end())
    except _UNREADABLE_JSON:
        return len(content), [{"name": m.group(1), "arguments": content[m.end():]}]
    return end, [{"name": m.group(1), "arguments": args}]


def _loose(content: str, offered: dict[str, dict], taken: list[tuple[int, int]]) -> list[Found]:
    """Fenced JSON blocks and bare JSON objects (or lists) that have a call's shape."""
    found: list[Found] = []

    def free(start: int, end: int) -> bool:
        return not any(s < end and start < e for s, e in taken + [(f.start, f.end) for f in found])

    for m in _FENCE.finditer(content):
        values = _json_values(m.group(1))
        if free(m.start(), m.end()) and values and all(_shaped(v) for v in values):
            found.append(Found(m.start(), m.end(), _calls(values, offered, strict=False)))
    decoder = json.JSONDecoder()
    for m in re.finditer(r"(?m)^[ \t]*([{\[])", content):  # JSON starting a line (or the message)
        start = m.start(1)
        if not free(start, start + 1):
            continue
        try:
            value, end = decoder.raw_decode(content, start)
        except _UNREADABLE_JSON:
            continue
        values = value if isinstance(value, list) else [value]
        if values and all(_shaped(v) for v in values) and free(start, end):
            found.append(Found(start, end, _calls(values, offered, strict=False)))
    return [f for f in found if f.calls]


def _shaped(value) -> bool:
    """A call's shape: a name and arguments (or parameters), or OpenAI's {"function": {...}}."""
    if not isinstance(value, dict):
        return False
    if isinstance(value.get("function"), dict):
        value = value["function"]
    return isinstance(value.get("name"), str) and ("arguments" in value or "parameters" in value)


def _calls(values: list, offered: dict[str, dict], strict: bool) -> list[ToolCall]:
    calls = []
    for value in values:
        if isinstance(value, dict) and isinstance(value.get("function"), dict):
            value = value["function"]
        if not isinstance(value, dict) or not (strict or _shaped(value)):
            if strict:
                calls.append(ToolCall("", UNREADABLE, "{}", error="the tool call is not a JSON object with a name and "
                                      "arguments; write <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>"))
            continue
        name = value["name"] if isinstance(value.get("name"), str) else ""
        args = value.get("arguments", value.get("parameters", {}))
        calls.append(_checked(name, args, offered))
    return calls


def _checked(name: str, args, offered: dict[str, dict]) -> ToolCall:
    if isinstance(args, str):  # some models write the arguments as a JSON string, as the API does
        try:
            args = json.loads(args) if args.strip() else {}
        except _UNREADABLE_JSON:
            return ToolCall("", name, args, error=f"the arguments of {name!r} are not valid JSON; send a JSON object")
    text = json.dumps(args, ensure_ascii=False)
    if name not in offered:
        tools = ", ".join(sorted(offered))
        return ToolCall("", name, text, error=f"there is no tool {name!r}; the tools you can call are: {tools}")
    problem = schema_problem(args, offered[name])
    if problem:
        return ToolCall("", name, text, error=f"the arguments of {name!r} do not fit its schema: {problem}")
    return ToolCall("", name, text)


def schema_problem(args, schema: dict) -> str | None:
    """What is wrong with `args` for a JSON schema, in one line; None when they fit."""
    import jsonschema

    if not isinstance(args, dict):
        return "arguments must be a JSON object"
    try:
        validator = jsonschema.validators.validator_for(schema)(schema)
        error = jsonschema.exceptions.best_match(validator.iter_errors(args))
    except jsonschema.exceptions.SchemaError:
        return None  # the tool's own schema is broken: let the tool judge its arguments
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where + ': ' if where else ''}{error.message[:300]}"


def _json_values(text: str) -> list:
    """Every JSON value in `text`, one after another (separated by whitespace or newlines)."""
    decoder = json.JSONDecoder()
    values: list = []
    i = _skip_space(text, 0)
    while i < len(text):
        try:
            value, i = decoder.raw_decode(text, i)
        except _UNREADABLE_JSON:
            return values or [_Unreadable()]
        values.extend(value if isinstance(value, list) else [value])
        i = _skip_space(text, i)
    return values


class _Unreadable:
    """A tagged call whose body is not JSON: still a call, answered with an error."""


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n,":
        i += 1
    return i


def _without(content: str, spans: list[tuple[int, int]]) -> str:
    out, at = [], 0
    for start, end in sorted(spans):
        if start >= at:
            out.append(content[at:start])
            at = end
        else:
            at = max(at, end)
    out.append(content[at:])
    text = _STRAY_TOKENS.sub("", "".join(out))
    return re.sub(r"\n{3,}", "\n\n", text).strip()


class HoldBack:
    """Streamed text passed on as it comes, except where a call may begin: a tagged call is held
    until the message is complete (then shown only if it was not read as a call); a fenced block or
    a line opening with `{` or `[` is held only until it is clearly not a call."""

    def __init__(self, on_text: OnText):
        self.on_text = on_text
        self.sent = ""
        self.pending = ""
        self.holding = False  # a call (or what looks like one): held to the end of the message

    def feed(self, text: str) -> None:
        self.pending += text
        while self.pending and not self.holding:
            cut = _hold_from(self.pending, line_start=not self.sent or self.sent.endswith("\n"))
            self._send(self.pending[:cut])
            self.pending = self.pending[cut:]
            if not self.pending:
                return
            verdict = _verdict(self.pending)
            if verdict is None:
                return  # not yet known: wait for more text
            if verdict == 0:
                self.holding = True
                return
            self._send(self.pending[:verdict])
            self.pending = self.pending[verdict:]

    def _send(self, text: str) -> None:
        if text:
            self.sent += text
            self.on_text(text)

    def finish(self, shown: str | None) -> None:
        """The message is complete and `shown` is what remains of it once calls are taken out."""
        shown, sent = shown or "", self.sent.strip()
        if shown.startswith(self.sent):
            rest = shown[len(self.sent):]
        else:  # calls taken out: the text shown is stripped of the whitespace around them
            rest = shown[len(sent):].lstrip("\n" if sent else " \t\n") if shown.startswith(sent) else ""
        if rest:
            self._send(rest)
        self.pending, self.holding = "", False


def _hold_from(text: str, line_start: bool) -> int:
    """Where in `text` a call may begin (len(text): nowhere): a call marker, a marker cut in two by
    the chunk's end, or `{`/`[` opening a line."""
    cut = len(text)
    for marker in _MARKERS:
        i = text.find(marker)
        if i >= 0:
            cut = min(cut, i)
        for k in range(len(marker) - 1, 0, -1):
            if text.endswith(marker[:k]):
                cut = min(cut, len(text) - k)
                break
    for m in re.finditer(r"(?m)^[ \t]*[{\[]", text):
        if m.start() > 0 or line_start:
            cut = min(cut, m.start())
            break
    return cut


def _verdict(held: str) -> int | None:
    """For text that starts where a call may begin: 0 hold it all (a call), n > 0 the first n
    characters are plain text, None: not known yet."""
    if held.startswith(("<tool_call>", "<|python_tag|>", "[TOOL_CALLS]")):
        return 0
    if any(m.startswith(held) for m in _MARKERS):
        return None  # a marker's beginning, cut by the chunk's end
    if held.startswith("```"):
        newline = held.find("\n")
        close = _CLOSE_FENCE.search(held, newline) if newline >= 0 else None
        if close is None:
            return None  # a code block is shown once it is closed (or at the end of the message)
        if held[3:newline].strip().lower() not in _JSON_FENCES:
            return close.end()
        values = _json_values(held[newline + 1:close.start()])
        return 0 if values and all(_shaped(v) for v in values) else close.end()
    start = len(held) - len(held.lstrip(" \t"))
    try:
        value, end = json.JSONDecoder().raw_decode(held, start)
    except RecursionError:
        return start + 1
    except json.JSONDecodeError as exc:
        return None if exc.pos >= len(held) - 1 or _is_prefix_of_json(held[start:]) else start + 1
    values = value if isinstance(value, list) else [value]
    return 0 if values and all(_shaped(v) for v in values) else end


def _is_prefix_of_json(text: str) -> bool:
    """Whether more text could still make `text` a JSON value (decoding failed for want of it)."""
    try:
        json.loads(text + "\u0000")
    except json.JSONDecodeError as exc:
        return exc.pos >= len(text)
    except RecursionError:
        return False
    return True


class TextCallModel:
    """A Model whose replies have their text calls read (see `read`): the loop then runs them like
    any other call. Streamed text goes through a HoldBack, so a call is never shown as the answer."""

    def __init__(self, model: Model, on_read: Callable[[list[ToolCall]], None] | None = None):
        self.model = model
        self.name = model.name
        self.on_read = on_read

    def complete(self, messages: list[dict], tools: list[dict], response_format: dict | None = None,
                 on_text: OnText | None = None, temperature: float | None = None) -> Reply:
        hold = HoldBack(on_text) if on_text and tools else None
        reply = self.model.complete(messages, tools, response_format, on_text=hold.feed if hold else on_text,
                                    **({"temperature": temperature} if temperature is not None else {}))
        if not reply.tool_calls and tools:
            shown, calls = read(reply.content, tools)
            if calls:
                reply = Reply(shown, calls, reply.usage)
                if self.on_read:
                    self.on_read(calls)
        if hold:
            hold.finish(reply.content)
        return reply

    def __getattr__(self, name: str):  # usage, calls, settings: the wrapped model's
        return getattr(self.model, name)
