"""Provenance: who authored each commit and which trailers say why — one table, one place.

Every commit GitStore makes passes through `Provenance.seal` (in `GitStore._commit_tree` and
`commit_all`), so a rule that holds for every commit is written once, here:

| act                                      | author     | trailers                              |
|------------------------------------------|------------|---------------------------------------|
| a person's edit, committed by the daemon | the person | Hermes-Change: human-edit             |
| a person's decision (merge/reject/revert)| the person | Hermes-Change: merge/revert, -Branch  |
| a person's command (init, import, fix)   | the person | Hermes-Change: init / import          |
| the agent in a session                   | the agent  | Hermes-Session                        |
| an MCP client's write                    | the agent  | Hermes-Client (+ Hermes-Session)      |
| a cron run / an inbox request            | the agent  | Hermes-Job: <job> / inbox/<name>      |
| chat turns' results and transcripts      | the agent  | Hermes-Change: gateway                |
| a session saved after a crash            | the agent  | Hermes-Change: recovered              |
| a learned change on its branch           | the agent  | Refine-* / Learn-* / Curate-*, Checks,|
|                                          |            | Learning-Tokens, Learning-Cost        |
| skills installed from a git repository   | the person | Skill-Source (+ Skill-Ref, Skill-Path)|
| a merge made by policy                   | the agent  | Hermes-Change: merge, Hermes-Branch   |
| sync's merge of another machine's main   | the agent  | Hermes-Change: sync, Hermes-Host      |
| a claim of a job run (refs/hermes/claims)| the agent  | Hermes-Host, Claim-State, -Expires    |

"The agent" is `git.author` of hermes.yaml; "the person" is git's own user.name/user.email.
The person always stays the committer. A trailer that every commit of a machine must carry
(DESIGN §15: `Hermes-Host: <host id>` when syncing through a remote) is added by `Provenance`
itself: give it `host=` (a callable, read at commit time) and no call site changes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from ..errors import InputError
from .config import GitConfig

# -- trailer names (the only place they are spelled) -----------------------------------------
CHANGE = "Hermes-Change"
SESSION = "Hermes-Session"
JOB = "Hermes-Job"
CLIENT = "Hermes-Client"
HOST = "Hermes-Host"
BRANCH = "Hermes-Branch"  # on merge and revert commits: the learned change's branch
REFINE_SESSION = "Refine-Session"
REFINE_SNAPSHOT = "Refine-Snapshot"
REFINE_FOCUS = "Refine-Focus"
REFINE_MODEL = "Refine-Model"
REFINE_CLIENT = "Refine-Client"
LEARN_SOURCE = "Learn-Source"
LEARN_MODEL = "Learn-Model"
CLAIM_STATE = "Claim-State"
CLAIM_EXPIRES = "Claim-Expires"
CLAIM_TOOK_OVER = "Claim-Took-Over"
LEASE_EXPIRES = "Lease-Expires"
CURATE_POLICY = "Curate-Policy"
CURATE_MODEL = "Curate-Model"
SKILL_SOURCE = "Skill-Source"  # installed skills: "<url> <commit>" they were copied from
SKILL_REF = "Skill-Ref"  # the --ref the person asked for (what `skills update` fetches again)
SKILL_PATH = "Skill-Path"  # the --path folder of the repository the skills were taken from
CHECKS = "Checks"  # on a learned change: its checks' results ("2/3 passed; failed: node-pm")
LEARNING_TOKENS = "Learning-Tokens"  # what the review that made a learned change used: "1234 (1000 in, 234 out)"
LEARNING_COST = "Learning-Cost"  # and cost, in USD as litellm prices it ("0.000321 USD", or "unknown")

HUMAN_EDIT = "human-edit"  # the value of Hermes-Change on a person's edit
_TRAILER = re.compile(r"^([A-Za-z][A-Za-z0-9-]*): (.*)$")


class By(StrEnum):
    PERSON = "person"  # git's user.name / user.email
    AGENT = "agent"  # hermes.yaml git.author


@dataclass(frozen=True)
class Act:
    """What a commit is: who did it and the trailers that lead back to why (a session, a job...)."""

    by: By
    trailers: dict[str, str] = field(default_factory=dict)

    # a person's acts
    @classmethod
    def person(cls) -> Act:
        """A person's command or decision (review merge/reject/revert, skills validate --fix)."""
        return cls(By.PERSON)

    @classmethod
    def human_edit(cls) -> Act:
        return cls(By.PERSON, {CHANGE: HUMAN_EDIT})

    @classmethod
    def init(cls) -> Act:
        return cls(By.PERSON, {CHANGE: "init"})

    @classmethod
    def imported(cls) -> Act:
        return cls(By.PERSON, {CHANGE: "import"})

    # the agent's acts
    @classmethod
    def session(cls, session_id: str) -> Act:
        return cls(By.AGENT, {SESSION: session_id})

    @classmethod
    def client(cls, name: str, session_id: str | None = None) -> Act:
        return cls(By.AGENT, {SESSION: session_id or "", CLIENT: name})

    @classmethod
    def job(cls, name: str) -> Act:
        return cls(By.AGENT, {JOB: name})

    @classmethod
    def request(cls, name: str) -> Act:
        """An inbox request `inbox/<name>` (answered like a job)."""
        return cls(By.AGENT, {JOB: f"inbox/{name}"})

    @classmethod
    def gateway(cls) -> Act:
        """Gateway chat turns: their results and transcripts, committed together by the cadence."""
        return cls(By.AGENT, {CHANGE: "gateway"})

    @classmethod
    def recovered(cls) -> Act:
        return cls(By.AGENT, {CHANGE: "recovered"})

    @classmethod
    def sync(cls, host: str) -> Act:
        """A commit sync makes on main (merging another machine's main, withdrawing a lost result)."""
        return cls(By.AGENT, {CHANGE: "sync", HOST: host})

    @classmethod
    def claim(cls, host: str, state: str, expires: float = 0.0, took_over: str = "") -> Act:
        """A claim commit (empty tree, under refs/hermes/claims/): who holds a job run, until when;
        after a takeover, whose claim ran out when (`<host> <expiry>`)."""
        return cls(By.AGENT, {HOST: host, CLAIM_STATE: state, CLAIM_EXPIRES: str(expires) if expires else "",
                              CLAIM_TOOK_OVER: took_over})

    @classmethod
    def lease(cls, host: str, expires: float) -> Act:
        """A lease commit (empty tree, under refs/hermes/leases/): who holds a channel account, until when."""
        return cls(By.AGENT, {HOST: host, LEASE_EXPIRES: f"{expires:.3f}"})

    @classmethod
    def learned(cls, trailers: dict[str, str] | None = None) -> Act:
        """A learned change's commit on its branch (trailers from `refine_trailers` and the like)."""
        return cls(By.AGENT, dict(trailers or {}))

    @classmethod
    def installed(cls, trailers: dict[str, str]) -> Act:
        """Skills a person installed from a repository, on their install/ branch: the person asked
        for them (so the person authors the commit), the trailers say from where."""
        return cls(By.PERSON, dict(trailers))

    @classmethod
    def policy_merge(cls) -> Act:
        """A merge the policy made (auto / additions): the agent's act, not the person's."""
        return cls(By.AGENT)

    @property
    def is_human_edit(self) -> bool:
        return self.trailers.get(CHANGE) == HUMAN_EDIT


