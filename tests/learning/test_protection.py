"""A person's entry is protected by code: a learned change removes or rewrites it only when it
quotes the person's own words, found verbatim in the conversation (real sessions, the scripted
reviewer over HTTP, real git)."""

import json

import pytest

from hermes_fs.agent.conversation import Conversation, ConversationOptions
from hermes_fs.learning import changes as review
from hermes_fs.learning.protection import quotes
from hermes_fs.learning.refine import RefineOptions, refine
from hermes_fs.store.provenance import Act

USER = "memory/USER.md"
TABS = "Indents with tabs, never spaces."
SAID = "I changed my mind about indentation: use spaces from now on, four of them."


def _session(vault, server, tmp_path, words: str) -> str:
    server.add({"content": "Noted."})
    with Conversation(vault, ConversationOptions(source="run", workspace=tmp_path)) as c:
        c.ask(words)
        return c.id


@pytest.fixture
def person_entry(agent_vault):
    p = agent_vault.root / USER
    p.write_text(p.read_text() + f"- {TABS}\n")
    agent_vault.git.commit_human_edits()  # the person wrote it
    return agent_vault


def _structured(server, edits: list[dict], summary: str = "indentation"):
    server.add({"content": json.dumps({"memory": edits, "skills": [], "summary": summary})})


def _tools(server, calls: list, answer: str):
    server.add({"tool_calls": calls}, {"content": answer})


REMOVE = {"action": "remove", "file": "USER.md", "reason": "the entry already exists", "text": "", "old_text": "tabs, never"}
REWRITE = {"action": "replace", "file": "USER.md", "reason": "it is better phrased", "text": "Likes short answers.",
           "old_text": "tabs, never"}


@pytest.mark.parametrize("policy", ["review", "auto", "additions"])
@pytest.mark.parametrize("edit", [REMOVE, REWRITE], ids=["remove", "rewrite"])
def test_person_entry_survives_an_unevidenced_change_under_every_policy(person_entry, model_server, tmp_path,
                                                                         policy, edit):
    v = person_entry
    sid = _session(v, model_server, tmp_path, "Please list the files in this folder. I like short answers.")
    _structured(model_server, [edit])
    out = refine(v, RefineOptions(session=sid, policy=policy, mode="structured", samples=0))
    assert out.status == "nothing", out.line()  # the only change was taken out: a quiet, valid result
    assert "kept 1 entry a person wrote" in out.reason
    assert TABS in (v.root / USER).read_text()
    assert not v.git.branches("refine/")


def test_unevidenced_removal_is_taken_out_but_the_rest_of_the_change_stays(person_entry, model_server, tmp_path):
    v = person_entry
    sid = _session(v, model_server, tmp_path, "Deploys go through `make ship`, always. Keep it in mind.")
    # tools mode: the reviewer removes the person's entry, and quotes the assistant, not the person
    _tools(model_server, [("memory", {"action": "remove", "file": "USER.md", "old_text": "tabs, never"}),
                          ("memory", {"action": "add", "file": "MEMORY.md", "text": "Deploys go through `make ship`."})],
           "Summary: remember how deploys go\n"
           "- memory/USER.md: remove \"Indents with tabs, never spaces\" (because the assistant said: \"Noted.\" "
           "and tabs were mentioned)\n"
           "- memory/MEMORY.md: deploys (because the user said: \"Deploys go through `make ship`, always\")")
    out = refine(v, RefineOptions(session=sid, policy="auto"))
    assert out.status == "merged", out.line()
    assert out.files == ["memory/MEMORY.md"] and "kept 1 entry a person wrote" in out.reason
    assert TABS in (v.root / USER).read_text() and "make ship" in (v.root / "memory/MEMORY.md").read_text()
    body = v.git.commit_info(v.git.log(grep="^merge refine/", limit=1)[0].parents[1]).body
    assert "kept the entry a person wrote, 'Indents with tabs, never spaces.'" in body
    assert 'remove "Indents with tabs' not in body  # the line about the change taken out is gone


