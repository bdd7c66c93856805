"""Entry-aware merges of learned changes (DESIGN section 13), on real git repositories.

Branches are made the way refine makes them (a plumbing commit on a snapshot of main), then merged,
reverted and shown through the same library calls and CLI the person uses.
"""

import json

import pytest
from conftest import git

from hermes_fs.errors import ConflictError
from hermes_fs.learning import changes
from hermes_fs.mind.merge import merge_memory, merge_skill
from hermes_fs.store.provenance import Act

USER = "memory/USER.md"


def text(vault, path=USER):
    return (vault.root / path).read_text()


def learned(vault, name, edits, base=None):
    """A refine-like branch: `edits` maps path -> function(old text) -> new text, applied on `base`."""
    store = vault.git
    base = base or store.head()
    overlay = {}
    for path, fn in edits.items():
        old = store.read_file(base, path)
        overlay[path] = fn(old.decode() if old else "").encode()
    branch = f"refine/20261130-000000-{name}"
    store.commit_overlay(base, branch, overlay, f"{name}\n\n- {path}: because\n", Act.learned())
    return branch


def add_entry(entry, after="- Prefers concise answers; show commands and code rather than describing them.\n"):
    return lambda old: old.replace(after, after + entry + "\n")


def assert_untouched(vault, before_head, before_text):
    assert vault.git.head() == before_head
    assert text(vault) == before_text
    assert git(vault, "status", "--porcelain") == ""


@pytest.mark.parametrize("order", [("a", "b"), ("b", "a")])
def test_two_pending_refines_adding_to_the_same_file_merge_in_either_order(vault, order):
    base = vault.git.head()
    branches = {"a": learned(vault, "a", {USER: add_entry("- Writes commit messages in the imperative mood.")}, base),
                "b": learned(vault, "b", {USER: add_entry("- Wants dates in ISO 8601.")}, base)}
    for name in order:
        changes.merge(vault.git, branches[name])
    body = text(vault)
    assert "- Writes commit messages in the imperative mood.\n" in body and "- Wants dates in ISO 8601.\n" in body
    first, second = (branches[n] for n in order)
    assert body.index("imperative" if order[0] == "a" else "ISO 8601") < body.index("ISO 8601" if order[0] == "a" else "imperative")
    assert git(vault, "status", "--porcelain") == ""
    assert [c.state for c in changes.learned_log(vault.git)] == ["merged", "merged"]


def test_learned_entry_merges_over_an_agent_write_on_main_and_a_persons_uncommitted_note(vault):
    branch = learned(vault, "iso", {USER: add_entry("- Wants dates in ISO 8601.")})
    # the agent writes on main (a REMEMBER in chat), then the person types a note and does not commit
    (vault.root / USER).write_text(text(vault) + "- Uses fish as the shell.\n")
    vault.git.commit_paths([USER], "memory: add entry", Act.session("s1"))
    (vault.root / USER).write_text(text(vault) + "- Person's own note, not committed yet.\n")
    changes.merge(vault.git, branch)
    body = text(vault)
    for line in ("- Wants dates in ISO 8601.", "- Uses fish as the shell.", "- Person's own note, not committed yet."):
        assert line in body
    # main's entries first, then the branch's, in the section where it was added
    assert body.index("Person's own note") < body.index("ISO 8601")
    assert git(vault, "status", "--porcelain") == ""
    log = git(vault, "log", "--first-parent", "--format=%an|%s", "-4").splitlines()
    assert log[0].startswith(vault.git.config_get("user.name") + "|merge refine/")  # the person's decision
    assert log[1].endswith("|edit: memory/USER.md")  # the note, committed as a human edit first
    assert log[2] == "hermes-fs|memory: add entry"


def test_blame_tells_the_agent_from_the_person(vault):
    branch = learned(vault, "iso", {USER: add_entry("- Wants dates in ISO 8601.")})
    (vault.root / USER).write_text(text(vault) + "- Person's note.\n")
    vault.git.commit_human_edits([USER])
    changes.merge(vault.git, branch)
    blame = git(vault, "blame", "--line-porcelain", USER)
    authors = {}
    for block in blame.split("\nauthor ")[1:]:
        name = block.split("\n", 1)[0]
        line = block.rsplit("\n\t", 1)[-1].split("\n")[0]
        authors[line] = name
    assert authors["- Wants dates in ISO 8601."] == "hermes-fs"
    assert authors["- Person's note."] == vault.git.config_get("user.name")
    committer = git(vault, "log", "-1", "--format=%cn", f"{changes.merge_commit_of(vault.git, branch)}^2")
    assert committer.strip() == vault.git.config_get("user.name")  # the person stays the committer


