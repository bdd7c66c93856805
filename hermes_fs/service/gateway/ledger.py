"""The gateway's ledger: .hermes/gateway/gateway.db (SQLite, WAL), shared by the daemon and the CLI.

What must survive a restart and is not a vault file:
- `messages`: every message key (platform|chat|message id) ever submitted and what became of it:
  the idempotency index (a Matrix event, a webhook delivery id, a mail Message-ID seen twice is
  one request; the seen ids survive a restart);
- `sessions`: which session transcript each chat (session key) continues;
- `deliveries`: each reply: pending -> sending -> delivered | failed (with the reason), attempts,
  the platform's message id;
- `pairing`, `approved`, `pair_failures`: pairing codes (only their SHA-256 is kept), approved
  senders, failed approvals;
- `cursors`: a channel's position (a Matrix sync token, an IMAP UID), saved after its messages'
  requests are durable.
One connection per process, used under a lock; SQLite's own locking covers the CLI beside the daemon.

With several machines (a vault with `remote:`), the part of this state a channel's next holder
needs — which session each chat continues, approved senders, pending pairing codes — travels in the
channel's lease journal (`shared_state` / `merge_shared`, holder.py), so a chat goes on in its
session and an approved sender stays approved when another machine takes the channel over.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ...agent.outgoing import OutgoingFile
from ...errors import HermesError
from ...store.private import connect_private
from .message import Origin

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
  key TEXT PRIMARY KEY, id TEXT NOT NULL UNIQUE, platform TEXT NOT NULL, session_key TEXT NOT NULL,
  state TEXT NOT NULL, claim TEXT, created REAL NOT NULL, finished REAL, status TEXT, answer TEXT);
CREATE TABLE IF NOT EXISTS sessions (key TEXT PRIMARY KEY, session TEXT, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS deliveries (
  id TEXT PRIMARY KEY, platform TEXT NOT NULL, origin TEXT NOT NULL, text TEXT NOT NULL,
  state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, reason TEXT, platform_id TEXT,
  created REAL NOT NULL, updated REAL NOT NULL, next_try REAL NOT NULL, keep_text INTEGER NOT NULL DEFAULT 1,
  files TEXT);
CREATE TABLE IF NOT EXISTS pairing (
  code_hash TEXT PRIMARY KEY, platform TEXT NOT NULL, sender TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS pair_asked (platform TEXT, sender TEXT, at REAL NOT NULL, PRIMARY KEY (platform, sender));
CREATE TABLE IF NOT EXISTS approved (platform TEXT, sender TEXT, at REAL NOT NULL, PRIMARY KEY (platform, sender));
CREATE TABLE IF NOT EXISTS pair_failures (at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS bodies (
  platform TEXT NOT NULL, chat TEXT NOT NULL, digest TEXT NOT NULL, message TEXT NOT NULL, at REAL NOT NULL,
  PRIMARY KEY (platform, chat, digest));
CREATE TABLE IF NOT EXISTS cursors (channel TEXT PRIMARY KEY, value TEXT NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS room_lines (
  event TEXT PRIMARY KEY, room TEXT NOT NULL, sender TEXT NOT NULL, text TEXT NOT NULL, at REAL NOT NULL);
"""

# message states
CLAIMED = "claimed"  # a request file waits in .hermes/gateway/requests/
DONE = "done"  # its result is written
IGNORED = "ignored"  # access denied: nothing run, nothing said
REFUSED = "refused"  # refused (a pairing code, too long, too many, empty), with or without a reply; nothing run
ANSWERED_ELSEWHERE = "elsewhere"  # taken and answered by the channel's last holder, on another machine
# why a message was refused (its status while REFUSED)
EMPTY, TOO_LONG, TOO_MANY = "empty", "too long", "too many"
UNHEARD = "voice not transcribed"  # a voice message refused: voice off, over a limit, not audio, no words
WITH_A_PERSON = "with a person"  # a chat handed to its owner (handoff.py): passed on to them, not run

DELIVERY_COLUMNS = "id, platform, origin, text, state, attempts, reason, platform_id, updated, files"

