"""Skills from the real world and migration from Hermes Agent, with real files: a Hermes Agent home
made by Hermes Agent 0.19.0 itself (tests/data/hermes-home) and real skills from its source package."""

import shutil

import pytest
from conftest import git
from locations import DATA

from hermes_fs.mind import skills
from hermes_fs.store.docs import parse_doc

HOME = DATA / "hermes-home"
KEY = "sk-or-v1-" + "0123456789abcdef0123456789abcdef"


@pytest.fixture
def home(tmp_path):
    h = tmp_path / "hermes-home"
    shutil.copytree(HOME, h)
    (h / ".env").write_text(f"OPENROUTER_API_KEY={KEY}\nTERMINAL_ENV=local\n")
    return h


def test_dry_run_writes_nothing(vault, home, run_cli):
    head = vault.git.head()
    secrets_before = (vault.root / ".hermes" / "secrets.env").read_bytes()  # `init` makes it, empty and 0600
    r = run_cli("--vault", str(vault.root), "import", "hermes-agent", str(home), "--dry-run")
    assert r.returncode == 0 and "would write memory/USER.md: 2 entries" in r.stdout and "dry run" in r.stdout
    assert vault.git.head() == head and git(vault, "status", "--porcelain") == ""
    assert (vault.root / ".hermes" / "secrets.env").read_bytes() == secrets_before


def test_import_in_one_commit_and_a_second_run_changes_nothing(vault, home, run_cli):
    head = vault.git.head()
    r = run_cli("--vault", str(vault.root), "import", "hermes-agent", str(home))
    assert r.returncode == 0, r.stderr
    assert git(vault, "rev-list", "--count", f"{head}..HEAD").strip() == "1"
    assert git(vault, "log", "-1", "--format=%s").strip() == "import: hermes-agent"
    assert git(vault, "status", "--porcelain") == ""
    again = run_cli("--vault", str(vault.root), "import", "hermes-agent", str(home))
    assert again.returncode == 0 and "nothing to import" in again.stdout
    assert git(vault, "rev-list", "--count", f"{head}..HEAD").strip() == "1"


def test_memories_become_entries_text_kept(vault, home, run_cli):
    run_cli("--vault", str(vault.root), "import", "hermes-agent", str(home))
    user = (vault.root / "memory/USER.md").read_text()
    assert "## Imported from Hermes Agent" in user
    assert "- Prefers answers in short bullet points.\n" in user
    assert "- Works in Europe/Paris; writes commit messages in English.\n  Uses fish as the shell.\n" in user
    from hermes_fs.mind import memory

    m = memory.load(vault.files, "USER.md", vault.config)
    assert sum("Imported" == (e.section or "")[:8] for e in m.entries) == 2
    assert "§" not in user


def test_soul_is_the_identity(vault, home, run_cli):
    from hermes_fs.agent.prompt import IDENTITY, system_prompt

    run_cli("--vault", str(vault.root), "import", "hermes-agent", str(home))
    vault._config = None
    prompt = system_prompt(vault)
    assert prompt.startswith("You are Hermes Agent") and IDENTITY not in prompt


def test_skills_in_reference_form_with_their_category(vault, home, run_cli):
    run_cli("--vault", str(vault.root), "import", "hermes-agent", str(home))
    for name, category in (("vllm", "mlops/inference"), ("obsidian", "note-taking"), ("ocr-and-documents", "productivity")):
        assert skills.validate(vault.files, name) == [], name
        meta = parse_doc((vault.root / f"skills/{name}/SKILL.md").read_text(), name).meta
        assert meta["name"] == name and meta["metadata"]["category"] == category
    vllm = parse_doc((vault.root / "skills/vllm/SKILL.md").read_text(), "x").meta
    assert vllm["metadata"]["original-name"] == "serving-llms-vllm"
    assert (vault.root / "skills/vllm/references/troubleshooting.md").read_bytes() == \
        (HOME / "skills/mlops/inference/vllm/references/troubleshooting.md").read_bytes()
    obsidian = parse_doc((vault.root / "skills/obsidian/SKILL.md").read_text(), "x").meta
    assert obsidian["metadata"]["platforms"] == '["linux", "macos", "windows"]'  # a string: metadata is str -> str


