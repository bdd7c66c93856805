"""Sync against what another machine (or whoever can push to the remote) may put there: a
password in the remote's URL never printed, a file name git holds but a checkout cannot write,
forged claim refs, and settings that widen what runs here, held until approved on this machine.
Two real vaults and a real `git daemon` remote."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import DaemonProc, git, wait_for
from gitserver import GitDaemon, free_port

from hermes_fs.store.vault import init_vault

pytestmark = pytest.mark.gitdaemon


@pytest.fixture
def server(tmp_path):
    d = GitDaemon(tmp_path / "srv")
    yield d
    d.close()


def test_a_password_in_the_remote_url_is_never_printed(tmp_path, run_cli):
    v = init_vault(tmp_path / "v").vault
    (v.root / "hermes.yaml").write_text((v.root / "hermes.yaml").read_text() + "\nremote:\n  url: ''\n  branch: main\n")
    url = f"https://alice:s3cr3tpw@127.0.0.1:{free_port()}/vault.git"
    git(v, "config", "hermes.remoteUrl", url)  # a per-clone URL: where a credentialed one belongs
    v.git.commit_human_edits()
    outputs = []
    for args in (["sync"], ["status"], ["status", "--json"], ["doctor"], ["clone", url, str(tmp_path / "copy")]):
        r = run_cli("--vault", str(v.root), *args)
        outputs.append(r.stdout + r.stderr)
    assert "alice:***@127.0.0.1" in outputs[0] and "alice:***@127.0.0.1" in outputs[1], outputs[:2]
    assert json.loads(outputs[2])["sync"]["remote"].startswith("https://alice:***@"), outputs[2]
    d = DaemonProc(v.root)
    try:
        assert wait_for(lambda: any("offline" in e or "sync" in e for e in d.state().get("last_events") or []), 60)
    finally:
        d.stop()
    for text in outputs:
        assert "s3cr3tpw" not in text, text
    for p in v.state_dir.rglob("*"):
        if p.is_file() and "secrets" not in p.name:
            assert b"s3cr3tpw" not in p.read_bytes(), p
