"""Refine end to end: a real session, the scripted reviewer over HTTP, real git."""

import json
import threading
import time

import pytest
from conftest import git

from hermes_fs.agent.conversation import Conversation, ConversationOptions
from hermes_fs.agent.tools import REVIEW_TOOLS
from hermes_fs.errors import ConflictError
from hermes_fs.learning import changes as review
from hermes_fs.learning.refine import RefineOptions, refine
from hermes_fs.learning.validate import similar_skill
from hermes_fs.store.provenance import Act

USER = "memory/USER.md"
SKILL = """---
name: deploy-fly
description: Deploy the web app to fly.io with a rolling strategy and check it is healthy. Use when the user asks to ship or deploy.
---
# Deploy to fly.io

1. Run `fly deploy --strategy rolling`.
2. Check `fly status` shows all machines healthy.
"""
DONE = "Summary: remember tabs preference and the fly.io deploy procedure\n- memory/USER.md: prefers tabs (because the user said so twice)\n- skills/deploy-fly/SKILL.md: new skill (because the rolling deploy worked)"


@pytest.fixture
def session(agent_vault, model_server, tmp_path):
    model_server.add({"content": "Deployed with `fly deploy --strategy rolling`; all machines healthy."})
    with Conversation(agent_vault, ConversationOptions(source="run", workspace=tmp_path)) as c:
        c.ask("I always use tabs, not spaces. Now deploy the app to fly.io please.")
        return c.id


def good_review(server):
    server.add(
        {"tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": "Prefers tabs over spaces."}),
                        ("skill_manage", {"action": "create", "name": "deploy-fly", "content": SKILL})]},
        {"content": DONE},
    )


def test_session_to_branch_with_memory_entry_and_skill(agent_vault, model_server, session):
    head_before = agent_vault.git.head()
    status_before = git(agent_vault, "status", "--porcelain")
    good_review(model_server)
    result = refine(agent_vault, RefineOptions(focus="preferences and deploys"))
    assert result.status == "pending", result.reason
    assert result.branch.startswith("refine/") and result.branch.endswith("remember-tabs-preference-and-the-fly-io")
    assert sorted(result.files) == [USER, "skills/deploy-fly/SKILL.md"]
    # the ended session was committed already, so S is main as it was; main did not move
    assert agent_vault.git.head() == result.snapshot == head_before
    assert git(agent_vault, "status", "--porcelain") == status_before
    assert "tabs" not in (agent_vault.root / USER).read_text()
    assert not (agent_vault.root / "skills/deploy-fly").exists()
    info = agent_vault.git.commit_info(result.branch)
    assert info.parents == [result.snapshot]
    assert info.summary == "remember tabs preference and the fly.io deploy procedure"
    assert "- memory/USER.md: prefers tabs (because the user said so twice)" in info.body
    assert info.trailers == {"Refine-Session": session, "Refine-Snapshot": result.snapshot,
                             "Refine-Focus": "preferences and deploys", "Refine-Model": "openai/test-model",
                             # what the review cost: two model calls of 11 + 7 tokens; no price for this model
                             "Learning-Tokens": "36 (22 in, 14 out)",
                             "Learning-Cost": "unknown (no price for this model)"}
    assert b"- Prefers tabs over spaces." in agent_vault.git.read_file(result.branch, USER)
    from skills_ref.parser import parse_frontmatter
    meta, _ = parse_frontmatter(agent_vault.git.read_file(result.branch, "skills/deploy-fly/SKILL.md").decode())
    assert meta["metadata"]["created-by"] == "refine"
    # what the reviewer was sent
    req = model_server.requests[1]
    assert sorted(t["function"]["name"] for t in req["tools"]) == sorted(REVIEW_TOOLS)
    brief = req["messages"][1]["content"]
    assert "Focus: preferences and deploys" in brief
    assert "USER: I always use tabs, not spaces." in brief
    assert "### memory/USER.md" in brief and "- writing-skills:" in brief
    assert "Lessons, not logs" in req["messages"][0]["content"]
    assert "stays pending" not in result.line() and result.branch in result.line()


