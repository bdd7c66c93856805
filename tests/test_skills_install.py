"""`skills install` / `skills update` against real repositories served by `git daemon`: a copy of a
public skills repository, and a hostile one built from git objects (a symlink out, a `.git` inside,
a 50 MB file, names that escape, a submodule, a secret)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from gitserver import GitDaemon

from hermes_fs.errors import InputError
from hermes_fs.learning import changes, install
from hermes_fs.learning.install import InstallError, Source
from hermes_fs.store.provenance import SKILL_SOURCE

pytestmark = pytest.mark.gitdaemon
DATA = Path(__file__).parent / "data" / "skills_repo"
GOOD_SKILL = b"---\nname: %s\ndescription: Says how to do %s. Use when the user asks about %s.\n---\n# %s\n\nDo it.\n"


def sh(cwd: Path, *args: str, input: bytes | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, input=input, check=True, capture_output=True).stdout.decode().strip()


def commit_dir(src: Path, work: Path, bare: Path) -> None:
    shutil.copytree(src, work)
    sh(work, "init", "-q", "-b", "main")
    sh(work, "add", "-A")
    sh(work, "-c", "user.name=T", "-c", "user.email=t@example.com", "commit", "-qm", "skills")
    sh(work.parent, "clone", "-q", "--bare", str(work), str(bare))


def blob(repo: Path, data: bytes) -> str:
    return sh(repo, "hash-object", "-w", "--stdin", input=data)


def tree(repo: Path, entries: list[tuple[str, str, str, str]]) -> str:
    text = "".join(f"{mode} {kind} {sha}\t{name}\n" for mode, kind, sha, name in entries)
    return sh(repo, "mktree", input=text.encode())


def hostile_repo(bare: Path) -> None:
    """A skills repository a person should never get on disk as it is, made from git objects
    (git itself would refuse to check most of it out)."""
    sh(bare.parent, "init", "-q", "--bare", "-b", "main", str(bare))
    skill = blob(bare, GOOD_SKILL % (b"evil", b"evil", b"evil", b"Evil"))
    script = blob(bare, b"#!/bin/sh\necho hi\n")
    link = blob(bare, b"../../../../../etc/passwd")
    hook = blob(bare, b"[core]\n\thooksPath = /tmp\n")
    big = blob(bare, b"\0" * 50_000_000)  # compresses to almost nothing in git
    leaky = blob(bare, GOOD_SKILL.replace(b"Do it.", b"token: ghp_" + b"1234567890abcdefghijABCDEFGHIJklmnop")
                 % (b"leaky", b"leaky", b"leaky", b"Leaky"))
    dotgit = tree(bare, [("100644", "blob", hook, "config")])
    scripts = tree(bare, [("100755", "blob", script, "run.sh")])
    evil = tree(bare, [("100644", "blob", skill, "SKILL.md"), ("120000", "blob", link, "passwd"),
                       ("040000", "tree", dotgit, ".git"), ("100644", "blob", big, "big.bin"),
                       ("100644", "blob", script, ".."), ("100644", "blob", script, "a\\..\\b"),
                       ("160000", "commit", "0" * 39 + "1", "vendored"), ("040000", "tree", scripts, "scripts")])
    leaky_tree = tree(bare, [("100644", "blob", leaky, "SKILL.md")])
    skills_tree = tree(bare, [("040000", "tree", evil, "evil"), ("040000", "tree", leaky_tree, "leaky")])
    root = tree(bare, [("040000", "tree", skills_tree, "skills")])
    commit = sh(bare, "-c", "user.name=T", "-c", "user.email=t@example.com", "commit-tree", root, "-m", "hostile")
    sh(bare, "update-ref", "refs/heads/main", commit)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("served")
    commit_dir(DATA, base / "work", base / "skills.git")
    hostile_repo(base / "hostile.git")
    daemon = GitDaemon(base)
    yield daemon, base
    daemon.close()


def test_install_whole_repository_as_a_branch_then_merge_and_revert(vault, served):
    daemon, base = served
    result = install.install(vault, Source(daemon.url("skills.git")))
    branch = result.outcome.branch
    assert result.outcome.status == "pending" and branch.startswith("install/")
    assert sorted(result.skills) == ["brand-guidelines", "webapp-testing"]
    assert result.scripts == {"webapp-testing": ["scripts/with_server.py"]}
    assert vault.files.read("skills/brand-guidelines/SKILL.md") is None  # nothing on main until merged
    info = vault.git.commit_info(branch)
    source_commit = sh(base / "skills.git", "rev-parse", "main")
    assert info.trailers[SKILL_SOURCE] == f"{daemon.url('skills.git')} {source_commit}"
    text = changes.show(vault.git, branch)
    assert "skills/webapp-testing/scripts/with_server.py: a SCRIPT" in text
    assert branch in [p.branch for p in changes.pending(vault.git)]
    changes.merge(vault.git, branch)
    assert b"Anthropic Brand Styling" in vault.files.read("skills/brand-guidelines/SKILL.md")
    assert vault.files.read("README.md") is None or b"skills repository" not in vault.files.read("README.md")
    assert [c.state for c in changes.learned_log(vault.git) if c.branch == branch] == ["merged"]
    changes.revert(vault.git, branch)
    assert vault.files.read("skills/brand-guidelines/SKILL.md") is None


def test_install_one_folder_at_a_ref_and_update_from_the_recorded_source(vault, served, tmp_path):
    daemon, base = served
    work = tmp_path / "upstream"
    sh(tmp_path, "clone", "-q", str(base / "skills.git"), str(work))
    sh(work, "tag", "v1")
    sh(work, "push", "-q", "origin", "v1")
    url = daemon.url("skills.git")
    result = install.install(vault, Source(url, ref="v1", path="skills/brand-guidelines"))
    assert result.skills == ["brand-guidelines"] and result.outcome.branch.startswith("install/")
    assert result.outcome.branch.endswith("-brand-guidelines")
    changes.merge(vault.git, result.outcome.branch)
    assert [r.outcome.status for r in install.update(vault)] == ["nothing"]  # v1 has not moved
    # upstream moves the tag to a new commit that changes the skill: update proposes a new branch
    md = work / "skills/brand-guidelines/SKILL.md"
    md.write_text(md.read_text() + "\n## Logos\n\nUse the logo on light backgrounds.\n")
    sh(work, "-c", "user.name=T", "-c", "user.email=t@example.com", "commit", "-qam", "logos")
    sh(work, "tag", "-f", "v1")
    sh(work, "push", "-q", "-f", "origin", "main", "v1")
    [updated] = install.update(vault, ["brand-guidelines"])
    assert updated.outcome.status == "pending" and updated.outcome.files == ["skills/brand-guidelines/SKILL.md"]
    assert updated.commit == sh(work, "rev-parse", "HEAD")
    assert "webapp-testing" not in updated.skills  # only the folder that was installed
    with pytest.raises(InputError, match="not installed from a repository"):
        install.update(vault, ["no-such-skill"])


def test_hostile_repository_installs_only_what_is_safe(vault, served):
    daemon, _base = served
    result = install.install(vault, Source(daemon.url("hostile.git")))
    assert result.skills == ["evil"]
    files = result.outcome.files
    assert files == ["skills/evil/SKILL.md", "skills/evil/scripts/run.sh"]
    left_out = "\n".join(result.skipped)
    for why in ("symlink", "submodule", "50000000 bytes", "could leave", "leaky"):
        assert why in left_out, why
    assert "secret" in left_out
    assert result.scripts == {"evil": ["scripts/run.sh"]}
    assert not (vault.root / "skills" / "evil").exists()  # only a branch, never the disk
    tip = result.outcome.branch
    assert not [p for p in vault.git.list_files(tip, "skills") if ".git" in p or p.endswith("passwd")]


@pytest.mark.parametrize("src", [
    Source("--upload-pack=touch /tmp/x"), Source("ext::sh -c touch% /tmp/x"),
    Source("https://user:hunter2@example.com/skills.git"), Source("git://127.0.0.1/x", ref="--output=/tmp/x"),
    Source("git://127.0.0.1/x", path="skills/../../etc"), Source("git://127.0.0.1/x", path="skills/.git"),
])
def test_bad_sources_are_refused_before_any_git_runs(vault, src):
    with pytest.raises(InputError):
        install.install(vault, src)


def test_unreachable_or_empty_sources_say_why(vault, served, tmp_path):
    daemon, base = served
    with pytest.raises(InstallError, match="clone failed"):
        install.install(vault, Source(daemon.url("missing.git")))
    with pytest.raises(InstallError, match="no branch, tag or commit"):
        install.install(vault, Source(daemon.url("skills.git"), ref="no-such-tag"))
    with pytest.raises(InstallError, match="no skill"):
        install.install(vault, Source(daemon.url("skills.git"), path="skills/nothing-here"))
    assert not vault.git.branches("install/")


def test_cli_install_and_review(vault, served, run_cli):
    daemon, _base = served
    r = run_cli("skills", "install", daemon.url("skills.git"), "--path", "skills/webapp-testing",
                "--vault", str(vault.root))
    assert r.returncode == 0, r.stderr
    assert "with scripts: scripts/with_server.py" in r.stdout
    branch = vault.git.branches("install/")[0].name
    r = run_cli("review", "--vault", str(vault.root))
    assert branch in r.stdout
    r = run_cli("review", "merge", branch, "--vault", str(vault.root))
    assert r.returncode == 0, r.stderr
    assert vault.files.read("skills/webapp-testing/scripts/with_server.py") is not None


def test_a_repository_that_is_one_skill_from_a_local_path(vault, tmp_path):
    src = tmp_path / "src" / "deploy-fly"
    src.mkdir(parents=True)
    (src / "SKILL.md").write_bytes(GOOD_SKILL % (b"deploy-fly", b"deploys", b"deploys", b"Deploy"))
    (src / "notes.md").write_text("# Notes\n")
    commit_dir(src, tmp_path / "work" / "deploy-fly", tmp_path / "bare" / "deploy-fly.git")
    result = install.install(vault, Source(str(tmp_path / "bare" / "deploy-fly.git")))
    assert result.skills == ["deploy-fly"]
    assert result.outcome.files == ["skills/deploy-fly/SKILL.md", "skills/deploy-fly/notes.md"]
