"""The `delegate` tool: the agent hands independent sub-tasks to sub-agents running in parallel.

Each sub-agent is a Conversation of its own (its own session transcript, whose frontmatter names
the parent, and a note in the parent's transcript naming it), with its own step budget and a
subset of the parent's tools: what a task asks for is checked against what the parent has, never
widened, and `delegate` itself is offered only above `delegation.max_depth`. Stopping the parent
(Ctrl-C) or the call's timeout stops every sub-agent. The model's task list is hostile input: its
shape, count and tool names are checked here before anything runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from ..errors import InputError
from ..store.config import DelegationConfig

NAME = "delegate"
SCHEMA = {"type": "function", "function": {
    "name": NAME,
    "description": "Hand independent sub-tasks to sub-agents that work in parallel, each in a session of its own, "
                   "and get their answers back. Give each a complete goal: it does not see this conversation.",
    "parameters": {"type": "object", "properties": {"tasks": {"type": "array", "items": {
        "type": "object", "properties": {
            "goal": {"type": "string", "description": "what the sub-agent must do and answer, self-contained"},
            "tools": {"type": "array", "items": {"type": "string"},
                      "description": "the tools it may use (a subset of yours; default: all of yours but delegate)"}},
        "required": ["goal"]}}}, "required": ["tasks"]}}}
MAX_GOAL_CHARS = 20_000


@dataclass(frozen=True)
class SubTask:
    goal: str
    tools: tuple[str, ...]


@dataclass
class SubResult:
    task: SubTask
    session: str | None
    answer: str
    ok: bool

    def render(self, n: int) -> str:
        head = f"task {n} (session {self.session or 'none'})" + ("" if self.ok else " FAILED")
        return f"{head}: {self.task.goal[:80]}\n{self.answer}"


class Child(Protocol):
    """What the delegator needs of a sub-agent (a Conversation): ask once, stop, end."""

    @property
    def id(self) -> str: ...
    def ask(self, text: str): ...
    def interrupt(self) -> None: ...
    def end(self) -> str | None: ...


def parse_tasks(raw: object, allowed: list[str], config: DelegationConfig) -> list[SubTask]:
    """The model's task list, checked: 1..max_tasks tasks, each a goal and known tools only."""
    if not isinstance(raw, list) or not raw:
        raise InputError("tasks must be a non-empty list of {goal, tools}")
    if len(raw) > config.max_tasks:
        raise InputError(f"{len(raw)} tasks: at most {config.max_tasks} per delegate call")
    default = tuple(t for t in allowed if t != NAME)
    tasks = []
    for i, item in enumerate(raw, 1):
        if not isinstance(item, dict) or not isinstance(item.get("goal"), str) or not item["goal"].strip():
            raise InputError(f"task {i}: needs a goal (a non-empty string)")
        if len(item["goal"]) > MAX_GOAL_CHARS:
            raise InputError(f"task {i}: the goal is over {MAX_GOAL_CHARS} characters")
        tools = item.get("tools")
        if tools is None:
            chosen = default
        elif not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
            raise InputError(f"task {i}: tools must be a list of tool names")
        else:
            wider = [t for t in tools if t not in allowed]
            if wider:
                raise InputError(f"task {i}: {', '.join(wider)} not available to a sub-agent here "
                                 f"(it may have only: {', '.join(default) or 'nothing'})")
            chosen = tuple(dict.fromkeys(tools))
        tasks.append(SubTask(item["goal"], chosen))
    return tasks


class Delegator:
    """Runs one delegate call's sub-agents, at most `max_parallel` at once; `stop()` (from the
    parent's interrupt) stops the running ones and skips the rest."""

    def __init__(self, config: DelegationConfig, allowed: Callable[[], list[str]],
                 start: Callable[[SubTask], Child]):
        self.config = config
        self.allowed = allowed  # the parent's tools now (a sub-agent gets no more)
        self.start = start  # makes a sub-agent's Conversation for a task
        self.running: set[Child] = set()
        self.stopped = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, raw_tasks: object) -> str:
        tasks = parse_tasks(raw_tasks, self.allowed(), self.config)
        self.stopped.clear()
        timer = threading.Timer(self.config.timeout_s, self.stop)
        timer.daemon = True
        timer.start()
        try:
            with ThreadPoolExecutor(max_workers=max(1, self.config.max_parallel), thread_name_prefix="delegate") as pool:
                results = list(pool.map(self._run, tasks))
        finally:
            timer.cancel()
        note = "\n(stopped: the delegate call was interrupted or ran out of time)" if self.stopped.is_set() else ""
        return "\n\n".join(r.render(n) for n, r in enumerate(results, 1)) + note

    def _run(self, task: SubTask) -> SubResult:
        if self.stopped.is_set():
            return SubResult(task, None, "not started: the delegate call was stopped", False)
        child = self.start(task)
        with self.lock:
            self.running.add(child)
        try:
            turn = child.ask(task.goal)
            return SubResult(task, child.id, turn.answer, not turn.stopped)
        except Exception as exc:  # a sub-agent's failure is its task's result, never the parent's crash
            return SubResult(task, child.id, f"error: {type(exc).__name__}: {exc}", False)
        finally:
            with self.lock:
                self.running.discard(child)
            child.end()

    def stop(self) -> None:
        self.stopped.set()
        with self.lock:
            children = list(self.running)
        for child in children:
            child.interrupt()
