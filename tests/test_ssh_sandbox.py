"""`sandbox.backend: ssh` against a real OpenSSH server on 127.0.0.1 (scripts/sshd-test-env.sh:
its own config, host key, client key and test user): commands, caps, timeouts and Ctrl-C that kill
the remote process group, files under workdir only, host keys never accepted unseen."""

from __future__ import annotations

import subprocess
import threading
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from hermes_fs.agent.sandbox import SandboxError, make_sandbox
from hermes_fs.agent.sandbox.ssh import SshSandbox
from hermes_fs.agent.tools import ToolBox
from hermes_fs.store.config import SandboxConfig, SshConfig

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "sshd-test-env.sh"
pytestmark = pytest.mark.sshd


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    where = tmp_path_factory.mktemp("sshd")
    r = subprocess.run(["sh", str(SCRIPT), str(where)], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        pytest.skip(f"no OpenSSH server for the ssh sandbox tests: {r.stderr.strip()[-300:]}")
    env = dict(line.split("=", 1) for line in (where / "env").read_text().splitlines() if "=" in line)
    yield SshConfig(host="127.0.0.1", port=int(env["PORT"]), user=env["USER"], identity_file=env["KEY"],
                    known_hosts=env["KNOWN_HOSTS"], workdir=f"{env['HOME']}/work", connect_timeout_s=10)
    subprocess.run(["kill", env["PID"]], check=False)


@pytest.fixture
def box(sshd):
    b = SshSandbox(sshd, timeout_s=30)
    yield b
    b.close()


def gone(box: SshSandbox, marker: str) -> bool:
    """No process of the test user still has `marker` in its command line."""
    r = box.run(f"ps -u $(id -un) -o args= | grep -v grep | grep -c -- '{marker}' || true")
    return r.stdout.strip() == "0"


def test_commands_run_on_the_remote_host_in_workdir(sshd):
    box = make_sandbox(SandboxConfig(backend="ssh", ssh=replace(sshd, workdir="~/work")), Path("/nonexistent"), "s1")
    try:
        r = box.run("pwd; id -un; echo oops >&2; exit 3")
        assert r.exit_code == 3
        assert r.stdout.splitlines() == [sshd.workdir, sshd.user]
        assert r.stderr.strip() == "oops"  # the process-group line is not shown
        big = box.run("yes 0123456789 | head -c 200000")
        assert big.exit_code == 0 and len(big.stdout) == 200000
        assert "characters truncated" in big.render() and len(big.render()) < 20_000  # capped as locally
    finally:
        box.close()


def test_a_timeout_kills_the_whole_remote_process_group(box):
    r = box.run("sh -c 'sleep 171' & sleep 172; echo late", timeout_s=1)
    assert r.timed_out and r.exit_code is None and "late" not in r.stdout
    assert gone(box, "sleep 17[12]")


def test_interrupt_kills_the_running_remote_command(box):
    results = []
    t = threading.Thread(target=lambda: results.append(box.run("sh -c 'sleep 181' & sleep 182; echo done")))
    t.start()
    for _ in range(200):
        if box.pgid:
            break
        threading.Event().wait(0.05)
    box.interrupt()
    t.join(30)
    assert not t.is_alive() and results[0].interrupted and "done" not in results[0].stdout
    assert gone(box, "sleep 18[12]")


def test_tool_files_under_workdir_go_to_the_remote_host(box, sshd, vault):
    tools = ToolBox(files=vault.files, config=vault.config, sandbox=box, vault_root=vault.root)
    path = f"{sshd.workdir}/notes/plan.txt"
    assert tools.call("write_file", f'{{"path": "{path}", "content": "remote text"}}').startswith("ok")
    assert box.run("cat notes/plan.txt").stdout == "remote text"
    assert tools.call("read_file", f'{{"path": "{path}"}}') == "remote text"
    assert box.run("stat -c %U notes/plan.txt").stdout.strip() == sshd.user  # written as the remote user
    box.run("ln -sfn /etc escape")
    out = tools.call("read_file", f'{{"path": "{sshd.workdir}/escape/passwd"}}')
    assert out.startswith("error") and "outside" in out
    out = tools.call("write_file", f'{{"path": "{sshd.workdir}/escape/x", "content": "no"}}')
    assert out.startswith("error") and "outside" in out
    out = tools.call("read_file", '{"path": "/etc/hostname-not-in-workdir"}')
    assert out.startswith("error")


def test_unknown_and_changed_host_keys_are_refused(sshd, tmp_path):
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    with pytest.raises(SandboxError, match="never accepted on first sight"):
        SshSandbox(replace(sshd, known_hosts=str(empty)), 10).run("true")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    other = (tmp_path / "other.pub").read_text().split()[:2]
    changed = tmp_path / "known_hosts_changed"
    changed.write_text(f"[127.0.0.1]:{sshd.port} {other[0]} {other[1]}\n")
    with pytest.raises(SandboxError, match="CHANGED"):
        SshSandbox(replace(sshd, known_hosts=str(changed)), 10).run("true")
    with pytest.raises(SandboxError, match="does not exist"):
        SshSandbox(replace(sshd, known_hosts=str(tmp_path / "missing")), 10).run("true")
    with pytest.raises(SandboxError, match="refused our key"):
        SshSandbox(replace(sshd, identity_file=str(tmp_path / "other")), 10).run("true")


def test_doctor_checks_the_connection(vault, sshd, run_cli):
    cfg = yaml.safe_load((vault.root / "hermes.yaml").read_text())
    cfg["sandbox"] = {"backend": "ssh", "ssh": {"host": sshd.host, "port": sshd.port, "user": sshd.user,
                                                "identity_file": sshd.identity_file, "known_hosts": sshd.known_hosts,
                                                "workdir": sshd.workdir}}
    (vault.root / "hermes.yaml").write_text(yaml.safe_dump(cfg))
    r = run_cli("doctor", "--no-model", "--vault", str(vault.root))
    assert f"ok  ssh sandbox: {sshd.user}@127.0.0.1:{sshd.port} (host key verified)" in r.stdout, r.stdout + r.stderr
    cfg["sandbox"]["ssh"]["known_hosts"] = str(vault.root / "nope")
    (vault.root / "hermes.yaml").write_text(yaml.safe_dump(cfg))
    r = run_cli("doctor", "--no-model", "--vault", str(vault.root))
    assert "BAD ssh sandbox" in r.stdout and r.returncode == 1


@pytest.mark.docker
def test_docker_on_a_remote_host_over_ssh(sshd, tmp_path, monkeypatch):
    """DOCKER_HOST=ssh://user@host: the docker SDK reaches the engine through sshd (host key from
    ~/.ssh/known_hosts, refused when unknown), and the docker sandbox runs there unchanged."""
    from hermes_fs.agent.sandbox.docker import DockerSandbox

    image = "hermes-fs-test:busybox"
    if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode != 0:
        pytest.skip(f"no local Docker engine with {image} (scripts/docker-test-env.sh)")
    box = SshSandbox(sshd, 20)
    try:
        if "docker" not in box.run("id -Gn").stdout.split():
            pytest.skip(f"{sshd.user} may not use the Docker engine (not in the docker group)")
    finally:
        box.close()
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(f"Host 127.0.0.1\n  IdentityFile {sshd.identity_file}\n")
    (home / ".ssh" / "known_hosts").write_text("")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("DOCKER_HOST", f"ssh://{sshd.user}@127.0.0.1:{sshd.port}")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    config = SandboxConfig(backend="docker", image=image)
    with pytest.raises(SandboxError, match="no reachable Docker engine"):  # host key unknown: refused
        DockerSandbox(config, workspace, "s-remote").run("true")
    (home / ".ssh" / "known_hosts").write_text(Path(sshd.known_hosts).read_text())
    remote = DockerSandbox(config, workspace, "s-remote")
    try:
        r = remote.run("echo hello from the container; cat /etc/hostname")
    finally:
        remote.close()
    assert r.exit_code == 0 and r.stdout.startswith("hello from the container")
