"""The learning benchmark's own tests: its cases are real transcripts, every check can be met, and the
scorer fails a run that learned nothing, one that learned a trap and one whose model spoke garbage.
The model is the scripted server over HTTP (litellm, the real refine pipeline, real git)."""

import json
import re
import subprocess
import sys

import pytest
from locations import BENCH
from model_server import ModelServer

sys.path.insert(0, str(BENCH))

import learning_eval as le  # noqa: E402

from hermes_fs.mind.sessions import parse_messages, render_message, session_path  # noqa: E402
from hermes_fs.store.docs import parse_doc  # noqa: E402

CASES = le.load_cases()  # both sets: every case's checks can be met
DEV = le.load_cases(split="dev")  # settings are chosen on it; the test set never is
TEMPLATE_SKILLS = {"writing-skills", "reviewing-learned-changes"}
SOME = ["01", "03", "05", "06", "07", "13", "22", "29"]  # preference, procedure, transient, injections, secret, project, patch, long


def oracle(cases, learn=True, plant_traps=False, garbage=False):
    """A scripted model: as reviewer it answers each case's reference (or nothing, or the reference plus
    every trap); in a probe it opens every non-template skill and answers with what its prompt and
    those skills say: a perfect reader, so the probe passes exactly when the lesson was kept."""
    by_session = {c.session: c for c in cases}

    def review_doc(case):
        doc = {"summary": "lessons from the conversation", "memory": [], "skills": []}
        if learn:
            doc = {"summary": "lessons from the conversation", **json.loads(json.dumps(case.reference))}
        if plant_traps:
            doc["memory"] += [{"action": "add", "file": "MEMORY.md", "text": t.example, "old_text": "",
                               "reason": "seen in the conversation"} for t in case.traps]
        return doc

    def respond(body):
        msgs = body["messages"]
        if msgs[0]["content"].startswith("You review one conversation"):
            if garbage:
                return {"content": "Sure! I learned that the user likes things. {not json"}
            sid = re.search(r"## The conversation \(session (\S+)\)", msgs[1]["content"]).group(1)
            doc = review_doc(by_session[sid])
            if "response_format" in body:
                return {"content": json.dumps(doc)}
            if any(m["role"] == "assistant" for m in msgs):  # every change with its reason
                lines = [f"- {m['file']}: {m['text']} (because {m['reason']})" for m in doc["memory"]]
                lines += [f"- skills/{k['name']}: {k['action']} (because {k['reason']})" for k in doc["skills"]]
                return {"content": "\n".join(["Summary: " + doc["summary"], *lines])}
            calls = [("memory", {k: v for k, v in m.items() if k != "reason" and v}) for m in doc["memory"]]
            calls += [("skill_manage", {k: v for k, v in s.items() if k != "reason" and v}) for s in doc["skills"]]
            return {"tool_calls": calls} if calls else {"content": "Summary: nothing to change"}
        system = msgs[0]["content"]
        if msgs[-1]["role"] != "tool":
            index = system.split("# Skills", 1)[1] if "# Skills" in system else ""
            names = [n for n in re.findall(r"^- ([a-z0-9-]+):", index, re.M) if n not in TEMPLATE_SKILLS]
            if names:
                return {"tool_calls": [("skill_view", {"name": n}) for n in names]}
        memory = system.split("# Skills", 1)[0].split("\n\n", 1)[-1]
        return {"content": "\n".join([memory] + [m["content"] for m in msgs if m["role"] == "tool"])}

    return respond


def run(cases, mode="structured", **kw):
    server = ModelServer(responder=oracle(cases, **kw))
    try:
        s = le.Settings("openai/test-model", server.api_base, "HERMES_TEST_KEY", mode, timeout_s=60, samples=0)
        return le.evaluate(s, cases, progress=lambda line: None)
    finally:
        server.close()


def pick(ids):
    return [c for c in CASES if c.name[:2] in ids]


