"""A real mail system on 127.0.0.1 for the e-mail channel's tests and bench.

Dovecot (Debian's package, installed by scripts/mail-test-env.sh) serves IMAP with IDLE and takes
delivery over LMTP; an aiosmtpd server plays the MX and the submission server: it verifies DKIM with
dkimpy against the test zone, prepends `Authentication-Results: <authserv_id>; dkim=...; dmarc=...`
(as a receiving MTA such as Gmail or Fastmail does, dropping any that claim its own authserv-id), and
delivers to Dovecot over LMTP before it answers 250, so "SMTP accepted" means "in the mailbox".
Every port is picked free; each MailEnv has its own config, mail store and logs in a temp dir.
"""

from __future__ import annotations

import email
import email.utils
import os
import pwd
import shutil
import smtplib
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path

import dkim
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP
from deadlines import deadline as generous

AUTHSERV = "mx.test.example"
PASSWORD = "secret-pw"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dovecot_missing() -> str | None:
    if not shutil.which("dovecot") or not Path("/usr/lib/dovecot/lmtp").exists():
        return "Dovecot is not installed (bash scripts/mail-test-env.sh installs it, as root)"
    return None


@dataclass
class DkimKey:
    """A signing key and the TXT record that publishes it, for one domain and selector."""

    domain: str
    selector: str
    private: bytes
    txt: bytes

    @classmethod
    def make(cls, domain: str, selector: str = "sel") -> DkimKey:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                    serialization.NoEncryption())
        public = key.public_key().public_bytes(serialization.Encoding.DER,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
        import base64

        return cls(domain, selector, private, b"v=DKIM1; k=rsa; p=" + base64.b64encode(public))

    def sign(self, raw: bytes, headers: tuple[bytes, ...] = (b"from", b"to", b"subject", b"date", b"message-id",
                                                             b"in-reply-to", b"references"),
             domain: str | None = None) -> bytes:
        sig = dkim.sign(raw, self.selector.encode(), (domain or self.domain).encode(), self.private,
                        include_headers=list(headers))
        return sig + raw


@dataclass
class Zone:
    """The test's DNS: TXT records by name, looked up the way dkimpy's dnsfunc is called."""

    records: dict[str, bytes] = field(default_factory=dict)

    def add(self, key: DkimKey) -> None:
        self.records[f"{key.selector}._domainkey.{key.domain}."] = key.txt

    def __call__(self, name: bytes | str, timeout: float = 5) -> bytes | None:
        n = name.decode() if isinstance(name, bytes) else name
        return self.records.get(n if n.endswith(".") else n + ".")


def dmarc_verdict(raw: bytes, zone: Zone) -> tuple[str, str, str]:
    """What an MX would conclude: (dkim result, d= of the passing signature, dmarc result)."""
    msg = email.message_from_bytes(raw)
    froms = msg.get_all("From") or []
    addrs = email.utils.getaddresses(froms)
    from_domain = addrs[0][1].rpartition("@")[2].lower() if len(addrs) == 1 else ""
    sigs = msg.get_all("DKIM-Signature") or []
    d = dkim.DKIM(raw)
    result, signer = ("none", "") if not sigs else ("fail", "")
    for i in range(len(sigs)):
        try:
            ok = d.verify(idx=i, dnsfunc=zone)
        except Exception:
            ok = False
        if ok:
            result, signer = "pass", (d.domain or b"").decode().lower()
            if signer == from_domain:
                break
    dmarc = "pass" if result == "pass" and signer == from_domain and from_domain else "fail"
    return result, signer, dmarc


class _Handler:
    def __init__(self, env: MailEnv):
        self.env = env

    async def handle_DATA(self, server, session, envelope):
        raw = envelope.original_content or envelope.content
        if isinstance(raw, str):
            raw = raw.encode("utf-8", "surrogateescape")
        try:
            self.env.deliver(raw, envelope.mail_from, list(envelope.rcpt_tos))
        except Exception as exc:  # the sender sees a temporary failure, as from a real MX
            return f"451 delivery failed: {exc}"
        return "250 OK delivered"


class _SMTP(SMTP):
    # With aiosmtpd's own line limit (1001, also its StreamReader's limit), DATA of a few hundred
    # KB with 78-character lines was refused here as "Line too long" (aiosmtpd 1.4.6, Python 3.11).
    line_length_limit = 1 << 27  # above data_size_limit


class _Controller(Controller):
    def factory(self):
        return _SMTP(self.handler, **self.SMTP_kwargs)


class MailEnv:
    """Dovecot + an aiosmtpd MX; `users` get mailboxes with PASSWORD."""

    def __init__(self, users: list[str], authserv_id: str = AUTHSERV, add_auth_results: bool = True):
        # Dovecot's unprivileged processes must reach the config and mail store: pytest's own
        # temp dirs are 0700, so the env keeps its own (removed by stop()).
        self.root = Path(tempfile.mkdtemp(prefix="hermes-mail-"))
        self.root.chmod(0o711)
        self.users = users
        self.authserv_id = authserv_id
        self.add_auth_results = add_auth_results
        self.zone = Zone()
        self.imap_port = free_port()
        self.lmtp_port = free_port()
        self.proc: subprocess.Popen | None = None
        self.controller: Controller | None = None
        self.smtp_port = 0
        self.delivered: list[tuple[str, list[str], bytes]] = []  # (mail from, rcpts, raw as stored)
        self.lock = threading.Lock()

    # -- servers
    def start(self) -> MailEnv:
        self._start_dovecot()
        self.controller = _Controller(_Handler(self), hostname="127.0.0.1", port=free_port(),
                                     decode_data=False, data_size_limit=60_000_000)
        self.controller.start()
        self.smtp_port = self.controller.port
        return self

    def stop(self) -> None:
        if self.controller:
            self.controller.stop()
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.root, ignore_errors=True)

    def restart_imap(self, down_s: float = 0.0) -> None:
        """Stop Dovecot (connections drop, as in a server restart), then start it on the same ports."""
        assert self.proc
        self.proc.terminate()
        self.proc.wait(10)
        time.sleep(down_s)
        self._start_dovecot()

    def _mail_owner(self) -> tuple[str, int, int]:
        if os.getuid() == 0:
            pw = pwd.getpwnam("mail")
        else:
            pw = pwd.getpwuid(os.getuid())
        return pw.pw_name, pw.pw_uid, pw.pw_gid

    def _start_dovecot(self) -> None:
        r = self.root
        for d in ("run", "state", "mail"):
            (r / d).mkdir(parents=True, exist_ok=True)
        name, uid, gid = self._mail_owner()
        os.chown(r / "mail", uid, gid)
        (r / "users").write_text("".join(f"{u}:{{PLAIN}}{PASSWORD}:{uid}:{gid}::{r / 'mail' / u}::\n"
                                         for u in self.users))
        (r / "users").chmod(0o644)  # test passwords only; Dovecot's auth process reads it
        internal = "dovecot" if os.getuid() == 0 else name
        login = "dovenull" if os.getuid() == 0 else name
        (r / "dovecot.conf").write_text(f"""
instance_name = hermes-test-{self.imap_port}
base_dir = {r / 'run'}
state_dir = {r / 'state'}
log_path = {r / 'dovecot.log'}
info_log_path = {r / 'dovecot.log'}
protocols = imap lmtp
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
default_internal_user = {internal}
default_login_user = {login}
first_valid_uid = {uid}
last_valid_uid = {uid}
first_valid_gid = 0
mail_location = maildir:~/Maildir
mail_privileged_group =
lmtp_save_to_detail_mailbox = no
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%Lu {r / 'users'}
}}
userdb {{
  driver = passwd-file
  args = username_format=%Lu {r / 'users'}
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {self.imap_port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service lmtp {{
  inet_listener lmtp {{
    address = 127.0.0.1
    port = {self.lmtp_port}
  }}
  unix_listener lmtp {{
    mode = 0600
  }}
}}
service stats {{
  unix_listener stats-writer {{
    mode = 0666
  }}
}}
protocol lmtp {{
  postmaster_address = postmaster@test.example
}}
""")
        self.proc = subprocess.Popen(["dovecot", "-F", "-c", str(r / "dovecot.conf")],
                                     stdout=open(r / "dovecot.out", "wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("dovecot exited: " + (r / "dovecot.out").read_text() + self.log())
            try:
                with socket.create_connection(("127.0.0.1", self.imap_port), 1), \
                        socket.create_connection(("127.0.0.1", self.lmtp_port), 1):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("dovecot did not listen: " + self.log())

    def log(self) -> str:
        p = self.root / "dovecot.log"
        return p.read_text(errors="replace") if p.exists() else ""

    # -- delivery, as an MX would
    def deliver(self, raw: bytes, mail_from: str, rcpts: list[str]) -> None:
        if self.add_auth_results:
            raw = self._stamp(raw)
        raw = (f"Received: from client by {self.authserv_id} with ESMTP; "
               f"{email.utils.formatdate()}\r\n").encode() + raw
        with smtplib.LMTP("127.0.0.1", self.lmtp_port) as lmtp:
            lmtp.sendmail(mail_from, rcpts, raw)
        with self.lock:
            self.delivered.append((mail_from, rcpts, raw))

    def _stamp(self, raw: bytes) -> bytes:
        """Drop headers that claim this MX's authserv-id (RFC 8601 §5), then prepend its verdict."""
        dk, signer, dmarc = dmarc_verdict(raw, self.zone)
        head, sep, body = raw.partition(b"\r\n\r\n") if b"\r\n\r\n" in raw else raw.partition(b"\n\n")
        kept: list[bytes] = []
        skipping = False
        for line in head.splitlines(keepends=True):
            if line[:1] in (b" ", b"\t"):
                if not skipping:
                    kept.append(line)
                continue
            name, _, value = line.partition(b":")
            skipping = name.strip().lower() == b"authentication-results" and \
                value.strip().lower().startswith(self.authserv_id.encode())
            if not skipping:
                kept.append(line)
        msg = email.message_from_bytes(raw)
        addrs = email.utils.getaddresses(msg.get_all("From") or [])
        from_domain = addrs[0][1].rpartition("@")[2].lower() if addrs else ""
        stamp = (f"Authentication-Results: {self.authserv_id}; dkim={dk}"
                 + (f" header.d={signer}" if signer else "")
                 + f"; dmarc={dmarc} header.from={from_domain or 'unknown'}\r\n").encode()
        return stamp + b"".join(kept) + sep + body

    # -- clients
    def send(self, raw: bytes | EmailMessage, mail_from: str, rcpts: list[str]) -> None:
        data = raw.as_bytes() if isinstance(raw, EmailMessage) else raw
        with smtplib.SMTP("127.0.0.1", self.smtp_port) as s:
            s.sendmail(mail_from, rcpts, data)

    def mailbox(self, user: str):
        from imap_tools import MailBoxUnencrypted

        return MailBoxUnencrypted("127.0.0.1", self.imap_port).login(user, PASSWORD)

    def wait_for(self, user: str, count: int, timeout: float = 120.0, folder: str = "INBOX") -> list:
        """The user's messages once there are at least `count` of them (raw MailMessage objects)."""
        timeout = generous(timeout)  # tests/deadlines.py: a deadline, generous under load
        deadline = time.monotonic() + timeout
        while True:
            with self.mailbox(user) as mb:
                mb.folder.set(folder)
                msgs = list(mb.fetch(mark_seen=False))
            if len(msgs) >= count or time.monotonic() > deadline:
                return msgs
            time.sleep(0.2)
