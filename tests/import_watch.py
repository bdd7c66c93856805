"""A real `hermes-fs` CLI process that records every attempt to import litellm or torch (even one
a `try` would swallow): tests that the daily path and warm turns never pay for them."""

from __future__ import annotations

import os
import subprocess
import sys

HEAVY = ("litellm", "torch", "sentence_transformers")

# Runs the real entry point with a meta path finder that says at once (a process may end with
# os._exit, skipping anything after main) each heavy import it is asked for.
WATCHED = f"""
import sys

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {HEAVY!r}:
            print("HEAVY-IMPORT", name, file=sys.stderr, flush=True)
        return None

sys.meta_path.insert(0, Watch())
print("IMPORT-WATCH-ON", file=sys.stderr, flush=True)
from hermes_fs.cli.main import main
main(sys.argv[1:], prog_name="hermes-fs")
"""


def watched(vault, *args: str, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WATCHED, "--vault", str(vault.root), *args], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, cwd=cwd, timeout=120)


def heavy(r: subprocess.CompletedProcess) -> str:
    """"HEAVY-IMPORTS [names]": the top-level heavy packages the process asked to import."""
    lines = r.stderr.splitlines()
    assert "IMPORT-WATCH-ON" in lines, r.stderr
    names = {x.split()[1].split(".")[0] for x in lines if x.startswith("HEAVY-IMPORT ")}
    return f"HEAVY-IMPORTS {sorted(names)}"
