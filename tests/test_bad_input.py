"""The bad-input corpus: each case gets a clear error and loses nothing.

Covers the CLI, inbox requests, cron files, memory and skill files, hermes.yaml and model outputs.
A case passes when the error names what is wrong and the vault's files and history are intact.
"""

import hashlib
import json

import pytest
from conftest import git

from hermes_fs.errors import InputError
from hermes_fs.mind import jobs as cron
from hermes_fs.mind import memory, skills
from hermes_fs.service import inbox
from hermes_fs.store.config import parse_config
from hermes_fs.store.provenance import Act


def snapshot(vault) -> str:
    """A digest of every tracked and untracked file plus HEAD: 'nothing lost' means it is unchanged."""
    h = hashlib.sha256(vault.git.head().encode())
    for p in sorted(vault.root.rglob("*")):
        if p.is_file() and ".git" not in p.parts and ".hermes" not in p.parts:
            h.update(str(p.relative_to(vault.root)).encode() + p.read_bytes())
    return h.hexdigest()


# -- hermes.yaml ------------------------------------------------------------------------------------
CONFIG_CASES = [
    ("model: [a, b]\n", "'model' must be a string"),
    ("models: {refine: 3}\n", "'models.refine' must be a string"),
    ("refine: {policy: yolo}\n", "refine.policy' must be one of"),
    ("refine: {every_turns: -x}\n", "must be an integer"),
    ("memory: {budgets: [1, 2]}\n", "must be a mapping"),
    ("skills: {prompt_budget_chars: 1.5}\n", "must be an integer"),
    ("sandbox: {backend: podman}\n", "sandbox.backend' must be one of"),
    ("sandbox: {timeout_s: forever}\n", "must be an integer"),
    ("notify: {targets: [phone]}\n", "must be a mapping"),
    ("notify: {events: [lunch]}\n", "notify.events"),
    ("cron: {timezone: 5}\n", "must be a string"),
    ("git: {author: hermes, extra: 1}\n", "unknown key 'git.extra'"),
    ("git: {author: null}\n", "'git.author' must be a string"),
    ("colour: blue\n", "unknown key 'colour'"),
    ("model: x\n  bad indent: [\n", "invalid YAML"),
    ("- just\n- a list\n", "must be a mapping"),
]


@pytest.mark.parametrize("text,expected", CONFIG_CASES)
def test_bad_config(text, expected):
    with pytest.raises(InputError) as exc:
        parse_config(text, "hermes.yaml")
    assert expected in str(exc.value) and "hermes.yaml" in str(exc.value)


# -- cron job files -----------------------------------------------------------------------------------
CRON_CASES = [
    ("---\nschedule: '* * *'\n---\nx\n", "bad schedule"),
    ("---\nschedule: every -5m\n---\nx\n", "bad schedule"),
    ("---\nschedule: every monday at 9\n---\nx\n", "bad schedule"),
    ("---\nschedule: at 2026-13-45T99:00\n---\nx\n", "bad one-shot time"),
    ("---\nschedule: every 1h\nenabled: sometimes\n---\nx\n", "'enabled' must be bool"),
    ("---\nschedule: every 1h\nskills: 5\n---\nx\n", "'skills' must be a list"),
    ("---\nschedule: every 1h\nnotify: [nowhere]\n---\nx\n", "not defined in hermes.yaml"),
    ("---\nschedule: every 1h\n---\n   \n", "has no prompt"),
    ("---\nschedule: [every, 1h\n---\nx\n", "invalid YAML"),
    ("schedule: every 1h\nno frontmatter\n", "missing YAML frontmatter"),
]


@pytest.mark.parametrize("text,expected", CRON_CASES)
def test_bad_cron_file(vault, text, expected):
    (vault.root / "cron" / "bad.md").write_text(text)
    jobs, errors = cron.load_jobs(vault.files, vault.config)
    assert [j.name for j in jobs] == ["morning-brief"]  # the good job still loads
    assert len(errors) == 1 and expected in str(errors[0]) and "cron/bad.md" in str(errors[0])


