"""The NumPy all-MiniLM-L6-v2 (mind/minilm.py) gives sentence-transformers' own vectors, without torch.

The reference vectors in tests/data/minilm_reference.json were made by sentence-transformers on
torch from the same packaged weights; here only NumPy and tokenizers run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_fs.mind import embeddings, minilm

DATA = Path(__file__).parent / "data" / "minilm_reference.json"
needs_model = pytest.mark.skipif(not embeddings.available(), reason="the embedding model package is not installed")


@needs_model
def test_vectors_agree_with_sentence_transformers():
    import numpy as np

    ref = json.loads(DATA.read_text())
    ours = embeddings.encode(ref["texts"])
    theirs = np.array(ref["vectors"], dtype=np.float32)
    assert ours.shape == theirs.shape == (3, embeddings.DIM)
    assert (ours * theirs).sum(1).min() > 0.99999  # cosine; the long text is cut at 256 tokens by both
    assert np.abs(ours - theirs).max() < 1e-4


@needs_model
def test_a_batch_with_padding_gives_each_text_its_own_vector():
    import numpy as np

    texts = ["a", "a much longer sentence about rotating keys on servers, padded beside the short one"]
    together = embeddings.encode(texts)
    alone = np.concatenate([embeddings.encode([t]) for t in texts])
    assert np.abs(together - alone).max() < 1e-5


@needs_model
def test_ranking_by_meaning_never_imports_torch():
    code = ("import sys; from hermes_fs.mind import embeddings; embeddings.encode(['hello']); "
            "print(any(m == 'torch' or m.startswith(('torch.', 'sentence_transformers')) for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_corrupt_weights_file_is_a_clear_error(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
    with pytest.raises(ValueError, match="not a safetensors file"):
        minilm.read_safetensors(tmp_path / "model.safetensors")