def test_merge_reject_and_revert(agent_vault, model_server, session):
    good_review(model_server)
    r = refine(agent_vault, RefineOptions())
    review.merge(agent_vault.git, r.branch)
    assert "- Prefers tabs over spaces." in (agent_vault.root / USER).read_text()
    assert (agent_vault.root / "skills/deploy-fly/SKILL.md").is_file()
    assert git(agent_vault, "log", "--first-parent", "-1", "--format=%s").startswith(f"merge {r.branch}: remember tabs")
    assert agent_vault.git.rev(f"refs/heads/{r.branch}") is None
    assert [c.state for c in review.learned_log(agent_vault.git)] == ["merged"]
    review.revert(agent_vault.git, r.branch)
    assert "tabs" not in (agent_vault.root / USER).read_text()
    assert not (agent_vault.root / "skills/deploy-fly").exists()
    assert git(agent_vault, "status", "--porcelain") == ""

    good_review(model_server)
    r2 = refine(agent_vault, RefineOptions())
    review.reject(agent_vault.git, r2.branch)
    assert agent_vault.git.rev(f"refs/hermes/rejected/{r2.branch}")
    states = {c.branch: c.state for c in review.learned_log(agent_vault.git)}
    assert states == {r.branch: "reverted", r2.branch: "rejected"}


def test_revert_refuses_lines_a_person_edited_since(agent_vault, model_server, session):
    good_review(model_server)
    r = refine(agent_vault, RefineOptions(policy="auto"))
    assert r.status == "merged"
    p = agent_vault.root / USER
    p.write_text(p.read_text().replace("Prefers tabs over spaces.", "Prefers tabs over spaces, width 4."))
    with pytest.raises(ConflictError) as exc:
        review.revert(agent_vault.git, r.branch)
    assert exc.value.files == [USER]
    assert "width 4" in p.read_text()


def test_additions_policy_both_ways(agent_vault, model_server, session):
    model_server.add({"tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": "Uses vim."})]},
                     {"content": "Summary: add vim\n- memory/USER.md: uses vim (because stated)"})
    r = refine(agent_vault, RefineOptions(policy="additions"))
    assert r.status == "merged" and "Uses vim" in (agent_vault.root / USER).read_text()
    model_server.add({"tool_calls": [("memory", {"action": "replace", "file": "USER.md", "old_text": "Uses vim",
                                                 "text": "Uses neovim."})]},
                     {"content": "Summary: vim -> neovim\n- memory/USER.md: neovim (because corrected)"})
    r = refine(agent_vault, RefineOptions(policy="additions"))
    assert r.status == "pending" and "edits or removes lines" in r.reason
    assert "Uses vim." in (agent_vault.root / USER).read_text()


def _run_in_thread(fn):
    box = {}
    t = threading.Thread(target=lambda: box.update(result=fn()))
    t.start()
    return t, box


def _wait_requests(server, n):
    deadline = time.time() + 60
    while len(server.requests) < n and time.time() < deadline:
        time.sleep(0.05)


def test_person_edits_user_md_while_review_runs(agent_vault, model_server, session):
    gate = threading.Event()
    model_server.add({"wait": gate, "tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": "Prefers tabs."})]},
                     {"content": "Summary: tabs\n- memory/USER.md: tabs (because stated)"})
    t, box = _run_in_thread(lambda: refine(agent_vault, RefineOptions(policy="auto")))
    _wait_requests(model_server, 2)
    p = agent_vault.root / USER
    p.write_text(p.read_text().replace("# About the user", "# About me (edited during the review)"))
    gate.set()
    t.join(60)
    r = box["result"]
    assert r.status == "merged", r.reason
    text = p.read_text()
    assert "# About me (edited during the review)" in text and "- Prefers tabs." in text
    assert git(agent_vault, "status", "--porcelain") == ""
    subjects = git(agent_vault, "log", "--first-parent", "--format=%s", "-2").splitlines()
    assert subjects[0].startswith("merge refine/") and subjects[1] == "edit: memory/USER.md"


def test_conflicting_edit_during_review_is_reported_and_nothing_lost(agent_vault, model_server, session):
    gate = threading.Event()
    p = agent_vault.root / USER
    p.write_text(p.read_text() + "- Likes terse commit messages.\n")  # an entry the agent learned (it may rewrite it)
    agent_vault.git.commit_paths([USER], "memory: add entry", Act.session("s0"))
    model_server.add({"wait": gate, "tool_calls": [("memory", {"action": "replace", "file": "USER.md",
                                                               "old_text": "terse", "text": "Prefers long answers."})]},
                     {"content": "Summary: longer answers\n- memory/USER.md: long answers (because asked)"})
    t, box = _run_in_thread(lambda: refine(agent_vault, RefineOptions(policy="auto")))
    _wait_requests(model_server, 2)
    p.write_text(p.read_text().replace("Likes terse commit messages", "Likes very short answers"))
    gate.set()
    t.join(60)
    r = box["result"]
    assert r.status == "conflict" and r.conflicts == [USER] and USER in r.line()
    assert "very short answers" in p.read_text()
    assert agent_vault.git.rev(f"refs/heads/{r.branch}")  # still pending
    assert b"Prefers long answers." in agent_vault.git.read_file(r.branch, USER)
    with pytest.raises(ConflictError):
        review.merge(agent_vault.git, r.branch)


