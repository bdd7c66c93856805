"""A real `hermes-fs` CLI process that records every attempt to import litellm or torch (even one
a `try` would swallow): tests that the daily path and warm turns never pay for them."""

from __future__ import annotations

import os
import subprocess
import sys

HEAVY = ("litellm", "torch", "sentence_transformers")

# Runs the real entry point with a meta path finder that notes every heavy import it is asked for.
WATCHED = f"""
import sys
asked = []

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {HEAVY!r}:
            asked.append(name)
        return None

sys.meta_path.insert(0, Watch())
from hermes_fs.cli.main import main
try:
    main(sys.argv[1:], prog_name="hermes-fs")
except SystemExit as exc:
    code = exc.code
else:
    code = 0
print("HEAVY-IMPORTS", sorted(set(asked)), file=sys.stderr)
sys.exit(code)
"""


def watched(vault, *args: str, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WATCHED, "--vault", str(vault.root), *args], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, cwd=cwd, timeout=120)


def heavy(r: subprocess.CompletedProcess) -> str:
    line = [x for x in r.stderr.splitlines() if x.startswith("HEAVY-IMPORTS")]
    assert line, r.stderr
    return line[-1]
