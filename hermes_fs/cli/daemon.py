"""`hermes-fs daemon`: the watcher, inbox, cron and gateway process of a vault."""

from __future__ import annotations

import sys

import click

from ..errors import HermesError
from .context import vault_for
from .options import vault_option
from .term import echo, emit_json


@click.group(invoke_without_command=True)
@vault_option
@click.option("--detach", is_flag=True, help="Run in the background.")
@click.option("--debounce", default=1.0, show_default=True, help="Seconds a file must be quiet before it is committed.")
@click.option("--workers", default=2, show_default=True, help="Jobs (inbox requests) run at once.")
@click.option("--turns-only", is_flag=True, hidden=True, help="Serve run/chat turns only (what run and chat start).")
@click.option("--idle-stop", type=float, default=0.0, hidden=True, help="With --turns-only: stop after this many idle seconds.")
@click.pass_context
def daemon(ctx: click.Context, detach: bool, debounce: float, workers: int, turns_only: bool, idle_stop: float):
    """Watch the vault: commit your edits, run inbox requests. Also: stop, status, install."""
    if ctx.invoked_subcommand:
        return
    from ..service.daemon import Daemon, DaemonOptions, is_running, make_way

    v = vault_for(ctx)
    if detach:
        from ..service.background import spawn

        if make_way(v):
            echo("stopped the daemon `run` started (turns only); starting the full one")
        if is_running(v):
            raise HermesError("a daemon is already running for this vault (see `hermes-fs daemon status`)")
        from ..service.daemon import wait_started

        pid = spawn(v.root, ["daemon", "--debounce", str(debounce), "--workers", str(workers)], v.state_dir / "daemon.out")
        if not wait_started(v, pid):
            raise HermesError(f"the daemon (pid {pid}) did not start; see {v.state_dir / 'daemon.out'}")
        echo(f"daemon started (pid {pid}); `hermes-fs daemon status`, `hermes-fs daemon stop`")
        return
    import logging

    from ..store import log_redaction

    # detached, stdout and stderr are .hermes/daemon.out: what any library prints there is redacted too
    log_redaction.install(v.secrets_env, streams=("stdout", "stderr"))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    Daemon(v, DaemonOptions(debounce_s=debounce, workers=workers, turns_only=turns_only, idle_stop_s=idle_stop)).run(
        on_started=lambda: echo(f"hermes-fs daemon watching {v.root} (Ctrl-C to stop)"))


@daemon.command("stop")
@vault_option
@click.pass_context
def daemon_stop(ctx: click.Context):
    """Stop the running daemon (it finishes or abandons its jobs cleanly)."""
    from ..service.daemon import stop

    if stop(vault_for(ctx)):
        echo("daemon stopped")
    else:
        echo("no daemon running")


@daemon.command("status")
@vault_option
@click.option("--json", "as_json", is_flag=True)
@click.option("--memory", is_flag=True, help="Also ask the daemon what it holds: memory, heavy packages imported, "
              "its model worker.")
@click.pass_context
def daemon_status(ctx: click.Context, as_json: bool, memory: bool):
    """Running or not, pid, uptime, queue, recent events and errors."""
    from ..service.daemon import status as daemon_state

    v = vault_for(ctx)
    st = daemon_state(v)
    if memory and st["running"]:
        from .remote import run_task

        st["footprint"] = run_task(v.state_dir, "footprint", {}, {})
    if as_json:
        emit_json(st)
        return
    if not st["running"]:
        echo("daemon: not running")
    elif st.get("starting"):
        echo(f"daemon: starting, pid {st.get('pid')}")
    elif st.get("turns_only"):
        idle = st.get("idle_stop_s") or 0
        echo("daemon: running, turns only (started by run or chat; no watcher, cron, gateway or sync"
             + (f"; stops after {idle / 60:g} min without a turn" if idle else "") + f"), pid {st.get('pid')}, "
             f"up {st.get('uptime_s')}s; `hermes-fs daemon` starts the full one in its place")
    else:
        echo(f"daemon: running, pid {st.get('pid')}, up {st.get('uptime_s')}s, queue: {', '.join(st.get('queue') or []) or 'empty'}")
    if st.get("footprint"):
        echo(footprint_line(st["footprint"]))
    for e in st.get("last_events") or []:
        echo(f"  event  {e}")
    for e in st.get("last_errors") or []:
        echo(f"  error  {e}")


def footprint_line(f: dict) -> str:
    def mib(kib) -> str:
        return f"{kib / 1024:.1f} MiB" if kib else "unknown"

    worker = (f"model worker pid {f['worker_pid']}, {mib(f.get('worker_rss_kib'))}" if f.get("worker_pid")
              else "no model worker (let go when idle; the next model call starts one)")
    return (f"  memory daemon {mib(f.get('rss_kib'))} (peak {mib(f.get('peak_rss_kib'))}), heavy packages imported: "
            f"{', '.join(f.get('heavy') or []) or 'none'}; {worker}")


@daemon.command("install")
@vault_option
@click.pass_context
def daemon_install(ctx: click.Context):
    """Write a systemd user unit (Linux) or print a launchd plist (macOS)."""
    import platform
    from pathlib import Path

    from ..service.daemon import plist_text, unit_name, unit_text

    v = vault_for(ctx)
    exe = str(Path(sys.executable).with_name("hermes-fs"))
    if platform.system() == "Darwin":
        echo(plist_text(v, exe))
        echo(f"save it as ~/Library/LaunchAgents/io.{unit_name(v)}.plist and run `launchctl load` on it", err=True)
        return
    unit_dir = Path.home() / ".config" / "systemd" / "user"
    unit_dir.mkdir(parents=True, exist_ok=True)
    unit = unit_dir / f"{unit_name(v)}.service"
    unit.write_text(unit_text(v, exe))
    echo(f"wrote {unit}; enable it with: systemctl --user enable --now {unit.name}")
