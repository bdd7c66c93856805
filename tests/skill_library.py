"""A skills folder too large for a small index budget, with one skill a request names by meaning
only: shared by the embedding and static-vector tests."""

REQUEST = "replace the old rsa credentials on all our machines"  # shares no word with ssh-key-rotation


def library(root, n=60) -> int:
    """n filler skills (the index no longer fits a 600-character budget) and ssh-key-rotation;
    returns how many skills the folder then holds (the vault's own included)."""
    for i in range(n):
        (root / "skills" / f"filler-{i}").mkdir()
        (root / "skills" / f"filler-{i}" / "SKILL.md").write_text(
            f"---\nname: filler-{i}\ndescription: Configure widget number {i} of the reporting pipeline, step by step.\n---\nbody\n")
    (root / "skills" / "ssh-key-rotation").mkdir()
    (root / "skills" / "ssh-key-rotation" / "SKILL.md").write_text(
        "---\nname: ssh-key-rotation\ndescription: Rotate SSH keys on servers and revoke the previous ones.\n---\nbody\n")
    return len(list((root / "skills").iterdir()))
