"""The package a person installs: the wheel built from this tree, installed with the locked dependency set
(requirements.lock, every file checked against its hashes) into a fresh venv, then used as a new user
would: `hermes-fs init`, `doctor --no-model`, `run` against the scripted model server. The process runs
outside the source tree, so only what the wheel carries (code, the vault template, the web page's
templates and assets) is there."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest
from locations import ROOT

pytestmark = pytest.mark.slow  # a venv and ~165 packages (from pip's cache after the first time)

INSTALL_TIMEOUT = 1800  # a cold cache on a loaded machine


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without what would show the venv this source tree (PYTHONPATH: pip would
    take the tree's hermes_fs.egg-info for an installed hermes-fs and skip the wheel)."""
    return {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}, **extra}


def _run(*cmd, timeout=INSTALL_TIMEOUT, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("env", clean_env())
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    assert r.returncode == 0, f"{cmd}\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", out, ROOT)
    (whl,) = out.glob("hermes_fs-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(tmp_path_factory, wheel):
    venv = tmp_path_factory.mktemp("venv") / "v"
    _run(sys.executable, "-m", "venv", venv)
    pip = venv / "bin" / "pip"
    _run(pip, "install", "-q", "--upgrade", "pip")
    _run(pip, "install", "-q", "--require-hashes", "-r", ROOT / "requirements.lock")
    _run(pip, "install", "-q", "--no-deps", wheel)
    return venv


def test_the_wheel_carries_the_template_and_the_web_assets(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for path in ["hermes_fs/vault_template/hermes.yaml", "hermes_fs/vault_template/.gitignore",
                 "hermes_fs/vault_template/memory/MEMORY.md", "hermes_fs/vault_template/memory/projects/.gitkeep",
                 "hermes_fs/service/web/templates/base.html", "hermes_fs/service/web/static/app.js"]:
        assert path in names, path
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "hermes-fs = hermes_fs.cli.main:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_a_fresh_venv_with_the_lock_inits_checks_and_runs(venv, tmp_path, model_server):
    exe = venv / "bin" / "hermes-fs"
    env = clean_env(HERMES_TEST_KEY="test-key")
    where = _run(venv / "bin" / "python", "-c", "import hermes_fs; print(hermes_fs.__file__)", cwd=tmp_path, env=env)
    assert str(venv) in where.stdout, where.stdout  # the installed wheel, not this source tree
    # the commands the ACP and MCP registries start (`uvx hermes-fs acp`, `uvx hermes-fs mcp`)
    for sub in ("acp", "mcp"):
        _run(exe, sub, "--help", cwd=tmp_path, env=env, timeout=300)

    vault = tmp_path / "vault"
    _run(exe, "init", vault, "--no-probe", cwd=tmp_path, env=env, timeout=300)
    assert (vault / "memory" / "MEMORY.md").exists() and (vault / "skills").is_dir()
    (vault / "hermes.yaml").write_text(f"model: openai/test-model\napi_base: {model_server.api_base}\n"
                                       "api_key_env: HERMES_TEST_KEY\nsandbox:\n  backend: none\n")
    _run("git", "-C", vault, "commit", "-qam", "test: point at the model server", env=env)
    r = _run(exe, "--vault", vault, "doctor", "--no-model", cwd=tmp_path, env=env, timeout=300)
    assert "BAD" not in r.stdout, r.stdout
    assert not model_server.requests  # --no-model: no model call

    model_server.add({"content": "Installed and answering."})
    r = _run(exe, "--vault", vault, "run", "Are you there?", cwd=tmp_path, env=env, timeout=300)
    assert r.stdout.strip() == "Installed and answering."
    assert model_server.requests[0]["messages"][-1]["content"] == "Are you there?"