def test_identical_additions_appear_once(vault):
    base = vault.git.head()
    a = learned(vault, "a", {USER: add_entry("- Wants dates in ISO 8601.")}, base)
    b = learned(vault, "b", {USER: add_entry("- Wants  dates in ISO 8601.")}, base)  # same words
    changes.merge(vault.git, a)
    changes.merge(vault.git, b)
    assert text(vault).count("ISO 8601") == 1


def test_same_entry_changed_on_both_sides_conflicts_naming_the_entry_and_loses_nothing(vault, run_cli):
    old = "- Prefers concise answers; show commands and code rather than describing them."
    branch = learned(vault, "long", {USER: lambda t: t.replace(old, "- Prefers long, detailed answers.")})
    (vault.root / USER).write_text(text(vault).replace(old, "- Prefers answers in French."))
    vault.git.commit_human_edits([USER])
    head, before = vault.git.head(), text(vault)
    with pytest.raises(ConflictError) as info:
        changes.merge(vault.git, branch)
    message = str(info.value)
    assert f'entry "{old}"' in message
    assert "main:   - Prefers answers in French." in message and "branch: - Prefers long, detailed answers." in message
    assert f"--skip {USER}" in message and "reject" in message
    assert_untouched(vault, head, before)
    assert vault.git.rev(f"refs/heads/{branch}")  # still pending
    cli = run_cli("review", "merge", branch.split("-", 2)[-1], "--vault", str(vault.root))  # by its slug
    assert cli.returncode == 1 and "Prefers answers in French" in cli.stderr and "--skip memory/USER.md" in cli.stderr
    assert_untouched(vault, head, before)


def test_removed_on_one_side_and_changed_on_the_other_conflicts(vault):
    old = "- Prefers concise answers; show commands and code rather than describing them."
    branch = learned(vault, "drop", {USER: lambda t: t.replace(old + "\n", "")})
    (vault.root / USER).write_text(text(vault).replace(old, "- Prefers concise answers, always."))
    vault.git.commit_human_edits([USER])
    with pytest.raises(ConflictError, match="main:   - Prefers concise answers, always.") as info:
        changes.merge(vault.git, branch)
    assert "branch: (removed)" in str(info.value)


def test_one_sided_replace_and_remove_apply(vault):
    old = "- Prefers concise answers; show commands and code rather than describing them."
    (vault.root / USER).write_text(text(vault) + "- Second entry.\n- Third entry.\n")
    vault.git.commit_human_edits([USER])
    branch = learned(vault, "edit", {USER: lambda t: t.replace(old, "- Prefers terse answers.").replace("- Third entry.\n", "")})
    (vault.root / USER).write_text(text(vault) + "- Fourth, by the person.\n")
    vault.git.commit_human_edits([USER])
    changes.merge(vault.git, branch)
    body = text(vault)
    assert "- Prefers terse answers." in body and "Third entry" not in body and "- Fourth, by the person." in body


def test_only_and_skip_accept_part_of_a_change(vault, run_cli):
    skill = "skills/deploy-fly/SKILL.md"
    skill_text = "---\nname: deploy-fly\ndescription: Deploy to fly.io. Use when deploying.\n---\n# Deploy\n\n1. fly deploy\n"
    branch = learned(vault, "two", {USER: add_entry("- Wants dates in ISO 8601."),
                                    "memory/MEMORY.md": lambda t: t + "- Lesson: run make test first.\n",
                                    skill: lambda _t: skill_text})
    r = run_cli("review", "merge", branch, "--only", USER, "--vault", str(vault.root))
    assert r.returncode == 0, r.stderr
    assert "ISO 8601" in text(vault) and "make test first" not in text(vault, "memory/MEMORY.md")
    assert not (vault.root / skill).exists()
    left = vault.git.changed_paths(f"refs/heads/{branch}^", f"refs/heads/{branch}")
    assert left == ["memory/MEMORY.md", skill]  # the rest is pending, a smaller change
    changes.merge(vault.git, branch, skip=[skill])
    assert "make test first" in text(vault, "memory/MEMORY.md")
    assert vault.git.changed_paths(f"refs/heads/{branch}^", f"refs/heads/{branch}") == [skill]
    with pytest.raises(Exception, match="not in this change"):
        changes.merge(vault.git, branch, only=["memory/nope.md"])
    changes.merge(vault.git, branch)
    assert (vault.root / skill).read_text() == skill_text and not vault.git.rev(f"refs/heads/{branch}")


