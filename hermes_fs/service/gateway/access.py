"""Who may talk to the agent: checked once, in the core, for every channel. Default deny.

A sender is allowed when named in the channel's `allow` or `admins`, or approved through pairing,
or when the channel itself proved the sender (a signed webhook: whoever holds the route's secret).
An empty allow list never means "everyone". A channel with `customers: true` answers everyone else as
a customer (support.tools only, decided where the turn's tools are built). Otherwise, with no allow
list and `pairing: true`, an unknown sender in a direct chat gets one pairing code; everything else
from unknown senders gets silence.

Pairing codes: 8 characters from an alphabet without 0/O/1/I, valid 1 hour, at most 3 pending per
platform, one per sender per 10 minutes; only their SHA-256 is stored and they are never logged.
After 5 failed approvals in an hour, approving is locked for an hour.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from ...errors import InputError
from .ledger import PairingRules

if TYPE_CHECKING:
    from .ledger import GatewayLedger, Pairing
    from .message import Inbound

ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I
CODE_LENGTH = 8
CODE_TTL_S = 3600
MAX_PENDING = 3  # per platform
ASK_EVERY_S = 600  # one code per sender per 10 minutes
MAX_FAILURES = 5
LOCK_S = 3600


@dataclass
class AccessRules:
    """A channel's access settings (from its hermes.yaml section)."""

    allow: list[str] = field(default_factory=list)
    admins: list[str] = field(default_factory=list)
    pairing: bool = False
    authenticated: bool = False  # the channel proved the sender itself (signed webhooks): allowed, never admin
    customers: bool = False  # anyone else is a customer: answered with support.tools only, never denied


RULES = PairingRules(code_ttl_s=CODE_TTL_S, max_failures=MAX_FAILURES, lock_s=LOCK_S)


class Verdict(Enum):
    ADMIN = "admin"
    ALLOWED = "allowed"
    CUSTOMER = "customer"  # answered, with the support tools only (a channel with `customers: true`)
    PAIR = "pair"  # send this sender a pairing code
    SILENCE = "silence"


def normal(sender: str) -> str:
    return sender.strip().lower()


def decide(rules: AccessRules, ledger: GatewayLedger, message: Inbound) -> Verdict:
    sender = normal(message.origin.sender)
    if not sender:
        return Verdict.SILENCE
    if sender in {normal(a) for a in rules.admins}:
        return Verdict.ADMIN
    if sender in {normal(a) for a in rules.allow} or ledger.is_approved(message.origin.platform, sender):
        return Verdict.ALLOWED
    if rules.authenticated:
        return Verdict.ALLOWED
    if rules.customers:
        return Verdict.CUSTOMER
    if rules.pairing and not rules.allow and message.direct:
        return Verdict.PAIR
    return Verdict.SILENCE


def hash_code(code: str) -> str:
    return hashlib.sha256(code.strip().upper().encode()).hexdigest()


def new_code(ledger: GatewayLedger, platform: str, sender: str, now: float | None = None) -> str | None:
    """A fresh pairing code for this sender, or None when the limits say silence."""
    now = now or time.time()
    sender = normal(sender)
    ledger.drop_expired_pairings(now - CODE_TTL_S)
    asked = ledger.last_asked(platform, sender)
    if asked is not None and now - asked < ASK_EVERY_S:
        return None
    pending = ledger.pairings(now - CODE_TTL_S, platform)
    if any(p.sender == sender for p in pending) or len(pending) >= MAX_PENDING:
        return None
    code = "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))
    ledger.add_pairing(hash_code(code), platform, sender)
    return code


def pairing_text(code: str) -> str:
    return (f"I don't know you yet. Your pairing code is {code} (valid for 1 hour). Ask the person who runs "
            f"this agent to approve it on their machine with: hermes-fs gateway pair approve {code}")


def locked_until(ledger: GatewayLedger, now: float | None = None) -> float | None:
    now = now or time.time()
    failures = ledger.pair_failures(now - LOCK_S)
    if len(failures) >= MAX_FAILURES:
        return failures[-MAX_FAILURES] + LOCK_S  # locked until the fifth-newest failure is an hour old
    return None


def approve(ledger: GatewayLedger, code: str, now: float | None = None) -> Pairing:
    return _decide(ledger, code, True, now)


def deny(ledger: GatewayLedger, code: str, now: float | None = None) -> Pairing:
    return _decide(ledger, code, False, now)


def _decide(ledger: GatewayLedger, code: str, approved: bool, now: float | None) -> Pairing:
    """Approvals and denials count alike against the lock-out: both try a code."""
    now = now or time.time()
    attempt = ledger.decide_pairing(hash_code(code), approved, RULES, now)
    if attempt.locked_until is not None:
        raise InputError(f"pairing approval is locked after {MAX_FAILURES} failed attempts; "
                         f"try again in {int(attempt.locked_until - now) // 60 + 1} minutes")
    if attempt.pairing is None:
        raise InputError("no pending pairing has this code (codes are valid for 1 hour); "
                         "`hermes-fs gateway pair list` shows who is waiting")
    return attempt.pairing
