"""Writers racing each other on real files (issue 22): several processes adding memory entries
through the same ToolBox an MCP client uses, while a person appends lines to USER.md by hand, and
processes writing one file with atomic_write at once. No line may be lost, no write may fail."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from conftest import git

WORKER = r"""
import sys
from hermes_fs.agent.tools import ToolBox, VaultCommitter
from hermes_fs.store.provenance import Act
from hermes_fs.store.vault import Vault
import json

root, wid, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
from pathlib import Path
vault = Vault(Path(root))
box = ToolBox(files=vault.files, config=vault.config, enabled=["memory"], vault_root=vault.root,
              committer=VaultCommitter(vault.git, Act.client(f"worker-{wid}")))
for i in range(n):
    text = f"Worker {wid} lesson {i}."
    out = box.call("memory", json.dumps({"action": "add", "file": "USER.md", "text": text}))
    print(json.dumps({"text": text, "result": out}), flush=True)
"""

EDITOR = r"""
import os, sys, time
path, stop = sys.argv[1], sys.argv[2]
i = 0
while not os.path.exists(stop) and i < 600:  # types a line every few milliseconds while the writers work
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)   # what `echo ... >> USER.md` does
    os.write(fd, f"- The person typed line {i}.\n".encode())
    os.close(fd)
    i += 1
    time.sleep(0.01)
print(i)
"""


@pytest.mark.slow
def test_mcp_writers_and_a_person_typing_lose_no_line(vault):
    import json

    user = vault.root / "memory/USER.md"
    user.write_text(user.read_text().replace("---\n", "---\nbudget: 50000\n", 1))
    from hermes_fs.store.provenance import Act

    vault.git.commit_paths(["memory/USER.md"], "room for the test", Act.person())
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, str(vault.root), str(w), "10"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in range(6)]
    time.sleep(0.3)
    stop = vault.root / ".hermes" / "stop-typing"
    editor = subprocess.Popen([sys.executable, "-c", EDITOR, str(user), str(stop)], stdout=subprocess.PIPE, text=True)
    outputs = [w.communicate(timeout=600) for w in workers]
    stop.touch()
    typed = int(editor.communicate(timeout=180)[0])
    assert all(w.returncode == 0 for w in workers), [o[1][-2000:] for o in outputs]
    results = [json.loads(line) for out, _ in outputs for line in out.splitlines()]
    final = user.read_text()
    ok = [r["text"] for r in results if r["result"].startswith("ok")]
    assert len(ok) == 60, [r["result"] for r in results if not r["result"].startswith("ok")]
    assert [t for t in ok if t not in final] == []  # every add that answered ok is there
    assert [i for i in range(typed) if f"- The person typed line {i}.\n" not in final] == []  # and every typed line
    assert not list(user.parent.glob(".*hermes-tmp"))
    vault.git.commit_human_edits()
    committed = git(vault, "show", "HEAD:memory/USER.md")
    assert all(t in committed for t in ok) and all(f"typed line {i}." in committed for i in range(typed))


ATOMIC = r"""
import sys
from pathlib import Path
from hermes_fs.store.files import atomic_write
target, wid = Path(sys.argv[1]), sys.argv[2]
for i in range(150):
    atomic_write(target, (f"{wid}:{i}:" + "x" * 20000 + "\n").encode())
"""


def test_atomic_write_from_several_processes_never_collides(tmp_path):
    target = tmp_path / "USER.md"
    procs = [subprocess.Popen([sys.executable, "-c", ATOMIC, str(target), str(w)], stderr=subprocess.PIPE, text=True)
             for w in range(4)]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errs
    text = target.read_text()
    assert text.endswith("x" * 20000 + "\n") and text.count(":") == 2  # one whole write, never a mix
    assert not list(tmp_path.glob(".*hermes-tmp"))


def test_a_change_redone_on_text_written_meanwhile(vault):
    """The swap sees a write that landed between the read and the write, and redoes the change on it."""
    from hermes_fs.mind import memory
    from hermes_fs.store.edit import edit

    user = vault.root / "memory/USER.md"
    typed = []

    def change(files):
        result = memory.add(files, vault.config, "USER.md", "Added by the agent.")
        if not typed:  # the person's editor saves after the change read the file, before it is written
            user.write_text(user.read_text() + "- Typed while the agent was thinking.\n")
            typed.append(1)
        return result

    edit(vault.files, vault.git.lock, change)
    text = user.read_text()
    assert "- Typed while the agent was thinking.\n" in text and "- Added by the agent.\n" in text


@pytest.mark.slow
def test_saves_from_the_web_page_and_a_person_typing_lose_no_line(vault):
    """The page's save (compare-and-swap against what it loaded) while an editor appends lines
    without taking our lock: each save is either refused (the page shows both) or lands, and no
    typed line and no landed save is lost."""
    from hermes_fs.service.web.edits import digest, save
    from hermes_fs.store.provenance import Act

    user = vault.root / "memory/USER.md"
    user.write_text(user.read_text().replace("---\n", "---\nbudget: 50000\n", 1))
    vault.git.commit_paths(["memory/USER.md"], "room for the test", Act.person())
    stop = vault.root / ".hermes" / "stop-typing"
    editor = subprocess.Popen([sys.executable, "-c", EDITOR, str(user), str(stop)], stdout=subprocess.PIPE, text=True)
    landed, refused = [], 0
    try:
        for k in range(40):
            loaded = user.read_bytes()
            line = f"- Saved from the page {k}.\n"
            saved = save(vault, "memory/USER.md", loaded.decode() + line, digest(loaded))
            (landed.append(line) if saved.ok else None)
            refused += not saved.ok
    finally:
        stop.touch()
        typed = int(editor.communicate(timeout=180)[0])
    final = user.read_text()
    assert landed, "no save landed"
    assert [x for x in landed if x not in final] == []
    assert [i for i in range(typed) if f"- The person typed line {i}.\n" not in final] == []
    assert not list(user.parent.glob(".*hermes-tmp"))
