"""`hermes-fs init`: a new vault from the template, or an existing folder adopted as one."""

from __future__ import annotations

import sys

import click

from .term import Spinner, echo


@click.command()
@click.argument("path", required=False, default=".", type=click.Path(file_okay=False))
@click.option("--model", help="The model (a litellm name: openai/gpt-4o-mini, ollama_chat/llama3.1, "
              "openai/<name> with --api-base for llama.cpp or vLLM); the review mode that suits it is set too.")
@click.option("--api-base", help="The model's OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1.")
@click.option("--no-probe", is_flag=True, help="With --model: do not ask the model to call a tool; choose the "
              "review mode by whether the model is local.")
def init(path: str, model: str | None, api_base: str | None, no_probe: bool):
    """Create a vault from the template: files, `git init -b main`, first commit. An existing folder
    or git repository (an Obsidian vault, a notes repo) is adopted: hermes.yaml, the folders and
    .gitignore lines are added and committed; its own files and history are left as they are.
    With --model, the model is set and asked to call one tool: a model that answers in words (most
    small local ones) gets refine.mode and learn.mode `structured`."""
    from pathlib import Path

    from .. import init_vault, setup_model

    if api_base and not model:
        raise click.UsageError("--api-base goes with --model")
    result = init_vault(Path(path))
    root = result.vault.root
    exe = Path(sys.executable).with_name("hermes-fs")
    if model:
        with Spinner(f"asking {model} to call a tool (which review mode suits it)"):
            chosen = setup_model(result.vault, model, api_base, probe=not no_probe)
        echo(chosen.line())
    if result.adopted:
        echo(f"adopted {root} as a vault: added {', '.join(sorted({p.split('/')[0] for p in result.added}))} "
             "(nothing of yours was changed)")
        if result.uncommitted:
            echo(f"note: the folder's own {result.uncommitted} file(s) are not in git yet; the daemon commits "
                 "them as your edits when it starts (or `git add` them yourself)")
    choose = f"  1. The model is set ({model}); change it in {root / 'hermes.yaml'} any time.\n" if model else (
        f"  1. Choose the model: edit `model` in {root / 'hermes.yaml'} (openai/gpt-4o-mini, anthropic/..., "
        "or ollama_chat/llama3.1 with `api_base: http://localhost:11434` for a local model), or run "
        "`init --model M [--api-base URL]`, which also sets the review mode that suits the model.\n")
    echo(f"{'' if result.adopted else 'created vault ' + str(root) + chr(10)}\nNext steps:\n{choose}"
         f"  2. Put the key in {root / '.hermes/secrets.env'} (untracked), e.g. OPENAI_API_KEY=sk-..., "
         "or export it in your shell. Local models need none.\n"
         f"  3. Talk to it: {exe} --vault {root} chat   (put {exe.parent} on your PATH to type just `hermes-fs`).\n"
         f"  Check the setup any time with: hermes-fs --vault {root} doctor")
    if result.set_local_identity:
        echo("note: no git identity was configured, so this vault got one of its own ('hermes-fs user'); your "
             f"edits are committed under it. Put your name on them: `git -C {root} config user.name 'Your Name'` "
             f"and `git -C {root} config user.email you@example.org`.")
