"""Who sent a mail, proven rather than claimed: `From:` is only a claim anyone can write.

A mail is from `me@example.org` only if (1) a DKIM signature verifies (dkimpy) whose signing domain
`d=` is exactly the From domain (strict alignment: no public-suffix guessing), that signs From,
and that has no `l=` body length (which would let anyone append text); or (2) the topmost
`Authentication-Results` header, written by the configured `authserv_id` (the receiving server the
person trusts, which drops forged copies of its own header), says `dmarc=pass` for that From
domain. Everything else fails closed, with the reason. The DNS lookup is a parameter so tests pass a
stub zone holding their keys; in production dkimpy asks DNS through dnspython.
"""

from __future__ import annotations

import email.utils
from collections.abc import Callable
from dataclasses import dataclass
from email.message import Message

DnsFunc = Callable[..., bytes | None]


@dataclass(frozen=True)
class Proof:
    """The sender's address if proven (lowercase), how, or why not."""

    address: str | None
    method: str  # dkim | dmarc | none
    reason: str

    @property
    def ok(self) -> bool:
        return self.address is not None


def claimed_from(msg: Message) -> tuple[str | None, str]:
    """The one address in the one From header, or None and what is wrong."""
    values = msg.get_all("From") or []
    if len(values) != 1:
        return None, f"{len(values)} From headers (exactly one is required)"
    try:
        addrs = [a for _, a in email.utils.getaddresses([str(values[0])]) if a]
    except Exception as exc:  # a header the parser chokes on is not an identity
        return None, f"unreadable From header ({type(exc).__name__})"
    if len(addrs) != 1 or addrs[0].count("@") != 1:
        return None, "From must name exactly one address"
    local, domain = addrs[0].rsplit("@", 1)
    if not local or not domain or any(c in addrs[0] for c in " \r\n<>"):
        return None, "From is not a plain address"
    return addrs[0].lower(), ""


def _dkim_pass(raw: bytes, from_domain: str, dns: DnsFunc | None) -> str | None:
    """None if an aligned signature verifies, else why not."""
    import dkim
    from dkim.util import parse_tag_value

    d = dkim.DKIM(raw, minkey=1024)
    sigs = [v for k, v in d.headers if k.lower() == b"dkim-signature"]
    if not sigs:
        return "no DKIM signature"
    reasons = []
    for i, value in enumerate(sigs):
        try:
            tags = parse_tag_value(value)
        except Exception:
            reasons.append(f"signature {i + 1} unreadable")
            continue
        signer = tags.get(b"d", b"").decode("ascii", "replace").lower().rstrip(".")
        signed = [h.strip().lower() for h in tags.get(b"h", b"").split(b":")]
        if signer != from_domain:
            reasons.append(f"signature {i + 1} by {signer or '?'}, not the From domain {from_domain}")
            continue
        if b"from" not in signed:
            reasons.append(f"signature {i + 1} does not sign From")
            continue
        if b"l" in tags:
            reasons.append(f"signature {i + 1} covers only part of the body (l=)")
            continue
        try:
            ok = d.verify(idx=i, dnsfunc=dns) if dns else d.verify(idx=i)
        except Exception as exc:  # malformed signature, key or DNS answer: not a pass
            reasons.append(f"signature {i + 1}: {type(exc).__name__}: {exc}"[:200])
            continue
        if ok:
            return None
        reasons.append(f"signature {i + 1} by {signer} does not verify")
    return "; ".join(reasons)


def _dmarc_pass(msg: Message, from_domain: str, authserv_id: str | None) -> str | None:
    """None if the topmost Authentication-Results is the pinned server's and says dmarc=pass."""
    if not authserv_id:
        return "no authserv_id configured"
    headers = msg.get_all("Authentication-Results") or []
    if not headers:
        return "no Authentication-Results header"
    import authres

    try:
        top = authres.AuthenticationResultsHeader.parse_value(" ".join(str(headers[0]).split()))
    except Exception:
        return "the topmost Authentication-Results is unreadable"
    if (top.authserv_id or "").lower() != authserv_id.lower():
        return f"the topmost Authentication-Results is from {top.authserv_id!r}, not {authserv_id!r}"
    for r in top.results:
        if r.method == "dmarc":
            domains = [p.value.lower() for p in r.properties if p.type == "header" and p.name == "from"]
            if r.result == "pass" and domains == [from_domain]:
                return None
            return f"{authserv_id} says dmarc={r.result}" + (f" for {domains[0]}" if domains else "")
    return f"{authserv_id} gives no DMARC result"


def prove_sender(raw: bytes, msg: Message, authserv_id: str | None = None, dns: DnsFunc | None = None) -> Proof:
    """Prove the From address by DKIM (aligned) or the pinned server's DMARC verdict; else fail."""
    address, problem = claimed_from(msg)
    if address is None:
        return Proof(None, "none", problem)
    domain = address.rsplit("@", 1)[1]
    # The pinned server's verdict first: it needs no DNS (the server already asked).
    dmarc_problem = _dmarc_pass(msg, domain, authserv_id)
    if dmarc_problem is None:
        return Proof(address, "dmarc", f"{authserv_id} says dmarc=pass")
    dkim_problem = _dkim_pass(raw, domain, dns)
    if dkim_problem is None:
        return Proof(address, "dkim", f"DKIM d={domain} verifies")
    return Proof(None, "none", f"{address} not proven: {dkim_problem}; {dmarc_problem}")
