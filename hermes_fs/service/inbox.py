"""Inbox requests: `inbox/*.md` files a person (or a script) drops to trigger work.

A request is taken by moving it into .hermes/inbox/ under a name that fixes its result path (a
`TakenRequest`), so after a crash it is run again and answered exactly once: if its result was already committed,
it is only cleaned up. Every request gets a result file, malformed ones included, and the result
keeps the original text.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..agent.outgoing import OUTBOX_DIR, files_from_meta, files_meta
from ..errors import HermesError, InputError
from ..store.claims import RefClaims
from ..store.docs import decode, dump_doc, parse_doc
from ..store.files import atomic_write
from ..store.provenance import Act
from ..store.vault import Vault
from .requests import JOB_TYPES, ExecOptions, Handler, Request, Result, confined_source, execute, origin_from_meta
from .work import adopt_request, claim_lost, claim_request

__all__ = ["TakenRequest", "confined_source", "parse_request", "process", "read_result", "write_result"]

INBOX_DIR = "inbox"
RESULTS_DIR = "outputs/requests"
TYPES = JOB_TYPES
FIELDS = {"type", "focus", "session", "source"}
# a gateway's request files also say where they came from (and whether from a voice message)
CHAT_FIELDS = FIELDS | {"origin", "context", "voice"}
log = logging.getLogger(__name__)


STAMP_FORMAT = "%Y%m%d-%H%M%S-%f"  # a taken request's stamp: its result is outputs/requests/<stamp>-<name>
_STAMP = re.compile(r"\d{8}-\d{6}-\d{6}")  # what STAMP_FORMAT writes


@dataclass
class TakenRequest:
    """A request taken from the inbox (moved out of inbox/ into .hermes/inbox/, or written there by
    the gateway): its stamp fixes the result path. Not a claim: a claim is a ref on the remote
    (store/claims.py), which a request that came through git also has (`key`)."""

    path: Path  # .hermes/inbox/<stamp>--<name>
    name: str  # original file name, e.g. deploy.md
    stamp: str
    producer: str = INBOX_DIR  # who made the request: inbox (a file), or gateway (a chat message)
    key: str | None = None  # its claim on the remote, if it came through git (service/work.py)

    @property
    def request_id(self) -> str:
        """The request's id: its file name without `.md` (a gateway request is `<id>.md`)."""
        return self.name.removesuffix(".md")

    @property
    def key_path(self) -> Path:
        """Where `key` is kept beside the claimed file (hidden: pending_taken skips it)."""
        return self.path.with_name(f".{self.path.name}.key")

    def close(self) -> None:
        """The request is finished or let go: its claimed file goes, and its key with it."""
        self.path.unlink(missing_ok=True)
        self.key_path.unlink(missing_ok=True)

    @property
    def result_rel(self) -> str:
        from ..store.secrets import scan_text

        name = "request-with-a-secret-in-its-name.md" if scan_text("", self.name) else self.name
        return f"{RESULTS_DIR}/{self.stamp}-{name}" + ("" if name.endswith(".md") else ".md")

    @property
    def inbox_rel(self) -> str:
        return f"{self.producer}/{self.name}"


def is_request(rel: str) -> bool:
    """A file dropped straight into inbox/ (not its README, not a hidden file): it gets a result.
    Only `.md` files are run; any other is answered with a result saying so (see `not_a_request`)."""
    parts = rel.split("/")
    return len(parts) == 2 and parts[0] == INBOX_DIR and parts[1] != "README.md" and not parts[1].startswith(".")


KEPT_DIR = "inbox-kept"  # under .hermes/: files dropped in inbox/ that are not requests


def not_a_request(vault: Vault, c: TakenRequest) -> str:
    """A non-`.md` file dropped in inbox/: nothing is run; it is kept (untracked, under .hermes/)
    and the result says so. Returns the result's body."""
    kept = vault.state_dir / KEPT_DIR
    kept.mkdir(exist_ok=True)
    dest = kept / f"{c.stamp}-{c.name}"
    os.replace(c.path, dest)
    size = dest.lstat().st_size
    return (f"Not run: only `.md` files in inbox/ are requests, and `{c.name}` ({size} bytes) is not one. "
            f"It was kept, untracked, at .hermes/{KEPT_DIR}/{dest.name}; to run it, give it a `.md` name "
            "and drop it in inbox/ again.")