# delivery states
PENDING, SENDING, DELIVERED, FAILED = "pending", "sending", "delivered", "failed"


class LedgerClosed(HermesError):
    """The ledger was used after the gateway closed it (at stop)."""


def message_key(origin: Origin) -> str:
    return f"{origin.platform}|{origin.chat}|{origin.message}"


def request_id(origin: Origin) -> str:
    """The request id of a message: fixed by the message, so a second submit finds the first."""
    digest = hashlib.sha256(message_key(origin).encode()).hexdigest()[:16]
    return f"{origin.platform}-{digest}"


def origin_json(origin: Origin) -> str:
    return json.dumps({"platform": origin.platform, "chat": origin.chat, "sender": origin.sender,
                       "message": origin.message, "thread": origin.thread})


def origin_loads(text: str) -> Origin:
    d = json.loads(text)
    return Origin(d["platform"], d["chat"], d["sender"], d["message"], d.get("thread"))


@dataclass
class Message:
    key: str
    id: str
    platform: str
    session_key: str
    state: str
    claim: str | None
    created: float
    status: str | None = None
    answer: str | None = None


@dataclass
class Delivery:
    id: str
    platform: str
    origin: Origin
    text: str
    state: str
    attempts: int
    reason: str | None
    platform_id: str | None
    updated: float
    files: list[OutgoingFile] = field(default_factory=list)  # staged copies it carries (send_file)


def file_delivery_id(rid: str, n: int) -> str:
    """The delivery of a reply's n-th file (1-based) sent on its own: its own row, so a restart
    knows which files arrived; the id is also what an idempotent channel uses as its transaction id."""
    return f"{rid}~file{n}"


def files_json(files: list[OutgoingFile]) -> str | None:
    if not files:
        return None
    return json.dumps([{"path": str(f.path), "name": f.name, "size": f.size, "mime": f.mime, "caption": f.caption}
                       for f in files])


def files_loads(text: str | None) -> list[OutgoingFile]:
    if not text:
        return []
    return [OutgoingFile(Path(d["path"]), d["name"], d["size"], d.get("mime") or "application/octet-stream",
                         d.get("caption") or "") for d in json.loads(text)]


@dataclass(frozen=True)
class PairingRules:
    """The limits `decide_pairing` applies in one transaction (their values: access.py)."""

    code_ttl_s: float  # a code older than this is no code
    max_failures: int  # this many failed attempts within lock_s lock approving
    lock_s: float


@dataclass
class Pairing:
    platform: str
    sender: str
    created: float


@dataclass
class PairingAttempt:
    pairing: Pairing | None  # the code's pairing, taken (None: no such code, or locked)
    locked_until: float | None = None  # refused without looking at the code