def test_jobs_are_mapped_faithfully(vault, home, run_cli):
    run_cli("--vault", str(vault.root), "import", "hermes-agent", str(home))
    from hermes_fs.mind.jobs import load_jobs

    vault._config = None
    jobs, errors = load_jobs(vault.files, vault.config)
    assert errors == []
    by = {j.name: j for j in jobs}
    assert by["build-watch"].schedule.interval.total_seconds() == 1800  # `every 30m` repeats
    assert by["morning-brief"].schedule.cron == "0 7 * * 1-5"
    assert by["stretch"].schedule.at is not None  # `30m` was "once in 30 minutes": a one-shot
    assert "telegram" in (vault.root / "cron/build-watch.md").read_text()  # noted for the person to map
    assert by["build-watch"].prompt.startswith("Check the build status")


def test_keys_go_to_secrets_env_never_to_git(vault, home, run_cli):
    r = run_cli("--vault", str(vault.root), "import", "hermes-agent", str(home))
    assert KEY in (vault.root / ".hermes/secrets.env").read_text()
    assert "TERMINAL_ENV" not in (vault.root / ".hermes/secrets.env").read_text()  # not a key
    assert KEY not in git(vault, "log", "-p", "--all") and KEY not in r.stdout
    assert "model: openrouter/anthropic/claude-sonnet-4-5" in (vault.root / "hermes.yaml").read_text()
    from hermes_fs.agent.model import ModelSettings

    vault._config = None
    assert ModelSettings.for_vault(vault).api_key() == KEY  # the model key comes from secrets.env


def test_real_skills_dropped_in_raw_are_reported_and_fixed(vault, run_cli):
    shutil.copytree(HOME / "skills" / "mlops", vault.root / "skills" / "mlops")
    shutil.copytree(HOME / "skills" / "note-taking" / "obsidian", vault.root / "skills" / "obsidian")
    vault.git.commit_human_edits()
    v = ["--vault", str(vault.root)]
    status = run_cli(*v, "status").stdout
    assert "1 invalid" in status and "1 misplaced" in status
    r = run_cli(*v, "skills", "validate")
    assert r.returncode == 2
    assert "BAD obsidian:" in r.stdout and "MISPLACED skills/mlops/inference/vllm/SKILL.md" in r.stdout
    assert r.stdout.strip().splitlines()[-1].endswith("1 invalid, 1 misplaced")
    head = vault.git.head()
    r = run_cli(*v, "skills", "validate", "--fix")
    assert r.returncode == 0, r.stdout
    assert git(vault, "rev-list", "--count", f"{head}..HEAD").strip() == "1"
    assert (vault.root / "skills/vllm/references/quantization.md").exists() and not (vault.root / "skills/mlops").exists()
    assert "0 invalid, 0 misplaced" in run_cli(*v, "skills", "validate").stdout


def test_a_non_conforming_skill_is_read_and_can_be_patched(vault):
    shutil.copytree(HOME / "skills" / "note-taking" / "obsidian", vault.root / "skills" / "obsidian")
    assert skills.validate(vault.files, "obsidian")  # flow-style YAML: the reference validator refuses it
    s = skills.read(vault.files, "obsidian")
    assert s.description and "obsidian" in s.body.lower()
    skills.patch(vault.files, "obsidian", "# Obsidian Vault", "# Obsidian Vault (patched)")  # no new problem: allowed
    with pytest.raises(skills.SkillError):
        skills.patch(vault.files, "obsidian", "name: obsidian", "name: Not Valid")  # a new problem: refused


def test_any_file_inside_a_skill_can_be_viewed_but_nothing_outside(vault):
    shutil.copytree(HOME / "skills" / "productivity" / "ocr-and-documents", vault.root / "skills" / "ocr-and-documents")
    expected = (HOME / "skills/productivity/ocr-and-documents/DESCRIPTION.md").read_text()
    assert skills.view(vault.files, "ocr-and-documents", "DESCRIPTION.md") == expected
    from hermes_fs.errors import InputError

    for bad in ("../writing-skills/SKILL.md", "/etc/passwd", ".git/config"):
        with pytest.raises(InputError):
            skills.view(vault.files, "ocr-and-documents", bad)


def test_unicode_names_the_spec_allows(vault):
    assert skills.valid_name("pdf-formulář") and not skills.valid_name("PDF") and not skills.valid_name("a--b")
    skills.create(vault.files, "pdf-formulář", "---\nname: pdf-formulář\ndescription: Fill Czech PDF forms.\n---\nbody\n")
    assert "pdf-formulář" in skills.names(vault.files)
