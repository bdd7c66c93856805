"""`.hermes/sync/claims.json` written by two processes of one machine at once (the daemon, and a
CLI command deciding on a learned change): real processes taking real claims on a bare git
remote; no claim either of them holds is missing from the file afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from conftest import git

from hermes_fs.service.work import open_claims
from hermes_fs.store.claims import Take
from hermes_fs.store.provenance import Act
from hermes_fs.store.vault import Vault

TAKER = """
import sys, time
from pathlib import Path
from hermes_fs.service.work import open_claims
from hermes_fs.store.claims import Take
from hermes_fs.store.vault import Vault

root, name, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
claims = open_claims(Vault(Path(root)))  # loaded now, before the other process writes anything
(go.parent / f"ready-{name}").touch()
while not go.exists():
    time.sleep(0.01)
for i in range(count):
    assert claims.take(f"review/{name}-{i}/0123456789ab") == Take.WON
"""


def synced_vault(vault: Vault, tmp_path: Path) -> Vault:
    """The vault with a remote: a bare repository on this machine."""
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    cfg = vault.root / "hermes.yaml"
    cfg.write_text(cfg.read_text() + f"\nremote:\n  url: {bare}\n  branch: main\n")
    vault.git.commit_paths(["hermes.yaml"], "edit: hermes.yaml", Act.human_edit())
    vault.reload_config()
    return vault


def held_in_file(vault: Vault) -> set[str]:
    return set(json.loads((vault.state_dir / "sync" / "claims.json").read_text())["held"])


def test_two_processes_taking_claims_at_once_lose_none_of_them(vault, tmp_path):
    v = synced_vault(vault, tmp_path)
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", TAKER, str(v.root), name, "12", str(go)],
                              stderr=subprocess.PIPE, text=True) for name in ("daemon", "cli")]
    deadline = time.time() + 60
    while not all((tmp_path / f"ready-{n}").exists() for n in ("daemon", "cli")) and time.time() < deadline:
        time.sleep(0.02)
    go.touch()
    for p in procs:
        assert p.wait(120) == 0, p.stderr.read() if p.stderr else ""
    expected = {f"review/{name}-{i}/0123456789ab" for name in ("daemon", "cli") for i in range(12)}
    assert held_in_file(v) == expected


def test_a_process_writes_only_what_it_changed(vault, tmp_path):
    """One process giving a claim back leaves the claims another process took meanwhile, and
    removes only its own; a claim this process merely read (another's) it never writes back."""
    v = synced_vault(vault, tmp_path)
    first = open_claims(v)
    assert first is not None and first.take("review/a/0123456789ab") == Take.WON
    second = open_claims(Vault(v.root))  # reads a's claim, as a CLI started beside the daemon does
    assert second is not None and second.take("review/b/0123456789ab") == Take.WON
    assert first.take("review/c/0123456789ab") == Take.WON
    assert held_in_file(v) == {"review/a/0123456789ab", "review/b/0123456789ab", "review/c/0123456789ab"}
    second.release("review/b/0123456789ab")
    assert held_in_file(v) == {"review/a/0123456789ab", "review/c/0123456789ab"}
    first.renew()  # nothing due yet; a's entry as the first process holds it stays its own
    assert held_in_file(v) == {"review/a/0123456789ab", "review/c/0123456789ab"}