def refine_trailers(session: str | None, snapshot: str | None, focus: str | None, model: str | None,
                    client: str | None = None) -> dict[str, str]:
    return {REFINE_SESSION: session or "", REFINE_SNAPSHOT: snapshot or "", REFINE_FOCUS: focus or "",
            REFINE_MODEL: model or "", REFINE_CLIENT: client or ""}


def learn_trailers(sources: list[str], model: str | None) -> dict[str, str]:
    return {LEARN_SOURCE: ", ".join(sources), LEARN_MODEL: model or ""}


def curate_trailers(policy: str, model: str | None) -> dict[str, str]:
    return {CURATE_POLICY: policy, CURATE_MODEL: model or ""}


def install_trailers(url: str, commit: str, ref: str | None, path: str | None) -> dict[str, str]:
    return {SKILL_SOURCE: f"{url} {commit}", SKILL_REF: ref or "", SKILL_PATH: path or ""}


def parse_install_trailers(trailers: dict[str, str]) -> tuple[str, str, str | None, str | None] | None:
    """(url, commit, ref, path) of an install commit's trailers; None when it has no Skill-Source."""
    url, _, commit = trailers.get(SKILL_SOURCE, "").strip().partition(" ")
    if not url:
        return None
    return url, commit.strip(), trailers.get(SKILL_REF) or None, trailers.get(SKILL_PATH) or None


