"""Checks a person writes of what the agent knows (`checks/<name>.md`, DESIGN §16).

    ---
    ask: "Which package manager do I use for node projects?"
    expect: [pnpm]          # the answer must mention each, case-insensitive
    forbid: ["npm install"] # and none of these
    ---

A check asks the agent its question with the system prompt assembled from one tree of the vault
(main, a pending change, a commit in history) and the configured model; it passes when the answer
mentions every `expect` and no `forbid`. The checks themselves are always read from main: a
learned change cannot touch checks/ (it may only change memory/ and skills/), so it cannot edit
the test it is judged by. A check file that does not parse is a failing result naming why (a
person's typo must not pass a change silently). `enabled: false` keeps a check without running it.

Results of a learned change are run once, when it is made, and written into its commit message
(a `- check ...` line each, and the `Checks` trailer), so `review`, `review show` and the web page
show them beside the diff without calling a model again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..agent.loop import Agent, AgentConfig
from ..agent.model import LiteLLMModel, Model, ModelSettings, Usage
from ..agent.prompt import tree_prompt
from ..agent.tools import ToolBox
from ..errors import HermesError, InputError
from ..store.docs import decode, parse_doc
from ..store.files import FileStore
from ..store.git import GitStore
from ..store.overlay import OverlayFiles
from ..store.vault import Vault

CHECKS_DIR = "checks"
CHECK_TOOLS = ["skill_view"]  # the agent may open a skill to answer; it changes nothing
CHECK_STEPS = 4
MAX_CHECK_BYTES = 20_000
LINE_PREFIX = "- check "  # a result line in a learned change's message


@dataclass
class Check:
    name: str
    ask: str = ""
    expect: list[str] = field(default_factory=list)
    forbid: list[str] = field(default_factory=list)
    enabled: bool = True
    error: str = ""  # the file does not parse: the check fails with this

    @property
    def path(self) -> str:
        return f"{CHECKS_DIR}/{self.name}.md"


@dataclass
class CheckResult:
    name: str
    passed: bool
    answer: str = ""
    missing: list[str] = field(default_factory=list)  # expected, not mentioned
    forbidden: list[str] = field(default_factory=list)  # forbidden, mentioned
    error: str = ""  # the check could not run (a bad file, the model failed)

    def why(self) -> str:
        if self.error:
            return self.error
        parts = [f"does not mention {', '.join(repr(m) for m in self.missing)}" if self.missing else "",
                 f"mentions {', '.join(repr(f) for f in self.forbidden)}" if self.forbidden else ""]
        return "the answer " + " and ".join(p for p in parts if p) if any(parts) else ""

    def line(self) -> str:
        """`- check <name>: passed` / `- check <name>: FAILED: why`, the line a commit message holds."""
        return f"{LINE_PREFIX}{self.name}: passed" if self.passed else f"{LINE_PREFIX}{self.name}: FAILED: {_one(self.why())}"


@dataclass
class Run:
    """Every enabled check against one tree, and what the answers cost."""

    results: list[CheckResult] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if not r.passed]

    @property
    def passed(self) -> bool:
        return not self.failed

    def trailer(self) -> str:
        """The `Checks` trailer's value: `2/3 passed; failed: node-pm`."""
        text = f"{len(self.results) - len(self.failed)}/{len(self.results)} passed"
        return text + (f"; failed: {', '.join(r.name for r in self.failed)}" if self.failed else "")


def load(files: FileStore) -> list[Check]:
    """The checks in `checks/` of a tree (every `*.md` directly in it), by name."""
    out = []
    for rel in files.list(CHECKS_DIR):
        name = rel[len(CHECKS_DIR) + 1:]
        if "/" in name or not name.endswith(".md") or name.lower() == "readme.md":
            continue
        out.append(parse_check(name[:-3], files.read(rel)))
    return sorted(out, key=lambda c: c.name)


