#!/usr/bin/env bash
# Installs a Matrix homeserver (Synapse, from PyPI) into its own venv, .venv-synapse, for the
# gateway tests. Idempotent: a second run checks the install and returns. Synapse's many pinned
# dependencies stay out of the project's own venv. The tests start it per session on a free port.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-synapse
PY=${PY:-python3}
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import synapse" 2>/dev/null; then
  exit 0
fi
test -x "$VENV/bin/python" || "$PY" -m venv "$VENV"
echo "installing Synapse into $VENV (log: $VENV/install.log)"
"$VENV/bin/pip" install -q --upgrade pip > "$VENV/install.log" 2>&1 || { cat "$VENV/install.log"; exit 1; }
"$VENV/bin/pip" install -q "matrix-synapse>=1.100" >> "$VENV/install.log" 2>&1 || { cat "$VENV/install.log"; exit 1; }
"$VENV/bin/python" -c "import synapse; print('synapse', synapse.__version__)"
