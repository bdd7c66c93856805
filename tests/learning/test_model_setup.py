"""`init --model`: the model set in hermes.yaml and the review mode that suits it, decided by the
same tool-call probe `doctor` runs (against the scripted model server over HTTP), or, when the
model cannot be asked, by whether it is local."""

from __future__ import annotations

import socket

import pytest
import yaml
from conftest import git

from hermes_fs.errors import InputError
from hermes_fs.learning.model_setup import is_local, set_key
from hermes_fs.store.vault import Vault


def settings(root) -> dict:
    return yaml.safe_load((root / "hermes.yaml").read_text())


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_model_that_answers_in_words_gets_structured_mode(tmp_path, model_server, run_cli):
    model_server.add({"content": "I have noted 'ok'."})
    root = tmp_path / "v"
    r = run_cli("init", str(root), "--model", "openai/qwen-small", "--api-base", model_server.api_base)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "model openai/qwen-small at" in r.stdout and "review mode structured (probed: asked to call a tool, " \
        "it answered in words)" in r.stdout
    s = settings(root)
    assert s["model"] == "openai/qwen-small" and s["api_base"] == model_server.api_base
    assert s["refine"]["mode"] == "structured" and s["learn"]["mode"] == "structured"
    assert s["refine"]["policy"] == "review"  # the rest of the section as it was
    text = (root / "hermes.yaml").read_text()
    assert "# hermes-fs vault settings." in text and "# review: leave each learned change" in text  # comments kept
    assert [t["function"]["name"] for t in model_server.requests[0]["tools"]] == ["note"]
    assert git(Vault(root), "status", "--porcelain") == ""
    assert "init: model openai/qwen-small, review mode structured" in git(Vault(root), "log", "-1", "--format=%s")
    assert Vault(root).config.refine.mode == "structured"


def test_a_model_that_calls_the_tool_keeps_tools_mode(tmp_path, model_server):
    from hermes_fs import init_vault, setup_model

    model_server.add({"tool_calls": [("note", {"text": "ok"})]})
    chosen = setup_model(init_vault(tmp_path / "v").vault, "openai/big", model_server.api_base)
    assert (chosen.mode, chosen.probed, chosen.detail) == ("tools", True, "it called a tool when asked")
    s = settings(tmp_path / "v")
    assert s["model"] == "openai/big" and "mode" not in s["refine"] and "learn" not in s


def test_a_model_that_cannot_be_asked_is_judged_by_where_it_runs(tmp_path, run_cli, monkeypatch):
    from hermes_fs import init_vault, setup_model

    base = f"http://127.0.0.1:{closed_port()}/v1"  # the server is not started yet
    local = setup_model(init_vault(tmp_path / "local").vault, "openai/qwen2.5-coder-1.5b-instruct", base)
    assert (local.mode, local.probed) == ("structured", False)
    assert local.detail.startswith("the model did not answer") and "small local models rarely call tools" in local.detail
    assert settings(tmp_path / "local")["refine"]["mode"] == "structured"
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    hosted = setup_model(init_vault(tmp_path / "hosted").vault, "anthropic/claude-sonnet-4-5")
    assert (hosted.mode, hosted.probed) == ("tools", False) and "no API key" in hosted.detail
    assert "mode" not in settings(tmp_path / "hosted")["refine"]
    r = run_cli("init", str(tmp_path / "quick"), "--model", "ollama_chat/llama3.1", "--no-probe")
    assert "review mode structured (not probed: --no-probe" in r.stdout, r.stdout + r.stderr
    r = run_cli("init", str(tmp_path / "bad"), "--api-base", base)
    assert r.returncode == 2 and "--api-base goes with --model" in r.stderr


def test_is_local():
    assert is_local("ollama_chat/llama3.1", None) and is_local("openai/x", "http://127.0.0.1:8090/v1")
    assert is_local("openai/x", "http://localhost:11434") and is_local("openai/x", "http://192.168.1.20:8000/v1")
    assert not is_local("openai/gpt-4o-mini", None) and not is_local("openai/x", "https://api.example.com/v1")


def test_set_key_keeps_comments_and_refuses_what_it_cannot_edit():
    text = "# top\nmodel: a  # old\nrefine:\n  # the policy\n  policy: review\n\nmemory:\n  budgets: {}\n"
    out = set_key(set_key(set_key(text, "model", "openai/b: c"), "refine.mode", "structured"), "learn.mode", "structured")
    assert yaml.safe_load(out) == {"model": "openai/b: c", "refine": {"mode": "structured", "policy": "review"},
                                   "memory": {"budgets": {}}, "learn": {"mode": "structured"}}
    assert "# top" in out and "# the policy" in out
    assert yaml.safe_load(set_key(out, "refine.mode", "tools"))["refine"]["mode"] == "tools"  # replaced, not doubled
    with pytest.raises(InputError, match="written on one line"):
        set_key("refine: {policy: review}\n", "refine.mode", "structured")


def test_setup_refuses_a_multiline_model_and_leaves_the_vault_as_it_was(vault):
    from hermes_fs import setup_model

    before = (vault.root / "hermes.yaml").read_text()
    with pytest.raises(InputError, match="one line"):
        setup_model(vault, "openai/x\nsandbox: {backend: local}")
    assert (vault.root / "hermes.yaml").read_text() == before
