"""Decisions on learned changes (service/decisions.decide): every front end takes the same path, and
in a synced vault the decision is claimed on the remote first. End to end: two machines on a real
`git daemon` remote, one merging from its web page (a real `hermes-fs web` over HTTP), the other
from chat (the gateway's `/merge` command through a channel) at the same moment."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from urllib.parse import urlencode

import pytest
from conftest import git
from gitserver import GitDaemon
from test_gateway_core import Loopback
from test_sync import first_machine, learned_branch, machine
from web_helpers import refine_change, start_web

from hermes_fs.errors import InputError
from hermes_fs.service.decisions import DecidedElsewhere, decide
from hermes_fs.service.gateway.core import Gateway
from hermes_fs.service.sync import Syncer
from hermes_fs.service.web.security import Keys
from hermes_fs.service.work import open_claims
from hermes_fs.store.host import host_id
from hermes_fs.store.provenance import Act
from hermes_fs.store.vault import Vault


@pytest.fixture
def server(tmp_path):
    d = GitDaemon(tmp_path / "srv")
    yield d
    d.close()


CHAT = "gateway:\n  commit_idle_s: 0.1\n  matrix:\n    allow: ['@boss:test']\n    admins: ['@boss:test']\n"
ENTRY = "Prefers tabs over spaces."


def two_machines_with_a_change(tmp_path: Path, server: GitDaemon) -> tuple[Vault, Vault, str]:
    """A and B sync one vault (whose chat has an admin who may /merge); a learned change made on A
    is on B too (one round each)."""
    a = first_machine(tmp_path, server)
    cfg = a.root / "hermes.yaml"
    cfg.write_text(cfg.read_text() + CHAT)
    a.git.commit_paths(["hermes.yaml"], "edit: hermes.yaml", Act.human_edit())
    a.reload_config()
    branch = learned_branch(a, "refine/20261203-100000-ahost-tabs", ENTRY)
    assert Syncer(a).round(work=False).refs  # main and the learned branch go up
    b = machine(tmp_path, server, "b")
    Syncer(b).round(work=False)  # adopts the learned branch
    assert b.git.rev(f"refs/heads/{branch}") == a.git.rev(f"refs/heads/{branch}")
    return a, b, branch


def merges_of(server: GitDaemon, branch: str) -> list[str]:
    """The merge commits of `branch` on the remote's main."""
    out = git(server.base / "vault.git", "log", "--format=%s", "main")
    return [line for line in out.splitlines() if line.startswith(f"merge {branch}")]


def chat_gateway(b: Vault) -> tuple[Gateway, Loopback]:
    """B's gateway, the claims passed in as the daemon does."""
    ch = Loopback()
    gw = Gateway(Vault(b.root), channels=[ch], claims=open_claims(b))
    gw.start()
    return gw, ch


@pytest.mark.gitdaemon
def test_a_merge_from_the_web_page_and_one_from_chat_on_two_machines_merge_once(tmp_path, server):
    a, b, branch = two_machines_with_a_change(tmp_path, server)
    gw, ch = chat_gateway(b)
    w = start_web(a.root)
    try:
        web_answer: list[tuple[int, dict, str]] = []
        csrf = Keys(w.token).csrf
        post = threading.Thread(target=lambda: web_answer.append(
            w.request("POST", f"/changes/{branch}/merge", urlencode({"csrf": csrf, "how": "all"}))))
        post.start()  # both at once: A's page and B's chat
        ch.say("@boss:test", f"/merge {branch}", chat="!boss")
        post.join(120)
        assert gw.wait_idle(180)
        code, headers, _ = web_answer[0]
        assert code == 303
        _, _, page = w.request("GET", headers["location"])
    finally:
        w.stop()
        gw.stop()
    chat = ch.texts()[-1]
    from_web = re.search(r'class="flash (\w+)" role="status"><pre>(.*?)</pre>', page, re.S)
    assert from_web, page
    kind, text = from_web.group(1), from_web.group(2)
    won_on_web = kind == "ok"
    assert won_on_web != chat.startswith(f"merged {branch}"), (text, chat)  # exactly one decided
    loser = chat if won_on_web else text
    winner_host = host_id((a if won_on_web else b).state_dir)
    assert f"already decided on machine {winner_host}" in loser, loser
    for v in (a, b, a):  # both publish; the winner's merge reaches the other
        Syncer(v).round(work=False)
    assert len(merges_of(server, branch)) == 1
    assert a.git.head() == b.git.head()
    assert a.git.rev(f"refs/heads/{branch}") is None and b.git.rev(f"refs/heads/{branch}") is None
    assert (a.root / "memory" / "USER.md").read_text().count(ENTRY) == 1


@pytest.mark.gitdaemon
def test_a_decision_claimed_elsewhere_is_refused_and_changes_nothing(tmp_path, server):
    """The library API (what the CLI calls): B decides first; A, behind, is told and changes nothing.
    A reject then a revert go through the same claim; a revert is one decision per merge."""
    a, b, branch = two_machines_with_a_change(tmp_path, server)
    done = decide(b, branch, "merge", claims=open_claims(b))
    assert done.line().startswith(f"merged {branch}") and merges_of(server, branch)
    before = a.git.head()
    with pytest.raises(DecidedElsewhere) as refused:
        decide(a, branch, "reject")
    assert refused.value.host == host_id(b.state_dir) and a.git.head() == before
    assert a.git.rev(f"refs/heads/{branch}")  # still pending here until the next round says otherwise
    Syncer(a).round(work=False)
    assert a.git.rev(f"refs/heads/{branch}") is None
    reverted = decide(a, branch, "revert")
    assert reverted.line().startswith(f"reverted {branch}")
    Syncer(b).round(work=False)
    with pytest.raises(DecidedElsewhere):  # the same merge undone on B: claimed by A already
        decide(b, branch, "revert", claims=open_claims(b))


def test_decide_without_a_remote_is_the_change_itself(agent_vault, model_server, tmp_path):
    branch = refine_change(agent_vault, model_server, tmp_path, skill=False)
    with pytest.raises(InputError):
        decide(agent_vault, branch, "dance")  # type: ignore[arg-type]
    with pytest.raises(InputError):
        decide(agent_vault, branch, "reject", only=["memory/USER.md"])
    done = decide(agent_vault, branch, "reject")
    assert done.kept_as == f"refs/hermes/rejected/{branch}" and not agent_vault.git.rev(f"refs/heads/{branch}")
