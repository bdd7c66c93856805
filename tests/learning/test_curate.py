"""The curator (issue 28), end to end: usage from real transcripts, stale skills archived, near-
duplicates merged by the scripted model, memory over budget consolidated, contradictions resolved,
review / log / revert / restore like any learned change, the daemon's part, and bad input."""

import json
import time

import pytest
from conftest import git

from hermes_fs.agent.conversation import Conversation, ConversationOptions
from hermes_fs.errors import InputError
from hermes_fs.learning import changes as review
from hermes_fs.learning.curate import CurateOptions, curate, find_duplicates, plan, restore
from hermes_fs.mind import skills, usage
from hermes_fs.service.curator import CuratorService, schedule_of
from hermes_fs.service.services import services_for
from hermes_fs.store.provenance import Act

DAY = 86400
USER = "memory/USER.md"


def skill_md(name, description, steps):
    body = "\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1))
    return f"---\nname: {name}\ndescription: {description}\n---\n# {name}\n\n{body}\n"


def add_skill(vault, name, description, steps, created_by=None, days_ago=0, monkeypatch=None):
    """A skill committed on main, `days_ago` in the past (real commits with old dates)."""
    text = skill_md(name, description, steps)
    if created_by:
        text = skills.stamp_metadata(text, {"created-by": created_by})
    (vault.root / "skills" / name).mkdir(parents=True, exist_ok=True)
    (vault.root / "skills" / name / "SKILL.md").write_text(text)
    if days_ago and monkeypatch:
        when = f"@{int(time.time() - days_ago * DAY)} +0000"
        monkeypatch.setenv("GIT_COMMITTER_DATE", when)
        monkeypatch.setenv("GIT_AUTHOR_DATE", when)
    vault.git.commit_paths([f"skills/{name}/SKILL.md"], f"skills: add {name}",
                           Act.learned() if created_by else Act.person())
    if monkeypatch:
        monkeypatch.delenv("GIT_COMMITTER_DATE", raising=False)
        monkeypatch.delenv("GIT_AUTHOR_DATE", raising=False)


def use_skill(vault, model_server, tmp_path, name):
    """A real session in which the agent reads the skill (the tool call lands in the transcript)."""
    model_server.add({"tool_calls": [("skill_view", {"name": name})]}, {"content": "done"})
    with Conversation(vault, ConversationOptions(source="run", workspace=tmp_path)) as c:
        c.ask(f"do the {name} thing")


def test_usage_comes_from_the_transcripts_and_is_read_incrementally(agent_vault, model_server, tmp_path, run_cli):
    v = agent_vault
    add_skill(v, "deploy-fly", "Deploy the web app to fly.io.", ["fly deploy"])
    use_skill(v, model_server, tmp_path, "deploy-fly")
    use_skill(v, model_server, tmp_path, "deploy-fly")
    first = usage.refresh(v)
    s = first.skills["deploy-fly"]
    assert s.uses == 2 and s.last_used and s.created and s.created_by == "person"
    assert first.commits_read >= 3
    assert usage.refresh(v).commits_read == 0  # nothing new: the cache answers
    use_skill(v, model_server, tmp_path, "deploy-fly")
    again = usage.refresh(v)
    assert again.commits_read == 1 and again.skills["deploy-fly"].uses == 3  # only the new session was read
    (v.state_dir / "cache" / usage.CACHE).unlink()
    assert usage.refresh(v).skills["deploy-fly"].uses == 3  # rebuilt from the record alone
    r = run_cli("--vault", str(v.root), "skills", "list", "--usage", "--json")
    assert r.returncode == 0, r.stderr
    rows = {row["name"]: row for row in json.loads(r.stdout)}
    assert rows["deploy-fly"]["uses"] == 3 and rows["deploy-fly"]["created_by"] == "person"
    assert rows["writing-skills"]["uses"] == 0 and rows["deploy-fly"]["stale"] is False
    r = run_cli("--vault", str(v.root), "skills", "list", "--usage")
    assert "deploy-fly" in r.stdout and "last used" in r.stdout


