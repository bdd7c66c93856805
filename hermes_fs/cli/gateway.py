"""`hermes-fs gateway`: the channels' state, pairing approvals, hand-offs, and a test of one channel."""

from __future__ import annotations

import time

import click

from ..errors import InputError
from .options import vault_option
from .term import echo, safe


def _vault(ctx: click.Context):
    from .. import open_vault as find_vault

    return find_vault(ctx.find_root().obj.get("vault"))


@click.group()
def gateway():
    """Chat platforms and signed webhooks: status, pairing, tests."""


@gateway.command("status")
@vault_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def gateway_status(ctx: click.Context, as_json: bool):
    """Each channel: connected / error, its last message, replies pending or failed."""
    from ..service.gateway.status import collect

    rows = collect(_vault(ctx))
    if as_json:
        import json  # only this command needs it: --help stays light
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        from ..service.gateway.registry import CHANNELS

        echo(f"no gateway channels in hermes.yaml (gateway: {{NAME: ...}}; channels: {', '.join(CHANNELS)})")
        return
    for r in rows:
        echo(render_row(r))


def render_row(r: dict) -> str:
    last = f"last message {_ago(r['last_message'])}" if r.get("last_message") else "no message yet"
    d = r.get("deliveries") or {}
    replies = ", ".join(f"{n} {state}" for state, n in sorted(d.items()) if n) or "no replies"
    detail = f" ({r['detail']})" if r.get("detail") else ""
    return safe(f"{r['channel']:<8} {r['state']}{detail}; {last}; {replies}")


def _ago(when: float) -> str:
    s = int(time.time() - when)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit} ago"
    return f"{s}s ago"


@gateway.group("pair")
def pair():
    """Pairing: unknown senders in a DM get a code; approve it here."""


@pair.command("list")
@vault_option
@click.pass_context
def pair_list(ctx: click.Context):
    """Senders waiting for approval (codes are never shown: the sender has theirs)."""
    from ..service.gateway.access import CODE_TTL_S
    from ..service.gateway.ledger import GatewayLedger, ledger_path

    ledger = GatewayLedger(ledger_path(_vault(ctx).state_dir))
    waiting = ledger.pairings(time.time() - CODE_TTL_S)
    for p in waiting:
        echo(f"{p.platform:<8} {p.sender}  asked {_ago(p.created)}, expires in {int(p.created + CODE_TTL_S - time.time()) // 60} min")
    if not waiting:
        echo("no pending pairings")
    approved = ledger.approved()
    if approved:
        echo("approved: " + ", ".join(f"{s} ({p})" for p, s in approved))


@pair.command("approve")
@vault_option
@click.argument("code")
@click.pass_context
def pair_approve(ctx: click.Context, code: str):
    """Let the sender who was given CODE talk to the agent."""
    _decide(ctx, code, approved=True)


@pair.command("deny")
@vault_option
@click.argument("code")
@click.pass_context
def pair_deny(ctx: click.Context, code: str):
    """Drop a pending pairing (the sender gets no new code for 10 minutes)."""
    _decide(ctx, code, approved=False)


def _decide(ctx: click.Context, code: str, approved: bool) -> None:
    from ..errors import InputError
    from ..service.gateway.access import approve, deny
    from ..service.gateway.ledger import GatewayLedger, ledger_path
    from ..service.work import remote_url

    v = _vault(ctx)
    try:
        found = (approve if approved else deny)(GatewayLedger(ledger_path(v.state_dir)), code)
    except InputError as exc:
        if remote_url(v) is None:
            raise
        raise InputError(f"{exc}. With several machines a code is kept by the machine holding the channel "
                         "(and handed to the next holder): run this there — the one whose `hermes-fs gateway "
                         "status` says connected") from None
    echo(f"{'approved' if approved else 'denied'} {found.sender} on {found.platform}")


@gateway.command("handoffs")
@vault_option
@click.pass_context
def gateway_handoffs(ctx: click.Context):
    """Chats handed to a person (the `handoff` tool): the agent answers them no more until resumed."""
    from ..service.gateway.handoff import HandoffBook, describe

    rows = HandoffBook(_vault(ctx).state_dir).all()
    for h in rows:
        echo(safe(describe(h)))
    if not rows:
        echo("no chat is with a person")


@gateway.command("resume")
@vault_option
@click.argument("chat", metavar="CHANNEL:CHAT")
@click.pass_context
def gateway_resume(ctx: click.Context, chat: str):
    """Give a handed-over chat back to the agent (a running daemon answers its next message)."""
    from ..service.gateway.handoff import HandoffBook, parse_key

    key = ":".join(parse_key(chat))
    if HandoffBook(_vault(ctx).state_dir).close(key) is None:
        raise InputError(f"{key} is not with a person (`hermes-fs gateway handoffs` lists them)")
    echo(safe(f"{key} is the agent's again"))


@gateway.command("test")
@vault_option
@click.argument("channel")
@click.pass_context
def gateway_test(ctx: click.Context, channel: str):
    """Connect CHANNEL with the settings of hermes.yaml and say whether it works."""
    from ..service.gateway.registry import CHANNELS, configured, load_channel

    v = _vault(ctx)
    if channel not in CHANNELS:
        raise InputError(f"unknown channel {channel!r} (known: {', '.join(CHANNELS)})")
    if channel not in configured(v):
        raise InputError(f"gateway.{channel} is not set in hermes.yaml")
    echo(f"ok {channel}: {load_channel(v, channel).check()}")


def doctor_checks(v) -> list[tuple[str, bool, str]]:
    """`doctor`: each configured channel's own test (a login, a listener, the secrets it needs)."""
    from ..errors import HermesError

    cfg = v.config.gateway
    if not cfg.channels:
        return []
    from ..service.gateway.registry import configured, load_channel

    out = []
    for name in configured(v):
        try:
            out.append((f"gateway {name}", True, load_channel(v, name).check()))
        except HermesError as exc:
            out.append((f"gateway {name}", False, str(exc)))
        except Exception as exc:  # a channel's library failing (network, TLS): a check result, not a crash
            out.append((f"gateway {name}", False, f"{type(exc).__name__}: {exc}"))
    if cfg.allow_local_shell:
        out.append(("gateway shell", True, "allow_local_shell: true: chat senders' commands run on this machine"))
    return out
