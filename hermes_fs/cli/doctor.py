"""`hermes-fs doctor`: is the setup working (model, review mode, embeddings, MCP, gateway, sandbox)."""

from __future__ import annotations

import click

from .context import vault_for
from .gateway import doctor_checks as gateway_checks
from .options import vault_option
from .term import Spinner, echo


@click.command(short_help="Check the setup: the model, review mode, MCP servers, gateway and sandbox.")
@vault_option
@click.pass_context
@click.option("--no-model", is_flag=True, help="Skip the one tiny model call.")
def doctor(ctx: click.Context, no_model: bool):
    """Check the setup: the model (one tiny call), and the sandbox (Docker engine and image, or
    the ssh host: its key verified, our login, the workdir)."""
    v = vault_for(ctx)
    checks = [] if no_model else _check_model(v)
    checks += _check_embeddings(v)
    checks += _check_mcp(v)
    checks += gateway_checks(v)
    if v.config.gateway.channels:  # voice messages come only through the gateway's chats
        from ..agent.transcription import check as check_voice

        checks.append(("voice", *check_voice(v.config.voice, v.secrets())))
    cfg = v.config.sandbox
    if cfg.backend == "ssh":
        from ..agent.sandbox.ssh import doctor as check_ssh

        checks += check_ssh(cfg.ssh)
    elif cfg.backend != "docker":
        checks.append(("sandbox", True, f"backend {cfg.backend}" + (
            " (commands run on this machine)" if cfg.backend == "local" else " (shell disabled)")))
    else:
        from ..agent.sandbox.docker import doctor as check

        checks += list(check(cfg))
    for name, ok, detail in checks:
        echo(f"{'ok ' if ok else 'BAD'} {name}: {detail}")
    if not all(ok for _n, ok, _d in checks):
        ctx.exit(1)


def _check_mcp(v) -> list[tuple[str, bool, str]]:
    """Each MCP server of hermes.yaml: does it start, and how many tools does it give; a browser
    (`mcp add browser`) also opens a page, so Node and its Chromium are checked for real."""
    servers = v.config.mcp.servers
    if not servers:
        return []
    from ..agent import browser
    from ..agent.mcp_client import McpHub

    hub = McpHub(servers, v.secrets())
    try:
        with Spinner("starting MCP servers"):
            rows = [(f"mcp server {name}", ok, detail) for name, ok, detail in hub.status()]
            return rows + browser.doctor(hub, servers)
    finally:
        hub.stop()


def _check_model(v) -> list[tuple[str, bool, str]]:
    """One tiny call, then the review-mode probe (which mode suits the refine model), both by the
    daemon when one runs (the same keys: the caller's), else here."""
    from ..agent.model import check_model
    from ..learning.structured import check_mode
    from .remote import warm_task

    with Spinner(f"asking {v.config.model} for one word, then to call a tool"):
        done = warm_task(v, "doctor", {})
        if done is not None and (not done["ok"] or "mode_ok" in done):
            rows = [("model", bool(done["ok"]), str(done["detail"]))]
            if done["ok"]:
                rows.append(("review mode", bool(done["mode_ok"]), str(done["mode_detail"])))
            return rows
        ok, detail = (done["ok"], done["detail"]) if done else check_model(v)  # no daemon, or an older one
        rows = [("model", ok, detail)]
        if ok:
            mode_ok, mode_detail = check_mode(v)
            rows.append(("review mode", mode_ok, mode_detail))
        return rows


def _check_embeddings(v) -> list[tuple[str, bool, str]]:
    """Ranking by meaning: on, off, or (auto without the extra) full-text with how to turn it on."""
    from ..mind import embeddings, static_vectors

    kind = embeddings.mode(v.config.skills.embeddings)
    if kind == "off":  # older vaults have `false` written by their init: say what the default is now
        return [("skill routing", True, "by full-text only (skills.embeddings: false); "
                 "set it to auto to rank skills by meaning")]
    if not embeddings.available():
        if kind == "auto":  # not a failure: the default falls back to full-text
            return [("skill routing", True, f"by full-text only; to rank skills by meaning: {embeddings.EXTRA}")]
        return [("skill embeddings", False, f"skills.embeddings is on but not installed: {embeddings.EXTRA}")]
    where = static_vectors.locate(v.state_dir)
    if where is None:
        table = ("not built (`hermes-fs skills embed --install-table` builds it once; else the daemon builds it "
                 "when the skills index is over its budget)")
    else:
        table = "built" if where.parent == v.state_dir else f"the installation's ({where})"
    return [("skill embeddings", True, f"{'static vectors (+ the model in the daemon)' if kind == 'auto' else 'static vectors + the model'}; "
             f"model at {embeddings.model_dir()}; token table {table}")]