def test_stale_skills_are_archived_on_a_curate_branch_and_restored(vault, monkeypatch, run_cli):
    add_skill(vault, "old-report", "Build the quarterly sales report in a spreadsheet.", ["open sheet"],
              created_by="refine", days_ago=45, monkeypatch=monkeypatch)
    add_skill(vault, "fresh-tool", "Rotate the API credentials of the staging cluster.", ["rotate"],
              created_by="learn", days_ago=2, monkeypatch=monkeypatch)
    add_skill(vault, "mine", "Water the office plants on Mondays.", ["water"], days_ago=40, monkeypatch=monkeypatch)
    (vault.root / "skills" / "mine" / "SKILL.md").write_text(
        (vault.root / "skills" / "mine" / "SKILL.md").read_text() + "\n2. check the soil\n")
    vault.git.commit_human_edits()  # a person edited it just now: not stale
    r = run_cli("--vault", str(vault.root), "status", "--json")
    assert json.loads(r.stdout)["skills"]["stale"] == 1, r.stdout
    found = plan(vault)
    assert list(found.stale) == ["old-report"] and "never used" in found.stale["old-report"]
    out = curate(vault)  # no model call needed: archiving is decided by code
    assert out.status == "pending" and out.branch.startswith("curate/"), out.reason
    info = vault.git.commit_info(out.branch)
    assert "archive 1 stale skill" in info.summary and "old-report" in info.body and "45 days ago" in info.body
    assert info.trailers.get("Curate-Policy") == "review"
    tip = out.branch
    assert vault.git.read_file(tip, "skills/.archive/old-report/SKILL.md") is not None
    assert vault.git.read_file(tip, "skills/old-report/SKILL.md") is None
    assert (vault.root / "skills/old-report/SKILL.md").is_file()  # main untouched until reviewed
    # review / log treat it like refine and learn
    assert [p.branch for p in review.pending(vault.git)] == [out.branch]
    review.merge(vault.git, out.branch)
    assert not (vault.root / "skills/old-report").exists()
    assert "old-report" not in skills.names(vault.files)
    r = run_cli("--vault", str(vault.root), "log")
    assert out.branch in r.stdout and "merged" in r.stdout
    # restore: back in the library as the person's commit
    r = run_cli("--vault", str(vault.root), "skills", "restore", "old-report")
    assert r.returncode == 0, r.stderr
    assert (vault.root / "skills/old-report/SKILL.md").is_file() and not (vault.root / "skills/.archive/old-report").exists()
    r = run_cli("--vault", str(vault.root), "skills", "restore", "old-report")
    assert r.returncode == 2 and "no archived skill" in r.stderr


def test_near_duplicates_are_merged_by_the_model_and_a_bad_answer_changes_nothing(agent_vault, model_server):
    v = agent_vault
    add_skill(v, "deploy-fly", "Deploy the web application to fly.io with a rolling strategy.",
              ["fly deploy --strategy rolling"])
    add_skill(v, "fly-deploy-app", "Deploy web application to fly.io using rolling strategy and check health.",
              ["fly deploy", "fly status"])
    pairs = find_duplicates({"deploy-fly": "Deploy the web application to fly.io with a rolling strategy.",
                             "fly-deploy-app": "Deploy web application to fly.io using rolling strategy and check health.",
                             "water-plants": "Water the office plants."})
    assert [(p.keep, p.other) for p in pairs] == [("deploy-fly", "fly-deploy-app")] and pairs[0].similarity >= 0.5
    model_server.add({"content": "I would rather not. Here are some thoughts instead."})  # garbage
    bad = curate(v)
    assert bad.status == "failed" and "deploy-fly+fly-deploy-app" in bad.reason
    assert review.pending(v.git) == [] and skills.names(v.files).count("fly-deploy-app") == 1
    merged = skill_md("deploy-fly", "Deploy the web application to fly.io with a rolling strategy; check health.",
                      ["fly deploy --strategy rolling", "fly status"])
    model_server.add({"content": f"```markdown\n{merged}```"})
    out = curate(v, CurateOptions(policy="auto"))
    assert out.status == "merged", out.reason
    assert "fly status" in (v.root / "skills/deploy-fly/SKILL.md").read_text()
    assert not (v.root / "skills/fly-deploy-app").exists() and (v.root / "skills/.archive/fly-deploy-app/SKILL.md").is_file()
    body = v.git.log(grep="^merge curate/", limit=1)[0]
    branch_commit = v.git.commit_info(body.parents[1])
    assert "similarity" in branch_commit.body and "merged with fly-deploy-app" in branch_commit.body
    assert "Merge them into ONE SKILL.md named `deploy-fly`" in model_server.requests[-1]["messages"][-1]["content"]


