"""E-mail as a gateway channel: IMAP IDLE in, SMTP out, senders proven, nothing lost while down.

In: one IMAP connection (imap-tools) sits in IDLE, so a delivery is seen at once, not on a poll.
A durable cursor per mailbox (UIDVALIDITY + last UID, in `.hermes/gateway/email.sqlite`) moves
only after `Sink.submit` has made the mail a durable request, so mail that arrived while the daemon
was down is read after it starts, and a crash before the cursor moved resubmits a mail whose
Message-ID the core already knows (a no-op). A UIDVALIDITY change rescans the mailbox and skips
every Message-ID already handled. Each mail is then, in order: parsed (text part, else HTML as
text, quoted reply cut; 8-bit headers read as UTF-8), dropped if auto-generated (loops), dropped if
its sender is not proven (`mailauth`: DKIM aligned with From, or the pinned server's DMARC pass),
given its thread (Message-ID / In-Reply-To / References -> the thread's root), its attachments
saved under the workspace (size capped, types by name and content, never executed), and submitted.
Out: replies over SMTP in the same thread, to the proven sender only, with Date, Message-ID (from
the reply id, so a retry reuses it and a sent id is never sent again), In-Reply-To, References and
`Auto-Submitted: auto-replied`, as multipart/alternative: the Markdown as text/plain and the same
reply as sanitised HTML (render.py).
"""

from __future__ import annotations

import email.policy
import email.utils
import hashlib
import logging
import os
import re
import smtplib
import ssl
import threading
import time
from dataclasses import dataclass, field
from email.message import EmailMessage, Message
from email.parser import BytesParser
from pathlib import Path

from ...errors import ConfigError, HermesError
from ...store.files import atomic_write
from ...store.private import connect_private
from ...store.vault import Vault
from .channel import ChannelBase, ChatSettings, Inbound, Origin, Outbound, Sink, attachments_dir
from .mailauth import DnsFunc, claimed_from, prove_sender
from .message import Audio
from .render import html_document, render

log = logging.getLogger("hermes_fs.gateway.email")

PLATFORM = "email"
MAX_ATTACHMENT_BYTES = 18_000_000  # all files of one reply: ~24 MB once base64-encoded, under common 25 MB caps
LEARN_TYPES = {".md": "text", ".markdown": "text", ".txt": "text", ".html": "html", ".htm": "html", ".pdf": "pdf"}
MAX_PARTS = 100  # MIME parts looked at in one mail; the rest is refused by count
AUDIO_TYPES = {".ogg", ".oga", ".opus", ".mp3", ".wav", ".m4a", ".mp4", ".aac", ".flac", ".webm", ".amr"}
MAX_TEXT_CHARS = 100_000  # of the person's message (the mail's text part)
MAX_REFERENCES = 20  # kept in a reply's References (RFC 5322 allows trimming the middle)
IDLE_RENEW_S = 20 * 60  # RFC 2177: re-issue IDLE before 29 minutes
AUTO_LOCALPARTS = re.compile(r"^(mailer-daemon|postmaster|no-?reply|do-?not-?reply|bounces?|"
                             r"noreply-.*|.*-noreply|.*\+bounces?)$", re.I)
REPLY_PREFIX = re.compile(r"^\s*((re|aw|sv|fwd?|wg)\s*(\[\d+\])?\s*:\s*)+", re.I)
COMMAND_START = re.compile(r"^\s*(/|!|learn:)", re.I)


# --- settings -------------------------------------------------------------------------------------

@dataclass
class ImapSettings:
    """Where the agent's mail is read (one IMAP connection in IDLE)."""

    host: str = ""  # the IMAP server
    port: int = 993  # its port
    tls: bool = True  # TLS from the start (IMAPS)
    user: str = ""  # the login
    password_env: str | None = None  # the variable holding the password (an app password)
    mailbox: str = "INBOX"  # the folder read; mail is never deleted or moved


@dataclass
class SmtpSettings:
    """How replies are sent."""

    host: str = ""  # the SMTP server
    port: int = 587  # its port
    starttls: bool = True  # upgrade the connection with STARTTLS
    tls: bool = False  # TLS from the start (port 465) instead
    user: str = ""  # the login
    password_env: str | None = None  # the variable holding the password
    from_: str = ""  # written `from:` in hermes.yaml


