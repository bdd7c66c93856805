import pytest

from hermes_fs.errors import InputError
from hermes_fs.mind import memory
from hermes_fs.store.config import Config
from hermes_fs.store.docs import parse_doc
from hermes_fs.store.files import DiskFiles

CFG = Config()

SAMPLE = """---
title: User
budget: 600
---
# About

Some free prose that is not an entry.

## Preferences

- Likes tea,
  not coffee.
- Uses vim   
* Works in Europe/Paris

## Projects
- hermes-fs is written in Python
"""


@pytest.fixture
def files(tmp_path):
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "USER.md").write_text(SAMPLE)
    return DiskFiles(tmp_path)


def raw(files):
    return (files.root / "memory" / "USER.md").read_bytes()


def test_parse_entries_sections_and_continuations(files):
    m = memory.load(files, "USER.md", CFG)
    assert [e.text for e in m.entries] == [
        "- Likes tea,\n  not coffee.", "- Uses vim   ", "* Works in Europe/Paris", "- hermes-fs is written in Python"]
    assert [e.section for e in m.entries] == ["Preferences", "Preferences", "Preferences", "Projects"]
    assert m.budget == 600  # frontmatter overrides hermes.yaml


def test_replace_touches_only_the_entry(files):
    before = raw(files)
    memory.replace(files, CFG, "USER.md", "tea", "Likes green tea")
    after = raw(files)
    old_entry = b"- Likes tea,\n  not coffee.\n"
    i = before.index(old_entry)
    assert after[:i] == before[:i]
    assert after[i:].startswith(b"- Likes green tea\n")
    assert after[i + len(b"- Likes green tea\n"):] == before[i + len(old_entry):]  # trailing spaces kept too


def test_remove_and_add(files):
    memory.remove(files, CFG, "memory/USER.md", "Uses vim")
    assert b"Uses vim" not in raw(files)
    assert b"- Uses vim" not in raw(files) and b"Works in Europe/Paris" in raw(files)
    memory.add(files, CFG, "USER.md", "Uses emacs\nwith evil-mode", section="Preferences")
    text = raw(files).decode()
    assert "* Works in Europe/Paris\n- Uses emacs\n  with evil-mode\n\n## Projects" in text
    memory.add(files, CFG, "USER.md", "Reads French", section="Languages")
    assert text in raw(files).decode()  # appended: nothing before it changed
    assert raw(files).decode().endswith("## Languages\n\n- Reads French\n")
    m = memory.load(files, "USER.md", CFG)
    assert m.entries[-1].section == "Languages"


def test_ambiguous_and_missing_old_text_list_candidates(files):
    with pytest.raises(InputError) as exc:
        memory.remove(files, CFG, "USER.md", "es ")  # "Likes tea", "Uses vim"
    assert "2 entries contain 'es '" in str(exc.value)
    assert "'Likes tea,'" in str(exc.value) and "'Uses vim'" in str(exc.value)
    with pytest.raises(InputError) as exc:
        memory.remove(files, CFG, "USER.md", "golang")
    assert "no entry contains 'golang'" in str(exc.value) and "Likes tea," in str(exc.value)
    with pytest.raises(InputError, match="old_text is empty"):
        memory.remove(files, CFG, "USER.md", "  ")


def test_budget_refuses_growth_past_limit(files):
    before = raw(files)
    with pytest.raises(memory.BudgetError, match="over budget"):
        memory.add(files, CFG, "USER.md", "x" * 700)
    assert raw(files) == before  # nothing written


def test_duplicate_entry_refused(files):
    with pytest.raises(InputError, match="already exists"):
        memory.add(files, CFG, "USER.md", "Uses vim")