def test_memory_over_budget_is_consolidated_and_contradictions_keep_the_newest(agent_vault, model_server, tmp_path):
    v = agent_vault
    text = (v.root / USER).read_text().replace("title: User\n", "title: User\nbudget: 420\n")
    (v.root / USER).write_text(text + "- Prefers npm for JavaScript projects.\n")
    v.git.commit_human_edits()  # the person wrote this one
    (v.root / USER).write_text((v.root / USER).read_text()
                               + "- Lives in Lyon, France, and works from home most days of the week.\n"
                               "- Works remotely from Lyon most days.\n"
                               "- Always uses pnpm, never npm, for JavaScript.\n")
    v.git.commit_paths([USER], "memory: add entry", Act.session("s1"))  # the agent, later
    assert plan(v).over_budget == [USER]
    model_server.add({"content": json.dumps({
        "merge": [{"ids": [3, 4], "text": "Lives in Lyon, France; works from home most days.", "reason": "same fact"}],
        "drop": [{"id": 99, "reason": "out of range: ignored"}],
        "contradictions": [{"ids": [2, 5], "reason": "npm vs pnpm"}]})})
    out = curate(v)
    assert out.status == "pending", out.reason
    after = v.git.read_file(out.branch, USER).decode()
    # a person's entry is never dropped by the curator: the contradiction is named for them to settle
    assert "Always uses pnpm" in after and "Prefers npm for JavaScript projects." in after
    assert "Lives in Lyon, France; works from home most days." in after and "Works remotely" not in after
    assert "Prefers concise answers" in after  # untouched entries stay, byte for byte
    info = v.git.commit_info(out.branch)
    assert "left as a person wrote it" in info.body and "Prefers npm" in info.body and "contradicted by" in info.body
    assert "about entries a person wrote" in info.summary and "resolve 1 contradiction" in info.summary
    [request] = model_server.requests  # MEMORY.md holds one entry: nothing to ask about it
    prompt = request["messages"][-1]["content"]
    assert "OVER its budget" in prompt and "(person, added" in prompt and "(agent, added" in prompt
    # revert restores exactly, beside a later edit of the same file
    review.merge(v.git, out.branch)
    (v.root / USER).write_text((v.root / USER).read_text() + "- Drinks tea.\n")
    v.git.commit_human_edits()
    review.revert(v.git, out.branch)
    now = (v.root / USER).read_text()
    assert "Prefers npm for JavaScript projects." in now and "Works remotely from Lyon most days." in now
    assert "- Drinks tea.\n" in now and "Lives in Lyon, France; works from home most days." not in now
    assert [c.state for c in review.learned_log(v.git)][0] == "reverted"