def test_invalid_skill_is_sent_back_then_fixed(agent_vault, model_server, session):
    bad = SKILL.replace("name: deploy-fly", "name: Deploy Fly")
    model_server.add({"tool_calls": [("skill_manage", {"action": "create", "name": "deploy-fly", "content": bad})]},
                     {"tool_calls": [("skill_manage", {"action": "create", "name": "deploy-fly", "content": SKILL})]},
                     {"content": DONE})
    r = refine(agent_vault, RefineOptions())
    assert r.status == "pending" and r.files == ["skills/deploy-fly/SKILL.md"]
    first_result = [m for m in model_server.requests[2]["messages"] if m["role"] == "tool"][0]["content"]
    assert first_result.startswith("error:") and "lowercase" in first_result


def test_duplicate_skill_is_refused_naming_the_existing_one(agent_vault, model_server, session):
    dup = SKILL.replace("deploy-fly", "reviewing-changes").replace(
        "Deploy the web app to fly.io with a rolling strategy and check it is healthy. Use when the user asks to ship or deploy.",
        "How to review, merge, reject or revert what hermes-fs learned (refine and learn branches).")
    model_server.add({"tool_calls": [("skill_manage", {"action": "create", "name": "reviewing-changes", "content": dup})]},
                     {"content": "Summary: nothing to change"})
    r = refine(agent_vault, RefineOptions())
    assert r.status == "nothing"
    msg = [m for m in model_server.requests[2]["messages"] if m["role"] == "tool"][0]["content"]
    assert "nearly duplicates the existing skill 'reviewing-learned-changes'" in msg and "patch" in msg
    assert similar_skill("deploy-fly", "Deploy to fly.io", {"writing-skills": "How to write a skill"}) is None


def test_over_budget_memory_is_refused(agent_vault, model_server, session):
    model_server.add({"tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": "x" * 2500})]},
                     {"content": "Summary: nothing to change"})
    r = refine(agent_vault, RefineOptions())
    assert r.status == "nothing"
    msg = [m for m in model_server.requests[2]["messages"] if m["role"] == "tool"][0]["content"]
    assert "over budget" in msg


def test_secret_is_refused_and_no_branch(agent_vault, model_server, session):
    model_server.add({"tool_calls": [("memory", {"action": "add", "file": "MEMORY.md",
                                                 "text": "Deploy token ghp_1234567890abcdefghijABCDEFGHIJklmnop"})]},
                     {"content": DONE})
    r = refine(agent_vault, RefineOptions())
    assert r.status == "nothing"
    msg = [m for m in model_server.requests[2]["messages"] if m["role"] == "tool"][0]["content"]
    assert "refusing to commit a secret" in msg and "GitHub token" in msg and "ghp_1234" not in msg
    assert agent_vault.git.branches("refine/") == []
    assert "ghp_1234" not in git(agent_vault, "log", "--all", "-p")


def test_model_failing_mid_review_leaves_no_branch_and_no_lock(agent_vault, model_server, session):
    model_server.add({"tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": "Prefers tabs."})]},
                     {"status": 400, "body": {"error": {"message": "context length exceeded", "type": "invalid_request_error"}}})
    r = refine(agent_vault, RefineOptions(policy="auto"))
    assert r.status == "failed" and "context length exceeded" in r.reason
    assert agent_vault.git.head() == r.snapshot  # main: only the snapshot
    assert agent_vault.git.branches("refine/") == []
    assert "tabs" not in (agent_vault.root / USER).read_text()
    with agent_vault.git.lock.hold(timeout=1):
        pass


