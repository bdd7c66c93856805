"""Merges and fixes that must not drop a person's text (issue 22): a comment on main through a
clean merge, `skills validate --fix` on links, comments and odd folder names, and a merge that
fails half-way on another git's index.lock. Real git, the real CLI."""

from __future__ import annotations

import os
import time

from conftest import git

from hermes_fs.store.provenance import Act

USER = "memory/USER.md"


def test_a_comment_added_on_main_survives_a_clean_merge(vault, run_cli):
    base = vault.git.head()
    old = vault.git.read_file(base, USER).decode()
    assert old.startswith("---\ntitle: User\n---\n")
    branch = "refine/20261201-000000-title"
    theirs = old.replace("title: User\n", "title: About the person\n", 1) + "- Learned on the branch.\n"
    vault.git.commit_overlay(base, branch, {USER: theirs.encode()}, "retitle", Act.learned())
    mine = old.replace("title: User\n", "title: User\n# keep this file short: it goes into every prompt\n", 1)
    (vault.root / USER).write_text(mine)
    vault.git.commit_human_edits([USER])
    r = run_cli("--vault", str(vault.root), "review", "merge", branch)
    assert r.returncode == 0, r.stderr + r.stdout
    text = (vault.root / USER).read_text()
    assert "# keep this file short: it goes into every prompt\n" in text
    assert "title: About the person\n" in text and "- Learned on the branch.\n" in text
    assert git(vault, "status", "--porcelain") == ""


def _skill(vault, name, front, body="Body.\n"):
    d = vault.root / "skills" / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "SKILL.md").write_text(f"---\n{front}---\n{body}")
    return d


def test_fix_never_deletes_a_file_another_skill_links_to(vault, run_cli):
    a = _skill(vault, "alpha", "name: alpha\ndescription: The owner of the shared file.\n")
    (a / "references").mkdir()
    (a / "references" / "shared.md").write_text("Shared reference, owned by alpha.\n")
    b = _skill(vault, "beta", "name: beta\ndescription: Links to alpha's file.\nplatforms: [linux]\n")
    (b / "references").mkdir()
    (b / "references" / "shared.md").symlink_to("../../alpha/references/shared.md")
    vault.git.commit_human_edits()
    r = run_cli("--vault", str(vault.root), "skills", "validate", "--fix")
    assert r.returncode == 0, r.stderr + r.stdout
    assert (a / "references" / "shared.md").read_text() == "Shared reference, owned by alpha.\n"
    assert "alpha/references/shared.md" in git(vault, "ls-files", "skills/alpha")


def test_fix_keeps_comments_and_the_body_byte_for_byte(vault, run_cli):
    body = "\nFirst line after a blank line.\n\n  indented   spacing kept  \n"
    _skill(vault, "gamma", "name: gamma\n# why this skill exists: the person's note\ndescription: Gamma.\n"
                           "platforms: [linux]\n", body)
    vault.git.commit_human_edits()
    r = run_cli("--vault", str(vault.root), "skills", "validate", "--fix")
    assert r.returncode == 0, r.stderr + r.stdout
    text = (vault.root / "skills/gamma/SKILL.md").read_text()
    assert "# why this skill exists: the person's note\n" in text
    assert text.endswith("---\n" + body)  # the blank line after the frontmatter too


def test_one_bad_folder_name_does_not_stop_fix_for_the_others(vault, run_cli):
    _skill(vault, "My_Skill", "name: My_Skill\ndescription: Mine.\n")
    _skill(vault, "delta", "name: delta\ndescription: Delta.\nplatforms: [linux]\n")
    vault.git.commit_human_edits()
    r = run_cli("--vault", str(vault.root), "skills", "validate", "--fix")
    assert r.returncode == 0, r.stderr + r.stdout
    assert (vault.root / "skills/my-skill/SKILL.md").is_file() and not (vault.root / "skills/My_Skill").exists()
    assert "metadata" in (vault.root / "skills/delta/SKILL.md").read_text()


def test_a_merge_failing_on_a_held_index_lock_leaves_nothing_behind(vault, run_cli):
    base = vault.git.head()
    old = vault.git.read_file(base, USER)
    branch = "refine/20261201-000000-locked"
    vault.git.commit_overlay(base, branch, {USER: old + b"- Learned, still to be reviewed.\n"}, "learn", Act.learned())
    lock = vault.root / ".git" / "index.lock"
    lock.write_text("")  # another git (a person's, an editor's) holds the index for the whole merge
    try:
        r = run_cli("--vault", str(vault.root), "review", "merge", branch)
        assert r.returncode != 0
        assert (vault.root / USER).read_bytes() == old  # the branch's text is not left in the working tree
    finally:
        os.utime(lock, (time.time() - 60, time.time() - 60))
        lock.unlink()
    assert vault.git.commit_human_edits().sha is None  # nothing to take for a person's edit
    assert vault.git.head() == base and vault.git.rev(f"refs/heads/{branch}")  # still pending
    assert git(vault, "status", "--porcelain") == ""
    again = run_cli("--vault", str(vault.root), "review", "merge", branch)
    assert again.returncode == 0, again.stderr
    assert b"- Learned, still to be reviewed.\n" in (vault.root / USER).read_bytes()
