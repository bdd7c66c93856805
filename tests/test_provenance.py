"""Provenance (issue 21 item 16): one place decides every commit's author and trailers.

Proved two ways: the code spells no trailer name and passes no author outside store/provenance.py,
and a host trailer given to the vault's Provenance once appears on every commit a real session,
refine, merge (whole, partial, by policy), revert and human edit make."""

import ast
import re
from pathlib import Path

from conftest import git

from hermes_fs.agent.conversation import Conversation, ConversationOptions
from hermes_fs.learning import changes as review
from hermes_fs.learning.pipeline import apply_policy
from hermes_fs.learning.refine import RefineOptions, refine
from hermes_fs.store.provenance import Act, By, Provenance

PKG = Path(__file__).resolve().parent.parent / "hermes_fs"
TRAILER_NAME = re.compile(r"^(Hermes|Refine|Learn|Curate)-[A-Z][a-z]+$")
USER = "memory/USER.md"


def string_constants(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def test_trailer_names_and_authors_are_spelled_only_in_provenance():
    literals = [f"{p.relative_to(PKG)}:{line} {value!r}" for p in PKG.rglob("*.py")
                if p.name != "provenance.py" for line, value in string_constants(p) if TRAILER_NAME.match(value)]
    assert literals == []
    authors = [f"{p.relative_to(PKG)}:{n}" for p in PKG.rglob("*.py") if p.name not in ("vault.py", "provenance.py")
               for n, text in enumerate(p.read_text().splitlines(), 1) if "git.author" in text]
    assert authors == []  # the agent's identity is read in one place: Vault.provenance


def test_seal_merges_trailers_and_adds_the_host_to_every_act():
    p = Provenance(agent=lambda: "Bot <bot@x>", host=lambda: "laptop-1")
    text, env = p.seal("learned\n\n- a: because\n\nRefine-Session: s1\n", Act.learned({"Refine-Model": "m"}))
    assert text == "learned\n\n- a: because\n\nRefine-Session: s1\nHermes-Host: laptop-1\nRefine-Model: m\n"
    assert env == {"GIT_AUTHOR_NAME": "Bot", "GIT_AUTHOR_EMAIL": "bot@x"}
    text, env = p.seal("revert x\n\nThis reverts merge abc.", Act.person())
    assert text == "revert x\n\nThis reverts merge abc.\n\nHermes-Host: laptop-1\n" and env == {}
    assert Act.human_edit().by == By.PERSON and Act.job("brief").by == By.AGENT


def test_one_host_hook_reaches_every_commit_with_the_right_author(agent_vault, model_server, tmp_path):
    v = agent_vault
    v.provenance.host = lambda: "laptop-1"  # what sync will do, once, for a vault with a remote
    start = v.git.head()
    person = git(v, "config", "user.name").strip()
    agent = v.config.git.author.split(" <")[0]
    # a session that writes memory (the agent, live), then a refine of it and a person's edit
    model_server.add({"tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": "Uses fish."})]},
                     {"content": "noted"})
    with Conversation(v, ConversationOptions(source="run", workspace=tmp_path)) as c:
        c.ask("remember I use fish")
    model_server.add(
        {"tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": "Prefers tabs over spaces."}),
                        ("memory", {"action": "add", "file": "MEMORY.md", "text": "Deploys on Fridays."})]},
        {"content": "Summary: tabs and deploys\n- memory/USER.md: tabs (because asked)\n- memory/MEMORY.md: deploys (because said)"},
    )
    r = refine(v, RefineOptions())
    assert r.status == "pending", r.reason
    review.merge(v.git, r.branch, only=[USER])  # a partial merge: the rest stays pending
    apply_policy(v, r.branch, "the rest", "auto")  # a merge by policy
    review.revert(v.git, r.branch)
    (v.root / "memory" / "MEMORY.md").write_text((v.root / "memory" / "MEMORY.md").read_text() + "- mine\n")
    v.git.commit_human_edits()

    rows = git(v, "log", "--all", "--format=%H%x1f%an%x1f%s%x1f%(trailers:key=Hermes-Host,valueonly)%x1e",
               f"^{start}").split("\x1e")
    commits = [r.strip().split("\x1f") for r in rows if r.strip()]
    assert len(commits) >= 7
    assert [c[2] for c in commits if c[3].strip() != "laptop-1"] == []  # every commit carries the host
    by = {c[2].split(" ")[0] + (" part" if "(part:" in c[2] else ""): c[1] for c in commits}
    assert by["edit:"] == person and by["revert"] == person and by["merge part"] == person
    assert by["memory:"] == agent and by["session:"] == agent and by["tabs part"] == agent  # both parts: the agent's
    policy_merge = next(c for c in commits if c[2].startswith("merge") and "(part:" not in c[2])
    assert policy_merge[1] == agent