@dataclass
class EmailSettings(ChatSettings):
    """The e-mail channel: a mailbox of the agent's own."""

    imap: ImapSettings = field(default_factory=ImapSettings)  # reading
    smtp: SmtpSettings = field(default_factory=SmtpSettings)  # replying
    # addresses that may write to the agent (proven by DKIM/DMARC); empty = nobody
    allow: list[str] = field(default_factory=list)
    admins: list[str] = field(default_factory=list)  # addresses that may /merge and /reject
    authserv_id: str | None = None  # Authentication-Results from this host are trusted
    max_attachment_bytes: int = 10_000_000  # larger attachments are refused by name


# --- reading a mail ------------------------------------------------------------------------------

@dataclass
class Attachment:
    """One attached file: saved under the workspace, or refused with the reason (by name)."""

    name: str
    size: int
    path: Path | None = None
    refused: str | None = None


@dataclass
class ParsedMail:
    msg: Message
    message_id: str  # the mail's Message-ID, or one made from its bytes (stable across refetches)
    has_message_id: bool
    in_reply_to: str | None
    references: list[str]
    subject: str
    text: str  # the new text of the message (quoted reply cut)
    parts: list[Message] = field(default_factory=list)  # attachment parts, not yet saved
    problems: list[str] = field(default_factory=list)


def _header(msg: Message, name: str) -> str:
    """A header as clean text, never an exception: RFC 2047 decoded; raw 8-bit bytes (parsed with
    compat32, which keeps them) read as UTF-8 (RFC 6532), or as Latin-1 when they are not UTF-8."""
    from email.header import decode_header, make_header

    try:
        # raw_items: the stored value, 8-bit bytes kept as surrogates (get() would replace them)
        value = next((v for k, v in msg.raw_items() if k.lower() == name.lower()), None)
        if value is None:
            return ""
        text = str(value)
        if any("\udc80" <= c <= "\udcff" for c in text):
            raw = text.encode("utf-8", "surrogateescape")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                text = raw.decode("latin-1")
        elif "=?" in text:
            text = str(make_header(decode_header(text)))
    except Exception:  # a header so broken no decoder takes it
        return ""
    return " ".join(text.split())


def _ids(value: str) -> list[str]:
    return re.findall(r"<[^<>\s]+>", value or "")


def parse_mail(raw: bytes) -> ParsedMail:
    """Parse any bytes into a mail; malformed MIME gives what could be read plus `problems`."""
    msg = BytesParser(policy=email.policy.compat32).parsebytes(raw)
    problems = [type(d).__name__ for d in msg.defects]
    mids = _ids(_header(msg, "Message-ID"))
    message_id = mids[0] if mids else f"<{hashlib.sha256(raw).hexdigest()[:32]}@hermes-fs.invalid>"
    irt = _ids(_header(msg, "In-Reply-To"))
    refs = _ids(_header(msg, "References"))
    text, parts = _walk(msg, problems)
    return ParsedMail(msg, message_id, bool(mids), irt[-1] if irt else None, refs, _header(msg, "Subject"),
                      strip_quoted(text)[:MAX_TEXT_CHARS], parts, problems)


def _walk(msg: Message, problems: list[str]) -> tuple[str, list[Message]]:
    """The text to read (first text/plain, else the first text/html as text) and the attachments."""
    plain: str | None = None
    html: str | None = None
    parts: list[Message] = []
    for i, part in enumerate(msg.walk()):
        if i >= MAX_PARTS:
            problems.append(f"more than {MAX_PARTS} MIME parts; the rest was not read")
            break
        if part.is_multipart():
            continue
        ctype = part.get_content_type()
        disposition = (part.get_content_disposition() or "").lower()
        if disposition == "attachment" or part.get_filename() or not ctype.startswith("text/"):
            parts.append(part)
            continue
        if ctype == "text/plain" and plain is None:
            plain = _text_of(part, problems)
        elif ctype == "text/html" and html is None:
            html = _text_of(part, problems)
    if plain and plain.strip():
        return plain, parts
    if html:
        import html2text

        h = html2text.HTML2Text()
        h.ignore_images = True
        h.body_width = 0
        return h.handle(html), parts
    return plain or "", parts


def _text_of(part: Message, problems: list[str]) -> str:
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):
        return ""
    charset = part.get_content_charset() or "utf-8"
    try:
        return payload.decode(charset, errors="replace")
    except LookupError:  # an unknown charset name
        problems.append(f"unknown charset {charset!r}, read as UTF-8")
        return payload.decode("utf-8", errors="replace")