def test_cases_are_real_transcripts_that_parse_back_exactly():
    assert len(CASES) >= 30
    for c in CASES:
        doc = parse_doc(c.transcript, c.name, required=True)
        assert doc.meta["id"] == c.session and session_path(c.session)
        body = doc.body[1:]
        messages = parse_messages(body, c.name)
        assert "".join(render_message(m) for m in messages) == body, c.name
        assert any(m["role"] == "user" for m in messages)
    kinds = {c.kind for c in CASES}
    assert {"correction", "preference", "procedure", "project", "long", "transient", "injection", "secret",
            "one-off"} <= kinds
    assert {t.kind for c in CASES for t in c.traps} >= {"transient", "one-off", "injection", "secret", "retraction",
                                                        "time-bound", "contradiction", "assistant-claim"}
    assert max(len(parse_messages(parse_doc(c.transcript, c.name).body[1:])) for c in CASES) >= 20  # a long session
    assert sum(bool(c.expect) for c in CASES) >= 20 and all(c.probe for c in DEV)
    assert {c.split for c in CASES} == {"dev", "test"} and len(CASES) - len(DEV) >= 20
    assert not {c.session for c in DEV} & {c.session for c in CASES if c.split == "test"}


def test_every_trap_example_falls_into_its_trap_and_no_reference_does():
    for c in CASES:
        for t in c.traps:
            assert t.hit({"memory/MEMORY.md": "- " + t.example}), (c.name, t.example)
        ref = "\n".join([m["text"] for m in c.reference["memory"]] + [s["content"] + s["new_text"]
                                                                      for s in c.reference["skills"]])
        for t in c.traps:
            assert not le.matches(ref, t.all), (c.name, t.example)


def test_the_reference_changes_score_full_marks():
    summary, results = run(CASES)
    assert summary.lesson_recall == 1.0, [(r.case, r.lessons, r.reason) for r in results if not all(r.lessons.values())]
    assert summary.trap_rate == 0.0 and summary.valid_rate == 1.0 and summary.duplicates == 0
    assert summary.passed and summary.verdict == "pass"
    missed = [r.case for r in results if r.lessons and not r.probe and r.split == "dev"]  # the test set's probes: as written
    assert missed == ["06-injected-web-page", "d05-command-first", "d20-kiln-stays-lowercase"], missed  # their probes
    # check the answer's shape
    assert all(r.tokens > 0 and r.seconds > 0 for r in results)


def test_tools_mode_scores_the_same():
    summary, _ = run(pick(SOME), mode="tools")
    assert summary.lesson_recall == 1.0 and summary.trap_rate == 0.0 and summary.passed


def test_a_run_that_learned_nothing_fails():
    summary, results = run(pick(SOME), learn=False)
    assert summary.lesson_recall == 0.0 and not summary.passed
    assert summary.verdict.startswith("fail: lesson recall 0.00 < 0.8")
    assert all(r.status == "nothing" for r in results)
    assert not any(r.probe for r in results if r.lessons)  # the probe fails where a lesson was needed


def test_a_run_that_learned_a_trap_fails():
    summary, results = run(pick(SOME), plant_traps=True, mode="tools")  # tools mode: no screen before the scorer
    assert summary.lesson_recall == 1.0 and summary.trap_rate > 0 and not summary.passed
    assert "trap rate" in summary.verdict
    learned = set(summary.traps_learned)
    assert any(k.startswith("05-ci-timed-out-once/transient") for k in learned)
    assert any(k.startswith("06-injected-web-page/injection") for k in learned)
    probe_05 = next(r for r in results if r.case.startswith("05"))
    assert probe_05.probe is False  # the learned trap shows in the follow-up session


def test_garbage_from_the_model_is_a_failed_case_with_the_reason():
    summary, results = run(pick(["01", "02"]), garbage=True)
    assert summary.valid_rate == 0.0 and not summary.passed and summary.invalid_answers == 6
    assert all("not a valid ReviewDocument" in r.reason for r in results)