def test_a_conflicting_part_leaves_the_whole_change_pending(vault):
    old = "- Prefers concise answers; show commands and code rather than describing them."
    branch = learned(vault, "mixed", {USER: lambda t: t.replace(old, "- Prefers long answers."),
                                      "memory/MEMORY.md": lambda t: t + "- Lesson.\n"})
    tip = vault.git.rev(f"refs/heads/{branch}")
    (vault.root / USER).write_text(text(vault).replace(old, "- Prefers French."))
    vault.git.commit_human_edits([USER])
    with pytest.raises(ConflictError):
        changes.merge(vault.git, branch, only=[USER])
    assert vault.git.rev(f"refs/heads/{branch}") == tip


def test_revert_of_an_old_learned_entry_after_later_edits_in_the_same_file(vault, run_cli):
    branch = learned(vault, "iso", {USER: add_entry("- Wants dates in ISO 8601.")})
    changes.merge(vault.git, branch)
    later = learned(vault, "fish", {USER: lambda t: t + "- Uses fish.\n"})
    changes.merge(vault.git, later)
    (vault.root / USER).write_text(text(vault).replace("- Wants dates in ISO 8601.\n", "- Wants dates in ISO 8601.\n- Person's line right after it.\n"))
    vault.git.commit_human_edits([USER])
    r = run_cli("revert", branch, "--vault", str(vault.root))
    assert r.returncode == 0, r.stderr
    body = text(vault)
    assert "ISO 8601" not in body and "- Uses fish." in body and "- Person's line right after it." in body
    log = json.loads(run_cli("log", "--json", "--vault", str(vault.root)).stdout)
    assert {c["branch"]: c["state"] for c in log} == {branch: "reverted", later: "merged"}
    assert "reverted" in run_cli("log", "--vault", str(vault.root)).stdout


def test_revert_refuses_an_entry_a_person_changed_since(vault):
    branch = learned(vault, "iso", {USER: add_entry("- Wants dates in ISO 8601.")})
    changes.merge(vault.git, branch)
    (vault.root / USER).write_text(text(vault).replace("- Wants dates in ISO 8601.", "- Wants dates in ISO 8601, with time zones."))
    vault.git.commit_human_edits([USER])
    with pytest.raises(ConflictError, match="with time zones"):
        changes.revert(vault.git, branch)


def test_frontmatter_merges_by_key(vault):
    branch = learned(vault, "budget", {USER: lambda t: t.replace("title: User\n", "title: User\nbudget: 3000\n")})
    (vault.root / USER).write_text(text(vault).replace("title: User", "title: About me") + "- Note.\n")
    vault.git.commit_human_edits([USER])
    changes.merge(vault.git, branch)
    head = text(vault).split("---")[1]
    assert "title: About me" in head and "budget: 3000" in head and "- Note." in text(vault)


def test_review_show_previews_main_now_and_says_up_front_when_it_would_conflict(vault, run_cli):
    old = "- Prefers concise answers; show commands and code rather than describing them."
    ok = learned(vault, "iso", {USER: add_entry("- Wants dates in ISO 8601.")})
    bad = learned(vault, "long", {USER: lambda t: t.replace(old, "- Prefers long answers.")})
    (vault.root / USER).write_text(text(vault).replace(old, "- Prefers French.") + "- Later note.\n")
    vault.git.commit_human_edits([USER])
    shown = run_cli("review", "show", ok, "--vault", str(vault.root)).stdout
    assert "What merging it would do to main now:" in shown and "+- Wants dates in ISO 8601." in shown
    assert "-- Prefers French." not in shown  # the person's text is not undone by the preview
    shown = run_cli("review", "show", bad, "--vault", str(vault.root)).stdout
    assert shown.index("Merging now would CONFLICT") < shown.index("The change itself")
    assert "main:   - Prefers French." in shown
    changes.merge(vault.git, ok)
    changes.reject(vault.git, bad)
    assert "(merged)" in run_cli("review", "show", ok, "--vault", str(vault.root)).stdout
    assert "(rejected)" in run_cli("review", "show", bad, "--vault", str(vault.root)).stdout


