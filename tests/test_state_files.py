"""State files are the owner's alone: a real daemon (umask 022 in the shell that started it) leaves
nothing under `.hermes/` readable by group or others, SQLite's -wal and -shm included; the mail
channel's database the same; and the commands the agent runs still get the person's umask."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from conftest import DaemonProc, wait_for

from hermes_fs.store.config import SandboxConfig
from hermes_fs.store.provenance import Act


def _readable_by_others(folder: Path) -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            if not stat.S_ISLNK(st.st_mode) and stat.S_IMODE(st.st_mode) & 0o077:
                found.append(f"{p.relative_to(folder)} {stat.S_IMODE(st.st_mode):o}")
    return found


def test_the_daemon_makes_every_state_file_0600(vault):
    with open(vault.root / "hermes.yaml", "a") as f:
        f.write("gateway:\n  webhook:\n    listen: 127.0.0.1:0\n    routes:\n      hook: {secret_env: HOOK_SECRET}\n")
    vault.git.commit_paths(["hermes.yaml"], "test: a webhook route", Act.person())
    old_log = vault.state_dir / "logs" / "from-an-older-version.log"
    old_log.parent.mkdir(parents=True, exist_ok=True)
    old_log.write_text("message text\n")
    old_log.chmod(0o644)
    before = os.umask(0o022)  # the usual shell umask: files 0644 unless the daemon says otherwise
    try:
        d = DaemonProc(vault.root)
    finally:
        os.umask(before)
    try:
        gateway = vault.state_dir / "gateway"
        assert wait_for(lambda: (gateway / "state.json").exists() and (gateway / "gateway.db-wal").exists(), 30), \
            d.output()
        assert (gateway / "gateway.db-shm").exists()
        assert _readable_by_others(vault.state_dir) == []
        assert stat.S_IMODE(vault.state_dir.stat().st_mode) == 0o700
    finally:
        d.stop()
    assert _readable_by_others(vault.state_dir) == []


def test_the_mail_database_and_its_wal_are_0600(tmp_path):
    from hermes_fs.service.gateway.email import MailState

    before = os.umask(0o022)
    try:
        state = MailState(tmp_path / "email.sqlite")
        state.record_sent("reply-1", "<m1@example.org>", "<root@example.org>")
        made = sorted(p.name for p in tmp_path.iterdir())
        assert "email.sqlite-wal" in made, made
        assert _readable_by_others(tmp_path) == []
    finally:
        os.umask(before)


def test_commands_the_agent_runs_get_the_persons_umask(tmp_path, monkeypatch):
    from hermes_fs.agent.sandbox.local import LocalSandbox
    from hermes_fs.store.private import tighten_umask

    monkeypatch.delenv("HERMES_PERSON_UMASK", raising=False)
    before = os.umask(0o022)
    try:
        tighten_umask()
        (tmp_path / "state").write_text("x")
        assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o600
        box = LocalSandbox(tmp_path / "work", SandboxConfig())
        assert box.run("touch made && stat -c %a made").stdout.strip() == "644"
    finally:
        os.umask(before)
