"""`hermes-fs doctor`: is the setup working (model, review mode, embeddings, MCP, gateway, sandbox)."""

from __future__ import annotations

import sys

import click

from ..errors import HermesError
from .context import vault_for
from .gateway import doctor_checks as gateway_checks
from .options import vault_option
from .term import Spinner, echo


@click.command()
@vault_option
@click.pass_context
@click.option("--no-model", is_flag=True, help="Skip the one tiny model call.")
def doctor(ctx: click.Context, no_model: bool):
    """Check the setup: the model (one tiny call), and the sandbox (Docker engine and image)."""
    v = vault_for(ctx)
    checks = [] if no_model else [_check_model(v)]
    if checks and checks[0][1]:
        if "litellm" in sys.modules:  # the model check ran here: the probe costs no second cold import
            checks.append(_check_mode(v))
        else:  # the daemon answered the model check; the probe is not served warm yet
            checks.append(("review mode", True, "not probed (the daemon ran the model check); "
                           "HERMES_NO_DAEMON=1 hermes-fs doctor probes tool calling"))
    if v.config.skills.embeddings:
        from ..mind import embeddings

        checks.append(("skill embeddings", embeddings.available(), f"model at {embeddings.model_dir()}"
                       if embeddings.available() else f"skills.embeddings is on but not installed: {embeddings.EXTRA}"))
    checks += _check_mcp(v)
    checks += gateway_checks(v)
    cfg = v.config.sandbox
    if cfg.backend != "docker":
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
    """Each MCP server of hermes.yaml: does it start, and how many tools does it give."""
    servers = v.config.mcp.servers
    if not servers:
        return []
    from ..agent.mcp_client import McpHub

    hub = McpHub(servers, v.secrets())
    try:
        with Spinner("starting MCP servers"):
            return [(f"mcp server {name}", ok, detail) for name, ok, detail in hub.status()]
    finally:
        hub.stop()


def _check_model(v) -> tuple[str, bool, str]:
    """One tiny call, by the daemon when one runs (the same keys: the caller's), else here."""
    from ..agent.model import check_model
    from .remote import warm_task

    with Spinner(f"asking {v.config.model} for one word"):
        done = warm_task(v, "doctor", {})
        ok, detail = (done["ok"], done["detail"]) if done else check_model(v)
    return "model", ok, detail


def _check_mode(v) -> tuple[str, bool, str]:
    """Which review mode suits the refine model: one tiny tool-call probe (learning.structured)."""
    from ..agent.model import LiteLLMModel, ModelSettings
    from ..learning.structured import probe_mode

    settings = ModelSettings.for_vault(v, "refine")
    settings.retries = 0
    try:
        with Spinner(f"asking {settings.model} to call a tool"):
            advice = probe_mode(LiteLLMModel(settings))
    except HermesError as exc:
        return "review mode", False, str(exc)
    modes = {"refine.mode": v.config.refine.mode, "learn.mode": v.config.learn.mode}
    wrong = [k for k, m in modes.items() if m != advice.suggested]
    detail = f"{advice.suggested} suits {settings.model}: {advice.detail}"
    if wrong and not advice.called:
        return "review mode", False, detail + f"; set {' and '.join(f'{k}: structured' for k in wrong)} in hermes.yaml"
    if wrong:  # a model that calls tools does well in either mode: not a problem
        return "review mode", True, detail + f" ({', '.join(f'{k}: {modes[k]}' for k in wrong)} works too)"
    return "review mode", True, detail
