"""A person's checks (`checks/<name>.md`): run on every learned change, holding back an `auto`
change that fails one, and `learn bisect` naming the merged change that broke one (real git,
the scripted model over HTTP, answering from the system prompt each tree gives)."""

import pytest

from hermes_fs.agent.conversation import Conversation, ConversationOptions
from hermes_fs.learning import changes as review
from hermes_fs.learning import checks
from hermes_fs.learning.bisect import bisect
from hermes_fs.learning.refine import RefineOptions, refine
from hermes_fs.store.overlay import OverlayFiles
from hermes_fs.store.provenance import Act

NODE = """---
ask: "Which package manager do I use for node projects?"
expect: [pnpm]
forbid: ["npm install"]
---
The agent once learned npm from a one-off.
"""


def commit_check(vault, name: str = "node-pm", text: str = NODE) -> None:
    (vault.root / "checks").mkdir(exist_ok=True)
    (vault.root / f"checks/{name}.md").write_text(text)
    vault.git.commit_paths([f"checks/{name}.md"], f"checks: {name}", Act.person())


def answer_from_prompt(body: dict) -> dict:
    """The agent as its memory makes it: it says what USER.md says about node, else pnpm."""
    system = body["messages"][0]["content"]
    return {"content": "Run `npm install`." if "npm install" in system else "You use pnpm."}


def session(vault, server, tmp_path, words: str) -> str:
    server.add({"content": "Noted."})
    with Conversation(vault, ConversationOptions(source="run", workspace=tmp_path)) as c:
        c.ask(words)
        return c.id


def learned(server, entry: str, summary: str) -> None:
    server.add({"tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": entry})]},
               {"content": f"Summary: {summary}\n- memory/USER.md: {entry} (because the user said so)"})


def test_check_files_are_read_and_judged(vault):
    commit_check(vault)
    commit_check(vault, "off", '---\nask: "x?"\nexpect: [y]\nenabled: false\n---\n')
    commit_check(vault, "broken", "---\nexpect: [pnpm]\n---\n")
    commit_check(vault, "binary", "\x00\x01---")
    found = {c.name: c for c in checks.load(OverlayFiles(vault.git, vault.git.head()))}
    assert found["node-pm"].ask.startswith("Which package manager") and found["node-pm"].forbid == ["npm install"]
    assert not found["off"].enabled and not found["off"].error
    assert "`ask` must be the question" in found["broken"].error and found["binary"].error
    assert [c.name for c in checks.main_checks(vault.git)] == ["binary", "broken", "node-pm"]
    c = found["node-pm"]
    assert checks.judge(c, "Use PNPM, always.").passed
    r = checks.judge(c, "Run npm   install then go")
    assert not r.passed and r.missing == ["pnpm"] and r.forbidden == ["npm install"]
    assert r.line() == "- check node-pm: FAILED: the answer does not mention 'pnpm' and mentions 'npm install'"
    assert checks.results_in([r.line(), "- check other: passed"])[1].passed


def test_check_runs_against_main_and_a_pending_change(agent_vault, model_server, tmp_path):
    v = agent_vault
    sid = session(v, model_server, tmp_path, "For node I just run npm install.")
    learned(model_server, "Uses npm install for node projects.", "node installs use npm")
    out = refine(v, RefineOptions(session=sid))  # no checks yet: nothing asked, nothing written
    assert out.status == "pending" and "Checks" not in v.git.commit_info(out.branch).trailers
    commit_check(v)
    model_server.add(answer_from_prompt, answer_from_prompt)
    on_main = checks.run(v, checks.tree_of(v, None)[0])
    files, label = checks.tree_of(v, out.branch)
    on_branch = checks.run(v, files)
    assert on_main.passed and not on_branch.passed and label.endswith("merged onto main")
    assert on_branch.failed[0].forbidden == ["npm install"]
    # the prompt was assembled from each tree: the pending entry only in the second
    assert "npm install" not in model_server.requests[-2]["messages"][0]["content"]
    assert "Uses npm install" in model_server.requests[-1]["messages"][0]["content"]
    assert model_server.requests[-1]["messages"][1]["content"] == "Which package manager do I use for node projects?"


@pytest.mark.parametrize("policy", ["auto", "additions"])
def test_an_auto_change_is_held_back_by_a_failing_check(agent_vault, model_server, tmp_path, policy):
    v = agent_vault
    commit_check(v)
    sid = session(v, model_server, tmp_path, "For node I just run npm install.")
    learned(model_server, "Uses npm install for node projects.", "node installs use npm")
    model_server.add(answer_from_prompt)
    out = refine(v, RefineOptions(session=sid, policy=policy))
    assert out.status == "pending" and "check node-pm fails" in out.reason, out.line()
    assert "npm install" not in (v.root / "memory/USER.md").read_text()
    info = v.git.commit_info(out.branch)
    assert info.trailers["Checks"] == "0/1 passed; failed: node-pm"
    assert "- check node-pm: FAILED: the answer does not mention 'pnpm' and mentions 'npm install'" in info.body
    # what `review show` and the web page read
    assert "check node-pm: FAILED" in review.show(v.git, out.branch)
    assert [(r.name, r.passed) for r in checks.results_in(info.body.splitlines())] == [("node-pm", False)]


