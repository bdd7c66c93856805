"""`hermes-fs init`: a new vault from the template, or an existing folder adopted as one."""

from __future__ import annotations

import sys

import click

from .term import echo


@click.command()
@click.argument("path", required=False, default=".", type=click.Path(file_okay=False))
def init(path: str):
    """Create a vault from the template: files, `git init -b main`, first commit. An existing folder
    or git repository (an Obsidian vault, a notes repo) is adopted: hermes.yaml, the folders and
    .gitignore lines are added and committed; its own files and history are left as they are."""
    from pathlib import Path

    from .. import init_vault

    result = init_vault(Path(path))
    root = result.vault.root
    exe = Path(sys.executable).with_name("hermes-fs")
    if result.adopted:
        echo(f"adopted {root} as a vault: added {', '.join(sorted({p.split('/')[0] for p in result.added}))} "
             "(nothing of yours was changed)")
        if result.uncommitted:
            echo(f"note: the folder's own {result.uncommitted} file(s) are not in git yet; the daemon commits "
                 "them as your edits when it starts (or `git add` them yourself)")
    echo(f"{'' if result.adopted else 'created vault ' + str(root) + chr(10)}\nNext steps:\n"
         f"  1. Choose the model: edit `model` in {root / 'hermes.yaml'} (openai/gpt-4o-mini, anthropic/..., "
         "or ollama_chat/llama3.1 with `api_base: http://localhost:11434` for a local model).\n"
         f"  2. Put the key in {root / '.hermes/secrets.env'} (untracked), e.g. OPENAI_API_KEY=sk-..., "
         "or export it in your shell. Local models need none.\n"
         f"  3. Talk to it: {exe} --vault {root} chat   (put {exe.parent} on your PATH to type just `hermes-fs`).\n"
         f"  Check the setup any time with: hermes-fs --vault {root} doctor")
    if result.set_local_identity:
        echo("note: no git identity was configured; set a vault-local one (hermes-fs user). "
                   "Change it with `git -C VAULT config user.name/user.email`.")
