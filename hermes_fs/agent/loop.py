"""The agent loop: ask the model, run the tool calls it makes, repeat until it answers.

It knows nothing about which tools exist (a `Tools` object supplies schemas and runs calls), where
messages are kept (an `on_message` callback records each one as it happens) nor how the model's
text reaches a screen (`on_text`, handed to the model). A call the model's reply already refused
(`ToolCall.error`: a text call naming no offered tool) is answered with its error, never run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from .model import Model, OnText, TurnCancelled, Usage
from .outgoing import OutgoingFile

__all__ = ["Agent", "AgentConfig", "Tools", "TurnCancelled", "TurnResult"]


class Tools(Protocol):
    def schemas(self) -> list[dict]: ...
    def call(self, name: str, raw_arguments: str) -> str: ...


@dataclass
class AgentConfig:
    max_steps: int = 25  # model calls per user turn


@dataclass
class TurnResult:
    answer: str
    steps: int
    usage: Usage = field(default_factory=Usage)
    stopped: bool = False  # hit the step limit
    files: list[OutgoingFile] = field(default_factory=list)  # sent with the answer (the send_file tool)


class Agent:
    def __init__(self, model: Model, tools: Tools, config: AgentConfig | None = None,
                 on_message: Callable[[dict], None] | None = None, cancel: threading.Event | None = None):
        self.model = model
        self.tools = tools
        self.config = config or AgentConfig()
        self.on_message = on_message or (lambda msg: None)
        self.cancel = cancel  # set from another thread: the turn stops before its next step

    def run(self, messages: list[dict], on_text: OnText | None = None) -> TurnResult:
        """Extend `messages` (system prompt + history + the new user message) until an answer."""
        usage = Usage()
        for step in range(1, self.config.max_steps + 1):
            if self.cancel is not None and self.cancel.is_set():
                raise TurnCancelled("the turn was interrupted")
            reply = self.model.complete(messages, self.tools.schemas(), on_text=on_text)
            usage.add(reply.usage)
            self._add(messages, reply.as_message())
            if not reply.tool_calls:
                return TurnResult(reply.content or "", step, usage)
            for call in reply.tool_calls:
                result = f"error: {call.error}" if call.error else self.tools.call(call.name, call.arguments)
                self._add(messages, {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": result})
        note = f"Stopped after {self.config.max_steps} steps without a final answer."
        self._add(messages, {"role": "assistant", "content": note})
        return TurnResult(note, self.config.max_steps, usage, stopped=True)

    def _add(self, messages: list[dict], msg: dict) -> None:
        messages.append(msg)
        self.on_message(msg)
