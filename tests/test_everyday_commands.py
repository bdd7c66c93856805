"""Everyday commands (DESIGN §16): `sessions`, `memory add|edit`, `cron enable|disable|new`,
`revert --only/--skip`, and `cron list` while a one-shot runs. Driven through the real click
commands (CliRunner, in process) on real vaults; each commit is checked in git."""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner
from conftest import git
from test_merge import USER, add_entry, learned

from hermes_fs.cli.main import main
from hermes_fs.learning import changes
from hermes_fs.mind.sessions import Transcript


def cli(vault, *args: str, env: dict | None = None, input: str | None = None):
    return CliRunner().invoke(main, ["--vault", str(vault.root), *args], env=env, input=input)


def last_commit(vault) -> tuple[str, str]:
    """(subject, author name) of main's newest commit."""
    subject, author = git(vault, "log", "-1", "--format=%s%n%an").splitlines()
    return subject, author


# -- sessions ------------------------------------------------------------------------------------
def _session(vault, title: str, words: str) -> str:
    t = Transcript.start(vault.root, "openai/test-model", "cli")
    t.set_title(title)
    t.append({"role": "user", "content": words})
    t.append({"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": '{"command": "fly deploy"}'}}]})
    t.append({"role": "tool", "tool_call_id": "c1", "name": "shell", "content": "deployed v42"})
    t.append({"role": "assistant", "content": "Deployed."})
    return t.id


def test_sessions_list_show_and_search(vault):
    first = _session(vault, "deploy the app", "deploy the app to fly.io please")
    time.sleep(1.1)  # ids carry the second they were made in: the second one is newer
    second = _session(vault, "tabs or spaces", "I always use tabs")
    r = cli(vault, "sessions")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].startswith(second) and lines[1].startswith(first)  # newest first
    assert "tabs or spaces" in lines[0] and "cli" in lines[0]
    listed = json.loads(cli(vault, "sessions", "list", "--json", "-n", "1").output)
    assert [s["id"] for s in listed] == [second]
    shown = cli(vault, "sessions", "show", first)
    assert shown.exit_code == 0, shown.output
    for part in ("deploy the app to fly.io please", "[calls shell]", "fly deploy", "[shell returned] deployed v42",
                 "Deployed.", f"chat --resume {first}"):
        assert part in shown.output
    found = cli(vault, "sessions", "search", "tabs")
    assert found.exit_code == 0 and second in found.output and first not in found.output
    assert "<!--" not in found.output  # the snippet shows words, not the transcript's markers
    assert "no session matches" in cli(vault, "sessions", "search", "kubernetes").output


def test_sessions_show_bad_or_unknown_id_is_a_clear_error(vault):
    r = cli(vault, "sessions", "show", "../../hermes.yaml")
    assert r.exit_code == 2 and "not a session id" in r.output
    r = cli(vault, "sessions", "show", "20261203-101010-abcd")
    assert r.exit_code == 2 and "no session 20261203-101010-abcd" in r.output


# -- memory add / edit ---------------------------------------------------------------------------
def test_memory_add_commits_an_entry_as_the_persons_edit(vault):
    r = cli(vault, "memory", "add", "USER.md", "Prefers", "ISO 8601 dates.")
    assert r.exit_code == 0, r.output
    assert "- Prefers ISO 8601 dates." in (vault.root / USER).read_text()
    subject, author = last_commit(vault)
    assert subject == f"edit: {USER}" and "Hermes-Change: human-edit" in git(vault, "log", "-1", "--format=%B")
    r = cli(vault, "memory", "add", "projects/site.md", "--section", "Deploy", "Uses fly.io")
    assert r.exit_code == 0, r.output
    text = (vault.root / "memory/projects/site.md").read_text()
    assert "## Deploy" in text and "- Uses fly.io" in text
    assert git(vault, "status", "--porcelain") == ""


@pytest.mark.parametrize("args, message", [
    (["../hermes.yaml", "x"], "escapes the vault"),
    (["skills/x/SKILL.md", "x"], "memory file must be"),
    (["USER.md", "my key is sk-ant-api03-" + "a" * 90], "secret"),
    (["USER.md", "x" * 60_000], "over budget"),
])
def test_memory_add_refuses_bad_input_and_changes_nothing(vault, args, message):
    head, before = vault.git.head(), (vault.root / USER).read_text()
    r = cli(vault, "memory", "add", *args)
    assert r.exit_code == 2 and message in r.output
    assert vault.git.head() == head and (vault.root / USER).read_text() == before