def test_continuation_lines_and_files_without_sections():
    base = "---\ntitle: M\n---\n- First lesson\n  with a second line.\n- Second lesson.\n"
    ours = base.replace("  with a second line.\n", "  with a second line.\n  and a third.\n") + "- Main's lesson.\n"
    theirs = base + "- Branch lesson\n  spanning two lines.\n"
    merged = merge_memory("memory/MEMORY.md", base, ours, theirs)
    assert merged.clean
    assert merged.text == ("---\ntitle: M\n---\n- First lesson\n  with a second line.\n  and a third.\n- Second lesson.\n"
                           "- Main's lesson.\n- Branch lesson\n  spanning two lines.\n")
    theirs2 = base.replace("  with a second line.\n", "  changed by the branch.\n")
    conflict = merge_memory("memory/MEMORY.md", base, ours, theirs2)
    assert not conflict.clean and "First lesson" in conflict.conflicts[0].what


def test_a_new_section_from_the_branch_is_added_at_the_end():
    base = "---\ntitle: U\n---\n## Work\n\n- A.\n"
    ours = base + "- B.\n"
    theirs = base + "\n## Tools\n\n- Uses fish.\n"
    merged = merge_memory("memory/USER.md", base, ours, theirs)
    assert merged.clean and merged.text.endswith("- A.\n- B.\n\n## Tools\n\n- Uses fish.\n")


def test_skill_frontmatter_by_key_and_body_by_line(vault):
    def line_merge(b, o, t):
        return vault.git.merge_text(b, o, t)

    base = "---\nname: x\ndescription: d\nmetadata:\n  version: \"1\"\n---\n# X\n\n1. One.\n\nSome text.\n\nMore text.\n\n2. Two.\n"
    ours = base.replace('version: "1"', 'version: "2"').replace("1. One.", "1. One, by main.")
    theirs = base.replace("description: d", "description: d\nlicense: MIT").replace("2. Two.", "2. Two, by branch.")
    merged = merge_skill("skills/x/SKILL.md", base, ours, theirs, line_merge)
    assert merged.clean, merged.conflicts
    assert "license: MIT" in merged.text and ("version: '2'" in merged.text or 'version: "2"' in merged.text)
    assert "1. One, by main." in merged.text and "2. Two, by branch." in merged.text
    both = merge_skill("skills/x/SKILL.md", base, ours, base.replace('version: "1"', 'version: "3"'), line_merge)
    assert not both.clean and "metadata.version" in both.conflicts[0].what


def test_new_skill_without_a_reason_is_listed_as_created():
    from hermes_fs.learning.refine import parse_report

    class Files:
        class store:
            @staticmethod
            def read_file(commit, path):
                return b"old" if path == USER else None

        commit = "c"

    summary, lines = parse_report("", {"skills/new/SKILL.md": b"x", USER: b"y"}, Files())
    assert lines == ["- memory/USER.md: updated (no reason given)", "- skills/new/SKILL.md: created (no reason given)"]


def test_entries_that_only_moved_are_kept_not_read_as_replaced():
    """Merges of merges made on several machines order a section's entries differently in the base
    and on each side (the sync chaos run found it): both sides kept every entry, moved the same
    block after their own new entries, and added one more each. Read as "entry i became entry j",
    the two sides "replaced" the moved entries differently and conflicted, and one side's new
    entries survived only in the copy kept beside the file. A move is not a change."""
    head = "---\ntitle: M\n---\n## Lessons\n\n"
    base = head + "- x1\n- x2\n- x3\n- d\n"
    ours = head + "- d\n- o1\n- x1\n- x2\n- x3\n- o2\n"
    theirs = head + "- d\n- t1\n- x1\n- x2\n- x3\n- t2\n"
    merged = merge_memory("memory/MEMORY.md", base, ours, theirs)
    assert merged.clean, [c.describe() for c in merged.conflicts]
    assert merged.text == head + "- d\n- o1\n- x1\n- x2\n- x3\n- o2\n- t1\n- t2\n"
    # a moved entry that the other side changed takes that change where this side moved it
    changed = base.replace("- x2\n", "- x2, corrected\n")
    merged = merge_memory("memory/MEMORY.md", base, ours, changed)
    assert merged.clean and merged.text == head + "- d\n- o1\n- x1\n- x2, corrected\n- x3\n- o2\n"
    # and removed on the other side: gone
    merged = merge_memory("memory/MEMORY.md", base, ours, base.replace("- x3\n", ""))
    assert merged.clean and merged.text == head + "- d\n- o1\n- x1\n- x2\n- o2\n"