def test_a_change_without_a_reason_is_asked_again_then_refused(agent_vault, model_server, session):
    model_server.add({"tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": "Prefers tabs."})]},
                     {"content": "\x00\x01 lol ok"},
                     {"content": "Summary: tabs over spaces\n- memory/USER.md: prefers tabs (because the user said "
                                 "\"I always use tabs, not spaces\")"})
    r = refine(agent_vault, RefineOptions(focus="indentation"))
    info = agent_vault.git.commit_info(r.branch)
    assert "is missing the reason for memory/USER.md" in model_server.requests[-1]["messages"][-1]["content"]
    # the title and the branch name come from the reviewer's summary, not the focus or the file names
    assert info.summary == "tabs over spaces" and r.branch.endswith("-tabs-over-spaces")
    model_server.add({"tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": "Likes tea."})]},
                     {"content": "ok"}, {"content": "Summary: tea"})
    r = refine(agent_vault, RefineOptions())
    assert r.status == "nothing" and r.branch is None, r.line()  # still no reason: the change is not made


def test_nothing_to_change_makes_no_branch(agent_vault, model_server, session):
    model_server.add({"content": "Summary: nothing to change"})
    r = refine(agent_vault, RefineOptions())
    assert r.status == "nothing" and r.branch is None
    assert agent_vault.git.branches("refine/") == [] and "nothing to change" in r.line()


def test_two_refines_at_once(agent_vault, model_server, session):
    def responder(body):
        brief = body["messages"][1]["content"]
        which = "alpha" if "Focus: alpha" in brief else "beta"
        target = "USER.md" if which == "alpha" else "MEMORY.md"
        if any(m["role"] == "tool" for m in body["messages"]):
            return {"content": f"Summary: {which}\n- {target}: {which} (because test)"}
        return {"delay": 0.3, "tool_calls": [("memory", {"action": "add", "file": target, "text": f"Fact {which}."})]}

    model_server.responder = responder
    results = []
    threads = [threading.Thread(target=lambda f=f: results.append(refine(agent_vault, RefineOptions(focus=f, policy="auto"))))
               for f in ("alpha", "beta")]
    [t.start() for t in threads]
    [t.join(120) for t in threads]
    assert sorted(r.status for r in results) == ["merged", "merged"], [r.reason for r in results]
    assert len({r.branch for r in results}) == 2
    assert "Fact alpha." in (agent_vault.root / USER).read_text()
    assert "Fact beta." in (agent_vault.root / "memory/MEMORY.md").read_text()
    assert git(agent_vault, "status", "--porcelain") == ""
    import subprocess
    subprocess.run(["git", "-C", str(agent_vault.root), "fsck"], check=True, capture_output=True)


def test_refine_pending_is_notified(agent_vault, model_server, session, receiver):
    cfg = (agent_vault.root / "hermes.yaml").read_text()
    (agent_vault.root / "hermes.yaml").write_text(cfg + f"notify:\n  targets: {{desk: '{receiver.url('desk')}'}}\n  events: [refine_pending, refine_failed]\n")
    agent_vault.git.commit_paths(["hermes.yaml"], "notify", Act.person())
    agent_vault._config = None
    good_review(model_server)
    r = refine(agent_vault, RefineOptions())
    assert r.status == "pending"
    [got] = receiver.received
    assert r.branch in got["body"]["message"] and "refine pending" in got["body"]["title"]
    model_server.add({"status": 400, "body": {"error": {"message": "bad request", "type": "invalid_request_error"}}})
    r = refine(agent_vault, RefineOptions())
    assert r.status == "failed"
    assert "refine failed" in receiver.received[-1]["body"]["message"]


@pytest.mark.slow
def test_cli_refine_review_show_merge_log(agent_vault, model_server, session, run_cli):
    v = ["--vault", str(agent_vault.root)]
    good_review(model_server)
    r = run_cli(*v, "refine", "--wait", "deploys")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("refine: refine/") and "pending" in r.stdout and len(r.stdout.strip().splitlines()) == 1
    branch = r.stdout.split()[1]
    listing = run_cli(*v, "review").stdout
    assert branch in listing and "memory/USER.md" in listing and "remember tabs" in listing
    shown = run_cli(*v, "review", "show", branch).stdout
    assert "+- Prefers tabs over spaces." in shown and "Refine-Session:" in shown and "\x1b[" not in shown
    assert run_cli(*v, "review", "merge", branch).returncode == 0
    log = json.loads(run_cli(*v, "log", "--json").stdout)
    assert log[0]["branch"] == branch and log[0]["state"] == "merged"
    r = run_cli(*v, "review", "merge", "refine/nope")
    assert r.returncode == 2 and "no pending change" in r.stderr
    assert run_cli(*v, "revert", branch).returncode == 0
    assert "tabs" not in (agent_vault.root / USER).read_text()


