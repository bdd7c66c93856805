"""Structured mode: the reviewer answers one JSON document; the same overlay, checks, branch and review."""

import json

import pytest
from conftest import git
from test_refine import SKILL, session  # noqa: F401  (the fixture: a real session)

from hermes_fs.agent.conversation import Conversation, ConversationOptions
from hermes_fs.learning.learn import LearnOptions, learn
from hermes_fs.learning.refine import STRUCTURED_REVIEWER_PROMPT, RefineOptions, refine
from hermes_fs.learning.structured import (
    ReviewDocument,
    ReviewSkillEdit,
    SkillDocument,
    SkillEdit,
    json_schema,
    parse_document,
    tool_calls,
)
from hermes_fs.store.provenance import Act

USER = "memory/USER.md"


def doc(memory=(), skills=(), summary="remember the tabs preference"):
    return json.dumps({"summary": summary, "memory": list(memory), "skills": list(skills)})


def mem(text, action="add", file="USER.md", old_text="", reason="the user said so"):
    return {"action": action, "file": file, "text": text, "old_text": old_text, "reason": reason}


def skill(name, content="", action="create", old_text="", new_text="", reason="it worked"):
    """A refine skill entry (create or patch SKILL.md; no support files)."""
    return {"action": action, "name": name, "reason": reason, "content": content, "old_text": old_text,
            "new_text": new_text}


def learn_skill(name, content="", action="create", file=""):
    """A learn skill entry (it may write support files)."""
    return {**skill(name, content, action), "file": file}


def structured(vault):
    (vault.root / "hermes.yaml").write_text((vault.root / "hermes.yaml").read_text()
                                            + "refine:\n  mode: structured\n  samples: 0\nlearn:\n  mode: structured\n")
    vault.git.commit_paths(["hermes.yaml"], "test: structured mode", Act.person())
    vault._config = None


def test_document_becomes_the_same_branch_as_tool_edits(agent_vault, model_server, session):  # noqa: F811
    structured(agent_vault)
    model_server.add({"content": doc([mem("Prefers tabs over spaces.")], [skill("deploy-fly", SKILL)])})
    result = refine(agent_vault, RefineOptions())
    assert result.status == "pending", result.reason
    assert sorted(result.files) == [USER, "skills/deploy-fly/SKILL.md"]
    info = agent_vault.git.commit_info(result.branch)
    assert info.parents == [result.snapshot]
    assert info.summary == "remember the tabs preference"
    assert '- memory/USER.md: add "Prefers tabs over spaces." (because the user said so)' in info.body
    assert b"- Prefers tabs over spaces." in agent_vault.git.read_file(result.branch, USER)
    assert "tabs" not in (agent_vault.root / USER).read_text()  # nothing touched main
    req = model_server.requests[-1]
    assert "tools" not in req
    fmt = req["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"] == json_schema(ReviewDocument)
    assert "USER: I always use tabs, not spaces." in req["messages"][1]["content"]
    assert "You have no tools" in req["messages"][0]["content"]


def test_nothing_to_change(agent_vault, model_server, session):  # noqa: F811
    model_server.add({"content": doc(summary="nothing to change")})
    result = refine(agent_vault, RefineOptions(mode="structured", samples=0))
    assert result.status == "nothing", result.reason


@pytest.mark.parametrize("garbage", ["Sure! I will remember that.", '{"summary": "x", "memory": [{"action": "add"}]}',
                                     "", '{"summary": 3, "memory": [], "skills": []', "```json\n[1, 2]\n```"])
def test_garbage_answers_fail_clearly_and_leave_nothing(agent_vault, model_server, session, garbage):  # noqa: F811
    model_server.add(*[{"content": garbage}] * 3)
    heads = git_heads(agent_vault)
    result = refine(agent_vault, RefineOptions(mode="structured", samples=0))
    assert result.status == "failed"
    assert "structured mode: the model's answer is not a valid ReviewDocument after 3 tries" in result.reason
    assert git_heads(agent_vault) == heads  # no branch
    retry = model_server.requests[-1]["messages"][-1]["content"]
    assert retry.startswith("That answer is ") and "Answer again with only the JSON document" in retry


def git_heads(vault):
    return git(vault, "for-each-ref", "--format=%(refname)", "refs/heads")