def strip_quoted(text: str) -> str:
    """The new part of a reply: what the person wrote above the quoted mail."""
    if not text.strip():
        return ""
    try:
        from mailparser_reply import EmailReplyParser

        new = EmailReplyParser(languages=["en", "de", "fr", "es", "it", "nl"]).parse_reply(text=text)
    except Exception:  # the parser failing must not lose the message
        new = text
    return (new or text).strip()


def automated(msg: Message, own: set[str]) -> str | None:
    """Why this mail is machine-made (and so never answered), or None. Answering such mail is how
    two agents, or an agent and a vacation responder, loop forever."""
    auto = _header(msg, "Auto-Submitted").lower()
    if auto and auto.split(";")[0].strip() != "no":
        return f"Auto-Submitted: {auto}"
    precedence = _header(msg, "Precedence").lower()
    if precedence in ("bulk", "list", "junk", "auto_reply"):
        return f"Precedence: {precedence}"
    for name in ("X-Autoreply", "X-Autorespond", "List-Id", "List-Unsubscribe"):
        if msg.get(name) is not None:
            return f"{name} header"
    if msg.get_content_type() == "multipart/report":
        return "a delivery or read report"
    return_path = _header(msg, "Return-Path")
    if return_path.replace(" ", "") == "<>":
        return "a bounce (empty Return-Path)"
    address, _ = claimed_from(msg)
    if address:
        if address in own:
            return "sent by this agent"
        if AUTO_LOCALPARTS.match(address.split("@")[0]):
            return f"from {address}"
    return None


def command_text(mail: ParsedMail) -> str:
    """The message the core reads: a command in the subject (`/refine deploy notes`, `learn: ...`)
    comes first; a command on the body's first line is already first; else the subject of a new
    thread, then the body."""
    subject = REPLY_PREFIX.sub("", mail.subject).strip()
    body = mail.text.strip()
    if COMMAND_START.match(subject):
        head = re.sub(r"^\s*learn:\s*", "/learn ", subject, flags=re.I).strip()
        return f"{head}\n\n{body}".strip()
    if COMMAND_START.match(body):
        return re.sub(r"^\s*learn:\s*", "/learn ", body, flags=re.I)
    if subject and not mail.in_reply_to and not REPLY_PREFIX.match(mail.subject) and subject not in body:
        return f"{subject}\n\n{body}".strip()
    return body


def _safe_name(name: str, n: int) -> str:
    base = os.path.basename(name.replace("\\", "/")).strip().strip(".")
    base = re.sub(r"[^\w.\- ]+", "_", base)[:120]
    return base or f"attachment-{n}"


def _sniff(data: bytes, kind: str) -> str | None:
    """Why the bytes are not what the name says, or None: a zip named .pdf is refused, not read."""
    if data.startswith(b"PK\x03\x04") or data.startswith(b"\x1f\x8b") or data.startswith(b"7z\xbc\xaf"):
        return "an archive (archives are never unpacked)"
    if kind == "pdf":
        return None if data[:1024].lstrip().startswith(b"%PDF-") else "not a PDF"
    if b"\x00" in data[:65536]:
        return "binary data, not text"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8 text"
    return None


def voice_part(parts: list[Message]) -> tuple[Audio | None, list[Message], list[str]]:
    """The mail's first audio attachment as a voice message (the core transcribes it; it is never
    saved), the other parts, and the further audio parts refused by name (one voice message a mail)."""
    audio: Audio | None = None
    rest: list[Message] = []
    refused: list[str] = []
    for n, part in enumerate(parts, 1):
        name = _safe_name(part.get_filename() or "", n) if part.get_filename() else f"attachment-{n}"
        if not (part.get_content_maintype() == "audio" or os.path.splitext(name)[1].lower() in AUDIO_TYPES):
            rest.append(part)
            continue
        if audio is not None:
            refused.append(f"{name}: only the first audio file of a mail is transcribed")
            continue
        try:
            data = part.get_payload(decode=True)
        except Exception:
            data = None
        if not isinstance(data, bytes):
            refused.append(f"{name}: unreadable (malformed MIME part)")
            continue
        audio = Audio.of_bytes(data, part.get_content_type(), name)
    return audio, rest, refused


