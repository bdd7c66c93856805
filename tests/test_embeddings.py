"""Semantic skill ranking (the optional `embeddings` extra): skipped where it is not installed.

With the real packaged model: a turn never encodes skills (a cold cache ranks by full-text and
says so in the log), and the vectors are built afterwards, by the daemon's background thread or by
the `skills embed` process a CLI turn without a daemon starts."""

import logging
import os
import subprocess
import sys

import pytest
from conftest import DaemonProc, copy_static_table, git, wait_for
from skill_library import REQUEST, library

from hermes_fs import Conversation, ConversationOptions
from hermes_fs.agent.prompt import skills_index
from hermes_fs.mind import embeddings
from hermes_fs.mind.embeddings import fuse
from hermes_fs.mind.search import SearchIndex, fill_vectors, vectors_lock, vectors_missing

needs_model = pytest.mark.skipif(not embeddings.available(), reason="the embeddings extra is not installed")


def test_fusion_puts_a_skill_high_in_either_ranking_first():
    assert fuse(["a", "b", "c"], ["c", "d"])[:2] == ["c", "a"]
    assert fuse([], ["x"]) == ["x"]


def vector_rows(root) -> dict[str, tuple[int, int]]:
    index = SearchIndex(root)
    try:
        index.db.execute("CREATE TABLE IF NOT EXISTS skill_vectors(path TEXT PRIMARY KEY, mtime_ns INTEGER, size INTEGER, vec BLOB)")
        return {p: (m, s) for p, m, s in index.db.execute("SELECT path, mtime_ns, size FROM skill_vectors")}
    finally:
        index.close()


def with_embeddings(root, extra: str = "") -> None:
    text = (root / "hermes.yaml").read_text()
    (root / "hermes.yaml").write_text(text + f"skills:\n  embeddings: true\n  prompt_budget_chars: 600\n{extra}")


@needs_model
@pytest.mark.slow
def test_a_request_sharing_no_word_finds_its_skill(vault, static_table):
    total = library(vault.root)
    copy_static_table(static_table, vault.root)
    assert fill_vectors(vault.root) == 2 * total  # static vectors and the model's
    assert "ssh-key-rotation" in skills_index(vault, REQUEST, 600, semantic=True).shown
    assert "ssh-key-rotation" in skills_index(vault, REQUEST, 600, semantic="model").shown
    assert "ssh-key-rotation" not in skills_index(vault, REQUEST, 600, semantic=False).shown
    # vectors are cached by (mtime, size): a second fill re-encodes nothing
    assert len(vector_rows(vault.root)) == total and fill_vectors(vault.root) == 0


@needs_model
@pytest.mark.slow
def test_a_turn_with_a_cold_cache_does_not_wait_for_encoding(agent_vault, model_server, tmp_path, caplog, static_table):
    total = library(agent_vault.root)
    copy_static_table(static_table, agent_vault.root)
    with_embeddings(agent_vault.root)
    agent_vault._config = None
    model_server.add({"content": "ok"}, {"content": "ok"})
    with caplog.at_level(logging.INFO, logger="hermes_fs"), Conversation(
            agent_vault, ConversationOptions(workspace=tmp_path)) as c:
        c.ask(REQUEST)
    assert vector_rows(agent_vault.root) == {}  # the turn ran no transformer: no wait
    # static vectors need only the token table: the turn encoded them itself (and kept them)
    assert f"{total} of {total} skills had no static vectors: encoded now" in caplog.text
    assert f"{total} of {total} skills have no model vectors yet (being built): ranked without them" in caplog.text
    assert "ssh-key-rotation" in model_server.requests[0]["messages"][0]["content"].split("# Skills")[1]
    assert "ssh-key-rotation" not in skills_index(agent_vault, REQUEST, 600, semantic=False).shown  # full-text misses it
    # the model's filled afterwards (what the daemon's thread and `skills embed` run); the static ones were kept
    assert fill_vectors(agent_vault.root) == total and vectors_missing(agent_vault.root) == 0
    with Conversation(agent_vault, ConversationOptions(workspace=tmp_path)) as c:
        c.ask(REQUEST)
    assert "ssh-key-rotation" in model_server.requests[1]["messages"][0]["content"].split("# Skills")[1]


@needs_model
@pytest.mark.slow
def test_the_daemon_builds_the_vectors_in_the_background_and_refreshes_a_changed_skill(vault, static_table):
    total = library(vault.root)
    copy_static_table(static_table, vault.root)
    with_embeddings(vault.root)
    git(vault, "add", "-A")
    git(vault, "commit", "-qm", "test: skills")
    d = DaemonProc(vault.root)
    try:
        assert wait_for(lambda: len(vector_rows(vault.root)) == total, timeout=600, interval=0.5), d.output()
        assert "skill vectors: encoded" in d.output()
        skill = vault.root / "skills" / "ssh-key-rotation" / "SKILL.md"
        skill.write_text(skill.read_text().replace("revoke the previous ones", "revoke every older key"))
        st = os.stat(skill)
        key = "skills/ssh-key-rotation/SKILL.md"
        assert wait_for(lambda: vector_rows(vault.root).get(key) == (st.st_mtime_ns, st.st_size), timeout=300,
                        interval=0.5), d.output()
    finally:
        assert d.stop() == 0, d.output()


@needs_model
@pytest.mark.slow
def test_a_cli_turn_without_a_daemon_builds_the_vectors_in_a_background_process(agent_vault, model_server, static_table):
    total = library(agent_vault.root)
    copy_static_table(static_table, agent_vault.root)
    with_embeddings(agent_vault.root)
    model_server.add({"content": "ok"})
    proc = subprocess.run([sys.executable, "-m", "hermes_fs", "--vault", str(agent_vault.root), "run", REQUEST],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "HERMES_NO_DAEMON": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "building skill vectors in the background" in proc.stderr
    # the turn itself ranked by the static vectors it encoded from the token table; the model's come later
    assert "ssh-key-rotation" in model_server.requests[0]["messages"][0]["content"].split("# Skills")[1]
    assert wait_for(lambda: len(vector_rows(agent_vault.root)) == total, timeout=600, interval=0.5)
    assert wait_for(lambda: not vectors_lock(agent_vault.root).is_held(), timeout=180)  # the process is done