def test_an_auto_change_that_passes_its_checks_is_merged(agent_vault, model_server, tmp_path):
    v = agent_vault
    commit_check(v)
    sid = session(v, model_server, tmp_path, "I drink tea, not coffee.")
    learned(model_server, "Drinks tea, not coffee.", "tea")
    model_server.add(answer_from_prompt)
    out = refine(v, RefineOptions(session=sid, policy="auto"))
    assert out.status == "merged", out.line()
    assert v.git.commit_info(v.git.log(grep="^merge refine/", limit=1)[0].parents[1]).trailers["Checks"] == "1/1 passed"


def test_learn_bisect_names_the_change_that_broke_a_check(agent_vault, model_server, tmp_path):
    v = agent_vault
    branches = []
    for words, entry in [("I drink tea.", "Drinks tea."), ("For node I run npm install.", "Uses npm install for node."),
                         ("I live in Lyon.", "Lives in Lyon.")]:
        sid = session(v, model_server, tmp_path, words)
        learned(model_server, entry, entry.lower().rstrip("."))
        out = refine(v, RefineOptions(session=sid, policy="auto"))
        assert out.status == "merged", out.line()
        branches.append(out.branch)
    (v.root / "memory/MEMORY.md").write_text((v.root / "memory/MEMORY.md").read_text() + "- A person's note.\n")
    v.git.commit_human_edits()  # a person's edit after the merges: never the suspect
    commit_check(v)
    model_server.responder = answer_from_prompt
    found = bisect(v, "node-pm")
    assert found.culprit == branches[1], found.text()
    assert not found.reverted and f"hermes-fs revert {branches[1]}" in found.text()
    # main and the last merge fail; the check was written after them, so a passing point is looked for
    assert [s.passed for s in found.steps][:2] == [False, False] and any(s.passed for s in found.steps)
    review.revert(v.git, branches[1])
    again = bisect(v, "node-pm")
    assert again.culprit is None and "passes on main now" in again.note
    with pytest.raises(Exception, match="no check 'nope'"):
        bisect(v, "nope")


def knows_from_prompt(body: dict) -> dict:
    """The agent as its memory makes it, and nothing more: npm if memory says npm install, pnpm if it
    says pnpm, else it does not know (so the state before any learned change fails the check)."""
    system = body["messages"][0]["content"]
    if "npm install" in system:
        return {"content": "Run `npm install`."}
    return {"content": "You use pnpm." if "pnpm" in system else "I do not know which one you use."}


def learn_in_turn(v, server, tmp_path, lessons, check_after: int | None = None, check_text: str = NODE) -> list[str]:
    """Merge one refine per lesson (real git, the scripted model); the person commits the check after
    lesson `check_after` (0-based), or after all of them when None. Once the check exists, `auto`
    holds back a change that fails it: the person merges it anyway (`review merge`), as people do."""
    branches = []
    for i, (words, entry) in enumerate(lessons):
        sid = session(v, server, tmp_path, words)
        learned(server, entry, entry.lower().rstrip("."))
        if checks.main_checks(v.git):
            server.add(knows_from_prompt)  # the check run on the change, before `auto` merges it
        out = refine(v, RefineOptions(session=sid, policy="auto"))
        if out.status == "pending":
            review.merge(v.git, out.branch)
        else:
            assert out.status == "merged", out.line()
        branches.append(out.branch)
        if i == check_after:
            commit_check(v, text=check_text)
    if check_after is None:
        commit_check(v, text=check_text)
    server.responder = knows_from_prompt
    return branches


LEARNED_THEN_BROKEN = [("I drink tea.", "Drinks tea."), ("For node I use pnpm.", "Uses pnpm for node projects."),
                       ("I live in Lyon.", "Lives in Lyon."), ("Just run npm install for node.", "Runs npm install for node."),
                       ("I like jazz.", "Likes jazz.")]


def test_learn_bisect_starts_where_the_check_was_written_when_the_knowledge_was_itself_learned(
        agent_vault, model_server, tmp_path):
    """pnpm was learned by a merge (the check was written then, and passed); a later learned merge broke
    it. Before any learned change the agent knew nothing, so a bisect from there could name nothing."""
    v = agent_vault
    branches = learn_in_turn(v, model_server, tmp_path, LEARNED_THEN_BROKEN, check_after=1)
    found = bisect(v, "node-pm")
    assert found.culprit == branches[3], found.text()
    labels = {s.label: s.passed for s in found.steps}
    assert labels["where the check was written"] is True and labels["main now"] is False
    assert "before any learned change" not in labels  # it started from where the check passed
    assert branches[0] not in labels and branches[1] not in labels  # merges before the passing point: not suspects
    assert f"first fails after {branches[3]}" in found.text()


