"""The hermes-fs command line: the root group and the registry of every command group.

Each command group lives in its own module named for it (cron.py, review.py, ...) and is imported
only when it runs: `--help` lists the commands from the registry below without importing any of
them (DESIGN principle 7). Anything heavy is imported inside the commands. Exit codes: 0 ok,
1 failed operation, 2 bad usage or bad input.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass

import click

from ..errors import HermesError


@dataclass(frozen=True)
class Entry:
    """Where a command lives, and the one line `--help` shows for it (tests/test_cli.py checks
    that it is the command's own short help, so the two cannot drift apart)."""

    module: str
    attr: str
    short_help: str


COMMANDS: dict[str, Entry] = {
    "acp": Entry("acp", "acp_serve", "Serve the agent to an editor over the Agent Client Protocol (stdio)."),
    "chat": Entry("run", "chat", "Interactive session with slash commands (/help)."),
    "check": Entry("check", "check", "Ask the agent each check's question (checks/<name>.md); exit 1 if any fails."),
    "clone": Entry("sync", "clone", "Copy a synced vault to this machine (git clone); then run `hermes-fs daemon`."),
    "cron": Entry("cron", "cron_group", "Scheduled jobs: list, run, enable, disable, new."),
    "curate": Entry("curate", "curate",
                    "Archive stale skills, merge duplicates, consolidate memory (a curate/ branch)."),
    "daemon": Entry("daemon", "daemon", "Watch the vault: commit your edits, run inbox requests."),
    "doctor": Entry("doctor", "doctor", "Check the setup: the model, review mode, MCP servers, gateway and sandbox."),
    "gateway": Entry("gateway", "gateway", "Chat platforms and signed webhooks: status, pairing, tests."),
    "import": Entry("importer", "import_group", "Bring another agent's memory, skills and jobs into this vault."),
    "init": Entry("init", "init", "Create a vault from the template: files, `git init -b main`, first commit."),
    "learn": Entry("learning", "learn", "Learn from documents, or find the learned change that broke a check."),
    "log": Entry("review", "log", "Learned changes (merged, pending, rejected), newest first."),
    "mcp": Entry("mcp", "mcp_serve",
                 "Serve this vault over MCP: memory, skills, session search and refine for other agents."),
    "memory": Entry("memory", "memory", "Show, add to and edit memory files."),
    "notify": Entry("notify", "notify", "Notifications through Apprise."),
    "refine": Entry("learning", "refine",
                    "Review a conversation and propose memory/skill changes on a refine/ branch."),
    "revert": Entry("review", "revert",
                    "Undo a merged learned change, entry by entry, or part of it (--only, --skip)."),
    "review": Entry("review", "review", "Pending learned changes: list, `show B`, `merge B`, `reject B`."),
    "run": Entry("run", "run", "Run one agent task and print the answer; the transcript goes to sessions/."),
    "sandbox": Entry("sandbox", "sandbox", "The Docker sandbox of the `shell` tool."),
    "sessions": Entry("sessions", "sessions", "Past conversations: `sessions list`, `show ID`, `search TEXT`."),
    "skills": Entry("skills", "skills", "List, show and validate skills."),
    "status": Entry("status", "status",
                    "Memory sizes vs budgets, skills, cron jobs, pending reviews, daemon state."),
    "sync": Entry("sync", "sync", "One round with the git remote of hermes.yaml: fetch, merge by entry, push."),
    "web": Entry("web", "web",
                 "Review learned changes, memory, skills, jobs and sessions in a browser (loopback by default)."),
}


class LazyCommands(MutableMapping):
    """The root group's commands by name: a registered one is imported on first access, so
    listing names (or showing `--help`) imports no command module."""

    def __init__(self, registry: dict[str, Entry]):
        self.registry = registry
        self.loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self.loaded:
            entry = self.registry[name]  # KeyError: no such command
            module = importlib.import_module(f"{__package__}.{entry.module}")
            self.loaded[name] = getattr(module, entry.attr)
        return self.loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self.loaded[name] = command

    def __delitem__(self, name: str) -> None:
        self.loaded.pop(name, None)
        self.registry = {k: v for k, v in self.registry.items() if k != name}

    def __iter__(self) -> Iterator[str]:
        return iter(sorted({*self.registry, *self.loaded}))

    def __len__(self) -> int:
        return len({*self.registry, *self.loaded})

    def __contains__(self, name: object) -> bool:
        return name in self.registry or name in self.loaded

    def short_help(self, name: str, limit: int) -> str:
        """The line `--help` shows: from the registry while the command is not imported."""
        if name in self.loaded or name not in self.registry:
            return self[name].get_short_help_str(limit)
        return self.registry[name].short_help


class HermesGroup(click.Group):
    """Turns library errors into one-line messages with the right exit code; commands load lazily."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.commands = LazyCommands(COMMANDS)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except HermesError as exc:
            from .term import echo

            echo(f"error: {exc}", err=True)
            ctx.exit(getattr(exc, "exit_code", 1))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        commands = self.commands
        assert isinstance(commands, LazyCommands)
        names = list(commands)
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        with formatter.section("Commands"):
            formatter.write_dl([(n, commands.short_help(n, limit)) for n in names])


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


if __name__ == "__main__":
    main(sys.argv[1:])