class GatewayLedger:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.db = connect_private(path, check_same_thread=False, timeout=30, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")  # a row that says "claimed" or "delivered" is on disk
        self.db.executescript(SCHEMA)
        columns = {row[1] for row in self.db.execute("PRAGMA table_info(deliveries)").fetchall()}
        if "files" not in columns:  # a ledger made before replies carried files
            self.db.execute("ALTER TABLE deliveries ADD COLUMN files TEXT")
        self.lock = threading.RLock()
        self.closed = False

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.db.close()

    @contextmanager
    def _open(self) -> Iterator[None]:
        """The connection, to one thread at a time, while the ledger is open: after `close` (the
        gateway stopped) every use raises LedgerClosed, so a thread that outlived the stop (a
        send that hung) ends cleanly, and what it did is recovered at the next start."""
        with self.lock:
            if self.closed:
                raise LedgerClosed(f"{self.path.name} is closed: the gateway stopped")
            yield

    def _one(self, sql: str, *args):
        with self._open():  # fetchall: a statement left open would pin this connection to an old snapshot
            rows = self.db.execute(sql, args).fetchall()
        return rows[0] if rows else None

    def _all(self, sql: str, *args) -> list:
        with self._open():
            return self.db.execute(sql, args).fetchall()

    def _do(self, sql: str, *args) -> int:
        with self._open():
            return self.db.execute(sql, args).rowcount

    # -- messages ---------------------------------------------------------------------------------
    def message(self, key: str) -> Message | None:
        row = self._one("SELECT key, id, platform, session_key, state, claim, created, status, answer "
                        "FROM messages WHERE key = ?", key)
        return Message(*row) if row else None

    def message_by_id(self, rid: str) -> Message | None:
        row = self._one("SELECT key, id, platform, session_key, state, claim, created, status, answer "
                        "FROM messages WHERE id = ?", rid)
        return Message(*row) if row else None

    def add_message(self, origin: Origin, session_key: str, state: str, claim: str | None = None) -> bool:
        """Record a message once; False when its key was already there."""
        return self._do("INSERT OR IGNORE INTO messages (key, id, platform, session_key, state, claim, created) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)", message_key(origin), request_id(origin), origin.platform,
                        session_key, state, claim, time.time()) == 1

    def refuse_message(self, rid: str, kind: str, reason: str) -> None:
        """A message answered without running it: why (`kind`, the reason said to whoever asks)."""
        self._do("UPDATE messages SET status = ?, answer = ? WHERE id = ?", kind, reason, rid)

    def finish_message(self, rid: str, status: str, answer: str) -> None:
        self._do("UPDATE messages SET state = ?, status = ?, answer = ?, finished = ? WHERE id = ?",
                 DONE, status, answer, time.time(), rid)

    def last_message(self, platform: str) -> float | None:
        row = self._one("SELECT MAX(created) FROM messages WHERE platform = ?", platform)
        return row[0] if row else None

    def count_messages(self, platform: str, state: str | None = None) -> int:
        if state:
            return self._one("SELECT COUNT(*) FROM messages WHERE platform = ? AND state = ?", platform, state)[0]
        return self._one("SELECT COUNT(*) FROM messages WHERE platform = ?", platform)[0]

    # -- sessions ---------------------------------------------------------------------------------
    def session(self, key: str) -> str | None:
        row = self._one("SELECT session FROM sessions WHERE key = ?", key)
        return row[0] if row else None

    def set_session(self, key: str, session: str | None) -> None:
        self._do("INSERT INTO sessions (key, session, updated) VALUES (?, ?, ?) "
                 "ON CONFLICT(key) DO UPDATE SET session = excluded.session, updated = excluded.updated",
                 key, session, time.time())

    # -- deliveries -------------------------------------------------------------------------------
    def add_delivery(self, rid: str, origin: Origin, text: str, keep_text: bool = True,
                     files: list[OutgoingFile] | None = None) -> bool:
        """Queue the one reply to request `rid` (or one of its files: `file_delivery_id`); a second
        call for the same id is a no-op."""
        now = time.time()
        return self._do("INSERT OR IGNORE INTO deliveries (id, platform, origin, text, state, created, updated, "
                        "next_try, keep_text, files) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rid, origin.platform,
                        origin_json(origin), text, PENDING, now, now, now, int(keep_text), files_json(files or [])) == 1

    def file_deliveries(self, rid: str) -> list[Delivery]:
        """The deliveries of request `rid`'s files sent on their own, in order."""
        prefix = f"{rid}~file"
        rows = self._all(f"SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE substr(id, 1, ?) = ? ORDER BY created, rowid",
                         len(prefix), prefix)
        return [self._delivery(r) for r in rows]

    def delivery(self, rid: str) -> Delivery | None:
        row = self._one(f"SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE id = ?", rid)
        return self._delivery(row) if row else None

    @staticmethod
    def _delivery(row) -> Delivery:
        return Delivery(row[0], row[1], origin_loads(row[2]), row[3], row[4], row[5], row[6], row[7], row[8],
                        files_loads(row[9]))

    def due_deliveries(self, platforms: list[str], now: float | None = None) -> list[Delivery]:
        if not platforms:
            return []
        marks = ",".join("?" * len(platforms))
        rows = self._all(f"SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE state = ? AND next_try <= ? "
                         f"AND platform IN ({marks}) ORDER BY created, rowid", PENDING, now or time.time(), *platforms)
        return [self._delivery(r) for r in rows]

    def next_try(self) -> float | None:
        row = self._one("SELECT MIN(next_try) FROM deliveries WHERE state = ?", PENDING)
        return row[0] if row else None

    def mark_sending(self, rid: str) -> bool:
        """pending -> sending, recorded before the send: a crash mid-send is then known."""
        return self._do("UPDATE deliveries SET state = ?, attempts = attempts + 1, updated = ? "
                        "WHERE id = ? AND state = ?", SENDING, time.time(), rid, PENDING) == 1

    def mark_delivered(self, rid: str, platform_id: str) -> None:
        self._do("UPDATE deliveries SET state = ?, platform_id = ?, reason = NULL, updated = ?, "
                 "text = CASE keep_text WHEN 1 THEN text ELSE '(not kept)' END WHERE id = ?",
                 DELIVERED, platform_id, time.time(), rid)

    def mark_retry(self, rid: str, reason: str, delay_s: float) -> None:
        self._do("UPDATE deliveries SET state = ?, reason = ?, updated = ?, next_try = ? WHERE id = ?",
                 PENDING, reason, time.time(), time.time() + delay_s, rid)

    def mark_failed(self, rid: str, reason: str) -> None:
        self._do("UPDATE deliveries SET state = ?, reason = ?, updated = ?, "
                 "text = CASE keep_text WHEN 1 THEN text ELSE '(not kept)' END WHERE id = ?",
                 FAILED, reason, time.time(), rid)

    def interrupted_sends(self) -> list[Delivery]:
        rows = self._all(f"SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE state = ?", SENDING)
        return [self._delivery(r) for r in rows]

    def resend(self, rid: str) -> None:
        """A send cut short by a crash, on a channel whose sends are idempotent: try again."""
        self._do("UPDATE deliveries SET state = ?, next_try = ? WHERE id = ? AND state = ?",
                 PENDING, time.time(), rid, SENDING)

    def delivery_counts(self, platform: str) -> dict[str, int]:
        rows = self._all("SELECT state, COUNT(*) FROM deliveries WHERE platform = ? GROUP BY state", platform)
        return {state: n for state, n in rows}

    def deliveries_for(self, ids: list[str]) -> dict[str, Delivery]:
        out = {}
        for rid in ids:
            d = self.delivery(rid)
            if d:
                out[rid] = d
        return out

    # -- pairing ----------------------------------------------------------------------------------
    def add_pairing(self, code_hash: str, platform: str, sender: str) -> None:
        now = time.time()
        with self._open():
            self.db.execute("BEGIN IMMEDIATE")
            try:
                self.db.execute("INSERT INTO pairing (code_hash, platform, sender, created) VALUES (?, ?, ?, ?)",
                                (code_hash, platform, sender, now))
                self.db.execute("INSERT INTO pair_asked (platform, sender, at) VALUES (?, ?, ?) ON CONFLICT"
                                "(platform, sender) DO UPDATE SET at = excluded.at", (platform, sender, now))
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise

    def pairings(self, since: float, platform: str | None = None) -> list[Pairing]:
        if platform:
            rows = self._all("SELECT platform, sender, created FROM pairing WHERE created >= ? AND platform = ? "
                             "ORDER BY created", since, platform)
        else:
            rows = self._all("SELECT platform, sender, created FROM pairing WHERE created >= ? ORDER BY created", since)
        return [Pairing(*r) for r in rows]

    def pairing_by_hash(self, code_hash: str, since: float) -> Pairing | None:
        row = self._one("SELECT platform, sender, created FROM pairing WHERE code_hash = ? AND created >= ?",
                        code_hash, since)
        return Pairing(*row) if row else None

    def drop_pairing(self, code_hash: str) -> None:
        self._do("DELETE FROM pairing WHERE code_hash = ?", code_hash)

    def drop_expired_pairings(self, before: float) -> None:
        self._do("DELETE FROM pairing WHERE created < ?", before)

    def last_asked(self, platform: str, sender: str) -> float | None:
        row = self._one("SELECT at FROM pair_asked WHERE platform = ? AND sender = ?", platform, sender)
        return row[0] if row else None

    def approve(self, platform: str, sender: str) -> None:
        self._do("INSERT OR REPLACE INTO approved (platform, sender, at) VALUES (?, ?, ?)", platform, sender, time.time())

    def is_approved(self, platform: str, sender: str) -> bool:
        return self._one("SELECT 1 FROM approved WHERE platform = ? AND sender = ?", platform, sender) is not None

    def approved(self) -> list[tuple[str, str]]:
        return [(p, s) for p, s in self._all("SELECT platform, sender FROM approved ORDER BY at")]

    def decide_pairing(self, code_hash: str, approve: bool, rules: PairingRules, now: float) -> PairingAttempt:
        """One approval or denial, whole, in one write transaction (`BEGIN IMMEDIATE`): the lock-out
        is read, the code looked up and a failure counted with no other attempt in between, in this
        process or another, so N attempts at once count N and the lock holds at its limit."""
        with self._open():
            self.db.execute("BEGIN IMMEDIATE")
            try:
                failures = [r[0] for r in self.db.execute(
                    "SELECT at FROM pair_failures WHERE at >= ? ORDER BY at", (now - rules.lock_s,)).fetchall()]
                if len(failures) >= rules.max_failures:
                    self.db.execute("COMMIT")
                    return PairingAttempt(None, failures[-rules.max_failures] + rules.lock_s)
                row = self.db.execute("SELECT platform, sender, created FROM pairing WHERE code_hash = ? AND "
                                      "created >= ?", (code_hash, now - rules.code_ttl_s)).fetchone()
                if row is None:
                    self.db.execute("INSERT INTO pair_failures (at) VALUES (?)", (now,))
                else:
                    if approve:
                        self.db.execute("INSERT OR REPLACE INTO approved (platform, sender, at) VALUES (?, ?, ?)",
                                        (row[0], row[1], now))
                    self.db.execute("DELETE FROM pairing WHERE code_hash = ?", (code_hash,))
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
        return PairingAttempt(Pairing(*row) if row else None, None)

    def earlier_message(self, origin: Origin, digest: str, now: float, window_s: float) -> str | None:
        """Remember that `origin`'s message carried the body `digest` in its chat; the id of an
        earlier, other message that carried the same body there within `window_s` (a replay under a
        fresh id, on a platform that signs the body but not the id), else None."""
        with self._open():
            self.db.execute("BEGIN IMMEDIATE")
            try:
                self.db.execute("DELETE FROM bodies WHERE at < ?", (now - window_s,))
                row = self.db.execute("SELECT message FROM bodies WHERE platform = ? AND chat = ? AND digest = ?",
                                      (origin.platform, origin.chat, digest)).fetchone()
                if row is None:
                    self.db.execute("INSERT INTO bodies (platform, chat, digest, message, at) VALUES (?, ?, ?, ?, ?)",
                                    (origin.platform, origin.chat, digest, origin.message, now))
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
        return row[0] if row is not None and row[0] != origin.message else None

    def add_pair_failure(self) -> None:
        self._do("INSERT INTO pair_failures (at) VALUES (?)", time.time())

    def pair_failures(self, since: float) -> list[float]:
        return [r[0] for r in self._all("SELECT at FROM pair_failures WHERE at >= ? ORDER BY at", since)]

    # -- cursors ----------------------------------------------------------------------------------
    def cursor(self, channel: str) -> str | None:
        row = self._one("SELECT value FROM cursors WHERE channel = ?", channel)
        return row[0] if row else None

    def set_cursor(self, channel: str, value: str) -> None:
        self._do("INSERT INTO cursors (channel, value, updated) VALUES (?, ?, ?) ON CONFLICT(channel) "
                 "DO UPDATE SET value = excluded.value, updated = excluded.updated", channel, value, time.time())

    # -- a shared room's recent lines (others' text becomes untrusted context) --------------------
    def add_room_line(self, room: str, event: str, sender: str, text: str, keep: int) -> None:
        """Remember a line of a shared room (once per event: a replayed batch adds nothing); the
        room keeps its last `keep` lines, so the context survives a restart without growing."""
        with self._open():
            self.db.execute("INSERT OR IGNORE INTO room_lines (event, room, sender, text, at) VALUES (?, ?, ?, ?, ?)",
                            (event, room, sender, text, time.time()))
            self.db.execute("DELETE FROM room_lines WHERE room = ? AND event NOT IN (SELECT event FROM room_lines "
                            "WHERE room = ? ORDER BY rowid DESC LIMIT ?)", (room, room, keep))

    def room_lines(self, room: str) -> list[tuple[str, str, str]]:
        """(event, sender, text) of the room's remembered lines, oldest first."""
        return [tuple(r) for r in self._all("SELECT event, sender, text FROM room_lines WHERE room = ? ORDER BY rowid",
                                            room)]

    # -- what a channel's next holder needs (carried in the lease journal) ---------------------------
    def shared_state(self, platform: str, since_pairing: float) -> dict:
        """This platform's chat sessions (the SHARED_SESSIONS most recent), approved senders and
        pairing codes issued since `since_pairing` (hashes only), as plain JSON."""
        prefix = f"{platform}|"
        sessions = self._all("SELECT key, session, updated FROM sessions WHERE substr(key, 1, ?) = ? "
                             "ORDER BY updated DESC LIMIT ?", len(prefix), prefix, SHARED_SESSIONS)
        approved = self._all("SELECT sender, at FROM approved WHERE platform = ? ORDER BY at", platform)
        codes = self._all("SELECT code_hash, sender, created FROM pairing WHERE platform = ? AND created >= ? "
                          "ORDER BY created", platform, since_pairing)
        return {"sessions": [list(r) for r in reversed(sessions)], "approved": [list(r) for r in approved],
                "pairings": [list(r) for r in codes]}

    def merge_shared(self, platform: str, data: object) -> int:
        """Take in another machine's `shared_state` (read from the remote: checked row by row, a
        malformed row is skipped). A chat's session is the more recently set of the two; approvals
        and codes are added. Returns how many rows changed here."""
        if not isinstance(data, dict):
            return 0
        changed = 0
        prefix = f"{platform}|"
        with self._open():
            for row in _rows(data.get("sessions"), (str, (str, type(None)), (int, float)))[:SHARED_SESSIONS]:
                key, session, updated = row
                if key.startswith(prefix):
                    changed += self.db.execute(
                        "INSERT INTO sessions (key, session, updated) VALUES (?, ?, ?) ON CONFLICT(key) DO UPDATE "
                        "SET session = excluded.session, updated = excluded.updated WHERE excluded.updated > updated",
                        (key, session, float(updated))).rowcount
            for sender, at in _rows(data.get("approved"), (str, (int, float)))[:SHARED_APPROVED]:
                changed += self.db.execute("INSERT OR IGNORE INTO approved (platform, sender, at) VALUES (?, ?, ?)",
                                           (platform, sender, float(at))).rowcount
            for code_hash, sender, created in _rows(data.get("pairings"), (str, str, (int, float)))[:SHARED_APPROVED]:
                changed += self.db.execute("INSERT OR IGNORE INTO pairing (code_hash, platform, sender, created) "
                                           "VALUES (?, ?, ?, ?)", (code_hash, platform, sender, float(created))).rowcount
        return changed


SHARED_SESSIONS = 200  # chats whose session travels with a channel's lease (the most recent ones)
SHARED_APPROVED = 1000  # approved senders and pending codes carried at most


def _rows(value: object, types: tuple) -> list[tuple]:
    """The rows of a JSON list whose cells have the given types (in order); others are dropped."""
    if not isinstance(value, list):
        return []
    return [tuple(r) for r in value if isinstance(r, list) and len(r) == len(types)
            and all(isinstance(c, t) and not isinstance(c, bool) for c, t in zip(r, types, strict=True))]


def ledger_path(state_dir: Path) -> Path:
    return state_dir / "gateway" / "gateway.db"