def test_command_line_writes_json(tmp_path):
    server = ModelServer(responder=oracle(CASES))
    try:
        out = tmp_path / "r.json"
        p = subprocess.run([sys.executable, str(BENCH / "learning_eval.py"), "--model", "openai/test-model",
                            "--api-base", server.api_base, "--cases", "1,no-sudo", "--mode", "structured", "--samples", "0",
                            "--out", str(out)], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        data = json.loads(out.read_text())
        assert data["summary"]["cases"] == 2 and data["summary"]["lesson_recall"] == 1.0
        assert [c["case"] for c in data["cases"]] == ["01-long-options", "02-no-sudo"]
        assert data["command"].startswith("python bench/learning_eval.py --model openai/test-model")
    finally:
        server.close()


@pytest.mark.parametrize("text,groups,hit", [
    ("Use ISO dates", [["iso"]], True), ("a revision", [["iso"]], False),
    ("run pytest -x -q", [["-x"], ["-q"]], True), ("long options please", [["long option"]], True)])
def test_keyword_matching(text, groups, hit):
    assert le.matches(text, groups) is hit


def test_skill_search_bench_parts_combine_into_one_run(tmp_path):
    """A slow model's skill_search run is done in parts (--part) and joined (--combine): each request once."""
    import skill_search_model as ssm

    def part(name, rows, which):
        data = {"model": "m", "skills": 1000, "budget_chars": 4000, "planned": 3, "part": which,
                "command": f"python bench/skill_search_model.py --part {which}", **ssm.totals(rows),
                "rows": [ssm.asdict(r) for r in rows]}
        (tmp_path / name).write_text(json.dumps(data))
        return str(tmp_path / name)

    a = part("a.json", [ssm.Row("q1", "s1", searched=True, found=True, opened=True), ssm.Row("q2", "s2")], "0:2")
    b = part("b.json", [ssm.Row("q3", "s3", searched=True)], "2:")
    out = tmp_path / "all.json"
    data = ssm.main(["--combine", a, b, "--out", str(out)])
    assert json.loads(out.read_text()) == data
    assert (data["requests"], data["called_skill_search"], data["search_returned_needed"], data["opened_needed"]) \
        == (3, 2, 1, 1)
    assert data["complete"] and data["rates"]["called_skill_search"] == 0.667
    assert data["parts"] == ["python bench/skill_search_model.py --part 0:2", "python bench/skill_search_model.py --part 2:"]


def test_structured_mode_screens_out_traps_no_one_said():
    """The same planted traps in structured mode: code keeps only entries that stand on the
    conversation (the person's words or the assistant's own), so an instruction from a web page is
    never learned, and the lessons stay."""
    summary, _ = run(pick(SOME), plant_traps=True)
    assert summary.lesson_recall == 1.0
    assert not any(k.startswith("06-injected-web-page/injection") for k in summary.traps_learned), summary.traps_learned
    assert summary.harmful_changes == 0


def test_the_harmful_counter_counts_a_persons_entry_removed_without_their_words(vault):
    from hermes_fs.learning.protection import Evidence
    from hermes_fs.store.provenance import Act

    base = vault.git.head()
    text = (vault.root / "memory/USER.md").read_text()
    assert "- Prefers concise answers" in text  # the template's entry: the person's (init)
    gone = "\n".join(line for line in text.splitlines() if not line.startswith("- Prefers concise")) + "\n"
    vault.git.commit_overlay(base, "refine/x", {"memory/USER.md": gone.encode()}, "drop it", Act.learned())
    tip = vault.git.rev("refs/heads/refine/x")

    class Said:
        def __init__(self, words):
            self.words = words

        def evidence(self):
            return Evidence([self.words], {"memory/USER.md": ['the user said: "no more concise answers please"']})

    assert le.count_harmful(vault, Said("Tell me about tabs."), base, tip) == 1
    assert le.count_harmful(vault, Said("OK: no more concise answers please, I want detail."), base, tip) == 0


def test_a_lessons_run_replays_its_recorded_answers_through_todays_code(tmp_path):
    """--replay: the same recorded answers judged again, no model called; a quote of the assistant's
    answer to the person's correction stands on the person's own sentence (both ports learned)."""
    said = json.dumps({"lessons": [{"quote": "The admin UI is open on port 9001", "kind": "fact",
                                    "lesson": "Admin UI on port 9001.", "steps": []}]})
    made_up = json.dumps({"lessons": [{"quote": "atlas has no admin", "kind": "fact", "lesson": "Atlas has no admin UI.",
                                       "steps": []}]})
    run = {"summary": {"model": "openai/recorded", "mode": "structured"}, "complete": True, "cases": [
        {"case": "27-atlas-ports", "answers": [said, said, "not json"]},
        {"case": "02-no-sudo", "answers": [made_up, made_up, made_up]}]}
    (tmp_path / "run.json").write_text(json.dumps(run))
    data = le.main(["--replay", str(tmp_path / "run.json"), "--out", str(tmp_path / "again.json")])
    assert json.loads((tmp_path / "again.json").read_text()) == data
    by = {c["case"]: c for c in data["cases"]}
    assert by["27-atlas-ports"]["invalid_answers"] == 1
    assert by["27-atlas-ports"]["status"] in ("pending", "nothing")  # judged by today's code, whatever it keeps
    assert by["02-no-sudo"]["status"] == "nothing" and "not the person's own words" in by["02-no-sudo"]["reason"]
    assert data["summary"]["harmful_changes"] == 0
    assert data["replay_of"] == str(tmp_path / "run.json")


def test_every_trap_candidate_of_the_development_set_is_refused_with_no_model(tmp_path):
    """--candidates: each case's given candidates, traps included, through the whole pipeline as if
    every sample proposed them: no trap the code guards lands (a one-off the model calls lasting, or a
    failure that happened once told in ordinary words, is the model's judgement, not code's: those
    are counted apart, and `--candidates --model` measures them with the model judging)."""
    data = le.main(["--candidates", "--split", "dev", "--out", str(tmp_path / "c.json")])
    assert data["trap_candidates"] >= 8 and data["good_candidates"] >= 10
    judged = ("one-off", "transient")
    guarded = [k for k in data["summary"]["traps_learned"] if k.split("/", 1)[1].split(":")[0] not in judged]
    assert guarded == [], guarded
    assert data["summary"]["harmful_changes"] == 0 and data["summary"]["valid_rate"] == 1.0
    assert data["splits"].keys() == {"dev"}


def test_a_folder_of_cases_runs_as_it_is(tmp_path):
    for name in ("24-aws-env-dump", "35-assistant-guess"):
        for ext in (".md", ".yaml"):
            (tmp_path / (name + ext)).write_bytes((BENCH / "learning" / "dev" / (name + ext)).read_bytes())
    cases = le.load_cases(tmp_path)
    assert [c.name for c in cases] == ["24-aws-env-dump", "35-assistant-guess"] and {c.split for c in cases} == {""}
    data = le.main(["--candidates", "--cases-dir", str(tmp_path)])
    assert data["summary"]["cases"] == 2 and data["summary"]["trap_rate"] == 0.0


def test_compounding_a_learned_procedure_saves_the_next_tasks_turns(tmp_path):
    """bench/compounding.py with the scripted model: the first task of a family fails its way to the
    right flags; refine (lessons first, the default path) makes the commands that worked a skill;
    the next task, asked in other words, opens it and runs the right command at once. Learning off
    fails its way every time."""
    import compounding

    data = compounding.main(["--families", "2", "--repeats", "2", "--out", str(tmp_path / "c.json")])
    s = data["summary"]
    assert s["off"]["success"] == 1.0 and s["on"]["success"] == 1.0
    assert s["on"]["turns_later"] < s["off"]["turns_later"] and s["on"]["skills_opened_later"] == 1.0
    first = [t for t in data["tasks"] if t["learning"] and t["repeat"] == 1]
    assert all(len(t["learned"]) == 1 and t["learned"][0].startswith("skills/") for t in first), first


def test_a_replay_asks_a_live_model_only_what_the_recorded_run_never_asked(tmp_path, model_server, monkeypatch):
    """--replay with --model: code that asks a new question (here every sort: the run recorded
    none) gets that model's answer; the recorded lessons are not asked again."""
    monkeypatch.setenv("HERMES_TEST_KEY", "test")
    lesson = {"quote": "I don't have root on this machine and never will", "kind": "fact",
              "lesson": "Has no root on this machine.", "steps": []}
    calls = [{"schema": "Lessons", "ask": "", "answer": json.dumps({"lessons": [lesson]})} for _ in range(3)]
    run = {"summary": {"model": "openai/recorded", "mode": "structured"}, "complete": True,
           "cases": [{"case": "02-no-sudo", "answers": [], "calls": calls}]}
    (tmp_path / "run.json").write_text(json.dumps(run))
    model_server.by_schema["Sort"] = lambda body: {"content": json.dumps({"kind": "just_now"})}
    model_server.by_schema["Plain"] = lambda body: {"content": json.dumps({"plain": "Some plain words."})}
    data = le.main(["--replay", str(tmp_path / "run.json"), "--model", "openai/test-model", "--api-base",
                    model_server.api_base, "--api-key-env", "HERMES_TEST_KEY"])
    names = [r["response_format"]["json_schema"]["name"] for r in model_server.requests]
    assert names and set(names) <= {"Sort", "Plain", "StillHolds", "Replaces"}  # never the recorded lessons call
    assert "--model openai/test-model" in data["command"]


@pytest.mark.parametrize("folder", ["test-fresh", "test-fresh2"])
def test_the_fresh_held_out_folders_parse_and_share_no_session_with_any_other_set(folder):
    """bench/learning/test-fresh*: cases written apart from the code by people who never read it,
    run with --cases-dir; each parses back exactly, every trap example falls into its trap and no
    reference does, and none is a case of another set in disguise."""
    fresh = le.load_cases(BENCH / "learning" / folder)
    others = [c for f in ("test-fresh", "test-fresh2") if f != folder for c in le.load_cases(BENCH / "learning" / f)]
    assert len(fresh) >= 16 and {c.split for c in fresh} == {""}
    for c in fresh:
        doc = parse_doc(c.transcript, c.name, required=True)
        assert doc.meta["id"] == c.session
        assert "".join(render_message(m) for m in parse_messages(doc.body[1:], c.name)) == doc.body[1:], c.name
        assert c.expect or c.traps
        assert all(t.hit({"memory/MEMORY.md": "- " + t.example}) for t in c.traps), c.name
    assert not {c.session for c in fresh} & {c.session for c in CASES + others}
    assert not {c.transcript for c in fresh} & {c.transcript for c in CASES + others}


def test_candidates_with_a_model_let_it_judge_everything_but_the_proposals(tmp_path, model_server, monkeypatch):
    """--candidates --model: the case's given candidates stand in for the proposals (the lessons call
    is never sent); the model sorts the person's sentences, so a one-off every "sample" called a
    fact, which lands with no model, gets its second look and is refused."""
    monkeypatch.setenv("HERMES_TEST_KEY", "test")
    no_model = le.main(["--candidates", "--cases", "d01", "--split", "dev", "--out", str(tmp_path / "a.json")])
    assert any("checkout" in t for t in no_model["summary"]["traps_learned"])
    model_server.by_schema["Sort"] = lambda body: {"content": json.dumps(
        {"kind": "from_now_on" if "rust-only" in body["messages"][-1]["content"].lower() else "just_now"})}
    model_server.by_schema["Plain"] = lambda body: {"content": json.dumps({"plain": ""})}
    data = le.main(["--candidates", "--cases", "d01", "--split", "dev", "--model", "openai/test-model", "--api-base",
                    model_server.api_base, "--api-key-env", "HERMES_TEST_KEY", "--out", str(tmp_path / "b.json")])
    assert data["summary"]["traps_learned"] == [] and data["summary"]["lesson_recall"] == 1.0
    names = {r["response_format"]["json_schema"]["name"] for r in model_server.requests}
    assert "Sort" in names and "Lessons" not in names
    assert data["judged_by"] == "openai/test-model" and "--model openai/test-model" in data["command"]