def test_invalid_then_valid_is_applied(agent_vault, model_server, session):  # noqa: F811
    model_server.add({"content": "I think the user likes tabs."}, {"content": doc([mem("Prefers tabs.")])})
    result = refine(agent_vault, RefineOptions(mode="structured", samples=0))
    assert result.status == "pending", result.reason
    assert b"- Prefers tabs." in agent_vault.git.read_file(result.branch, USER)


def test_refused_entries_go_back_and_the_correction_replaces_them(agent_vault, model_server, session):  # noqa: F811
    bad = doc([mem("Prefers tabs.", action="replace", old_text="no such entry"), mem("Ships on Fridays.")])
    model_server.add({"content": bad}, {"content": doc([mem("Prefers tabs.")])})
    result = refine(agent_vault, RefineOptions(mode="structured", samples=0))
    assert result.status == "pending", result.reason
    text = agent_vault.git.read_file(result.branch, USER).decode()
    assert "- Prefers tabs." in text and "Fridays" not in text  # the correction replaced the first document
    sent = model_server.requests[-1]["messages"][-1]["content"]
    assert sent.startswith("These entries were refused:") and "no such entry" not in sent.split("\n")[0]


def test_checks_refuse_and_the_model_fixes(agent_vault, model_server, session):  # noqa: F811
    """A secret is refused at the overlay; a skill the validator refuses goes back through the pipeline."""
    bad_skill = skill("deploy-fly", "---\nname: deploy-fly\ndescription: ''\n---\nbody\n")
    model_server.add({"content": doc([mem("Prefers tabs.")], [bad_skill])},
                     {"content": doc([mem("Prefers tabs.")], [skill("deploy-fly", SKILL)])})
    result = refine(agent_vault, RefineOptions(mode="structured", samples=0))
    assert result.status == "pending", result.reason
    assert "skills/deploy-fly/SKILL.md" in result.files
    assert len(model_server.requests) >= 3


def test_a_secret_or_a_path_outside_memory_never_lands(agent_vault, model_server, session):  # noqa: F811
    key = "sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    evil = doc([mem(f"The API key is {key}"), mem("x", file="../../hermes.yaml")])
    model_server.add(*[{"content": evil}] * 3)
    result = refine(agent_vault, RefineOptions(mode="structured", samples=0))
    assert result.status == "nothing", result.reason  # both refused, three times: nothing applied
    assert key not in json.dumps(model_server.requests[-1]["messages"][-1])


def test_duplicate_skill_guard_is_the_same(agent_vault, model_server, session):  # noqa: F811
    twin = SKILL.replace("deploy-fly", "writing-skills")
    model_server.add(*[{"content": doc(skills=[skill("writing-skills", twin)])}] * 3)
    result = refine(agent_vault, RefineOptions(mode="structured", samples=0))
    assert result.status == "nothing"
    assert "nearly duplicates the existing skill 'writing-skills'" in model_server.requests[-1]["messages"][-1]["content"] \
        or "already exists" in model_server.requests[-1]["messages"][-1]["content"]


def test_learn_structured(agent_vault, model_server, tmp_path):
    structured(agent_vault)
    src = tmp_path / "guide.md"
    src.write_text("# Deploying\n\nRun `fly deploy --strategy rolling`, then `fly status`.\n")
    model_server.add({"content": json.dumps({"summary": "deploy skill", "skills": [learn_skill("deploy-fly", SKILL)]})})
    result = learn(agent_vault, LearnOptions([src]))
    assert result.status == "pending", result.reason
    assert result.files == ["skills/deploy-fly/SKILL.md"]
    req = model_server.requests[-1]
    assert "memory" not in req["response_format"]["json_schema"]["schema"]["properties"]
    assert "<source" in req["messages"][1]["content"]


def test_learn_update_restriction_holds_in_structured_mode(agent_vault, model_server, tmp_path):
    src = tmp_path / "guide.md"
    src.write_text("# Notes on skills\n\nWrite each skill with a description that says when to use it.\n")
    other = json.dumps({"summary": "x", "skills": [learn_skill("deploy-fly", SKILL)]})
    model_server.add(*[{"content": other}] * 3)
    result = learn(agent_vault, LearnOptions([src], update="writing-skills", mode="structured"))
    assert result.status == "nothing"
    assert "may only" in model_server.requests[-1]["messages"][-1]["content"]