def save_attachments(parts: list[Message], dest: Path, max_bytes: int) -> list[Attachment]:
    """Save the parts a learn can read (Markdown, text, HTML, PDF) under `dest`, mode 0600; refuse
    the rest by name. Same mail, same names: a resubmission after a crash rewrites the same files."""
    out: list[Attachment] = []
    used: set[str] = set()
    for n, part in enumerate(parts, 1):
        raw_name = part.get_filename() or ""
        name = _safe_name(raw_name, n) if raw_name else f"attachment-{n}"
        ext = os.path.splitext(name)[1].lower()
        try:
            data = part.get_payload(decode=True)
        except Exception:
            data = None
        if not isinstance(data, bytes):
            out.append(Attachment(name, 0, refused="unreadable (malformed MIME part)"))
            continue
        if ext not in LEARN_TYPES:
            out.append(Attachment(name, len(data), refused=f"type {ext or '(none)'} is not accepted "
                                                          f"(only {', '.join(sorted(LEARN_TYPES))})"))
            continue
        if len(data) > max_bytes:
            out.append(Attachment(name, len(data), refused=f"{len(data)} bytes, over the {max_bytes} byte cap"))
            continue
        wrong = _sniff(data, LEARN_TYPES[ext])
        if wrong:
            out.append(Attachment(name, len(data), refused=f"named {ext} but is {wrong}"))
            continue
        while name in used:
            name = f"{n}-{name}"
        used.add(name)
        dest.mkdir(parents=True, exist_ok=True)
        path = dest / name
        atomic_write(path, data)
        path.chmod(0o600)
        out.append(Attachment(name, len(data), path))
    return out


# --- durable state: cursor, threads, replies -----------------------------------------------------

@dataclass
class Cursor:
    uidvalidity: int
    last_uid: int


@dataclass
class ThreadInfo:
    root: str
    subject: str
    references: list[str]
    has_message_id: bool


class MailState:
    """The channel's own durable record (SQLite, WAL): per-mailbox cursor, every handled
    Message-ID with its thread root and outcome, and every reply sent."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = connect_private(path, check_same_thread=False, isolation_level=None, timeout=30)
        self.lock = threading.Lock()
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript("""
            CREATE TABLE IF NOT EXISTS cursor (mailbox TEXT PRIMARY KEY, uidvalidity INTEGER, last_uid INTEGER);
            CREATE TABLE IF NOT EXISTS mail (message_id TEXT PRIMARY KEY, root TEXT, sender TEXT, subject TEXT,
                refs TEXT, has_id INTEGER, outcome TEXT, at REAL);
            CREATE TABLE IF NOT EXISTS sent (reply_id TEXT PRIMARY KEY, message_id TEXT, at REAL);
        """)

    def close(self) -> None:
        self.db.close()

    def cursor(self, mailbox: str) -> Cursor | None:
        with self.lock:
            row = self.db.execute("SELECT uidvalidity, last_uid FROM cursor WHERE mailbox=?", (mailbox,)).fetchone()
        return Cursor(row[0], row[1]) if row else None

    def outcome(self, message_id: str) -> str | None:
        with self.lock:
            row = self.db.execute("SELECT outcome FROM mail WHERE message_id=?", (message_id,)).fetchone()
        return row[0] if row else None

    def done(self, message_id: str) -> bool:
        """Submitted already (or one of the agent's own replies). A mail dropped before (unproven,
        auto-generated) is looked at again: a forged copy that came first must not make the real
        mail with the same Message-ID a "duplicate"."""
        out = self.outcome(message_id) or ""
        return out.startswith("submitted") or out == "sent by this agent"

    def root_for(self, mail: ParsedMail) -> str:
        """The thread's root: that of the nearest known ancestor (In-Reply-To, then References from
        the newest); when none is known here (the thread began on another machine of this vault,
        or before this mailbox was read), the oldest of References, which is the thread's first
        mail by RFC 5322, else In-Reply-To; a mail with neither starts a thread of its own."""
        candidates = ([mail.in_reply_to] if mail.in_reply_to else []) + list(reversed(mail.references))
        with self.lock:
            for mid in candidates:
                row = self.db.execute("SELECT root FROM mail WHERE message_id=?", (mid,)).fetchone()
                if row and row[0]:
                    return row[0]
        return mail.references[0] if mail.references else mail.in_reply_to or mail.message_id

    def remember(self, mail: ParsedMail, root: str, sender: str) -> None:
        """The thread facts a reply needs, written before submit (outcome `pending`)."""
        with self.lock:
            self.db.execute("INSERT OR IGNORE INTO mail VALUES (?,?,?,?,?,?,?,?)",
                            (mail.message_id, root, sender, mail.subject, " ".join(mail.references[-MAX_REFERENCES:]),
                             int(mail.has_message_id), "pending", time.time()))

    def finish(self, mailbox: str, cursor: Cursor, message_id: str | None = None, outcome: str | None = None) -> None:
        """Record a mail's outcome and move the cursor past it, in one transaction."""
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                if message_id is not None:
                    self.db.execute("INSERT INTO mail (message_id, outcome, at) VALUES (?,?,?) "
                                    "ON CONFLICT(message_id) DO UPDATE SET outcome=excluded.outcome",
                                    (message_id, outcome, time.time()))
                self.db.execute("INSERT OR REPLACE INTO cursor VALUES (?,?,?)",
                                (mailbox, cursor.uidvalidity, cursor.last_uid))
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise

    def thread(self, message_id: str) -> ThreadInfo | None:
        with self.lock:
            row = self.db.execute("SELECT root, subject, refs, has_id FROM mail WHERE message_id=?",
                                  (message_id,)).fetchone()
        if not row:
            return None
        return ThreadInfo(row[0] or message_id, row[1] or "", (row[2] or "").split(), bool(row[3]))

    def sent_id(self, reply_id: str) -> str | None:
        with self.lock:
            row = self.db.execute("SELECT message_id FROM sent WHERE reply_id=?", (reply_id,)).fetchone()
        return row[0] if row else None

    def record_sent(self, reply_id: str, message_id: str, root: str) -> None:
        """A sent reply, and its Message-ID as a member of the thread (the person answers it)."""
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.execute("INSERT OR REPLACE INTO sent VALUES (?,?,?)", (reply_id, message_id, time.time()))
            self.db.execute("INSERT OR IGNORE INTO mail (message_id, root, outcome, at) VALUES (?,?,?,?)",
                            (message_id, root, "sent by this agent", time.time()))
            self.db.execute("COMMIT")

    def counts(self) -> dict[str, int]:
        with self.lock:
            rows = self.db.execute("SELECT outcome FROM mail").fetchall()
        out: dict[str, int] = {}
        for (o,) in rows:
            key = (o or "").split(":")[0].split(" ")[0]
            out[key] = out.get(key, 0) + 1
        return out


