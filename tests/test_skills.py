import os

import pytest

from hermes_fs.errors import InputError
from hermes_fs.mind import skills
from hermes_fs.store.files import DiskFiles
from hermes_fs.store.vault import TEMPLATE_DIR

GOOD = """---
name: deploy-fly
description: Deploy the app to fly.io. Use when the user asks to ship or deploy.
---
# Deploy

1. Run `fly deploy`.
"""


def test_template_skills_pass_reference_validator():
    from skills_ref import validate

    for name in skills.names(DiskFiles(TEMPLATE_DIR)):
        assert validate(TEMPLATE_DIR / "skills" / name) == [], name
    assert len(skills.names(DiskFiles(TEMPLATE_DIR))) >= 2


def test_create_view_patch_and_support_files(vault):
    files = vault.files
    s = skills.create(files, "deploy-fly", GOOD, metadata={"created-by": "test", "version": "1"})
    assert s.meta["metadata"] == {"created-by": "test", "version": "1"}
    assert skills.validate(files, "deploy-fly") == []
    from skills_ref import validate
    assert validate(vault.root / "skills" / "deploy-fly") == []  # the reference validator on disk agrees
    skills.patch(files, "deploy-fly", "Run `fly deploy`.", "Run `fly deploy --strategy rolling`.")
    assert "rolling" in skills.view(files, "deploy-fly")
    skills.write_file(files, "deploy-fly", "references/flags.md", "# Flags\n")
    assert skills.read(files, "deploy-fly").files == ["references/flags.md"]
    assert skills.view(files, "deploy-fly", "references/flags.md") == "# Flags\n"
    skills.remove_file(files, "deploy-fly", "references/flags.md")
    assert skills.read(files, "deploy-fly").files == []
    with pytest.raises(InputError, match="already exists: patch it instead"):
        skills.create(files, "deploy-fly", GOOD)


def test_name_must_match_folder(vault):
    with pytest.raises(skills.SkillError, match="must match skill name"):
        skills.create(vault.files, "other-name", GOOD)
    assert not (vault.root / "skills" / "other-name").exists()


def test_description_over_1024_refused(vault):
    long = GOOD.replace("Deploy the app to fly.io.", "x" * 1100)
    with pytest.raises(skills.SkillError, match="1024"):
        skills.create(vault.files, "deploy-fly", long)


@pytest.mark.parametrize("bad", ["Deploy", "a--b", "-a", "a_b", "x" * 65, "../x"])
def test_bad_names(vault, bad):
    with pytest.raises(InputError):
        skills.create(vault.files, bad, GOOD)


def test_patch_that_breaks_frontmatter_is_refused(vault):
    skills.create(vault.files, "deploy-fly", GOOD)
    before = skills.view(vault.files, "deploy-fly")
    with pytest.raises(skills.SkillError):
        skills.patch(vault.files, "deploy-fly", "name: deploy-fly", "name: Deploy Fly")
    with pytest.raises(skills.SkillError, match="not found"):
        skills.patch(vault.files, "deploy-fly", "no such text", "x")
    assert skills.view(vault.files, "deploy-fly") == before


def test_unknown_frontmatter_field_is_invalid(vault):
    bad = GOOD.replace("description:", "version: 3\ndescription:")
    with pytest.raises(skills.SkillError, match="Unexpected fields"):
        skills.create(vault.files, "deploy-fly", bad)


def test_support_files_are_confined(vault):
    skills.create(vault.files, "deploy-fly", GOOD)
    for bad in ["../../hermes.yaml", "SKILL.md", "notes.md", "references/../../x.md", "/etc/passwd"]:
        with pytest.raises(InputError):
            skills.write_file(vault.files, "deploy-fly", bad, "x")


def test_load_all_reports_broken_skill_without_dropping_others(vault):
    d = vault.root / "skills" / "broken"
    d.mkdir()
    (d / "SKILL.md").write_bytes(b"\x00\x01binary")
    loaded, errors = skills.load_all(vault.files)
    assert {s.name for s in loaded} == {"writing-skills", "reviewing-learned-changes"}
    assert len(errors) == 1 and "skills/broken/SKILL.md" in str(errors[0])


def test_delete_with_merged_into(vault):
    skills.create(vault.files, "deploy-fly", GOOD)
    with pytest.raises(InputError, match="merged_into"):
        skills.delete(vault.files, "deploy-fly", merged_into="nope")
    skills.delete(vault.files, "deploy-fly", merged_into="writing-skills")
    assert not (vault.root / "skills" / "deploy-fly").exists()


def test_symlink_out_of_vault_is_refused(vault, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "SKILL.md").write_text(GOOD)
    os.symlink(outside, vault.root / "skills" / "evil")
    with pytest.raises(InputError, match="outside the vault"):
        vault.files.read("skills/evil/SKILL.md")
    os.symlink(vault.root / ".git", vault.root / "gitlink")
    with pytest.raises(InputError, match="into .git"):
        vault.files.write("gitlink/hooks/pre-commit", b"#!/bin/sh\n")
