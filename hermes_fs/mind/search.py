"""Full-text search over skills and sessions: SQLite FTS5 in .hermes/index.sqlite.

A cache in the DESIGN sense: delete it and it is rebuilt from the files. Each refresh compares
(mtime, size) per file and re-reads only what changed, so staleness costs a stat per file.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import HermesError, InputError
from ..store.docs import decode, parse_doc
from ..store.lock import VaultLock
from ..store.private import connect_private
from .skills import SKILL_FILE, SKILLS_DIR

_WORD = re.compile(r"[A-Za-z0-9]{2,}")
STOPWORDS = set("the a an and or to of in on for with is are be it this that how what do does can i you my me we "
                "please use using when from at by as".split())


@dataclass
class Hit:
    path: str
    name: str
    description: str
    snippet: str
    score: float


class SearchIndex:
    def __init__(self, vault_root: Path):
        self.root = Path(vault_root)
        db = self.root / ".hermes" / "index.sqlite"
        db.parent.mkdir(exist_ok=True)
        self.db = connect_private(db, timeout=30)  # it holds the text of every session
        self.db.executescript(
            """
            CREATE TABLE IF NOT EXISTS files(path TEXT PRIMARY KEY, kind TEXT, mtime_ns INTEGER, size INTEGER);
            CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(
                path UNINDEXED, kind UNINDEXED, name, description, body, tokenize='porter unicode61');
            """
        )

    def close(self) -> None:
        self.db.close()

    # -- keeping it fresh ------------------------------------------------------------------------
    def refresh(self, kind: str) -> int:
        """Bring one kind (skills | sessions) up to date; returns how many files were re-read."""
        current = dict(self._scan(kind))
        known = {p: (m, s) for p, m, s in self.db.execute("SELECT path, mtime_ns, size FROM files WHERE kind=?", (kind,))}
        changed = [p for p, sig in current.items() if known.get(p) != sig]
        gone = [p for p in known if p not in current]
        with self.db:
            for p in gone + changed:
                self.db.execute("DELETE FROM fts WHERE path=?", (p,))
                self.db.execute("DELETE FROM files WHERE path=?", (p,))
            for p in changed:
                name, desc, body = self._read(kind, p)
                self.db.execute("INSERT INTO fts(path, kind, name, description, body) VALUES (?,?,?,?,?)",
                                (p, kind, name, desc, body))
                self.db.execute("INSERT INTO files VALUES (?,?,?,?)", (p, kind, *current[p]))
        return len(changed)

    def _scan(self, kind: str):
        base = self.root / (SKILLS_DIR if kind == "skills" else "sessions")
        if not base.is_dir():
            return
        if kind == "skills":
            for entry in os.scandir(base):
                f = os.path.join(entry.path, SKILL_FILE)
                if entry.is_dir(follow_symlinks=False) and not entry.name.startswith(".") and os.path.isfile(f):
                    st = os.stat(f)
                    yield f"{SKILLS_DIR}/{entry.name}/{SKILL_FILE}", (st.st_mtime_ns, st.st_size)
            return
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                if name.endswith(".md"):
                    full = os.path.join(dirpath, name)
                    st = os.stat(full)
                    yield os.path.relpath(full, self.root).replace(os.sep, "/"), (st.st_mtime_ns, st.st_size)

    def _read(self, kind: str, rel: str) -> tuple[str, str, str]:
        try:
            doc = parse_doc(decode((self.root / rel).read_bytes(), rel), rel)
        except (InputError, OSError):
            return rel.split("/")[-2 if kind == "skills" else -1], "", ""
        if kind == "skills":
            return str(doc.meta.get("name") or rel.split("/")[1]), str(doc.meta.get("description") or ""), doc.body
        return str(doc.meta.get("title") or ""), str(doc.meta.get("id") or ""), doc.body

    # -- searching -------------------------------------------------------------------------------
    def search(self, kind: str, query: str, limit: int = 10) -> list[Hit]:
        self.refresh(kind)
        match = fts_query(query)
        if not match:
            return []
        rows = self.db.execute(
            "SELECT path, name, description, snippet(fts, 4, '[', ']', ' ... ', 12), bm25(fts, 0, 0, 10.0, 4.0, 1.0) "
            "FROM fts WHERE fts MATCH ? AND kind=? ORDER BY bm25(fts, 0, 0, 10.0, 4.0, 1.0) LIMIT ?",
            (match, kind, limit),
        ).fetchall()
        return [Hit(p, n, d, s, -score) for p, n, d, s, score in rows]

    def related(self, query: str, per_word: int = 3, most_docs: int = 40) -> list[str]:
        """Words related to the query's, mined from the skills themselves: for each query word found
        in a few skills' names or descriptions, the words those skills share most (in at least two of
        them), weighted by lift (how much more often they come with the word than without). No thesaurus: the library is its own corpus of contexts."""
        words = [w for w in fts_query(query).split(" OR ") if w]
        if not words:
            return []
        total = max(1, self.count("skills"))
        out: list[str] = []
        for word in words:
            docs = self.db.execute("SELECT name, description FROM fts WHERE fts MATCH ? AND kind='skills' LIMIT ?",
                                   (f"{{name description}} : {word}", most_docs + 1)).fetchall()
            if not docs or len(docs) > most_docs:
                continue  # unknown, or too common to say anything
            together: dict[str, int] = {}
            for name, desc in docs:
                for stem in self._stems(f"{name.replace('-', ' ')} {desc}"):
                    together[stem] = together.get(stem, 0) + 1
            own = self._stems(word.strip('"')) | set(out)
            scored = []
            for stem, n in together.items():
                if n < 2 or stem in own or stem in STOPWORDS or len(stem) < 3:
                    continue
                share = n / len(docs)  # how often it comes with the word, against how often overall
                scored.append((share * math.log(share * total / max(1, self._doc_freq(stem))), stem))
            out += [stem for _score, stem in sorted(scored, reverse=True)[:per_word]]
        return out

    def _stems(self, text: str) -> set[str]:
        """Words as the index stems them (porter, via a scratch FTS5 table of the same tokenizer)."""
        db = self.db
        db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.scratch USING fts5(x, tokenize='porter unicode61')")
        db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.scratch_terms USING fts5vocab(temp, scratch, 'row')")
        db.execute("DELETE FROM scratch")
        db.execute("INSERT INTO scratch VALUES (?)", (text,))
        return {t for (t,) in db.execute("SELECT term FROM scratch_terms")}

    def _doc_freq(self, stem: str) -> int:
        self.db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.fts_terms USING fts5vocab(main, fts, 'row')")
        row = self.db.execute("SELECT doc FROM fts_terms WHERE term=?", (stem,)).fetchone()
        return row[0] if row else 0

    def search_related(self, query: str, limit: int = 50) -> list[Hit]:
        """Skills by the related words of the query (the query's own words left out)."""
        terms = self.related(query)
        if not terms:
            return []
        match = " OR ".join(f'"{t}"' for t in terms)
        rows = self.db.execute(
            "SELECT path, name, description, '', bm25(fts, 0, 0, 10.0, 4.0, 1.0) FROM fts WHERE fts MATCH ? "
            "AND kind='skills' ORDER BY bm25(fts, 0, 0, 10.0, 4.0, 1.0) LIMIT ?", (match, limit)).fetchall()
        return [Hit(p, n, d, s, -score) for p, n, d, s, score in rows]

    def semantic(self, query: str, limit: int = 50, kind: str = "model") -> tuple[list[str], int]:
        """Skill paths by meaning (mind/embeddings.py; needs the `embeddings` extra), best first,
        and how many skills had no vectors of `kind` (static | model) cached. The model's vectors
        are never made here (that is `fill_vectors`' work, so a turn never waits for the
        transformer): skills without them are left to the other rankings, and with none ready the
        model is not even opened. Static vectors need no transformer, only the token table (built
        at install time): skills that arrived since the last fill are encoded here, the same way
        the fill encodes them (about a millisecond a skill), and kept in the cache, so the first
        turn after skills arrive ranks them by meaning too."""
        from . import embeddings

        vectors = embeddings.SkillVectors(self.db, kind)
        current = self._skill_signatures()
        stale = vectors.stale(current)
        if not query.strip() or (kind != embeddings.STATIC and len(stale) == len(current)):
            return [], len(stale)
        if kind == embeddings.STATIC:
            from .static_vectors import encoder_for

            encoder = encoder_for(self.root / ".hermes").encode  # TableMissing when there is none
            made = self._encode_now(stale, current, encoder) if stale else {}
            return vectors.ranked(current, encoder([query])[0], embeddings.STATIC_BODY_WEIGHT, limit, made), len(stale)
        return vectors.ranked(current, embeddings.encode([query])[0], embeddings.BODY_WEIGHT, limit), len(stale)

    def _encode_now(self, paths: list[str], current: dict[str, tuple[int, int]], encoder) -> dict:
        """Static vectors of `paths` made in this turn (skill_texts, as the fill makes them), stored
        in the cache when the database is free at once (a fill or another turn may hold it: then
        only this turn uses them)."""
        import sqlite3

        from . import embeddings

        wanted = set(paths)
        rows = {p: (n, d, b) for p, n, d, b in
                self.db.execute("SELECT path, name, description, body FROM fts WHERE kind='skills'") if p in wanted}
        order = [p for p in paths if p in rows]
        texts = [embeddings.skill_texts(*rows[p]) for p in order]
        flat = encoder([t for ts in texts for t in ts])
        made, i = {}, 0
        for p, ts in zip(order, texts, strict=True):
            made[p] = flat[i: i + len(ts)]
            i += len(ts)
        table = embeddings.TABLES[embeddings.STATIC]
        try:
            self.db.execute("PRAGMA busy_timeout=100")
            with self.db:
                self.db.executemany(f"DELETE FROM {table} WHERE path=?", [(p,) for p in order])
                self.db.executemany(f"INSERT INTO {table} VALUES (?,?,?,?)",
                                    [(p, *current[p], made[p].tobytes()) for p in order])
        except sqlite3.OperationalError:
            pass
        finally:
            self.db.execute("PRAGMA busy_timeout=30000")
        return made

    def fill_vectors(self, stop=None, kind: str = "model") -> int:
        """Encode the skills that have no fresh vectors of `kind` (new, changed, or a cold cache)."""
        from . import embeddings

        current = self._skill_signatures()
        rows = {p: (n, d, b) for p, n, d, b in
                self.db.execute("SELECT path, name, description, body FROM fts WHERE kind='skills'")}
        encoder = None
        if kind == embeddings.STATIC:
            from .static_vectors import encoder_for

            encoder = encoder_for(self.root / ".hermes").encode
        return embeddings.SkillVectors(self.db, kind, encoder).fill(
            current, lambda p: embeddings.skill_texts(*rows[p]), stop=stop)

    def _skill_signatures(self) -> dict[str, tuple[int, int]]:
        self.refresh("skills")
        return {p: (m, s) for p, m, s in self.db.execute("SELECT path, mtime_ns, size FROM files WHERE kind='skills'")}

    def count(self, kind: str) -> int:
        return self.db.execute("SELECT count(*) FROM files WHERE kind=?", (kind,)).fetchone()[0]


def search(vault_root: Path, kind: str, query: str, limit: int = 10) -> list[Hit]:
    """One search on a fresh connection (the `searcher` the agent's tools and MCP clients use)."""
    index = SearchIndex(vault_root)
    try:
        return index.search(kind, query, limit)
    finally:
        index.close()


def fill_vectors(vault_root: Path, stop=None, model: bool = True, build_table: bool = True) -> int | None:
    """Build or refresh the skill vectors of a vault (the daemon's background work, `hermes-fs
    skills embed`): the static token table if it is missing (a minute, once), the static vectors,
    then, with `model`, the model's. How many skills were encoded (static and model counted once
    each); None when another process is already at it (one filler per vault). Without
    `build_table` a missing table raises TableMissing (the daemon builds it in a child process, so
    the transformer's weights never enter the daemon)."""
    from . import embeddings, static_vectors

    lock = vectors_lock(vault_root)
    try:
        lock.acquire(timeout=0)
    except HermesError:
        return None
    index = SearchIndex(vault_root)
    try:
        state = Path(vault_root) / ".hermes"
        if not static_vectors.is_built(state):
            if not build_table:
                raise static_vectors.TableMissing("the static token table is not built yet")
            if static_vectors.build(state, stop=stop) is None:
                return 0
        done = index.fill_vectors(stop, embeddings.STATIC)
        if model and not (stop is not None and stop.is_set()):
            done += index.fill_vectors(stop, embeddings.MODEL)
        return done
    finally:
        index.close()
        lock.release()


def vectors_lock(vault_root: Path) -> VaultLock:
    return VaultLock(Path(vault_root) / ".hermes" / "locks" / "skill-vectors.lock")


def vectors_missing(vault_root: Path, model: bool = True) -> int:
    """How many skills have no fresh vectors yet, static (or, with `model`, the model's); all of
    them while the static table is not built (a stat per skill and one query; no model)."""
    from . import embeddings, static_vectors

    index = SearchIndex(vault_root)
    try:
        current = index._skill_signatures()
        if not static_vectors.is_built(Path(vault_root) / ".hermes"):
            return len(current)
        stale = set(embeddings.SkillVectors(index.db, embeddings.STATIC).stale(current))
        if model:
            stale |= set(embeddings.SkillVectors(index.db, embeddings.MODEL).stale(current))
        return len(stale)
    finally:
        index.close()


def surely_fits(vault_root: Path, budget: int) -> bool:
    """The skills index fits `budget` for certain, from a directory listing alone (no SQLite): a
    skill's line is never longer than its name plus its file. What a CLI call checks first, so a
    small vault's first call opens nothing more than before."""
    base = Path(vault_root) / SKILLS_DIR
    total = 0
    try:
        with os.scandir(base) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."):
                    try:
                        total += len(entry.name) + 4 + os.stat(os.path.join(entry.path, SKILL_FILE)).st_size
                    except OSError:
                        continue
                    if total > budget:
                        return False
    except OSError:
        return True
    return True


def over_budget(vault_root: Path, budget: int) -> bool:
    """The skills index does not fit `budget`, so skills are ranked (what vectors are for): below
    it, no table is built and no vectors are filled."""
    index = SearchIndex(vault_root)
    try:
        index.refresh("skills")
        used = sum(len(f"- {p.split('/')[1]}: {' '.join(d.split())}") + 1
                   for p, d in index.db.execute("SELECT path, description FROM fts WHERE kind='skills'"))
        return used - 1 > budget
    finally:
        index.close()


def fts_query(text: str) -> str:
    """Free text to an FTS5 query: quoted words OR-ed, so user text can never be a syntax error."""
    words = []
    for w in _WORD.findall(text.lower()):
        if w not in STOPWORDS and w not in words:
            words.append(w)
    return " OR ".join(f'"{w}"' for w in words[:32])