# --- the channel ---------------------------------------------------------------------------------

@dataclass
class ChannelStatus:
    connected: bool = False
    error: str | None = None
    last_message: str | None = None  # "<when> <message id>"
    handled: int = 0


class MailConfigError(ConfigError):
    """A setting the channel cannot work with (a missing password, clear text to another host)."""


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


class EmailChannel(ChannelBase):
    """The e-mail channel: `start(sink)` runs the IMAP IDLE loop in a thread; `send` answers."""

    name = PLATFORM
    Settings = EmailSettings
    max_file_bytes = MAX_ATTACHMENT_BYTES
    files_in_reply = True  # one reply, its files attached

    def __init__(self, vault: Vault, config: EmailSettings, dns: DnsFunc | None = None,
                 secrets: dict[str, str] | None = None):
        super().__init__(vault, config)
        self.config = config
        self.dns = dns
        self._secrets = secrets
        self.state = MailState(vault.state_dir / "gateway" / "email.sqlite")
        self.status = ChannelStatus()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sink: Sink | None = None
        self.idle_wakeups = 0  # how often IDLE returned (a measure of wasted work when idle)

    # -- settings
    def _secret(self, env_name: str | None) -> str | None:
        if not env_name:
            return None
        values = self._secrets if self._secrets is not None else self.vault.secrets()
        value = values.get(env_name) or os.environ.get(env_name)
        if not value:
            raise MailConfigError(f"{env_name} is not set in .hermes/secrets.env")
        return value

    @property
    def mailbox_key(self) -> str:
        i = self.config.imap
        return f"{i.user}@{i.host}:{i.port}/{i.mailbox}"

    @property
    def account(self) -> str:
        """What one machine at a time consumes when several share the vault (holder.py)."""
        return self.mailbox_key

    def progress(self, sink: Sink) -> str | None:
        """The cursor as `UIDVALIDITY:UID`, for the next holder of the channel (holder.py)."""
        c = self.state.cursor(self.mailbox_key)
        return f"{c.uidvalidity}:{c.last_uid}" if c else None

    def resume(self, sink: Sink, cursor: str) -> None:
        """Go on from the cursor the channel's last holder published (holder.py)."""
        validity, _, uid = cursor.partition(":")
        if validity.isdigit() and uid.isdigit():
            self.state.finish(self.mailbox_key, Cursor(int(validity), int(uid)))

    @property
    def from_address(self) -> str:
        return (self.config.smtp.from_ or self.config.imap.user).strip()

    def own_addresses(self) -> set[str]:
        own = {a.lower() for a in (self.config.smtp.from_, self.config.smtp.user, self.config.imap.user) if a}
        return {email.utils.parseaddr(a)[1].lower() or a for a in own}

    # -- lifecycle
    def start(self, sink: Sink) -> None:
        self._sink = sink
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gateway-email", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(15)
        self.status.connected = False

    def check(self) -> str:
        """`gateway test email`: log in to IMAP (the mailbox, its size, IDLE) and to SMTP (EHLO,
        STARTTLS, login as configured); nothing is sent, nothing is read."""
        try:
            with self._connect() as box:
                status = box.folder.status(self.config.imap.mailbox, ["MESSAGES", "UIDVALIDITY"])
                idle = "IDLE" in box.client.capabilities
        except MailConfigError:
            raise
        except Exception as exc:
            raise HermesError(f"IMAP {self.config.imap.host}:{self.config.imap.port}: {type(exc).__name__}: {exc}") from exc
        if not idle:
            raise HermesError(f"IMAP {self.config.imap.host} does not offer IDLE (the channel needs it)")
        s = self.config.smtp
        try:
            with self._smtp() as client:
                client.noop()
        except MailConfigError:
            raise
        except Exception as exc:
            raise HermesError(f"SMTP {s.host}:{s.port}: {type(exc).__name__}: {exc}") from exc
        return (f"IMAP {self.mailbox_key}: {status['MESSAGES']} message(s), IDLE; "
                f"SMTP {s.host}:{s.port}{' (TLS)' if s.tls or s.starttls else ''}: ready, from {self.from_address}")

    def _connect(self):
        from imap_tools import BaseMailBox, MailBox, MailBoxStartTls, MailBoxUnencrypted

        box: BaseMailBox
        i = self.config.imap
        password = self._secret(i.password_env) or ""
        if i.tls:
            box = MailBox(i.host, i.port, timeout=60, ssl_context=ssl.create_default_context())
        else:
            box = MailBoxUnencrypted(i.host, i.port, timeout=60)
            if "STARTTLS" in box.client.capabilities:
                box.client.shutdown()
                box = MailBoxStartTls(i.host, i.port, timeout=60, ssl_context=ssl.create_default_context())
            elif not _is_loopback(i.host):
                raise MailConfigError(f"{i.host} offers no TLS: the password is never sent in clear "
                                      "to another machine (set imap.tls: true)")
        return box.login(i.user, password, initial_folder=i.mailbox)

    def _run(self) -> None:
        # Import the mail libraries now, in the channel's thread, so the first mail is not slowed by it.
        import authres  # noqa: F401
        import dkim  # noqa: F401
        import html2text  # noqa: F401
        import mailparser_reply  # noqa: F401

        backoff = 1.0
        while not self._stop.is_set():
            try:
                with self._connect() as box:
                    self.status.connected, self.status.error = True, None
                    self._report("connected")
                    backoff = 1.0
                    log.info("email: connected to %s", self.mailbox_key)
                    self.catch_up(box)
                    while not self._stop.is_set():
                        self._idle(box)
                        self.catch_up(box)
            except Exception as exc:
                self.status.connected = False
                self.status.error = f"{type(exc).__name__}: {exc}"[:300]
                if self._stop.is_set():
                    break
                self._report("error", self.status.error)
                log.warning("email: %s (reconnecting in %.0f s)", self.status.error, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 60.0)
        self.status.connected = False

    def _report(self, state: str, detail: str = "") -> None:
        """Tell the core (its `gateway status`) whether the mailbox is connected."""
        if self._sink is not None:
            try:
                self._sink.channel_state(self.name, state, detail)
            except Exception:
                log.exception("email: could not report the channel state")

    def _idle(self, box) -> None:
        """Wait in IDLE until the server says something (new mail, flags, a keepalive), the stop
        flag is set, or it is time to renew IDLE. Polls the socket once a second for the flag."""
        box.idle.start()
        try:
            started = time.monotonic()
            while not self._stop.is_set() and time.monotonic() - started < IDLE_RENEW_S:
                t0 = time.monotonic()
                lines = box.idle.poll(timeout=1.0)
                if lines:
                    self.idle_wakeups += 1
                    if any(line.startswith(b"* BYE") for line in lines):
                        raise ConnectionError("the IMAP server closed the connection (BYE)")
                    return
                if time.monotonic() - t0 < 0.5:  # readable but nothing read: the socket is closed
                    raise ConnectionError("the IMAP connection was closed")
        finally:
            try:
                box.idle.stop()
            except Exception:  # a dead connection cannot end IDLE; the reconnect handles it
                pass

    # -- reading the mailbox
    def catch_up(self, box) -> int:
        """Handle every mail past the cursor, oldest first; the cursor moves after each."""
        status = box.folder.status(self.config.imap.mailbox, ["UIDVALIDITY", "UIDNEXT"])
        uidvalidity, uidnext = int(status["UIDVALIDITY"]), int(status["UIDNEXT"])
        key = self.mailbox_key
        cursor = self.state.cursor(key)
        if cursor is None:  # first start ever: mail from before the channel existed is history
            self.state.finish(key, Cursor(uidvalidity, uidnext - 1))
            log.info("email: first start on %s; %d earlier mail(s) left alone", key, uidnext - 1)
            return 0
        if cursor.uidvalidity != uidvalidity:
            log.warning("email: UIDVALIDITY of %s changed (%d -> %d); rescanning, skipping mail already handled",
                        key, cursor.uidvalidity, uidvalidity)
            cursor = Cursor(uidvalidity, 0)
        typ, data = box.client.uid("SEARCH", f"UID {cursor.last_uid + 1}:*")
        uids = sorted(int(u) for u in (data[0] or b"").split() if int(u) > cursor.last_uid) if typ == "OK" else []
        for uid in uids:
            if self._stop.is_set():
                break
            self._handle_uid(box, Cursor(uidvalidity, uid))
        return len(uids)

    def _fetch(self, box, uid: int) -> tuple[bytes | None, int]:
        typ, data = box.client.uid("FETCH", str(uid), "(RFC822.SIZE)")
        m = re.search(rb"RFC822\.SIZE (\d+)", b" ".join(d if isinstance(d, bytes) else d[0] for d in data if d))
        size = int(m.group(1)) if m else 0
        if size > self.max_message_bytes:
            return None, size
        typ, data = box.client.uid("FETCH", str(uid), "(BODY.PEEK[])")
        for item in data:
            if isinstance(item, tuple):
                return item[1], size
        return b"", size

    @property
    def max_message_bytes(self) -> int:
        return 4 * self.config.max_attachment_bytes + 1_000_000

    def _handle_uid(self, box, at: Cursor) -> None:
        key = self.mailbox_key
        raw, size = self._fetch(box, at.last_uid)
        if raw is None:
            mid = f"<uid-{at.uidvalidity}-{at.last_uid}@hermes-fs.invalid>"
            log.warning("email: UID %d is %d bytes, over the %d byte cap; left unread in the mailbox",
                        at.last_uid, size, self.max_message_bytes)
            self.state.finish(key, at, mid, f"refused: {size} bytes, over the cap")
            return
        self.handle(raw, at)

    def handle(self, raw: bytes, at: Cursor) -> str:
        """One mail, from bytes to a request (or a recorded reason why not); returns the outcome."""
        key = self.mailbox_key
        try:
            mail = parse_mail(raw)
        except Exception as exc:  # not even headers: record and move on, the mail stays in the mailbox
            mid = f"<{hashlib.sha256(raw).hexdigest()[:32]}@hermes-fs.invalid>"
            outcome = f"unreadable: {type(exc).__name__}"
            self.state.finish(key, at, mid, outcome)
            return outcome
        if self.state.done(mail.message_id):
            self.state.finish(key, at)
            return "duplicate"
        reason = automated(mail.msg, self.own_addresses())
        if reason:
            outcome = f"ignored: auto-generated ({reason})"
        else:
            proof = prove_sender(raw, mail.msg, self.config.authserv_id, self.dns)
            outcome = self._submit(mail, proof.address) if proof.ok and proof.address else f"unproven: {proof.reason}"
        log.info("email: UID %d %s: %s", at.last_uid, mail.message_id, outcome[:300])
        self.state.finish(key, at, mail.message_id, outcome)
        self.status.last_message = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {mail.message_id}"
        self.status.handled += 1
        return outcome

    def _submit(self, mail: ParsedMail, sender: str) -> str:
        assert self._sink is not None, "start(sink) first"
        root = self.state.root_for(mail)
        origin = Origin(PLATFORM, chat=sender, sender=sender, message=mail.message_id, thread=root)
        listed = {a.strip().lower() for a in self.config.allow + self.config.admins}
        # Files reach the disk only from senders the settings name; anyone else's mail is submitted
        # without them and the core ignores it (a proven stranger cannot fill the workspace).
        audio, others, extra = voice_part(mail.parts) if sender in listed else (None, mail.parts, [])
        files = save_attachments(others, attachments_dir(self.vault.state_dir, origin),
                                 self.config.max_attachment_bytes) if sender in listed else []
        text = command_text(mail)  # empty (no text part, no subject): the core answers that
        refused = [f"{a.name}: {a.refused}" for a in files if a.refused] + extra
        if refused and text.strip():  # a mail of only refused files stays empty: the core answers that
            text += "\n\n[attachments refused: " + "; ".join(refused) + "]"
        self.state.remember(mail, root, sender)
        request_id = self._sink.submit(Inbound(origin, text, True, [a.path for a in files if a.path], audio=audio))
        return f"submitted {request_id}"

    # -- replying
    def send(self, reply: Outbound) -> str:
        """Send the reply in the mail's thread; the same reply id is never sent twice."""
        done = self.state.sent_id(reply.reply_id)
        if done:
            return done
        info = self.state.thread(reply.origin.message)
        msg = self.reply_message(reply, info)
        self._smtp_send(msg, reply.origin.sender)
        mid = str(msg["Message-ID"])
        self.state.record_sent(reply.reply_id, mid, info.root if info else reply.origin.thread or mid)
        return mid

    def reply_message(self, reply: Outbound, info: ThreadInfo | None) -> EmailMessage:
        sender = self.from_address
        domain = sender.rsplit("@", 1)[-1] or "hermes-fs.invalid"
        token = hashlib.sha256(reply.reply_id.encode()).hexdigest()[:24]
        msg = EmailMessage()
        msg["From"] = sender
        msg["To"] = reply.origin.sender
        answering = info is not None or reply.origin.message.startswith("<")  # else: files sent to an address
        subject = REPLY_PREFIX.sub("", info.subject if info else "").strip() or "your message"
        first = (reply.text or "").strip().splitlines()[:1]
        msg["Subject"] = f"Re: {subject}" if answering else \
            (first[0][:120] if first else "Files from hermes-fs: " + ", ".join(f.name for f in reply.files))
        msg["Date"] = email.utils.formatdate(localtime=False)
        msg["Message-ID"] = f"<hermes.{token}@{domain}>"
        if answering and (info is None or info.has_message_id):
            parent = reply.origin.message
            refs = ((info.references if info else []) + [parent])[-MAX_REFERENCES:]
            msg["In-Reply-To"] = parent
            msg["References"] = " ".join(refs)
        msg["Auto-Submitted"] = "auto-replied" if answering else "auto-generated"
        msg["X-Auto-Response-Suppress"] = "All"
        text = reply.text or "(no answer)"
        msg.set_content(text)
        msg.add_alternative(html_document(render(text).html), subtype="html")  # multipart/alternative
        for f in reply.files:  # the agent's files: attachments of the reply (multipart/mixed)
            maintype, _, subtype = f.mime.partition("/")
            msg.add_attachment(f.path.read_bytes(), maintype=maintype or "application",
                               subtype=subtype or "octet-stream", filename=f.name)
        return msg

    def _smtp(self) -> smtplib.SMTP:
        """A logged-in SMTP connection, TLS as configured; never a password in clear to another host."""
        s = self.config.smtp
        password = self._secret(s.password_env)
        if s.user and not (s.tls or s.starttls) and not _is_loopback(s.host):
            raise MailConfigError(f"{s.host}: the password is never sent in clear (set smtp.starttls)")
        ctx = ssl.create_default_context()
        client: smtplib.SMTP = smtplib.SMTP_SSL(s.host, s.port, timeout=60, context=ctx) if s.tls \
            else smtplib.SMTP(s.host, s.port, timeout=60)
        try:
            client.ehlo()
            if s.starttls and not s.tls:
                client.starttls(context=ctx)
                client.ehlo()
            if s.user:
                client.login(s.user, password or "")
        except BaseException:
            client.close()
            raise
        return client

    def _smtp_send(self, msg: EmailMessage, to: str) -> None:
        with self._smtp() as client:
            client.send_message(msg, from_addr=email.utils.parseaddr(self.from_address)[1], to_addrs=[to])
