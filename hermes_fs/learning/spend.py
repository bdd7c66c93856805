"""What learning costs: every review's tokens and price, per change and per day.

Each learned change carries its own figures in its commit's trailers (`Learning-Tokens`,
`Learning-Cost`, spelled in store/provenance.py), so a change says what it cost wherever it goes.
A review that ends with nothing to change, or fails, still cost something and makes no commit, so
every review is also appended to this machine's ledger (`.hermes/learning-spend.jsonl`, one JSON
line each); `log` and the web page sum it per UTC day, and `refine.max_cost_per_day` is judged
against it. The price is litellm's (`response_cost`); a model it has no price for (a local
server) counts its tokens and is shown as unpriced, never as free.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from ..agent.model import Usage
from ..store.vault import Vault

LEDGER = "learning-spend.jsonl"
MAX_LINE = 2000  # a longer line is not one this module wrote
log = logging.getLogger(__name__)


@dataclass
class Spend:
    at: float
    kind: str  # refine | learn | curate
    status: str  # the Outcome's status
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None  # None: no price known for the model
    branch: str | None = None


@dataclass
class DaySpend:
    day: str  # YYYY-MM-DD, UTC
    reviews: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    unpriced: int = 0  # reviews whose model has no known price

    def line(self) -> str:
        cost = f"${self.cost_usd:.4f}" + (f" (+{self.unpriced} unpriced)" if self.unpriced else "")
        return f"{self.day}  {self.reviews} review{'s' if self.reviews != 1 else ''}  {self.tokens} tokens  {cost}"


def record(vault: Vault, kind: str, status: str, usage: Usage, branch: str | None = None) -> None:
    """Append one review to the ledger; a ledger that cannot be written never fails the change."""
    entry = Spend(time.time(), kind, status, usage.prompt_tokens, usage.completion_tokens, usage.cost_usd, branch)
    try:
        fd = os.open(vault.state_dir / LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(json.dumps(asdict(entry)) + "\n")
    except OSError:
        log.exception("could not record what a review cost")


def entries(vault: Vault) -> list[Spend]:
    """The ledger, oldest first; lines that are not ledger entries are skipped."""
    path = vault.state_dir / LEDGER
    out = []
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                if len(line) > MAX_LINE:
                    continue
                try:
                    raw = json.loads(line)
                    out.append(Spend(**raw))
                except (ValueError, TypeError):
                    continue
    except FileNotFoundError:
        return []
    return out


def day_of(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).date().isoformat()


def per_day(vault: Vault, days: int = 14) -> list[DaySpend]:
    """The newest `days` days that had reviews, newest first."""
    by_day: dict[str, DaySpend] = {}
    for e in entries(vault):
        d = by_day.setdefault(day_of(e.at), DaySpend(day_of(e.at)))
        d.reviews += 1
        d.tokens += int(e.prompt_tokens) + int(e.completion_tokens)
        if e.cost_usd is None:
            d.unpriced += 1
        else:
            d.cost_usd += float(e.cost_usd)
    return sorted(by_day.values(), key=lambda d: d.day, reverse=True)[:days]


def spent_today(vault: Vault, now: float | None = None) -> float:
    today = day_of(now or time.time())
    return sum(float(e.cost_usd or 0.0) for e in entries(vault) if day_of(e.at) == today)


def over_budget(vault: Vault, now: float | None = None) -> str | None:
    """The sentence saying background reviews stop today, or None while under `refine.max_cost_per_day`."""
    limit = vault.config.refine.max_cost_per_day
    if limit is None:
        return None
    spent = spent_today(vault, now)
    if spent < limit:
        return None
    return (f"automatic reviews are paused until tomorrow (UTC): learning has cost ${spent:.4f} today, past "
            f"refine.max_cost_per_day (${limit:g}); raise it in hermes.yaml, or run `hermes-fs refine` yourself")