def parse_check(name: str, data: bytes | None) -> Check:
    """One check from its file; what is wrong with it is kept in `error`, never raised."""
    c = Check(name)
    try:
        if data is None or len(data) > MAX_CHECK_BYTES:
            raise InputError(f"missing, or over {MAX_CHECK_BYTES} bytes")
        meta = parse_doc(decode(data, c.path), c.path, required=True).meta
        ask = meta.get("ask")
        if not isinstance(ask, str) or not ask.strip():
            raise InputError("`ask` must be the question, as text")
        c.ask = ask.strip()
        c.expect, c.forbid = _words(meta, "expect"), _words(meta, "forbid")
        if not c.expect and not c.forbid:
            raise InputError("give `expect` or `forbid` (or both): a list of words the answer must or must not mention")
        enabled = meta.get("enabled", True)
        if not isinstance(enabled, bool):
            raise InputError("`enabled` must be true or false")
        c.enabled = enabled
    except InputError as exc:
        c.error = f"{c.path} is not a valid check: {exc}"
    return c


def _words(meta: dict, key: str) -> list[str]:
    value = meta.get(key, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str | int | float) and str(v).strip() for v in value):
        raise InputError(f"`{key}` must be a list of words or phrases")
    return [str(v).strip() for v in value]


def judge(check: Check, answer: str) -> CheckResult:
    """Pass when the answer mentions every `expect` and no `forbid` (case-insensitive)."""
    text = " ".join((answer or "").lower().split())
    missing = [w for w in check.expect if " ".join(w.lower().split()) not in text]
    forbidden = [w for w in check.forbid if " ".join(w.lower().split()) in text]
    return CheckResult(check.name, not missing and not forbidden, answer, missing, forbidden)


def main_checks(store: GitStore) -> list[Check]:
    """The enabled checks as main holds them (committed: a person's draft is not yet a check)."""
    return [c for c in load(OverlayFiles(store, store.head())) if c.enabled or c.error]


def run(vault: Vault, files: FileStore, checks: list[Check] | None = None, model: Model | None = None) -> Run:
    """Ask every check's question of the agent as `files` (a tree of the vault) makes it."""
    checks = main_checks(vault.git) if checks is None else checks
    out = Run()
    if not checks:
        return out
    system = tree_prompt(files, vault.config)
    for c in checks:
        if c.error:
            out.results.append(CheckResult(c.name, False, error=c.error))
            continue
        try:
            model = model or LiteLLMModel(ModelSettings.for_vault(vault))
            agent = Agent(model, ToolBox(files=files, config=vault.config, enabled=list(CHECK_TOOLS)),
                          AgentConfig(CHECK_STEPS))
            turn = agent.run([{"role": "system", "content": system}, {"role": "user", "content": c.ask}])
            out.usage.add(turn.usage)
        except HermesError as exc:  # the model failed: the check did not pass
            out.results.append(CheckResult(c.name, False, error=f"the model failed: {_one(str(exc))}"))
            continue
        out.results.append(judge(c, turn.answer))
    return out


def tree_of(vault: Vault, branch: str | None) -> tuple[OverlayFiles, str]:
    """The files a check runs against: main, or a pending change as merging it now would make them
    (its own tree when it conflicts with main), and a word saying which."""
    from .changes import format_resolver, resolve_name

    store = vault.git
    main = store.head()
    if not branch:
        return OverlayFiles(store, main), "main"
    name = resolve_name(store, branch)
    tip = store.rev(f"refs/heads/{name}")
    if not tip:
        raise InputError(f"no pending change {branch!r}; see `hermes-fs review`")
    try:
        return OverlayFiles(store, store.merged_tree(main, tip, format_resolver(store))), f"{name} merged onto main"
    except HermesError:
        return OverlayFiles(store, tip), f"{name} (its own tree: it conflicts with main)"


def results_in(lines: list[str]) -> list[CheckResult]:
    """The check results written in a change's message lines."""
    out = []
    for line in lines:
        m = re.match(rf"^{re.escape(LINE_PREFIX)}([^:]+): (passed|FAILED)(?:: (.*))?$", line.strip())
        if m:
            out.append(CheckResult(m.group(1), m.group(2) == "passed", error=m.group(3) or ""))
    return out


def _one(text: str, limit: int = 200) -> str:
    t = " ".join(str(text).split())
    return t if len(t) <= limit else t[: limit - 3] + "..."
