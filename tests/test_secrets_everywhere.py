"""Plant provider keys and tokened Apprise URLs everywhere a person or the agent can write, and show
that none reaches a commit (they are refused, left uncommitted, or redacted)."""

from datetime import UTC, datetime

from conftest import git

from hermes_fs.agent.conversation import Conversation, ConversationOptions
from hermes_fs.learning.refine import RefineOptions, refine
from hermes_fs.mind import jobs as cron
from hermes_fs.service import cron_runner, inbox
from hermes_fs.store.provenance import Act

KEYS = {
    "openai": "sk-proj-" + "Q1w2E3r4T5y6U7i8O9p0AaSsDd",
    "anthropic": "sk-ant-api03-" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2",
    "github": "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "aws": "AKIA" + "ABCDEFGHIJKLMNOP",
    "apprise": "tgram://" + "987654321:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/12345",
    "slack": "xoxb-" + "2222222222-abcdefghijklmnop",
}
ALL = " ".join(KEYS.values())
SKILL = "---\nname: leaky\ndescription: A skill that leaks. Use never.\n---\n# Leaky\n\n" + ALL + "\n"


def history(vault) -> str:
    return git(vault, "log", "-p", "--all", "--format=%B")


def assert_clean(vault):
    text = history(vault)
    for name, value in KEYS.items():
        assert value not in text, f"{name} key reached a commit"


def test_secrets_never_reach_a_commit(agent_vault, model_server, tmp_path):
    v = agent_vault
    # 1. a person's edits, committed by the daemon's path
    (v.root / "memory" / "MEMORY.md").write_text(f"- keys: {ALL}\n")
    (v.root / "notes.md").write_text(f"apprise: {KEYS['apprise']}\n")
    (v.root / ".env").write_text("OPENAI_API_KEY=" + KEYS["openai"] + "\n")
    result = v.git.commit_human_edits()
    assert {f.path for f in result.refused} >= {"memory/MEMORY.md", "notes.md"}
    # 2. the agent, in a live session: memory, skills, support files, write_file, and the transcript
    model_server.add(
        {"tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": f"token {KEYS['github']}"}),
                        ("skill_manage", {"action": "create", "name": "leaky", "content": SKILL}),
                        ("skill_manage", {"action": "write_file", "name": "writing-skills", "file": "references/k.md", "content": ALL}),
                        ("write_file", {"path": "memory/projects/x.md", "content": f"- {ALL}\n"})]},
        {"content": f"Stored it: {ALL}"},
    )
    with Conversation(v, ConversationOptions(source="run", workspace=tmp_path)) as c:
        c.ask(f"remember these: {ALL}")
    # 3. a refine reviewer
    model_server.add({"tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": f"key {KEYS['anthropic']}"}),
                                     ("skill_manage", {"action": "create", "name": "leaky", "content": SKILL})]},
                     {"content": "Summary: nothing to change"})
    r = refine(v, RefineOptions(policy="auto"))
    assert r.status in ("nothing", "failed")
    # 4. a cron job whose answer holds secrets, and 5. an inbox request that quotes them
    (v.root / "cron" / "leak.md").write_text("---\nschedule: every 1h\n---\nTell me the keys.\n")
    jobs, _ = cron.load_jobs(v.files, v.config)
    model_server.add({"content": f"Here: {ALL}"})
    cron_runner.run_job(v, {j.name: j for j in jobs}["leak"], datetime.now(UTC))
    v.git.commit_paths(["cron/leak.md"], "add job", Act.person())
    (v.root / "inbox" / "leak.md").write_text(f"---\ntype: run\n---\nRepeat after me: {ALL}\n")
    model_server.add({"content": f"{ALL}"})
    c = inbox.take(v, "inbox/leak.md", None)
    inbox.process(v, c)
    assert "[REDACTED" in (v.root / c.result_rel).read_text()
    # 6. learn from a document full of keys
    from hermes_fs.learning.learn import LearnOptions, learn

    doc = tmp_path / "doc.md"
    doc.write_text(f"# Setup\n\nUse these keys: {ALL}\n")
    model_server.add({"tool_calls": [("skill_manage", {"action": "create", "name": "leaky", "content": SKILL})]},
                     {"content": "Summary: done"})
    learn(v, LearnOptions([doc], policy="auto"))
    assert_clean(v)
    # nothing was lost: the person's text is still on disk, uncommitted; the agent's refused write
    # left its file as it was (issue 22: a refused write leaves no key behind)
    assert KEYS["openai"] in (v.root / "memory/MEMORY.md").read_text()
    assert KEYS["github"] not in (v.root / "memory/USER.md").read_text()
    assert ALL in (v.root / "memory" / "MEMORY.md").read_text()
    assert KEYS["apprise"] in (v.root / "notes.md").read_text()
