"""What became of requests — files dropped in inbox/, webhook deliveries, chat messages — read
back from their result files (outputs/requests/<stamp>-<name>.md, written by service/inbox.py),
newest first, for the web page's Requests view. Results made on another machine arrive by sync
and are listed the same way. A result file is data a request wrote: read tolerantly, never run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import HermesError, NotFound
from ..store.docs import decode, parse_doc
from ..store.vault import Vault
from .inbox import RESULTS_DIR, parse_result

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,200}")
MAX_RESULT_BYTES = 2_000_000  # a larger file is listed, not read
FAILED_LOOKBACK = 20  # `status` and the web Status page name failures among the newest results


@dataclass
class RequestResult:
    name: str  # the file name without .md: <stamp>-<request name>
    rel: str
    status: str  # ok | error | unreadable
    type: str = ""  # run | refine | learn | a chat command
    request: str = ""  # inbox/<file> or gateway/<file>
    finished: str = ""
    duration_s: float | None = None
    platform: str = ""  # webhook, matrix, email ...: where a gateway request came from ("" for an inbox file)
    chat: str = ""  # the room, route or mailbox it came from
    answer: str = ""
    original: str = ""  # the request as it was sent
    session: str = ""
    branch: str = ""

    @property
    def source(self) -> str:
        return f"{self.platform} {self.chat}".strip() if self.platform else self.request


def recent_results(vault: Vault, limit: int = 50) -> list[RequestResult]:
    """The newest `limit` results (file names start with their stamp, so they sort by time)."""
    base = vault.root / RESULTS_DIR
    if not base.is_dir():
        return []
    files = sorted((p for p in base.glob("*.md") if p.is_file() and not p.is_symlink()), reverse=True)
    return [_read(vault, p.name[:-3]) for p in files[:limit]]


def recent_failures(vault: Vault, lookback: int = FAILED_LOOKBACK) -> list[RequestResult]:
    """The failed (or unreadable) ones among the newest `lookback` results: what `status` and the
    web Status page list as errors."""
    return [r for r in recent_results(vault, lookback) if r.status != "ok"]


def request_result(vault: Vault, name: str) -> RequestResult:
    """One result by its name (as listed); NotFound if there is none."""
    if not _NAME.fullmatch(name or "") or not (vault.root / RESULTS_DIR / f"{name}.md").is_file() \
            or (vault.root / RESULTS_DIR / f"{name}.md").is_symlink():
        raise NotFound(f"no request result named {name!r}")
    return _read(vault, name)


def _read(vault: Vault, name: str) -> RequestResult:
    rel = f"{RESULTS_DIR}/{name}.md"
    path = vault.root / rel
    try:
        if path.stat().st_size > MAX_RESULT_BYTES:
            return RequestResult(name, rel, "unreadable", answer=f"(over {MAX_RESULT_BYTES:,} bytes: open {rel})")
        text = decode(path.read_bytes(), rel)
        result, original = parse_result(text, rel)
        meta = parse_doc(text, rel).meta
    except (OSError, HermesError) as exc:
        return RequestResult(name, rel, "unreadable", answer=str(exc))
    platform, chat = _origin(original, rel)
    duration = meta.get("duration_s")
    return RequestResult(name, rel, result.status, result.type or "", str(meta.get("request") or ""),
                         str(meta.get("finished") or ""), float(duration) if isinstance(duration, int | float) else None,
                         platform, chat, result.body, original, result.session or "", result.branch or "")


def _origin(original: str, rel: str) -> tuple[str, str]:
    """(platform, chat) from the original request's `origin:` (a gateway request), else ("", "")."""
    try:
        origin = parse_doc(original, rel).meta.get("origin")
    except HermesError:
        return "", ""
    if not isinstance(origin, dict):
        return "", ""
    return str(origin.get("platform") or ""), str(origin.get("chat") or "")