def taken_dir(vault: Vault) -> Path:
    d = vault.state_dir / "inbox"
    d.mkdir(exist_ok=True)
    return d


def new_stamp() -> str:
    return datetime.now(UTC).strftime(STAMP_FORMAT)


def request_of_result(rel: str) -> str:
    """The id of the request a result file answers (`outputs/requests/<stamp>-<id>.md`)."""
    name = Path(rel).name
    stamp = _STAMP.match(name)
    if stamp is None or name[stamp.end():stamp.end() + 1] != "-":
        raise InputError("not a request's result (outputs/requests/<stamp>-<name>.md)", rel)
    return name[stamp.end() + 1:].removesuffix(".md")


def take(vault: Vault, rel: str, claims: RefClaims | None) -> TakenRequest | None:
    """Atomically move a request out of the inbox (None if it is gone or someone took it). With
    `claims` (the vault syncs), a request that came through git is taken only under its claim."""
    taken, key = claim_request(vault, claims, rel)  # a request that came through git: one machine takes it
    if not taken:
        return None
    src = vault.root / rel
    name = src.name
    stamp = new_stamp()
    c = TakenRequest(taken_dir(vault) / f"{stamp}--{name}", name, stamp, key=key)
    if key:  # kept before the move: after a crash the claimed file always has its key
        atomic_write(c.key_path, key, fsync=True)
    try:
        os.rename(src, c.path)
    except FileNotFoundError:
        c.close()
        return None
    return c


def resume(c: TakenRequest, claims: RefClaims | None) -> None:
    """A request taken before a crash or stop is answered again here: with a remote, its claim
    across machines is this machine's still (work.adopt_request)."""
    adopt_request(claims, c.key)


def pending_taken(vault: Vault, directory: Path | None = None, producer: str = INBOX_DIR) -> list[TakenRequest]:
    """Requests taken before a crash or stop, oldest first, each with its claim's key if it has
    one (a key left by a crash between writing it and moving the request is removed)."""
    out = []
    d = directory or taken_dir(vault)
    for p in sorted(d.iterdir()):
        if "--" in p.name and not p.name.startswith("."):
            stamp, name = p.name.split("--", 1)
            c = TakenRequest(p, name, stamp, producer)
            c.key = c.key_path.read_text().strip() if c.key_path.exists() else None
            out.append(c)
        elif p.name.startswith(".") and p.name.endswith(".key") and not (d / p.name[1:-4]).exists():
            p.unlink(missing_ok=True)
    return out


def parse_request(text: str, rel: str, types: tuple[str, ...] = TYPES, chat: bool = False) -> Request:
    """A request file's frontmatter and body. `chat`: a gateway's own file, which may carry
    `origin` and `context` (a file a person drops in inbox/ may not claim to come from a chat)."""
    doc = parse_doc(text, rel)
    meta = doc.meta
    known = CHAT_FIELDS if chat else FIELDS
    unknown = set(meta) - known
    if unknown:
        raise InputError(f"unknown field(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(known))})", rel)
    kind = meta.get("type") or ("run" if not meta else None)
    if kind not in types:
        raise InputError(f"type must be one of {', '.join(types)}, got {meta.get('type')!r}", rel)
    for key in ("focus", "session", "source", "context"):
        if meta.get(key) is not None and not isinstance(meta.get(key), str):
            raise InputError(f"'{key}' must be text", rel)
    body = doc.body.strip()
    if kind == "run" and not body:
        raise InputError("a run request needs a prompt in its body", rel)
    if kind == "learn" and not meta.get("source"):
        raise InputError("a learn request needs a `source`", rel)
    origin = origin_from_meta(meta["origin"], rel) if "origin" in meta else None
    return Request(kind, body, meta.get("focus") or (body if kind == "refine" and body else None),
                   meta.get("session"), meta.get("source"), origin, meta.get("context"), meta.get("voice") is True)