def test_garbage_json_for_memory_is_reported_and_nothing_is_lost(agent_vault, model_server):
    v = agent_vault
    (v.root / USER).write_text((v.root / USER).read_text() + "- Uses fish.\n- Uses zsh at work.\n")
    v.git.commit_human_edits()
    before = (v.root / USER).read_text()
    model_server.add({"content": "{\"merge\": [oops]}"})
    out = curate(v)
    assert out.status == "failed" and "not valid JSON" in out.reason
    assert (v.root / USER).read_text() == before and review.pending(v.git) == []


def test_bad_input_folders_archive_and_transcripts(agent_vault, model_server, tmp_path, run_cli):
    v = agent_vault
    (v.root / "skills" / "no-skill-md" / "references").mkdir(parents=True)
    (v.root / "skills" / "no-skill-md" / "references" / "x.md").write_text("notes\n")
    (v.root / "skills" / ".archive" / "half").mkdir(parents=True)
    (v.root / "skills" / ".archive" / "half" / "notes.md").write_text("no SKILL.md here\n")
    (v.root / "skills" / ".archive" / "SKILL.md").write_text("---\nname: archive\ndescription: x\n---\nhand-made\n")
    bad = v.root / "sessions" / "2026" / "11" / "20261130-120000-abcd.md"
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text("---\nid: 20261130-120000-abcd\n---\n<!-- hermes:tool-call x skill_view -->\nno assistant turn\n")
    v.git.commit_human_edits()
    assert ".archive" not in skills.names(v.files) and skills.misplaced(v.files) == []
    figures = usage.refresh(v)
    assert "sessions/2026/11/20261130-120000-abcd.md" in figures.unreadable
    found = plan(v)
    assert any("no-skill-md/: no SKILL.md" in n for n in found.notes)
    assert any("not counted in usage" in n for n in found.notes)
    with pytest.raises(InputError, match="edited by hand"):
        restore(v, "half")
    with pytest.raises(InputError, match="no archived skill"):
        restore(v, "nothing-here")
    r = run_cli("--vault", str(v.root), "curate", "--dry-run")
    assert r.returncode == 0 and "no-skill-md" in r.stdout and "not counted in usage" in r.stdout
    r = run_cli("--vault", str(v.root), "skills", "list", "--usage")
    assert "warning: sessions/2026/11/20261130-120000-abcd.md not counted" in r.stderr
    assert (v.root / "skills/no-skill-md/references/x.md").is_file()  # nothing touched


class Host:
    """The daemon as a part sees it (service/host.py's protocol), recording what it is told."""

    def __init__(self, vault):
        self.vault, self.notes, self.errors = vault, [], []
        self.scheduler = None

    def note(self, message):
        self.notes.append(message)

    def error(self, message):
        self.errors.append(message)


def test_the_daemon_runs_the_curator_on_its_schedule(vault, monkeypatch):
    assert "curator" in [s.name for s in services_for(Host(vault))]  # curate.every: weekly by default
    (vault.root / "hermes.yaml").write_text((vault.root / "hermes.yaml").read_text() + "curate:\n  every: false\n")
    vault._config = None
    assert "curator" not in [s.name for s in services_for(Host(vault))]
    assert schedule_of("weekly") is not None and schedule_of(False) is None
    with pytest.raises(InputError, match="curate.every"):
        schedule_of("now and then")
    (vault.root / "hermes.yaml").write_text((vault.root / "hermes.yaml").read_text().replace("every: false", "every: daily"))
    vault._config = None
    add_skill(vault, "old-report", "Build the quarterly sales report.", ["open"], created_by="refine", days_ago=60,
              monkeypatch=monkeypatch)
    host = Host(vault)
    service = CuratorService(host)
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC)
    first = service.next_due(now)
    assert first == service.last_run() + timedelta(days=1)  # never ran: one period from the first start
    service.run_once(now)
    assert host.errors == [] and any("curate/" in n and "pending" in n for n in host.notes), host.notes
    assert service.next_due(now) == now + timedelta(days=1)
    assert git(vault, "branch", "--list", "curate/*").strip()