def test_crlf_files_keep_their_line_endings(tmp_path):
    (tmp_path / "memory").mkdir()
    p = tmp_path / "memory" / "MEMORY.md"
    p.write_bytes(b"---\r\ntitle: M\r\n---\r\n- one\r\n- two\r\n")
    files = DiskFiles(tmp_path)
    memory.replace(files, CFG, "MEMORY.md", "one", "uno")
    memory.add(files, CFG, "MEMORY.md", "three")
    assert p.read_bytes() == b"---\r\ntitle: M\r\n---\r\n- uno\r\n- two\r\n- three\r\n"


def test_new_project_file_is_created(tmp_path):
    files = DiskFiles(tmp_path)
    memory.add(files, CFG, "projects/acme.md", "Deploys with fly.io")
    m = memory.load(files, "projects/acme.md", CFG)
    assert m.budget == 3000 and m.entries[0].text == "- Deploys with fly.io"


@pytest.mark.parametrize("name", ["../etc/passwd", "notes.md", "projects/a/b.md", "/abs/USER.md", ".git/config"])
def test_bad_memory_names(tmp_path, name):
    with pytest.raises(InputError):
        memory.load(DiskFiles(tmp_path), name, CFG)


def test_malformed_frontmatter_and_binary(tmp_path):
    (tmp_path / "memory").mkdir()
    files = DiskFiles(tmp_path)
    (tmp_path / "memory" / "USER.md").write_text("---\ntitle: [oops\n---\n- a\n")
    with pytest.raises(InputError, match=r"memory/USER.md:\d+: invalid YAML frontmatter"):
        memory.load(files, "USER.md", CFG)
    (tmp_path / "memory" / "USER.md").write_bytes(b"\x89PNG\x00\x00binary")
    with pytest.raises(InputError, match="binary file"):
        memory.load(files, "USER.md", CFG)
    (tmp_path / "memory" / "USER.md").write_bytes(b"- caf\xe9\n")
    with pytest.raises(InputError, match=r"memory/USER.md:1: not UTF-8"):
        memory.load(files, "USER.md", CFG)


# -- one parser of the memory format (issue 21 item 15) ------------------------------------------
TRICKY = [
    "---\ntitle: U\n---\n## Prefs\n\n- Likes tea,\n  not coffee.\n* Uses vim   \n\ttabbed continuation\n\n## \n- untitled section\n",
    "---\ntitle: U\n---\r\n- crlf entry\r\n  more\r\n## Work\r\n- b\r\nplain text\r\n  indented text, not a continuation\n",
    "---\ntitle: U\n---\n-not a bullet\n- real\n   \n- after a blank-ish line\n# H1\n###### H6 \n- six\n- no final newline",
]


def test_edits_and_merges_read_memory_through_one_parser():
    from hermes_fs.mind import merge

    assert merge.units is memory.units and merge.Unit is memory.Unit
    assert not hasattr(merge, "_BULLET") and not hasattr(merge, "_HEADING")
    for text in TRICKY:
        doc = parse_doc(text, "memory/USER.md")
        body_units = memory.units(doc.body)
        assert "".join(u.raw for u in body_units) == doc.body
        entries = memory.parse_entries(doc)
        assert [e.text for e in entries] == [u.raw.rstrip("\r\n") for u in body_units if u.kind == "entry"]
        assert [e.section for e in entries] == [u.section for u in body_units if u.kind == "entry"]
        assert all(text[e.start:e.end].rstrip("\r\n") == e.text for e in entries)


def test_a_change_of_format_reaches_edits_and_merges_alike(monkeypatch):
    """Say `+ ` starts an entry too: the editor and the merge must both see `+ B.` as an entry."""
    import re

    from hermes_fs.mind.merge import merge_memory

    monkeypatch.setattr(memory, "_BULLET", re.compile(r"^[-*+] "))
    base = "---\ntitle: U\n---\n- A.\n"
    ours, theirs = base + "+ B.\n", base + "+ C.\n"
    assert [e.text for e in memory.parse_entries(parse_doc(ours, "memory/USER.md"))] == ["- A.", "+ B."]
    merged = merge_memory("memory/USER.md", base, ours, theirs)
    assert merged.clean and merged.text == base + "+ B.\n+ C.\n"