def test_parse_document_tolerates_a_fence_only():
    assert parse_document("```json\n" + doc() + "\n```", ReviewDocument).summary == "remember the tabs preference"
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_document("Here it is: " + doc(), ReviewDocument)
    with pytest.raises(ValueError, match="Extra inputs"):
        parse_document(doc()[:-1] + ', "shell": "rm -rf /"}', ReviewDocument)


@pytest.mark.slow
def test_doctor_says_which_mode_suits_the_model(agent_vault, model_server, run_cli):
    """One tiny tool-call probe: a model that answers in words is pointed at structured mode."""
    (agent_vault.root / "hermes.yaml").write_text((agent_vault.root / "hermes.yaml").read_text().replace(
        "backend: local", "backend: none"))
    model_server.add({"content": "ok"}, {"content": "I have noted 'ok'."})
    r = run_cli("--vault", str(agent_vault.root), "doctor")
    assert r.returncode == 1, r.stdout
    assert ("BAD review mode: structured suits openai/test-model: asked to call a tool, it answered in words; "
            "set refine.mode: structured and learn.mode: structured in hermes.yaml") in r.stdout
    probe = model_server.requests[1]
    assert [t["function"]["name"] for t in probe["tools"]] == ["note"]
    structured(agent_vault)  # configured as the probe suggests: fine (in-process: one CLI start is enough)
    from hermes_fs.learning.structured import check_mode

    model_server.add({"content": "noted"})
    assert check_mode(agent_vault) == (True, "structured suits openai/test-model: asked to call a tool, it answered "
                                       "in words")


def test_doctor_names_the_missing_embeddings_extra(agent_vault, run_cli):
    from hermes_fs.mind import embeddings

    (agent_vault.root / "hermes.yaml").write_text((agent_vault.root / "hermes.yaml").read_text().replace(
        "backend: local", "backend: none") + "skills:\n  embeddings: true\n")
    r = run_cli("--vault", str(agent_vault.root), "doctor", "--no-model")
    if embeddings.available():
        assert "ok  skill embeddings: static vectors + the model; model at" in r.stdout
    else:
        assert r.returncode == 1 and "skills.embeddings is on but not installed: pip install 'hermes-fs[embeddings]'" in r.stdout


def test_doctor_says_an_older_vault_routes_by_full_text_and_what_to_set(agent_vault, run_cli):
    """A vault made before `auto` became the default has `embeddings: false` written in it."""
    (agent_vault.root / "hermes.yaml").write_text((agent_vault.root / "hermes.yaml").read_text().replace(
        "backend: local", "backend: none") + "skills:\n  embeddings: false\n")
    r = run_cli("--vault", str(agent_vault.root), "doctor", "--no-model")
    assert ("ok  skill routing: by full-text only (skills.embeddings: false); set it to auto to rank skills by "
            "meaning") in r.stdout


def test_the_schema_puts_the_lessons_first_and_the_prompt_example_is_a_document():
    """Under a grammar the fields are written in schema order: lessons before the summary, and each
    entry's reason (the user's words) before its text. The prompt's worked example must parse."""
    schema = json_schema(ReviewDocument)
    assert list(schema["properties"]) == ["memory", "skills", "summary"]
    assert list(schema["properties"]["memory"]["items"]["properties"])[:3] == ["action", "file", "reason"]
    assert "file" not in schema["properties"]["skills"]["items"]["properties"]  # refine writes SKILL.md only
    example = STRUCTURED_REVIEWER_PROMPT.split("The answer:\n", 1)[1].split("\n\n", 1)[0]
    assert parse_document(example, ReviewDocument).memory[0].file == "USER.md"  # type: ignore[attr-defined]
    nothing = STRUCTURED_REVIEWER_PROMPT.rsplit("If nothing is worth keeping: ", 1)[1]
    assert parse_document(nothing, ReviewDocument).summary == "nothing to change"


def test_learn_patch_naming_skill_md_means_skill_md():
    doc = SkillDocument(skills=[SkillEdit(action="patch", name="deploy-fly", content="", old_text="a", new_text="b",
                                          file=f, reason="r") for f in ("SKILL.md", "skills/deploy-fly/SKILL.md")],
                        summary="x")
    calls = tool_calls(doc)
    assert [c[1] for c in calls] == [{"action": "patch", "name": "deploy-fly", "old_text": "a", "new_text": "b"}] * 2
    assert [c[2] for c in calls] == ["skills/deploy-fly/SKILL.md"] * 2