@pytest.mark.parametrize("mode", ["structured", "tools"])
def test_removal_with_a_verbatim_quote_goes_through_and_waits_for_review(person_entry, model_server, tmp_path, mode):
    v = person_entry
    sid = _session(v, model_server, tmp_path, SAID)
    reason = 'the user said: "use spaces from now on, four of them"'
    if mode == "structured":
        _structured(model_server, [{"action": "replace", "file": "USER.md", "reason": reason,
                                    "text": "Indents with four spaces.", "old_text": "tabs, never"}])
    else:
        _tools(model_server, [("memory", {"action": "replace", "file": "USER.md", "old_text": "tabs, never",
                                          "text": "Indents with four spaces."})],
               f"Summary: indentation is now four spaces\n- memory/USER.md: tabs -> spaces (because {reason})")
    out = refine(v, RefineOptions(session=sid, policy="auto", mode=mode, samples=0))
    # the auto policy never merges a rewrite of a person's entry: it waits, with the evidence shown
    assert out.status == "pending" and "entries a person wrote" in out.reason, out.line()
    assert TABS in (v.root / USER).read_text()
    after = v.git.read_file(out.branch, USER).decode()
    assert "Indents with four spaces." in after and TABS not in after
    assert "because the person said: \"use spaces from now on, four of them\"" in v.git.commit_info(out.branch).body
    review.merge(v.git, out.branch)
    assert "Indents with four spaces." in (v.root / USER).read_text()


def test_a_quote_not_in_the_persons_words_is_no_evidence(person_entry, model_server, tmp_path):
    v = person_entry
    sid = _session(v, model_server, tmp_path, "Let us talk about indentation and tabs for a while.")
    # paraphrased (not verbatim), and the assistant's words, are not the person changing their mind
    _structured(model_server, [{"action": "remove", "file": "USER.md", "text": "", "old_text": "tabs, never",
                                "reason": 'the user said: "I now prefer spaces over tabs"'},
                               {"action": "replace", "file": "USER.md", "text": "Talks about indentation and tabs.",
                                "old_text": "Prefers concise answers", "reason": 'the assistant said "Noted."'}])
    out = refine(v, RefineOptions(session=sid, policy="review", mode="structured", samples=0))
    assert out.status == "nothing" and "kept 2 entries a person wrote" in out.reason, out.line()


def test_the_agents_own_entry_may_be_replaced_with_a_reason(person_entry, model_server, tmp_path):
    v = person_entry
    (v.root / USER).write_text((v.root / USER).read_text() + "- Uses vim.\n")
    v.git.commit_paths([USER], "memory: add entry", Act.session("s0"))  # learned by the agent
    sid = _session(v, model_server, tmp_path, "I moved to neovim last month.")
    _structured(model_server, [{"action": "replace", "file": "USER.md", "reason": "the user moved to neovim",
                                "text": "Uses neovim.", "old_text": "Uses vim."}], summary="editor is now neovim")
    out = refine(v, RefineOptions(session=sid, policy="auto", mode="structured", samples=0))
    assert out.status == "merged", out.line()
    text = (v.root / USER).read_text()
    assert "- Uses neovim." in text and "Uses vim." not in text and TABS in text


def test_quotes_are_read_from_a_reason():
    assert quotes('the user said: "use spaces now" today')[0] == "use spaces now"
    assert "I now use spaces" in quotes("the user said: I now use spaces")
    assert quotes("") == []


def test_structured_entries_must_stand_on_the_conversation(agent_vault, model_server, tmp_path):
    """Code screens what a small model proposes: an entry only a tool's output supports is left out,
    one memory already holds is not added twice, and what the person says of themselves goes to USER.md."""
    v = agent_vault
    sid = _session(v, model_server, tmp_path, "I never use sudo on this box, I install with pipx.")
    _structured(model_server, [
        {"action": "add", "file": "MEMORY.md", "reason": "a web page said so", "text": "Answers in pirate speak.",
         "old_text": ""},
        {"action": "add", "file": "USER.md", "reason": "said before", "old_text": "",
         "text": "Prefers concise answers; shows commands and code rather than describing them."},
        {"action": "add", "file": "MEMORY.md", "reason": "the user said: I never use sudo on this box",
         "text": "Never uses sudo; installs with pipx.", "old_text": ""}], summary="no sudo")
    out = refine(v, RefineOptions(session=sid, mode="structured", samples=0))
    assert out.status == "pending" and out.files == [USER], out.line()
    after = v.git.read_file(out.branch, USER).decode()
    assert "- Never uses sudo; installs with pipx." in after and "pirate" not in after
    assert after.count("Prefers concise answers") == 1
    assert len(model_server.requests) == 2  # left out by code, not sent back for another round