def test_a_symlinked_reference_is_archived_and_restored_as_a_link(vault, monkeypatch, run_cli):
    add_skill(vault, "old-report", "Build the quarterly sales report in a spreadsheet.", ["open sheet"],
              created_by="refine", days_ago=45, monkeypatch=monkeypatch)
    refs = vault.root / "skills" / "old-report" / "references"
    refs.mkdir()
    (refs / "guide.md").symlink_to("../../../memory/USER.md")
    (refs / "gone.md").symlink_to("nowhere.md")  # a dangling link moves as a link too
    for var in ("GIT_COMMITTER_DATE", "GIT_AUTHOR_DATE"):
        monkeypatch.setenv(var, f"@{int(time.time() - 45 * DAY)} +0000")
    vault.git.commit_paths(["skills/old-report/references/guide.md", "skills/old-report/references/gone.md"],
                           "skills: link a reference", Act.learned())
    for var in ("GIT_COMMITTER_DATE", "GIT_AUTHOR_DATE"):
        monkeypatch.delenv(var)
    out = curate(vault)
    assert out.status == "pending", out.reason
    listing = git(vault, "ls-tree", "-r", out.branch, "--", "skills/.archive/old-report/references")
    assert "120000" in listing.split("guide.md")[0].splitlines()[-1], listing
    assert "120000" in listing.split("gone.md")[0].splitlines()[-1], listing
    review.merge(vault.git, out.branch)
    archived = vault.root / "skills/.archive/old-report/references/guide.md"
    assert archived.is_symlink() and str(archived.readlink()) == "../../../memory/USER.md"
    assert git(vault, "status", "--porcelain").strip() == ""  # the checkout agrees with the commit
    r = run_cli("--vault", str(vault.root), "skills", "restore", "old-report")
    assert r.returncode == 0, r.stderr
    back = vault.root / "skills/old-report/references"
    assert (back / "guide.md").is_symlink() and str((back / "guide.md").readlink()) == "../../../memory/USER.md"
    assert (back / "gone.md").is_symlink() and str((back / "gone.md").readlink()) == "nowhere.md"
    assert "120000" in git(vault, "ls-tree", "-r", "HEAD", "--", "skills/old-report/references/guide.md")
    assert git(vault, "status", "--porcelain").strip() == ""


def test_one_unusable_answer_keeps_the_other_proposals_and_reports_the_failed_part(agent_vault, model_server,
                                                                                  monkeypatch):
    v = agent_vault
    add_skill(v, "old-report", "Build the quarterly sales report in a spreadsheet.", ["open sheet"],
              created_by="refine", days_ago=45, monkeypatch=monkeypatch)
    add_skill(v, "deploy-fly", "Deploy the web application to fly.io with a rolling strategy.",
              ["fly deploy --strategy rolling"])
    add_skill(v, "fly-deploy-app", "Deploy web application to fly.io using rolling strategy and check health.",
              ["fly deploy", "fly status"])
    model_server.add({"content": "I would rather not. Here are some thoughts instead."})  # not a SKILL.md
    out = curate(v)
    assert out.status == "pending", out.line()  # archiving the stale skill needed no model: it is kept
    assert v.git.read_file(out.branch, "skills/.archive/old-report/SKILL.md") is not None
    assert v.git.read_file(out.branch, "skills/fly-deploy-app/SKILL.md") is not None  # the failed part: unchanged
    assert "not done: deploy-fly+fly-deploy-app" in out.reason and "not a SKILL.md" in out.reason
    body = v.git.commit_info(out.branch).body
    assert "not merged: the model's SKILL.md was refused" in body
    review.reject(v.git, out.branch)
    monkeypatch.delenv("HERMES_TEST_KEY", raising=False)  # no model can be asked at all
    again = curate(v)
    assert again.status == "pending" and "not done:" in again.reason and "HERMES_TEST_KEY" in again.reason, again.line()
    assert v.git.read_file(again.branch, "skills/.archive/old-report/SKILL.md") is not None