def write_result(vault: Vault, c: TakenRequest, original: str, result: Result, started: float,
                 extra: dict | None = None) -> None:
    """outputs/requests/<stamp>-<name>.md: the result's fields, timings, the answer and the
    original request (fsynced: the file is what says "answered" after a crash)."""
    fields = result.meta()
    meta = {"status": fields.pop("status"), "request": c.inbox_rel,
            "started": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
            "finished": datetime.now(UTC).isoformat(timespec="seconds"),
            "duration_s": round(time.time() - started, 3), **fields, **(extra or {})}
    if result.files:  # read back after a crash, so the files are still delivered (once)
        meta["files"] = files_meta(result.files, outbox_dir(vault))
    body = result.body
    from ..store.secrets import redact

    longest = max([len(r) for r in original.split("\n") if set(r) == {"`"}] + [2])
    fence = "`" * max(3, longest + 1)
    text = dump_doc(meta, f"\n{body.strip()}\n\n## Original request\n\n{fence}markdown\n{original}\n{fence}\n")
    text, hidden = redact(text)  # a result is committed: secrets in it are replaced, never stored
    if hidden:
        text = text.replace("\n## Original request\n", f"\n## Original request ({hidden} secret(s) redacted)\n", 1)
    atomic_write(vault.root / c.result_rel, text, fsync=True)


def read_result(vault: Vault, c: TakenRequest) -> Result:
    """A result written before a crash, read back to finish the request (commit, reply)."""
    text = (vault.root / c.result_rel).read_text(encoding="utf-8") if (vault.root / c.result_rel).exists() \
        else (vault.git.read_file(vault.git.head(), c.result_rel) or b"").decode("utf-8", errors="replace")
    result = parse_result(text, c.result_rel)[0]
    result.files = files_from_meta(parse_doc(text, c.result_rel).meta.get("files"), outbox_dir(vault))
    return result


def outbox_dir(vault: Vault) -> Path:
    """Where the files a session sends are staged until delivered (.hermes/outbox)."""
    return vault.state_dir / OUTBOX_DIR


def parse_result(text: str, rel: str) -> tuple[Result, str]:
    """A result file (write_result's layout): the Result, and the text of the original request."""
    doc = parse_doc(text, rel)
    body, _, original = doc.body.partition("\n## Original request")
    fenced = re.search(r"^(`{3,})markdown\n(.*)\n\1$", original, re.S | re.M)
    return Result.from_meta(doc.meta, body.strip()), (fenced.group(2) if fenced else "")


def committed_result(vault: Vault, name: str) -> tuple[Result, str] | None:
    """The result of request `name` (a file name without `.md`, as a request id is) and the text
    of the original request, from outputs/requests/ — where a result made on another machine
    arrives through sync. None if there is none (or `name` is not a plain name)."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,150}", name):
        return None
    found = sorted(p for p in (vault.root / RESULTS_DIR).glob(f"*-{name}.md") if not p.is_symlink())
    if not found:  # a link (which sync could bring) is never followed out of the vault
        return None
    try:
        return parse_result(found[-1].read_text(encoding="utf-8"), f"{RESULTS_DIR}/{found[-1].name}")
    except (OSError, UnicodeDecodeError, HermesError):
        return None


MAX_REQUEST_BYTES = 1_000_000


def read_request(path: Path) -> tuple[bytes, str | None]:
    """The request's bytes, never through a symlink, at most MAX_REQUEST_BYTES; and what is wrong."""
    if path.is_symlink():
        return f"(a symlink to {os.readlink(path)})".encode(), "The request is a symlink; symlinks are never followed."
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        raw = f.read(MAX_REQUEST_BYTES + 1)
    if len(raw) > MAX_REQUEST_BYTES:
        return raw[:4000] + b"\n[... cut: the request is over 1 MB]", "The request is larger than 1 MB; nothing was run."
    return raw, None


