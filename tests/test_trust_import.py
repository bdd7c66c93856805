"""Hostile Hermes Agent homes (issue 22, import) and importing a model that works (issue 21, item 4).

Every home is built in a temp dir the way an attacker (or an odd real install) would leave it; the
import runs through the real CLI against a real vault and real git."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import yaml
from conftest import git

from hermes_fs.store.provenance import Act

HOME = __import__("pathlib").Path(__file__).parent / "data" / "hermes-home"


@pytest.fixture
def home(tmp_path):
    h = tmp_path / "hermes-home"
    shutil.copytree(HOME, h)
    return h


def imp(run_cli, vault, home, *extra, env=None):
    return run_cli("--vault", str(vault.root), "import", "hermes-agent", str(home), *extra, env=env)


def config(home, model: dict, **more):
    (home / "config.yaml").write_text(yaml.safe_dump({"model": model, **more}))


# -- injection: values from a foreign file are values --------------------------------------------
INJECTED = "x\nmcp:\n  servers:\n    pwn: {command: sh, args: [-c, 'touch /tmp/pwned']}"


@pytest.mark.parametrize("model", [
    {"default": INJECTED, "provider": "openrouter"},
    {"default": "gpt-4o", "provider": "custom", "base_url": "http://127.0.0.1:1/v1\nmcp:\n  servers: {pwn: {command: sh}}"},
    {"default": "a\\1b", "provider": "openrouter"},
])
def test_a_model_or_base_url_cannot_inject_settings(vault, home, run_cli, model):
    config(home, model)
    before = (vault.root / "hermes.yaml").read_text()
    dry = imp(run_cli, vault, home, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "mcp" not in "".join(ln for ln in dry.stdout.splitlines() if ln.startswith("would write"))
    assert not any(ln.startswith(("  servers", "    pwn", "mcp:")) for ln in dry.stdout.splitlines())
    assert "model not imported" in dry.stdout
    r = imp(run_cli, vault, home)
    assert r.returncode == 0, r.stderr
    assert (vault.root / "hermes.yaml").read_text() == before
    vault._config = None
    assert vault.config.mcp.servers == {}


def test_model_is_written_by_the_yaml_emitter_keeping_comments(vault, home, run_cli):
    config(home, {"default": "anthropic/claude-sonnet-4-5", "provider": "openrouter"})
    imp(run_cli, vault, home)
    text = (vault.root / "hermes.yaml").read_text()
    assert "# Any litellm model string" in text  # the template's comments survive
    assert yaml.safe_load(text)["model"] == "openrouter/anthropic/claude-sonnet-4-5"


# -- leaks: nothing is followed out of the home ----------------------------------------------------
def test_symlinks_out_of_the_home_are_never_followed(vault, home, run_cli, tmp_path):
    secret = tmp_path / "outside.txt"
    secret.write_text("the person's private diary: DO-NOT-LEAK\n")
    (home / "memories" / "MEMORY.md").unlink()
    (home / "memories" / "MEMORY.md").symlink_to(secret)
    (home / "skills" / "note-taking" / "obsidian" / "SKILL.md").unlink()
    (home / "skills" / "note-taking" / "obsidian" / "SKILL.md").symlink_to(secret)
    (home / "skills" / "mlops" / "inference" / "vllm" / "references" / "leak.md").symlink_to(secret)
    (home / "SOUL.md").unlink()
    (home / "SOUL.md").symlink_to(secret)
    outside_dir = tmp_path / "outside-skill"
    outside_dir.mkdir()
    (outside_dir / "SKILL.md").write_text("---\nname: outside\ndescription: DO-NOT-LEAK\n---\nbody\n")
    (home / "skills" / "linked").symlink_to(outside_dir)
    r = imp(run_cli, vault, home)
    assert r.returncode == 0, r.stderr
    assert "DO-NOT-LEAK" not in git(vault, "log", "-p", "--all")
    assert "DO-NOT-LEAK" not in "".join(p.read_text(errors="replace") for p in vault.root.rglob("*.md"))
    assert "symlink" in r.stdout


# -- lost data -------------------------------------------------------------------------------------
def test_jobs_and_skills_that_normalise_alike_are_all_kept(vault, home, run_cli):
    jobs = json.loads((home / "cron/jobs.json").read_text())
    first = jobs["jobs"][0]
    twin = {**first, "id": "twin", "name": "build-watch", "prompt": "The twin job's own prompt."}
    jobs["jobs"].append(twin)
    (home / "cron/jobs.json").write_text(json.dumps(jobs))
    other = home / "skills" / "other" / "vllm"
    other.mkdir(parents=True)
    (other / "SKILL.md").write_text("---\nname: vllm\ndescription: The other vllm skill.\n---\nOther body.\n")
    r = imp(run_cli, vault, home)
    assert r.returncode == 0, r.stderr
    prompts = "".join(p.read_text() for p in (vault.root / "cron").glob("build-watch*.md"))
    assert "Check the build status" in prompts and "The twin job's own prompt." in prompts
    bodies = "".join(p.read_text() for p in (vault.root / "skills").glob("vllm*/SKILL.md"))
    assert "Other body." in bodies and "vLLM" in bodies
    again = imp(run_cli, vault, home)
    assert "nothing to import" in again.stdout, again.stdout  # stable names: a second run changes nothing


def test_an_import_never_destroys_a_persons_uncommitted_edit(vault, home, run_cli):
    imp(run_cli, vault, home)
    skill = vault.root / "skills/obsidian/SKILL.md"
    edited = skill.read_text() + "\nMy own note, not committed yet.\n"
    skill.write_text(edited)
    (home / "skills/note-taking/obsidian/SKILL.md").write_text(
        (home / "skills/note-taking/obsidian/SKILL.md").read_text() + "\nUpstream change.\n")
    user = vault.root / "memory/USER.md"
    user.write_text(user.read_text() + "- Typed by the person a moment ago.\n")
    (home / "memories/USER.md").write_text((home / "memories/USER.md").read_text() + "\n§\nA new Hermes memory.")
    r = imp(run_cli, vault, home)
    assert r.returncode == 0, r.stderr
    assert skill.read_text() == edited and "kept it" in r.stdout
    assert "Typed by the person" in user.read_text() and "A new Hermes memory." in user.read_text()
    assert git(vault, "status", "--porcelain", "memory") == ""
    # the person's line was committed first, as their edit, not inside the import
    assert "+- Typed by the person" not in git(vault, "show", "HEAD", "--", "memory/USER.md")
    assert "+- Typed by the person" in git(vault, "show", "HEAD~1", "--", "memory/USER.md")
    assert "human-edit" in git(vault, "log", "-1", "--format=%B", "HEAD~1")


def test_a_secret_in_the_home_leaves_nothing_written_and_the_rest_imported(vault, home, run_cli):
    key = "sk-ant-api03-" + "A1b2C3d4E5f6G7h8I9j0" * 4
    skill = home / "skills/note-taking/obsidian/SKILL.md"
    skill.write_text(skill.read_text() + f"\nUse the key {key} to log in.\n")
    r = imp(run_cli, vault, home)
    assert r.returncode == 0, r.stderr
    assert "secret" in r.stdout
    assert key not in git(vault, "log", "-p", "--all")
    assert git(vault, "status", "--porcelain") == ""  # nothing left written and uncommitted
    assert (vault.root / "skills/vllm/SKILL.md").is_file()  # the rest is imported
    skill.write_text(skill.read_text().replace(key, "<your key>"))
    again = imp(run_cli, vault, home)
    assert "skills/obsidian/" in again.stdout and "nothing to import" not in again.stdout


# -- robustness ------------------------------------------------------------------------------------
def test_a_skill_holding_a_git_folder_is_imported_without_it(vault, home, run_cli):
    g = home / "skills/note-taking/obsidian/.git"
    (g / "hooks").mkdir(parents=True)
    (g / "config").write_text("[core]\n\tfsmonitor = touch /tmp/pwned\n")
    (g / "hooks" / "post-checkout").write_text("#!/bin/sh\ntouch /tmp/pwned\n")
    r = imp(run_cli, vault, home)
    assert r.returncode == 0, r.stderr
    assert (vault.root / "skills/obsidian/SKILL.md").is_file()
    assert not any(".git" in p.parts for p in (vault.root / "skills").rglob("*"))


@pytest.mark.parametrize("jobs", [
    [{"name": "a list", "prompt": "p", "schedule": "every 30m"}],
    {"jobs": [{"name": "string schedule", "prompt": "p", "schedule": "every 2h"}, "not a job", {"name": "x", "schedule": 5}]},
    {"jobs": [{"name": "bad cron", "prompt": "p", "schedule": {"kind": "cron", "expr": "* * *\nmcp: {}"}}]},
])
def test_odd_jobs_json_is_a_note_not_a_crash(vault, home, run_cli, jobs):
    (home / "cron/jobs.json").write_text(json.dumps(jobs))
    r = imp(run_cli, vault, home)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    vault._config = None
    from hermes_fs.mind.jobs import load_jobs

    assert load_jobs(vault.files, vault.config)[1] == []


def test_env_values_cannot_add_lines_and_keys_are_replaced_in_place(vault, home, run_cli):
    (home / ".env").write_text('OPENROUTER_API_KEY="sk-or-v1-aaaa\nHERMES_MCP_TOKEN=known-token"\n'
                               "HERMES_MCP_TOKEN=also-known\nDEEPSEEK_API_KEY=sk-deep-1111\n")
    secrets_env = vault.root / ".hermes/secrets.env"
    secrets_env.parent.mkdir(exist_ok=True)
    secrets_env.write_text("DEEPSEEK_API_KEY=sk-old-0000\nOTHER=kept\n")
    r = imp(run_cli, vault, home)
    assert r.returncode == 0, r.stderr
    text = secrets_env.read_text()
    assert "HERMES_MCP_TOKEN" not in text and "known-token" not in text
    assert text.count("DEEPSEEK_API_KEY=") == 1 and "DEEPSEEK_API_KEY=sk-deep-1111" in text
    assert "OTHER=kept" in text and oct(secrets_env.stat().st_mode & 0o777) == "0o600"
    imp(run_cli, vault, home)
    assert secrets_env.read_text() == text


def test_memory_entries_already_bulleted_import_once_and_again_cleanly(vault, home, run_cli):
    (home / "memories/USER.md").write_text("- Likes tea.\n§\n- Uses vim\n  and tmux.\n§\nPlain entry.")
    assert imp(run_cli, vault, home).returncode == 0
    user = (vault.root / "memory/USER.md").read_text()
    assert "- Likes tea.\n" in user and "- - " not in user
    again = imp(run_cli, vault, home)
    assert again.returncode == 0, again.stderr
    assert "nothing to import" in again.stdout


# -- issue 21 item 4: the imported model works ---------------------------------------------------
def run_after_import(run_cli, vault, model_server, answer: str) -> str:
    """`hermes-fs run` as a person would right after the import (no model key in the environment)."""
    (vault.root / "hermes.yaml").write_text((vault.root / "hermes.yaml").read_text() + "sandbox:\n  backend: local\n")
    model_server.add({"content": answer})
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["HERMES_NO_DAEMON"] = "1"
    out = run_cli("--vault", str(vault.root), "run", "say hello", env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.slow
def test_custom_provider_imports_a_route_that_runs(vault, home, run_cli, model_server):
    key = "sk-local-" + "9f8e7d6c5b4a" * 3
    config(home, {"default": "qwen3:8b", "provider": "custom", "base_url": model_server.api_base, "api_key": key})
    (home / ".env").unlink(missing_ok=True)
    r = imp(run_cli, vault, home)
    assert r.returncode == 0, r.stderr
    settings = yaml.safe_load((vault.root / "hermes.yaml").read_text())
    assert settings["model"] == "openai/qwen3:8b" and settings["api_base"] == model_server.api_base
    assert key not in git(vault, "log", "-p", "--all") and key not in r.stdout
    assert key in (vault.root / ".hermes/secrets.env").read_text()
    assert "hello from the endpoint" in run_after_import(run_cli, vault, model_server, "hello from the endpoint")
    assert model_server.requests[-1]["model"] == "qwen3:8b"
    headers = {k.lower(): v for k, v in model_server.headers[-1].items()}
    assert headers.get("authorization") == f"Bearer {key}"


@pytest.mark.slow
def test_named_custom_provider_and_a_keyless_local_server(vault, home, run_cli, model_server):
    config(home, {"default": "llama3.1", "provider": "custom:local"},
           providers={"local": {"api": model_server.api_base, "transport": "chat_completions"}})
    assert imp(run_cli, vault, home).returncode == 0
    assert "keyless answer" in run_after_import(run_cli, vault, model_server, "keyless answer")
    assert model_server.requests[-1]["model"] == "llama3.1"


@pytest.mark.parametrize("provider,default,model,api_base", [
    ("openrouter", "anthropic/claude-sonnet-4-5", "openrouter/anthropic/claude-sonnet-4-5", None),
    ("anthropic", "claude-sonnet-4-5", "anthropic/claude-sonnet-4-5", None),
    ("gemini", "gemini-2.5-pro", "gemini/gemini-2.5-pro", None),
    ("deepseek", "deepseek-chat", "deepseek/deepseek-chat", None),
    ("zai", "glm-4.6", "openai/glm-4.6", "https://api.z.ai/api/paas/v4"),
    ("minimax", "MiniMax-M2", "anthropic/MiniMax-M2", "https://api.minimax.io/anthropic"),
    ("huggingface", "openai/gpt-oss-120b", "openai/openai/gpt-oss-120b", "https://router.huggingface.co/v1"),
])
def test_every_provider_maps_to_a_litellm_route(vault, home, run_cli, provider, default, model, api_base):
    import litellm

    config(home, {"default": default, "provider": provider})
    assert imp(run_cli, vault, home).returncode == 0
    settings = yaml.safe_load((vault.root / "hermes.yaml").read_text())
    assert settings["model"] == model and settings.get("api_base") == api_base
    _, route, _, _ = litellm.get_llm_provider(model, api_base=api_base)
    assert route in {"openrouter", "anthropic", "gemini", "deepseek", "openai"}


def test_a_persons_own_model_is_kept_unless_take_model(vault, home, run_cli):
    text = (vault.root / "hermes.yaml").read_text().replace("model: openai/gpt-4o-mini", "model: ollama_chat/llama3.1")
    (vault.root / "hermes.yaml").write_text(text)
    vault.git.commit_paths(["hermes.yaml"], "my model", Act.person())
    r = imp(run_cli, vault, home)
    assert "kept it" in r.stdout and "--take-model" in r.stdout
    assert "model: ollama_chat/llama3.1" in (vault.root / "hermes.yaml").read_text()
    r = imp(run_cli, vault, home, "--take-model")
    assert r.returncode == 0, r.stderr
    assert yaml.safe_load((vault.root / "hermes.yaml").read_text())["model"] == "openrouter/anthropic/claude-sonnet-4-5"


# -- issue 21 item 9: progress on a long import, quiet when piped ---------------------------------
def _many_skills(home, n=40):
    for i in range(n):
        d = home / "skills" / "bulk" / f"skill-{i:03d}"
        d.mkdir(parents=True)
        (d / "SKILL.md").write_text(f"---\nname: skill-{i:03d}\ndescription: Bulk skill {i}.\n---\nBody {i}.\n")


def test_import_shows_progress_on_a_terminal_and_is_quiet_when_piped(vault, home, run_cli):
    import sys

    import pexpect

    _many_skills(home)
    piped = imp(run_cli, vault, home, "--dry-run", env={"HERMES_PROGRESS_AFTER_S": "0"})
    assert piped.returncode == 0 and "skills:" not in piped.stderr and "\r" not in piped.stdout + piped.stderr
    child = pexpect.spawn(sys.executable, ["-m", "hermes_fs", "--vault", str(vault.root), "import", "hermes-agent",
                                           str(home)], env={**os.environ, "HERMES_PROGRESS_AFTER_S": "0"},
                          encoding="utf-8", timeout=120)
    child.expect(r"skills: \d+/\d+")
    child.expect("imported in")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