def cost_trailers(usage) -> dict[str, str]:
    """`Learning-Tokens` and `Learning-Cost` of a review (`usage`: agent.model.Usage)."""
    cost = "unknown (no price for this model)" if usage.cost_usd is None else f"{usage.cost_usd:.6f} USD"
    return {LEARNING_TOKENS: f"{usage.total_tokens} ({usage.prompt_tokens} in, {usage.completion_tokens} out)",
            LEARNING_COST: cost}


def _default_agent() -> str:
    return GitConfig().author


@dataclass
class Provenance:
    """Turns an Act into a commit's final message and author. `agent` and `host` are read at each
    commit (settings reload); `host` is the hook for `Hermes-Host` on every commit of a machine."""

    agent: Callable[[], str] = _default_agent
    host: Callable[[], str | None] = lambda: None

    def author(self, act: Act) -> str | None:
        """`Name <email>` of the author; None: the person (git's own configuration)."""
        return self.agent() if act.by == By.AGENT else None

    def trailers(self, act: Act) -> dict[str, str]:
        """The act's trailers (an empty value adds nothing, and never blanks one the message has)."""
        host = self.host()
        # an act naming its own host (a claim) wins; an empty value never blanks the message's
        return {**({HOST: host} if host else {}), **{k: v for k, v in act.trailers.items() if str(v).strip()}}

    def seal(self, message: str, act: Act) -> tuple[str, dict[str, str]]:
        """(the message with the act's trailers merged into its trailer block, git's author env)."""
        text, existing = split_trailers(message)
        summary, _, body = text.partition("\n")
        return format_message(summary, body, {**existing, **self.trailers(act)}), author_env(self.author(act))


def author_env(author: str | None) -> dict[str, str]:
    if not author:
        return {}
    m = re.match(r"^\s*(.+?)\s*<([^>]+)>\s*$", author)
    if not m:
        raise InputError(f"git author must look like 'Name <email>', got {author!r}")
    return {"GIT_AUTHOR_NAME": m.group(1), "GIT_AUTHOR_EMAIL": m.group(2)}


def format_message(summary: str, body: list[str] | str = "", trailers: dict[str, str] | None = None) -> str:
    """One summary line, an optional body, then `Key: value` trailers (git's trailer format)."""
    parts = [summary.strip().splitlines()[0] if summary.strip() else "(no summary)"]
    body_text = body if isinstance(body, str) else "\n".join(body)
    if body_text.strip():
        parts.append(body_text.strip())
    if trailers:
        block = "\n".join(f"{k}: {' '.join(str(v).split())}" for k, v in trailers.items() if str(v).strip())
        if block:
            parts.append(block)
    return "\n\n".join(parts) + "\n"


def split_trailers(message: str) -> tuple[str, dict[str, str]]:
    """(the message without its trailer block, the trailers); a last paragraph that is not all
    `Key: value` lines is text, not trailers."""
    paragraphs = message.strip().split("\n\n")
    if len(paragraphs) < 2:
        return message.strip(), {}
    found = {}
    for line in paragraphs[-1].splitlines():
        m = _TRAILER.match(line)
        if not m:
            return message.strip(), {}
        found[m.group(1)] = m.group(2)
    return "\n\n".join(paragraphs[:-1]), found


def parse_trailers(message: str) -> dict[str, str]:
    return split_trailers(message)[1]
