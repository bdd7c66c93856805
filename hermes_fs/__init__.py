"""hermes-fs: a persistent agent whose whole mind is a git repository of Markdown files.

The package is a library first: the CLI (`hermes_fs.cli`) and the MCP server
(`hermes_fs.cli.mcp_server`) drive the names in `__all__` below, and so can any script. The layers beneath them, each importing only downward (docs/design/architecture.md):
`store` (vault, settings, files, git, provenance, secrets, notify), `mind` (memory, skills,
sessions, usage, search, job files), `agent` (the loop, model, tools, prompt, sandbox), `learning`
(one pipeline for refine, learn and curate, review of learned changes, import) and `service`
(daemon, watcher, inbox, scheduler, cron runner, curator, gateway, sync, web page); the
MCP server is a front end beside the CLI.

Names load on first use (PEP 562), so `import hermes_fs` — and `hermes-fs --help` — never pays
for litellm, GitPython or the MCP SDK.

    import hermes_fs
    vault = hermes_fs.open_vault("~/hermes-vault")
    with hermes_fs.Conversation(vault, hermes_fs.ConversationOptions(source="run")) as c:
        print(c.ask("what is on my list today?").answer)
    outcome = hermes_fs.refine(vault, hermes_fs.RefineOptions(focus="deploys"))
    print(hermes_fs.decide(vault, outcome.branch, "merge").line())  # claimed first when the vault syncs

hermes_fs.review reads learned changes (pending, show, learned_log); hermes_fs.decide is how a
person merges, rejects or reverts one: the same path the CLI, the web page and chat commands take.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import ConflictError, GitError, HermesError, InputError, SecretError

__version__ = "0.1.0"

# public name -> (module, attribute; None: the module itself)
_LAZY: dict[str, tuple[str, str | None]] = {
    "Vault": ("hermes_fs.store.vault", "Vault"),
    "open_vault": ("hermes_fs.store.vault", "find_vault"),
    "init_vault": ("hermes_fs.store.vault", "init_vault"),
    "setup_model": ("hermes_fs.learning.model_setup", "setup_model"),
    "Act": ("hermes_fs.store.provenance", "Act"),
    "Conversation": ("hermes_fs.agent.conversation", "Conversation"),
    "ConversationOptions": ("hermes_fs.agent.conversation", "ConversationOptions"),
    "refine": ("hermes_fs.learning.refine", "refine"),
    "RefineOptions": ("hermes_fs.learning.refine", "RefineOptions"),
    "learn": ("hermes_fs.learning.learn", "learn"),
    "LearnOptions": ("hermes_fs.learning.learn", "LearnOptions"),
    "curate": ("hermes_fs.learning.curate", "curate"),
    "CurateOptions": ("hermes_fs.learning.curate", "CurateOptions"),
    "Outcome": ("hermes_fs.learning.pipeline", "Outcome"),
    "review": ("hermes_fs.learning.changes", None),  # pending, show, learned_log (deciding: `decide`)
    "checks": ("hermes_fs.learning.checks", None),  # main_checks, tree_of, run: the person's checks/
    "bisect": ("hermes_fs.learning.bisect", "bisect"),
    "spend": ("hermes_fs.learning.spend", None),  # per_day, spent_today: what learning costs
    "decide": ("hermes_fs.service.decisions", "decide"),
    "Decision": ("hermes_fs.service.decisions", "Decision"),
    "DecidedElsewhere": ("hermes_fs.service.decisions", "DecidedElsewhere"),
    "install_skills": ("hermes_fs.learning.install", "install"),  # skills from a git repository, to review
    "update_skills": ("hermes_fs.learning.install", "update"),
    "run_job": ("hermes_fs.service.cron_runner", "run_job"),
    "add_browser": ("hermes_fs.agent.browser", "add_browser"),  # `mcp add browser`: a browser MCP server
    "CronRun": ("hermes_fs.service.cron_runner", "CronRun"),
}

__all__ = [  # spelled out (not built from _LAZY) so linters and readers see the API at a glance
    "__version__", "HermesError", "InputError", "ConflictError", "GitError", "SecretError",
    "Vault", "open_vault", "init_vault", "setup_model", "Act", "Conversation", "ConversationOptions",
    "refine", "RefineOptions", "learn", "LearnOptions", "curate", "CurateOptions", "Outcome", "review",
    "checks", "bisect", "spend", "decide", "Decision", "DecidedElsewhere", "install_skills", "update_skills", "run_job", "CronRun",
    "add_browser",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'hermes_fs' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = importlib.import_module(module)
    value = value if attr is None else getattr(value, attr)
    globals()[name] = value  # the next use is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # what the lazy names are, for type checkers
    from .agent.conversation import Conversation, ConversationOptions
    from .learning import changes as review
    from .learning import checks, spend
    from .learning.bisect import bisect
    from .learning.curate import CurateOptions, curate
    from .learning.learn import LearnOptions, learn
    from .learning.model_setup import setup_model
    from .learning.pipeline import Outcome
    from .learning.refine import RefineOptions, refine
    from .service.cron_runner import CronRun, run_job
    from .service.decisions import DecidedElsewhere, Decision, decide
    from .store.provenance import Act
    from .store.vault import Vault, init_vault
    from .store.vault import find_vault as open_vault