def _editor(tmp_path, code: str) -> str:
    script = tmp_path / "editor.py"
    script.write_text("import sys\npath = sys.argv[1]\n" + code)
    return f"{sys.executable} {script}"


def test_memory_edit_saves_what_the_editor_wrote_as_the_persons_edit(vault, tmp_path):
    editor = _editor(tmp_path, "open(path, 'a').write('- Edited in my editor.\\n')\n")
    r = cli(vault, "memory", "edit", "USER.md", env={"EDITOR": editor, "VISUAL": editor})
    assert r.exit_code == 0, r.output
    assert (vault.root / USER).read_text().endswith("- Edited in my editor.\n")
    assert last_commit(vault)[0] == f"edit: {USER}"
    unchanged = cli(vault, "memory", "edit", "USER.md", env={"EDITOR": _editor(tmp_path, "pass\n"), "VISUAL": ""})
    assert unchanged.exit_code == 0 and "not changed" in unchanged.output


def test_memory_edit_never_overwrites_a_change_made_while_editing(vault, tmp_path):
    """The agent (here: another writer) changes USER.md while the person is in the editor: the
    person's save is refused, their text is kept in a file they are told about, the other stays."""
    other = vault.root / USER
    editor = _editor(tmp_path, f"open({str(other)!r}, 'a').write('- Written meanwhile.\\n')\n"
                               "open(path, 'a').write('- Mine.\\n')\n")
    r = cli(vault, "memory", "edit", "USER.md", env={"EDITOR": editor, "VISUAL": editor})
    assert r.exit_code == 1 and "nothing was saved" in r.output
    assert "- Written meanwhile." in other.read_text() and "- Mine." not in other.read_text()
    kept = vault.root / ".hermes/edits/memory--USER.md"
    assert "- Mine." in kept.read_text()


# -- cron enable / disable / new -----------------------------------------------------------------
def test_cron_enable_disable_keep_the_files_comments(vault):
    job = vault.root / "cron/morning-brief.md"
    before = job.read_text()
    r = cli(vault, "cron", "enable", "morning-brief")
    assert r.exit_code == 0, r.output
    assert job.read_text() == before.replace("enabled: false", "enabled: true")  # every other byte kept
    assert last_commit(vault)[0] == "edit: cron/morning-brief.md"
    assert "2" in cli(vault, "cron", "list").output.split("morning-brief", 1)[1].split("\n")[0]  # a next run
    assert cli(vault, "cron", "disable", "morning-brief").exit_code == 0
    assert job.read_text() == before
    assert "disabled" in cli(vault, "cron", "list").output
    r = cli(vault, "cron", "enable", "no-such-job")
    assert r.exit_code == 2 and "no job 'no-such-job'" in r.output


def test_cron_new_checks_and_commits_a_job(vault):
    r = cli(vault, "cron", "new", "evening", "--schedule", "every day at 18:00", "--prompt", "What is left today?")
    assert r.exit_code == 0, r.output
    assert "next run: " in r.output and "T18:00:00" in r.output
    assert last_commit(vault)[0] == "edit: cron/evening.md"
    listed = {j["job"]: j for j in json.loads(cli(vault, "cron", "list", "--json").output)}
    assert listed["evening"]["enabled"] and listed["evening"]["schedule"] == "every day at 18:00 (UTC)"
    head = vault.git.head()
    for args, message in [(["evening", "--schedule", "every 30m", "--prompt", "x"], "exists"),
                          (["../evil", "--schedule", "every 30m", "--prompt", "x"], "a job name is"),
                          (["odd", "--schedule", "whenever", "--prompt", "x"], "bad schedule"),
                          (["loud", "--schedule", "every 30m", "--prompt", "x", "--notify", "nowhere"], "not defined"),
                          (["quiet", "--schedule", "every 30m", "--prompt", "   "], "no prompt")]:
        r = cli(vault, "cron", "new", *args)
        assert r.exit_code == 2 and message in r.output, (args, r.output)
    assert vault.git.head() == head and not (vault.root / "cron/odd.md").exists()


