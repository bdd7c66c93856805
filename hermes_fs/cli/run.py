"""`hermes-fs run` and `hermes-fs chat`: the agent at the terminal (the REPL itself: chat.py)."""

from __future__ import annotations

import sys

import click

from .context import vault_for
from .options import vault_option
from .term import Spinner, echo


@click.command()
@vault_option
@click.argument("prompt", nargs=-1, required=True)
@click.option("--model", help="Override the model for this run.")
@click.option("--workspace", type=click.Path(file_okay=False), help="Folder for files and the shell (default: here).")
@click.option("--max-steps", type=int, default=None, help="Most model calls for this task (default: the agent's).")
@click.pass_context
def run(ctx: click.Context, prompt: tuple[str, ...], model: str | None, workspace: str | None,
        max_steps: int | None):
    """Run one agent task and print the answer; the transcript goes to sessions/."""
    from pathlib import Path

    from ..service.auto_review import AutoReview
    from .answer import AnswerView
    from .remote import options_for, vectors_in_background, warm_conversation, warm_environment

    where = Path(workspace).resolve() if workspace else None
    v = vault_for(ctx)
    environ = warm_environment(v, model)
    view = AnswerView() if sys.stdout.isatty() else None  # a person watching: streamed Markdown
    on_tool = (lambda line: view.tool(f"  · {line}")) if view else None
    remote = None if environ is None else warm_conversation(
        v, options_for("run", model, where, max_steps, environ=environ), on_tool)
    if remote is not None:  # the daemon's warm process: no litellm import here
        try:
            _answer(view, lambda on_text: remote.ask(" ".join(prompt), on_text).answer)
        finally:
            remote.end()
        AutoReview(v, detached=True).after_turn(remote.id, 1)  # refine.every_turns: 1 reviews every run
        return
    from ..agent.model import import_litellm_in_background

    import_litellm_in_background()  # off the critical path: it overlaps loading the agent and building the prompt
    from .. import Conversation, ConversationOptions

    options = ConversationOptions(source="run", model=model, workspace=where, on_tool=on_tool)
    if max_steps:
        options.max_steps = max_steps
    vectors_in_background(v)
    with Conversation(v, options) as conversation:
        _answer(view, lambda on_text: conversation.ask(" ".join(prompt), on_text).answer)
    AutoReview(v, detached=True).after_turn(conversation.id, conversation.user_turns)
    _exit_without_teardown()


def _exit_without_teardown() -> None:
    """End the process now that the answer is out and the session committed: tearing down an
    interpreter that has imported litellm (hundreds of thousands of objects, freed one by one)
    costs a large share of a cold call's CPU and does nothing useful. Output is flushed and logs
    closed first; a thread still at work (not a daemon thread) gets the normal exit instead."""
    import os
    import threading

    if any(t.is_alive() and not t.daemon and t is not threading.main_thread() for t in threading.enumerate()):
        return
    import logging

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    logging.shutdown()
    os._exit(0)


def _answer(view, ask) -> None:
    """Run `ask(on_text)` and show its answer: streamed Markdown on a terminal, else printed whole
    once it is complete (a spinner on stderr meanwhile), exactly as piped output always was."""
    if view is None:
        with Spinner("thinking"):
            answer = ask(None)
        echo(answer)
        return
    view.thinking()
    try:
        answer = ask(view.text)
    except BaseException:
        view.stop()
        raise
    view.finish(answer)


@click.command()
@vault_option
@click.option("--resume", "resume", metavar="ID", help="Continue a past session.")
@click.option("--model", help="Override the model for this session.")
@click.option("--workspace", type=click.Path(file_okay=False), help="Folder for files and the shell (default: here).")
@click.pass_context
def chat(ctx: click.Context, resume: str | None, model: str | None, workspace: str | None):
    """Interactive session with slash commands (/help). Reads one message per line when piped."""
    from pathlib import Path

    from .. import ConversationOptions
    from .chat import chat as run_chat

    options = ConversationOptions(source="cli", model=model, resume=resume,
                                  workspace=Path(workspace).resolve() if workspace else None)
    failed = run_chat(vault_for(ctx), options, click.echo)
    if failed:
        echo(f"{failed} turn(s) failed", err=True)
        ctx.exit(1)
