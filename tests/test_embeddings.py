"""Semantic skill ranking (the optional `embeddings` extra): skipped where it is not installed."""

import pytest

from hermes_fs.agent.prompt import skills_index
from hermes_fs.mind import embeddings
from hermes_fs.mind.embeddings import fuse


def test_fusion_puts_a_skill_high_in_either_ranking_first():
    assert fuse(["a", "b", "c"], ["c", "d"])[:2] == ["c", "a"]
    assert fuse([], ["x"]) == ["x"]


@pytest.mark.skipif(not embeddings.available(), reason="the embeddings extra is not installed")
def test_a_request_sharing_no_word_finds_its_skill(vault):
    for i in range(60):  # enough skills that the index no longer fits the budget
        (vault.root / "skills" / f"filler-{i}").mkdir()
        (vault.root / "skills" / f"filler-{i}" / "SKILL.md").write_text(
            f"---\nname: filler-{i}\ndescription: Configure widget number {i} of the reporting pipeline, step by step.\n---\nbody\n")
    (vault.root / "skills" / "ssh-key-rotation").mkdir()
    (vault.root / "skills" / "ssh-key-rotation" / "SKILL.md").write_text(
        "---\nname: ssh-key-rotation\ndescription: Rotate SSH keys on servers and revoke the previous ones.\n---\nbody\n")
    request = "replace the old rsa credentials on all our machines"
    assert "ssh-key-rotation" in skills_index(vault, request, 600, semantic=True).shown
    assert "ssh-key-rotation" not in skills_index(vault, request, 600, semantic=False).shown
    # vectors are cached by (mtime, size): a second ranking re-encodes nothing
    from hermes_fs.mind.search import SearchIndex

    index = SearchIndex(vault.root)
    try:
        assert index.db.execute("SELECT count(*) FROM skill_vectors").fetchone()[0] == 63
    finally:
        index.close()