def session_key(c: TakenRequest) -> str:
    """What orders a claimed request against others: requests naming one session (a `run` that
    continues it, a `refine` of it) run one at a time in the order they were taken, like a chat's
    messages; any other request is its own key and runs in parallel. A file that cannot be read or
    parsed is its own key too (it is answered with the error when it runs)."""
    try:
        raw, problem = read_request(c.path)
        req = None if problem else parse_request(raw.decode("utf-8"), c.name, chat=c.producer != INBOX_DIR)
    except (OSError, UnicodeDecodeError, HermesError):
        req = None
    return f"session:{req.session}" if req is not None and req.session else f"request:{c.path.name}"


def process(vault: Vault, c: TakenRequest, log_line: Callable[[str], None] = lambda msg: None,
            options: ExecOptions | None = None, on_done: Callable[[Result], None] | None = None,
            chat: bool = False, commit: bool = True, handlers: dict[str, Handler] | None = None,
            claims: RefClaims | None = None) -> Result:
    """Run a claimed request, write its result and commit it with the request's removal; exactly
    once. After a crash the result already written is read back instead of running again.
    `on_done(result)` runs last (the gateway's reply goes out there); `commit=False` leaves the
    commit to the caller's cadence (Result.paths then lists what to commit). `handlers` replaces
    the handler table (the gateway runs chat messages and commands with its own). `claims`: the
    vault's claims when it syncs (a request that came through git is answered only under its claim)."""
    store = vault.git
    if claim_lost(claims, c.key):
        return _let_go(vault, c, log_line)
    if store.read_file(store.head(), c.result_rel) is not None or (vault.root / c.result_rel).exists():
        log_line(f"request {c.name}: result already written, finishing up")
        result = read_result(vault, c)
    else:
        result = _run(vault, c, options, chat, handlers)
    if commit:
        if claim_lost(claims, c.key):  # taken over while it ran
            return _let_go(vault, c, log_line)
        store.commit_paths([c.result_rel, c.inbox_rel, *result.paths], f"request: {c.name} ({result.status})",
                           Act.request(c.name))
    else:
        result.paths = [c.result_rel, *result.paths]
    if on_done:
        on_done(result)
    c.close()
    return result


def _let_go(vault: Vault, c: TakenRequest, log_line: Callable[[str], None]) -> Result:
    """Another machine took this request's claim over and answers it: nothing of this machine's
    answer is committed (a result written but not committed is removed), and the request is let go."""
    log_line(f"request {c.name}: another machine took its claim over and answers it; not answered here")
    if vault.git.read_file(vault.git.head(), c.result_rel) is None:
        (vault.root / c.result_rel).unlink(missing_ok=True)
    c.close()
    return Result("error", "Not answered here: another machine took this request's claim over and answers it.")


def _run(vault: Vault, c: TakenRequest, options: ExecOptions | None, chat: bool, handlers: dict[str, Handler] | None) -> Result:
    started = time.time()
    if not c.name.endswith(".md"):  # a file dropped in inbox/ that is no request: kept, and answered
        result = Result("error", not_a_request(vault, c))
        write_result(vault, c, "(not shown: not a request)", result, started)
        return result
    raw, problem = read_request(c.path)
    try:
        original = decode(raw, c.inbox_rel)
    except InputError as exc:
        original, problem = raw.decode("utf-8", errors="replace"), problem or f"Could not read the request: {exc}"
    if problem:
        result = Result("error", problem)
    else:
        try:
            req = parse_request(original, c.inbox_rel, tuple(handlers) if handlers else TYPES, chat=chat)
        except InputError as exc:
            result = Result("error", f"The request failed: {exc}")
        else:
            result = execute(vault, req, options or _default_options(vault, chat), handlers)
            if result.type is None:
                result.type = req.type
    write_result(vault, c, original, result, started)
    return result


def _default_options(vault: Vault, chat: bool) -> ExecOptions:
    from ..agent.boundary import Source
    from .auto_review import AutoReview

    return ExecOptions(source=Source.GATEWAY if chat else Source.INBOX, auto_review=AutoReview(vault))