def test_cron_list_status_and_the_web_say_a_one_shot_is_running_not_that_it_has_no_future_run(vault):
    """The scheduler marks a due time in its ledger before the run starts; until the output is
    written the one-shot has no next run — `cron list` used to say "no future run". `status` and
    the web Jobs and Status pages say the same, from the same reading."""
    from hermes_fs.mind import jobs as cron
    from hermes_fs.service.work import cron_claims, open_claims

    assert cli(vault, "cron", "new", "once", "--schedule", "at 2026-01-01T09:00", "--prompt", "hi").exit_code == 0
    [job] = [j for j in cron.load_jobs(vault.files, vault.config)[0] if j.name == "once"]
    cron_claims(vault, open_claims(vault)).mark("once", job.schedule.next_due(datetime.now(UTC), None))
    out = cli(vault, "cron", "list").output
    row = next(line for line in out.splitlines() if line.startswith("once"))
    assert "running now" in row and "no future run" not in row
    assert json.loads(cli(vault, "cron", "list", "--json").output)[1]["running"].startswith("2026-01-01T09:00")
    status = cli(vault, "status").output  # the same reading in `status` ...
    row = next(line for line in status.splitlines() if line.strip().startswith("once"))
    assert "running now (started for 2026-01-01T09:00" in row and "no future run" not in row
    [once] = [j for j in json.loads(cli(vault, "status", "--json").output)["cron"] if j["job"] == "once"]
    assert once["running"].startswith("2026-01-01T09:00") and once["next_run"] is None
    from web_helpers import start_web

    w = start_web(vault.root)  # ... and on the web page's Jobs and Status pages
    try:
        for page in ("/jobs", "/status"):
            code, _, body = w.request("GET", page)
            assert code == 200 and "running now (started for 2026-01-01T09:00" in body, page
    finally:
        w.stop()


# -- revert --only / --skip ----------------------------------------------------------------------
def test_revert_skips_the_entry_a_person_edited_and_says_what_to_do_next(vault):
    branch = learned(vault, "two", {USER: add_entry("- Wants dates in ISO 8601."),
                                    "memory/MEMORY.md": lambda t: t + "- Lesson: run make test first.\n"})
    changes.merge(vault.git, branch)
    user = vault.root / USER
    user.write_text(user.read_text().replace("- Wants dates in ISO 8601.", "- Wants dates in ISO 8601, with zones."))
    vault.git.commit_human_edits([USER])
    blocked = cli(vault, "revert", branch)
    assert blocked.exit_code == 1
    assert f"Next: `hermes-fs revert {branch} --skip {USER}`" in blocked.output
    r = cli(vault, "revert", branch, "--skip", USER)
    assert r.exit_code == 0, r.output
    assert "reverted part of" in r.output and "Next:" in r.output
    assert "make test first" not in (vault.root / "memory/MEMORY.md").read_text()
    assert "with zones" in user.read_text()  # the person's edit stays
    assert last_commit(vault)[0] == f"revert part of {branch}: memory/MEMORY.md"
    log = {c.branch: c.state for c in changes.learned_log(vault.git)}
    assert log[branch] == "merged"  # part of it is still merged
    r = cli(vault, "revert", branch, "--only", "memory/nope.md")
    assert r.exit_code == 2 and "not in this change" in r.output


def test_revert_only_one_file_then_the_rest(vault):
    branch = learned(vault, "pair", {USER: add_entry("- Wants dates in ISO 8601."),
                                     "memory/MEMORY.md": lambda t: t + "- Lesson: run make test first.\n"})
    changes.merge(vault.git, branch)
    assert cli(vault, "revert", branch, "--only", USER).exit_code == 0
    assert "ISO 8601" not in (vault.root / USER).read_text()
    assert "make test first" in (vault.root / "memory/MEMORY.md").read_text()
    r = cli(vault, "revert", branch)
    assert r.exit_code == 0, r.output
    assert "make test first" not in (vault.root / "memory/MEMORY.md").read_text()
    assert {c.branch: c.state for c in changes.learned_log(vault.git)}[branch] == "reverted"
