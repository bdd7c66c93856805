"""`make install` (run by `make run` and `make test`) shows progress while pip works, and all of
pip's output when it fails. The Makefile's own recipe runs; pip is a stand-in script that prints
what pip prints (a real install takes minutes and the package index)."""

from __future__ import annotations

import subprocess
import sys

from locations import ROOT

PIP = """#!/bin/sh
echo "Requirement already satisfied: pip"
[ "$2" = "-e" ] || exit 0
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
    return venv


def make_install(venv):
    return subprocess.run(["make", "-s", "-C", str(ROOT), "install", f"VENV={venv}"], capture_output=True, text=True,
                          timeout=60)


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


def test_a_failed_install_shows_the_whole_log_and_fails(tmp_path):
    venv = fake_venv(tmp_path, 'echo "ERROR: No matching distribution found for click>=8.1"; exit 1')
    r = make_install(venv)
    assert r.returncode != 0
    assert "ERROR: No matching distribution found for click>=8.1" in r.stdout
    assert not (venv / ".installed").exists()
