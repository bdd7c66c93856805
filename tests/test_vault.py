import os
import subprocess
from pathlib import Path

import pytest
from conftest import git

from hermes_fs.errors import InputError
from hermes_fs.store.vault import find_vault, init_vault


def test_init_copies_template_and_commits(tmp_path: Path):
    result = init_vault(tmp_path / "v")
    root = result.vault.root
    for rel in ["hermes.yaml", "memory/USER.md", "memory/MEMORY.md", "skills/writing-skills/SKILL.md",
                "skills/reviewing-learned-changes/SKILL.md", "cron/morning-brief.md", "inbox/README.md", ".gitignore"]:
        assert (root / rel).is_file(), rel
    assert git(root, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert git(root, "log", "--format=%s").strip() == "init: new hermes-fs vault"
    assert git(root, "status", "--porcelain") == ""
    assert ".hermes/" in (root / ".gitignore").read_text()


def test_init_adopts_a_non_empty_folder_and_refuses_an_existing_vault(tmp_path: Path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    assert init_vault(tmp_path / "busy").adopted  # adopted (tests/test_daily_use.py has the details)
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"
    init_vault(tmp_path / "v")
    with pytest.raises(InputError, match="already a hermes-fs vault"):
        init_vault(tmp_path / "v")


def test_init_without_git_identity_sets_local_one(tmp_path: Path, run_cli):
    env = {"HOME": str(tmp_path / "home"), "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
           "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
        os.environ.pop(var, None)
    r = run_cli("init", str(tmp_path / "v"), env=env)
    assert r.returncode == 0, r.stderr
    assert "no git identity" in r.stdout
    assert f"git -C {tmp_path / 'v'} config user.name 'Your Name'" in r.stdout  # a command to run, as is
    local = subprocess.run(["git", "-C", str(tmp_path / "v"), "config", "--local", "user.name"],
                           capture_output=True, text=True).stdout.strip()
    assert local == "hermes-fs user"


def test_find_vault_order(tmp_path: Path, monkeypatch):
    a = init_vault(tmp_path / "a").vault.root
    b = init_vault(tmp_path / "b").vault.root
    (a / "memory" / "deep").mkdir()
    monkeypatch.delenv("HERMES_VAULT", raising=False)
    assert find_vault(cwd=a / "memory" / "deep").root == a
    monkeypatch.setenv("HERMES_VAULT", str(b))
    assert find_vault(cwd=a).root == b
    assert find_vault(explicit=a).root == a
    with pytest.raises(InputError, match="not a hermes-fs vault"):
        find_vault(explicit=tmp_path)
    monkeypatch.delenv("HERMES_VAULT")
    with pytest.raises(InputError, match="no vault found"):
        find_vault(cwd=tmp_path)
