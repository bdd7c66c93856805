"""Inbox requests: `inbox/*.md` files a person (or a script) drops to trigger work.

A request is claimed by moving it into .hermes/inbox/ under a name that fixes its result path,
so after a crash it is run again and answered exactly once: if its result was already committed,
it is only cleaned up. Every request gets a result file, malformed ones included, and the result
keeps the original text.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..errors import InputError
from ..store.docs import decode, dump_doc, parse_doc
from ..store.files import atomic_write
from ..store.provenance import Act
from ..store.vault import Vault

INBOX_DIR = "inbox"
RESULTS_DIR = "outputs/requests"
TYPES = ("refine", "learn", "run")
FIELDS = {"type", "focus", "session", "source"}


@dataclass
class Claim:
    """A request taken from the inbox: its stamp fixes the result path."""

    path: Path  # .hermes/inbox/<stamp>--<name>
    name: str  # original file name, e.g. deploy.md
    stamp: str

    @property
    def result_rel(self) -> str:
        from ..store.secrets import scan_text

        name = "request-with-a-secret-in-its-name.md" if scan_text("", self.name) else self.name
        return f"{RESULTS_DIR}/{self.stamp}-{name}"

    @property
    def inbox_rel(self) -> str:
        return f"{INBOX_DIR}/{self.name}"


@dataclass
class Request:
    type: str
    text: str
    focus: str | None = None
    session: str | None = None
    source: str | None = None


def is_request(rel: str) -> bool:
    parts = rel.split("/")
    return len(parts) == 2 and parts[0] == INBOX_DIR and parts[1].endswith(".md") \
        and parts[1] != "README.md" and not parts[1].startswith(".")


def claims_dir(vault: Vault) -> Path:
    d = vault.state_dir / "inbox"
    d.mkdir(exist_ok=True)
    return d


def claim(vault: Vault, rel: str) -> Claim | None:
    """Atomically move a request out of the inbox (None if it is gone or someone took it)."""
    from .sync import claim_request

    if not claim_request(vault, rel):  # a request that came through git: one machine takes it
        return None
    src = vault.root / rel
    name = src.name
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S-%f")
    dest = claims_dir(vault) / f"{stamp}--{name}"
    try:
        os.rename(src, dest)
    except FileNotFoundError:
        return None
    return Claim(dest, name, stamp)


def pending_claims(vault: Vault) -> list[Claim]:
    """Requests claimed before a crash or stop, oldest first."""
    out = []
    for p in sorted(claims_dir(vault).iterdir()):
        if "--" in p.name:
            stamp, name = p.name.split("--", 1)
            out.append(Claim(p, name, stamp))
    return out


def parse_request(text: str, rel: str) -> Request:
    doc = parse_doc(text, rel)
    meta = doc.meta
    unknown = set(meta) - FIELDS
    if unknown:
        raise InputError(f"unknown field(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(FIELDS))})", rel)
    kind = meta.get("type") or ("run" if not meta else None)
    if kind not in TYPES:
        raise InputError(f"type must be one of {', '.join(TYPES)}, got {meta.get('type')!r}", rel)
    for key in ("focus", "session", "source"):
        if meta.get(key) is not None and not isinstance(meta.get(key), str):
            raise InputError(f"'{key}' must be text", rel)
    body = doc.body.strip()
    if kind == "run" and not body:
        raise InputError("a run request needs a prompt in its body", rel)
    if kind == "learn" and not meta.get("source"):
        raise InputError("a learn request needs a `source`", rel)
    return Request(kind, body, meta.get("focus") or (body if kind == "refine" and body else None),
                   meta.get("session"), meta.get("source"))


def write_result(vault: Vault, c: Claim, original: str, status: str, started: float, body: str,
                 extra: dict | None = None) -> None:
    meta = {"status": status, "request": c.inbox_rel,
            "started": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
            "finished": datetime.now(UTC).isoformat(timespec="seconds"),
            "duration_s": round(time.time() - started, 3), **(extra or {})}
    from ..store.secrets import redact

    longest = max([len(r) for r in original.split("\n") if set(r) == {"`"}] + [2])
    fence = "`" * max(3, longest + 1)
    text = dump_doc(meta, f"\n{body.strip()}\n\n## Original request\n\n{fence}markdown\n{original}\n{fence}\n")
    text, hidden = redact(text)  # a result is committed: secrets in it are replaced, never stored
    if hidden:
        text = text.replace("\n## Original request\n", f"\n## Original request ({hidden} secret(s) redacted)\n", 1)
    atomic_write(vault.root / c.result_rel, text)


def execute(vault: Vault, req: Request) -> tuple[str, str, dict]:
    """Run one request: (status, body, extra frontmatter)."""
    if req.type == "run":
        from ..agent.conversation import Conversation, ConversationOptions

        with Conversation(vault, ConversationOptions(source="inbox")) as conv:
            result = conv.ask(req.text)
        return "ok", result.answer, {"session": conv.id, "tokens": result.usage.total_tokens}
    if req.type == "refine":
        from ..learning.refine import RefineOptions, refine

        r = refine(vault, RefineOptions(session=req.session, focus=req.focus))
        extra = {"branch": r.branch, "refine": r.status}
        return ("ok" if r.ok else "error"), r.line(), extra
    if req.type == "learn":
        from ..learning.learn import LearnOptions, learn

        source = confined_source(vault, req.source or "")
        r = learn(vault, LearnOptions([source], focus=req.focus, notes=req.text or None))
        return ("ok" if r.ok else "error"), r.line(), {"branch": r.branch, "learn": r.status}
    raise InputError(f"unknown request type {req.type!r}")


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


def confined_source(vault: Vault, source: str) -> Path:
    """A learn source named by a request (which anyone or anything able to write inbox/ can drop)
    must be inside the vault or its workspace, never .git/ or .hermes/ secrets: a person's own CLI
    may name any path, a request may not."""
    raw = Path(source).expanduser()
    target = Path(os.path.realpath(raw if raw.is_absolute() else vault.root / raw))
    workspace = Path(os.path.realpath(vault.state_dir / "workspace"))
    root = Path(os.path.realpath(vault.root))
    if target.is_relative_to(workspace):
        return target
    if target.is_relative_to(root):
        top = target.relative_to(root).parts[:1]
        if top and top[0] in (".git", ".hermes"):
            raise InputError(f"a request may not read {top[0]}/", source)
        return target
    raise InputError("a request's source must be inside the vault or .hermes/workspace "
                     "(to learn from elsewhere, run `hermes-fs learn PATH` yourself)", source)


def process(vault: Vault, c: Claim, log=lambda msg: None) -> str:
    """Run a claimed request and commit its result with the request's removal; exactly once."""
    store = vault.git
    if store.read_file(store.head(), c.result_rel) is not None or (vault.root / c.result_rel).exists():
        log(f"request {c.name}: result already written, finishing up")
    else:
        started = time.time()
        raw, problem = read_request(c.path)
        try:
            original = decode(raw, c.inbox_rel)
        except InputError as exc:
            original, problem = raw.decode("utf-8", errors="replace"), problem or f"Could not read the request: {exc}"
        if problem:
            write_result(vault, c, original, "error", started, problem)
        else:
            try:
                req = parse_request(original, c.inbox_rel)
                status, body, extra = execute(vault, req)
                write_result(vault, c, original, status, started, body, {"type": req.type, **extra})
            except Exception as exc:  # every failure becomes a result file, never a lost request
                reason = str(exc) if hasattr(exc, "exit_code") else f"{type(exc).__name__}: {exc}"
                write_result(vault, c, original, "error", started, f"The request failed: {reason}")
    meta = parse_doc((vault.root / c.result_rel).read_text(encoding="utf-8"), c.result_rel).meta
    store.commit_paths([c.result_rel, c.inbox_rel], f"request: {c.name} ({meta.get('status')})",
                       Act.request(c.name))
    c.path.unlink(missing_ok=True)
    return str(meta.get("status"))