def test_only_skills_the_conversation_used_are_shown_whole(agent_vault, model_server, tmp_path):
    """A reviewer without tools sees in full the skills the conversation named (to patch them), and no
    index of the others (writing-skills shares words with most conversations)."""
    structured(agent_vault)
    (agent_vault.root / "skills" / "deploy-fly").mkdir()
    (agent_vault.root / "skills" / "deploy-fly" / "SKILL.md").write_text(SKILL)
    agent_vault.git.commit_paths(["skills/deploy-fly/SKILL.md"], "test: a skill", Act.person())
    model_server.add({"content": "Deployed, then checked `fly secrets list` too."})
    with Conversation(agent_vault, ConversationOptions(source="run", workspace=tmp_path)) as c:
        c.ask("Follow the deploy-fly skill, and from now on check the secrets first.")
    patch = skill("deploy-fly", action="patch", old_text="1. Run `fly deploy --strategy rolling`.",
                  new_text="1. Check `fly secrets list`.\n2. Run `fly deploy --strategy rolling`.")
    model_server.add({"content": doc(skills=[patch], summary="check secrets before deploying")})
    result = refine(agent_vault, RefineOptions(session=c.id))
    assert result.status == "pending", result.reason
    assert result.files == ["skills/deploy-fly/SKILL.md"]
    assert b"1. Check `fly secrets list`." in agent_vault.git.read_file(result.branch, "skills/deploy-fly/SKILL.md")
    brief = model_server.requests[-1]["messages"][1]["content"]
    assert "## Skill deploy-fly, used in the conversation" in brief and "description: Deploy the web app" in brief
    assert "writing-skills" not in brief


def test_a_skill_named_by_its_path_means_its_folder():
    doc = ReviewDocument(memory=[], skills=[ReviewSkillEdit(action="create", name=n, reason="r", content="c",
                                                            old_text="", new_text="")
                                            for n in ("skills/thumbs", "skills/thumbs/SKILL.md", "../etc")],
                         summary="x")
    assert [c[1]["name"] for c in tool_calls(doc)] == ["thumbs", "thumbs", "../etc"]  # the last: skill_manage refuses


@pytest.mark.slow
def test_background_reviews_say_once_what_to_set_for_a_model_doctor_found_unsuited(agent_vault, model_server, run_cli,
                                                                                    tmp_path):
    from hermes_fs.agent.conversation import Conversation, ConversationOptions
    from hermes_fs.service.auto_review import AutoReview

    v = agent_vault
    (v.root / "hermes.yaml").write_text((v.root / "hermes.yaml").read_text().replace("backend: local", "backend: none")
                                        + "refine:\n  every_turns: 1\n")
    said: list[str] = []
    reviews = AutoReview(v, lambda _s, line: said.append(line))
    model_server.add({"content": "Noted."})
    with Conversation(v, ConversationOptions(source="run", workspace=tmp_path)) as c:
        c.ask("hello")
        sid = c.id
    model_server.add({"content": "Summary: nothing to change"})
    assert reviews.after_turn(sid, 1)
    reviews.join(60)
    assert not any("refine.mode: structured" in line for line in said)  # no finding yet: nothing to say
    model_server.add({"content": "ok"}, {"content": "I have noted 'ok'."})
    assert run_cli("--vault", str(v.root), "doctor").returncode == 1  # the probe: it answers in words
    model_server.add({"content": "Summary: nothing to change"}, {"content": "Summary: nothing to change"})
    for turn in (2, 3):
        assert reviews.after_turn(sid, turn)  # the review still runs; the person is told what to set
        reviews.join(60)
    notices = [line for line in said if "set `refine.mode: structured` in hermes.yaml" in line]
    assert len(notices) == 1 and "openai/test-model does not call tools" in notices[0]
    structured(v)
    said.clear()
    model_server.add({"content": json.dumps({"memory": [], "skills": [], "summary": "nothing to change"})})
    fresh = AutoReview(v, lambda _s, line: said.append(line))  # a new chat, configured as advised
    fresh.after_turn(sid, 4)
    fresh.join(60)
    assert not any("refine.mode" in line for line in said)  # set as advised: quiet