# -- memory files -------------------------------------------------------------------------------------------
MEMORY_CASES = [
    ("add", {"text": "  "}, "empty"),
    ("replace", {"old_text": "no such entry", "text": "x"}, "no entry contains"),
    ("replace", {"old_text": "", "text": "x"}, "old_text is empty"),
    ("remove", {"old_text": "e"}, "entries contain"),
    ("add", {"text": "y" * 5000}, "over budget"),
    ("add", {"text": "Prefers concise answers; show commands and code rather than describing them."}, "already exists"),
]


@pytest.mark.parametrize("action,kw,expected", MEMORY_CASES)
def test_bad_memory_edits(vault, action, kw, expected):
    (vault.root / "memory" / "USER.md").write_text((vault.root / "memory/USER.md").read_text() + "- Uses emacs\n")
    before = snapshot(vault)
    fn = {"add": memory.add, "replace": memory.replace, "remove": memory.remove}[action]
    with pytest.raises(InputError, match=expected):
        fn(vault.files, vault.config, "USER.md", **kw)
    assert snapshot(vault) == before


@pytest.mark.parametrize("content,expected", [
    (b"---\ntitle: [\n---\n- a\n", "invalid YAML frontmatter"),
    (b"\xff\xfe\x00binary", "binary file"),
    (b"---\n- a list\n---\n- a\n", "frontmatter must be a YAML mapping"),
    (b"- caf\xe9\n", "not UTF-8"),
])
def test_bad_memory_files(vault, content, expected):
    (vault.root / "memory" / "MEMORY.md").write_bytes(content)
    with pytest.raises(InputError, match=expected):
        memory.load(vault.files, "MEMORY.md", vault.config)
    assert (vault.root / "memory" / "MEMORY.md").read_bytes() == content  # untouched


# -- skill files ----------------------------------------------------------------------------------------------
SKILL_CASES = [
    ("---\nname: s\n---\nno description\n", "description"),
    ("---\nname: other\ndescription: d\n---\n", "must match skill name"),
    ("---\nname: s\ndescription: d\nauthor: me\n---\n", "Unexpected fields"),
    ("no frontmatter at all\n", "must start with YAML frontmatter"),
    ("---\nname: s\ndescription: " + "x" * 1100 + "\n---\n", "1024"),
    ("---\nname: s\ndescription: d\ncompatibility: " + "c" * 600 + "\n---\n", "500"),
    ("---\nname: s\ndescription: d\nmetadata: {a: b}\n---\n", "Invalid YAML"),
]


@pytest.mark.parametrize("text,expected", SKILL_CASES)
def test_bad_skills_are_refused_before_writing(vault, text, expected):
    before = snapshot(vault)
    with pytest.raises(InputError, match=expected):
        skills.create(vault.files, "s", text)
    assert snapshot(vault) == before


# -- inbox requests ---------------------------------------------------------------------------------------------
INBOX_CASES = [
    ("---\ntype: [x\n---\nkeep this text 1\n", "invalid YAML"),
    ("---\ntype: teleport\n---\nkeep this text 2\n", "type must be one of"),
    ("---\ntype: run\n---\n", "needs a prompt"),
    ("---\ntype: learn\n---\nkeep this text 3\n", "needs a `source`"),
    ("---\ntype: run\nurgency: high\n---\nkeep this text 4\n", "unknown field"),
    ("---\ntype: learn\nsource: does/not/exist.md\n---\nkeep this text 5\n", "no such file"),
]


@pytest.mark.parametrize("text,expected", INBOX_CASES)
def test_bad_inbox_requests_get_an_error_result_that_keeps_the_text(vault, text, expected):
    (vault.root / "inbox" / "req.md").write_text(text)
    c = inbox.take(vault, "inbox/req.md", None)
    assert inbox.process(vault, c).status == "error"
    result = (vault.root / c.result_rel).read_text()
    assert "status: error" in result and expected in result and text.strip() in result
    assert git(vault, "status", "--porcelain") == ""


