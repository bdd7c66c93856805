"""What learning costs: tokens and price in each change's trailers, per day in `log`, and
`refine.max_cost_per_day` pausing automatic reviews (litellm prices the scripted replies of a
model it knows, over real HTTP)."""

from hermes_fs.agent.conversation import Conversation, ConversationOptions
from hermes_fs.learning import spend
from hermes_fs.learning.refine import RefineOptions, refine
from hermes_fs.service.auto_review import AutoReview


def priced(vault, extra: str = "") -> None:
    """A model litellm has a price for, served by the scripted server."""
    path = vault.root / "hermes.yaml"
    path.write_text(path.read_text().replace("model: openai/test-model", "model: openai/gpt-4o-mini") + extra)


def session(vault, server, tmp_path) -> str:
    server.add({"content": "Noted."})
    with Conversation(vault, ConversationOptions(source="run", workspace=tmp_path)) as c:
        c.ask("I always use tabs, not spaces.")
        return c.id


def good(server):
    server.add({"tool_calls": [("memory", {"action": "add", "file": "USER.md", "text": "Prefers tabs."})]},
               {"content": "Summary: tabs\n- USER.md: prefers tabs (because \"I always use tabs, not spaces\")"})


def test_each_review_records_tokens_and_cost_and_log_shows_spend_per_day(agent_vault, model_server, tmp_path, run_cli):
    v = agent_vault
    priced(v)
    sid = session(v, model_server, tmp_path)
    good(model_server)
    out = refine(v, RefineOptions(session=sid))
    trailers = v.git.commit_info(out.branch).trailers
    assert trailers["Learning-Tokens"] == "36 (22 in, 14 out)"
    cost = float(trailers["Learning-Cost"].removesuffix(" USD"))
    assert cost > 0 and out.usage.cost_usd is not None and abs(out.usage.cost_usd - cost) < 1e-6
    model_server.add({"content": "Summary: nothing to change"})
    assert refine(v, RefineOptions(session=sid)).status == "nothing"  # no commit, but it cost something
    [today] = spend.per_day(v)
    assert today.reviews == 2 and today.tokens == 36 + 18 and today.cost_usd > cost and not today.unpriced
    (v.state_dir / spend.LEDGER).open("a").write("not json\n" + "x" * 5000 + "\n")  # junk lines are skipped
    r = run_cli("--vault", str(v.root), "log")
    assert r.returncode == 0 and "Learning spend per day" in r.stdout and f"{today.day}  2 reviews  54 tokens" in r.stdout


def test_max_cost_per_day_pauses_automatic_reviews_and_says_so(agent_vault, model_server, tmp_path):
    v = agent_vault
    priced(v, "refine:\n  every_turns: 1\n  max_cost_per_day: 0.0000001\n")
    sid = session(v, model_server, tmp_path)
    said: list[str] = []
    reviews = AutoReview(v, lambda _s, line: said.append(line))
    good(model_server)
    assert reviews.after_turn(sid, 1)  # nothing spent yet today
    reviews.join(60)
    assert "pending" in said[-1]
    served = len(model_server.requests)
    assert not reviews.after_turn(sid, 2) and not reviews.after_turn(sid, 3)  # past the limit: none started
    assert len(model_server.requests) == served
    paused = [line for line in said if "paused until tomorrow" in line]
    assert len(paused) == 1 and "refine.max_cost_per_day" in paused[0]  # said once
    # the person can still ask for a review themselves
    model_server.add({"content": "Summary: nothing to change"})
    assert refine(v, RefineOptions(session=sid)).status == "nothing"
