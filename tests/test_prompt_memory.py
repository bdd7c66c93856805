"""The memory part of a prompt: bounded by the budget, secrets kept out, cost not growing with the
file (a file far over its budget is neither split into entries nor scanned past the budget)."""

from __future__ import annotations

from hermes_fs.agent.prompt import SECRET_SCAN_MARGIN, system_prompt
from hermes_fs.mind import memory

USER = "memory/USER.md"
KEY = "sk-ant-api03-" + "q" * 30


def _write(vault, body: str, budget: int = 4000) -> None:
    (vault.root / USER).write_text(f"---\ntitle: User\nbudget: {budget}\n---\n{body}")


def test_a_secret_inside_the_budget_keeps_the_file_out(vault):
    _write(vault, "- likes tea\n" + f"- {KEY}\n")
    prompt = system_prompt(vault)
    assert KEY not in prompt and "memory/USER.md holds a secret" in prompt and "likes tea" not in prompt


def test_a_secret_cut_by_the_budget_is_still_caught(vault):
    # the key starts 10 characters before the cut: the prompt would carry its first 10 characters
    filler = "- " + "a" * 3985 + "\n"
    _write(vault, filler + f"- {KEY}\n", budget=len(filler) + 2 + 10)
    prompt = system_prompt(vault)
    assert "holds a secret" in prompt and KEY[:10] not in prompt.split("holds a secret")[0][-200:]


def test_a_secret_far_past_the_budget_never_reaches_the_model_and_does_not_hide_the_rest(vault):
    head = "- prefers pnpm for node projects\n"
    tail = "".join(f"- fact {i}\n" for i in range(2000)) + f"- {KEY}\n"
    assert len(tail) > 4000 + SECRET_SCAN_MARGIN
    _write(vault, head + tail)
    prompt = system_prompt(vault)
    assert "prefers pnpm" in prompt and KEY not in prompt and "more characters over budget" in prompt


def test_the_prompt_view_does_not_split_a_huge_file_into_entries(vault, monkeypatch):
    big = "".join(f"- fact number {i}\n" for i in range(50_000))  # about 1 MB
    _write(vault, "- first\n" + big)

    def refuse(*_a, **_k):
        raise AssertionError("the prompt must not parse every entry of a memory file")

    monkeypatch.setattr(memory, "parse_entries", refuse)
    view = memory.prompt_view(vault.files, "USER.md", vault.config)
    assert view.body.startswith("- first") and view.budget == 4000
    assert "- first" in system_prompt(vault)