def test_learn_bisect_finds_a_passing_point_when_the_check_was_added_after_the_learning(
        agent_vault, model_server, tmp_path):
    v = agent_vault
    branches = learn_in_turn(v, model_server, tmp_path, LEARNED_THEN_BROKEN)
    found = bisect(v, "node-pm")
    assert found.culprit == branches[3], found.text()
    passed = [s.label for s in found.steps if s.passed]
    assert passed and "before any learned change" not in passed  # a learned state was the passing point
    assert len(found.steps) <= 5  # main, the last merge, and a few more: not one call per merge


def test_learn_bisect_says_plainly_when_the_check_never_passed(agent_vault, model_server, tmp_path, run_cli):
    v = agent_vault
    yarn = NODE.replace("expect: [pnpm]", "expect: [yarn]")
    learn_in_turn(v, model_server, tmp_path, LEARNED_THEN_BROKEN[:3], check_after=1, check_text=yarn)
    found = bisect(v, "node-pm")
    assert found.culprit is None and found.note.startswith("never passed"), found.text()
    labels = [s.label for s in found.steps]
    assert "where the check was written" in labels and "before any learned change" in labels
    assert all(not s.passed for s in found.steps)
    cli = run_cli("--vault", str(v.root), "learn", "bisect", "node-pm")
    assert cli.returncode == 1 and "never passed" in cli.stdout and "No learned change broke it" in cli.stdout


@pytest.mark.slow
def test_cli_check_review_and_learn_bisect(agent_vault, model_server, tmp_path, run_cli):
    v = agent_vault
    commit_check(v)
    sid = session(v, model_server, tmp_path, "For node I just run npm install.")
    learned(model_server, "Uses npm install for node projects.", "node installs use npm")
    model_server.add(answer_from_prompt)
    out = refine(v, RefineOptions(session=sid, policy="auto"))
    assert out.status == "pending"
    model_server.responder = answer_from_prompt
    cli = ["--vault", str(v.root)]
    listed = run_cli(*cli, "review")
    assert listed.returncode == 0 and "checks: 0/1 passed; failed: node-pm" in listed.stdout
    shown = run_cli(*cli, "review", "show", out.branch)
    assert "check node-pm: FAILED: the answer does not mention 'pnpm'" in shown.stdout
    ok = run_cli(*cli, "check")
    assert ok.returncode == 0 and "PASS  node-pm" in ok.stdout and "main: 1/1 passed" in ok.stdout, ok.stderr
    bad = run_cli(*cli, "check", "--branch", out.branch)
    assert bad.returncode == 1 and "FAIL  node-pm: the answer" in bad.stdout and "answer: Run `npm install`." in bad.stdout
    run_cli(*cli, "review", "merge", out.branch)
    found = run_cli(*cli, "learn", "bisect", "node-pm")
    assert found.returncode == 0 and f"first fails after {out.branch}" in found.stdout, found.stdout + found.stderr
    assert f"hermes-fs revert {out.branch}" in found.stdout
    missing = run_cli(*cli, "learn", "bisect", "nope")
    assert missing.returncode == 2 and "no check 'nope'" in missing.stderr  # bad input


def test_init_ships_one_example_check(vault):
    [example] = checks.load(OverlayFiles(vault.git, vault.git.head()))
    assert example.name == "example" and example.ask and example.expect and not example.enabled
    assert checks.main_checks(vault.git) == []  # off until the person turns it on: no model call per change


def test_web_page_shows_check_results_beside_the_diff_and_spend_per_day(agent_vault, model_server, tmp_path):
    from web_helpers import start_web

    v = agent_vault
    commit_check(v)
    sid = session(v, model_server, tmp_path, "For node I just run npm install.")
    learned(model_server, "Uses npm install for node projects.", "node installs use npm")
    model_server.add(answer_from_prompt)
    out = refine(v, RefineOptions(session=sid, policy="auto"))
    w = start_web(v.root)
    try:
        code, _, page = w.request("GET", f"/changes/{out.branch}")
        assert code == 200 and "Your checks on this change" in page and "<code>node-pm</code>: <strong>FAILED</strong>" in page
        _, _, pending = w.request("GET", "/")
        assert "0/1 passed; failed: node-pm" in pending
        _, _, log = w.request("GET", "/log")
        assert "Learning spend per day" in log and "1</td>" in log
    finally:
        w.stop()


def test_cli_check_names_a_check_saved_but_not_committed(vault, run_cli):
    """Checks run as main holds them; a check moved into checks/ but not committed is named, so it
    is not silently ignored (no model is called: nothing committed is enabled)."""
    (vault.root / "checks" / "node-pm.md").write_text(NODE)
    r = run_cli("--vault", str(vault.root), "check")
    assert r.returncode == 0, r.stderr
    assert "not committed yet, so not run: checks/node-pm.md" in r.stdout and "no checks to run" in r.stdout
    assert not checks.main_checks(vault.git)  # still a draft: nothing was committed for the person