@pytest.mark.slow
def test_cli_refine_in_background(agent_vault, model_server, session, run_cli):
    good_review(model_server)
    r = run_cli("--vault", str(agent_vault.root), "refine")
    assert r.returncode == 0 and "background" in r.stdout
    deadline = time.time() + 90
    while not agent_vault.git.branches("refine/") and time.time() < deadline:
        time.sleep(0.2)
    assert len(agent_vault.git.branches("refine/")) == 1


def test_checks_catch_what_tools_would_have_refused(vault):
    """Defense in depth: the final check re-validates every changed file of the overlay."""
    from hermes_fs.learning.validate import check
    from hermes_fs.store.overlay import OverlayFiles

    ov = OverlayFiles(vault.git, vault.git.head())
    ov.changes["skills/bad-skill/SKILL.md"] = b"---\nname: other\ndescription: d\n---\nx\n"
    ov.changes["skills/orphan/references/a.md"] = b"notes\n"
    ov.changes[USER] = b"---\ntitle: U\n---\n" + b"- " + b"y" * 2100 + b"\n"
    ov.changes["memory/MEMORY.md"] = b"---\ntitle: [broken\n---\n- a\n"
    ov.changes["cron/new-job.md"] = b"---\nschedule: every 1h\n---\nx\n"
    ov.changes["skills/writing-skills/references/bin.md"] = b"\x00\x01\x02"
    problems = "\n".join(check(ov, vault.config))
    assert "skills/bad-skill/SKILL.md: Directory name 'bad-skill' must match skill name 'other'" in problems
    assert "skills/orphan/references/a.md: skill orphan has no SKILL.md" in problems
    assert "memory/USER.md: over budget" in problems
    assert "memory/MEMORY.md:" in problems and "invalid YAML" in problems
    assert "cron/new-job.md: a learned change may only touch memory/ and skills/" in problems
    assert "binary file" in problems


def test_branch_names_are_never_reused_even_after_a_merge(vault):
    from hermes_fs.learning.pipeline import unique_branch

    s = vault.git.head()
    first = unique_branch(vault, "refine", "same focus")
    vault.git.commit_overlay(s, first, {USER: vault.git.read_file(s, USER) + b"- a\n"}, "a", Act.learned())
    vault.git.merge(first, f"merge {first}: a", Act.person())  # the merged branch ref is deleted...
    second = unique_branch(vault, "refine", "same focus")
    assert second != first  # ...but its name stays taken, so `log` and `revert` stay unambiguous


def test_filler_words_do_not_make_skills_look_alike():
    from hermes_fs.learning.validate import similar_skill

    existing = {"deploy-fly": "Use when you need the steps to deploy an app to fly.io with rolling updates."}
    assert similar_skill("bake-bread", "Use when you need the steps to bake sourdough bread at home.", existing) is None
    assert similar_skill("fly-deploys", "Deploy an app to fly.io with rolling updates.", existing) == "deploy-fly"


def test_structured_entry_without_a_reason_is_sent_back(agent_vault, model_server, session):
    bare = {"memory": [{"action": "add", "file": "USER.md", "reason": " ", "text": "Prefers tabs.", "old_text": ""}],
            "skills": [], "summary": ""}
    fixed = {"memory": [{**bare["memory"][0], "reason": "the user said: I always use tabs, not spaces"}],
             "skills": [], "summary": ""}
    model_server.add({"content": json.dumps(bare)}, {"content": json.dumps(fixed)})
    r = refine(agent_vault, RefineOptions(mode="structured", samples=0))
    assert "gives no reason" in model_server.requests[-1]["messages"][-1]["content"]
    info = agent_vault.git.commit_info(r.branch)
    # no summary given: the title is what was learned, not a file name
    assert info.summary == "learn: Prefers tabs." and "update memory" not in info.summary
    assert "(because the user said: I always use tabs, not spaces)" in info.body
    model_server.add({"content": json.dumps(bare)}, {"content": json.dumps(bare)}, {"content": json.dumps(bare)})
    assert refine(agent_vault, RefineOptions(mode="structured", samples=0)).status == "nothing"