def test_binary_inbox_request(vault):
    (vault.root / "inbox" / "junk.md").write_bytes(b"\x00\x01\x02 binary")
    c = inbox.take(vault, "inbox/junk.md", None)
    assert inbox.process(vault, c).status == "error"
    assert "binary file" in (vault.root / c.result_rel).read_text()


# -- the CLI ------------------------------------------------------------------------------------------------------
CLI_CASES = [
    (["memory", "show", "../../etc/passwd"], 2, "escapes the vault"),
    (["memory", "show", "notes.md"], 2, "must be USER.md"),
    (["skills", "show", "Bad_Name"], 2, "invalid skill name"),
    (["skills", "show", "writing-skills", "../../hermes.yaml"], 2, "escapes the vault"),
    (["review", "merge", "main"], 2, "not a learned change"),
    (["review", "show", "refine/nope"], 2, "no pending change"),
    (["revert", "refine/never-merged"], 2, "never merged"),
    (["cron", "run", "nope"], 2, "no valid job"),
    (["refine", "--wait", "--session", "not-an-id"], 1, "not a session id"),
    (["learn", "/definitely/missing.pdf"], 1, "no such file"),
    (["notify", "test", "nowhere"], 2, "unknown notify target"),
    (["status", "--bogus-flag"], 2, "No such option"),
]


@pytest.mark.parametrize("args,code,expected", CLI_CASES)
def test_bad_cli_usage(vault, run_cli, args, code, expected):
    (vault.root / "hermes.yaml").write_text("notify:\n  targets: {desk: 'json://127.0.0.1:9/x'}\n")
    before = snapshot(vault)
    r = run_cli("--vault", str(vault.root), *args)
    assert r.returncode == code, (r.stdout, r.stderr)
    assert expected in r.stderr + r.stdout
    assert snapshot(vault) == before


# -- model outputs -------------------------------------------------------------------------------------------------
MODEL_CASES = [
    ("memory", "{\"action\": \"add\"", "not valid JSON"),
    ("memory", "[1, 2]", "must be a JSON object"),
    ("memory", json.dumps({"action": "add", "file": 5, "text": "x"}), "file must be a string"),
    ("skill_manage", json.dumps({"action": "create", "name": "x", "content": "no frontmatter"}), "missing YAML frontmatter"),
    ("write_file", json.dumps({"path": ".git/hooks/pre-commit", "content": "#!/bin/sh"}), "inside .git/"),
    ("write_file", json.dumps({"path": "../outside.md", "content": "x"}), "escapes the vault"),
    ("write_file", json.dumps({"path": "/etc/cron.d/evil", "content": "x"}), "outside the vault"),
    ("read_file", json.dumps({"path": ".hermes/secrets.env"}), "inside .hermes/"),
    ("skill_view", json.dumps({"name": "../../etc"}), "invalid skill name"),
    ("shell", json.dumps({"command": ""}), "missing required"),
    ("nonexistent_tool", "{}", "unknown tool"),
]


@pytest.mark.parametrize("tool,args,expected", MODEL_CASES)
def test_bad_model_tool_calls(vault, tool, args, expected):
    from hermes_fs.agent.sandbox import NoSandbox
    from hermes_fs.agent.tools import ToolBox, VaultCommitter

    before = snapshot(vault)
    box = ToolBox(files=vault.files, config=vault.config, committer=VaultCommitter(vault.git, Act.session("s")),
                  vault_root=vault.root, sandbox=NoSandbox())
    result = box.call(tool, args)
    assert result.startswith("error:") and expected in result
    assert snapshot(vault) == before


def test_oversized_tool_output_is_truncated(vault, tmp_path):
    from hermes_fs.agent.sandbox import LocalSandbox
    from hermes_fs.agent.tools import ToolBox
    from hermes_fs.store.config import SandboxConfig

    box = ToolBox(files=vault.files, config=vault.config, sandbox=LocalSandbox(tmp_path, SandboxConfig(backend="local")))
    result = box.call("shell", json.dumps({"command": "yes hello | head -c 500000"}))
    assert "characters truncated" in result and len(result) < 20_000
