"""Starting hermes-fs itself as a detached process (`daemon --detach`, a background refine)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path


def spawn(vault_root: Path, args: list[str], log: Path) -> int:
    """Run `hermes-fs --vault ROOT ARGS...` detached from this terminal; output appended to `log`.

    Returns the pid. The child is its own session leader, so Ctrl-C here never reaches it.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as out:
        proc = subprocess.Popen([sys.executable, "-m", "hermes_fs", "--vault", str(vault_root), *args],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=vault_root)  # holds no other folder open
    return proc.pid


def refine_in_background(vault, options) -> tuple[int, Path]:
    """`hermes-fs refine --wait ...` as a detached process (the CLI's `refine`, the web page's
    "refine this session"); its pid and log file."""
    log = vault.state_dir / "logs" / f"refine-{datetime.now(UTC):%Y%m%d-%H%M%S-%f}.log"
    args = ["refine", "--wait"]
    if options.session:
        args += ["--session", options.session]
    if options.policy:
        args += ["--policy", options.policy]
    if options.focus:
        args += ["--", options.focus]
    return spawn(vault.root, args, log), log


def embed_in_background(vault) -> tuple[int, Path] | None:
    """`hermes-fs skills embed` as a detached process when skills are ranked by meaning (the skills
    index is over its budget), some skill has no vectors yet, and nobody is building them (the
    daemon does it itself): a turn in a process without a daemon ranks by full-text meanwhile
    instead of waiting. Its pid and log file."""
    from ..mind import embeddings
    from ..mind.search import over_budget, surely_fits, vectors_lock, vectors_missing

    skills = vault.config.skills
    if embeddings.mode(skills.embeddings) == "off" or surely_fits(vault.root, skills.prompt_budget_chars):
        return None  # nothing is ranked: a listing of skills/ was all this call paid
    if not embeddings.wanted(skills.embeddings) or not embeddings.available() or vectors_lock(vault.root).is_held():
        return None
    if not vectors_missing(vault.root, model=embeddings.mode(skills.embeddings) == "model"):
        return None
    if not over_budget(vault.root, skills.prompt_budget_chars):
        return None
    log = vault.state_dir / "logs" / f"embed-{datetime.now(UTC):%Y%m%d-%H%M%S-%f}.log"
    return spawn(vault.root, ["skills", "embed", "--background"], log), log
