"""The skills index of the prompt past its budget: the most relevant skills described, the next ones
named, and the lexical and passage helpers of routing (bench/routing_heldout.py measures them)."""

from hermes_fs.agent.prompt import first_sentence, select_skills, skills_index
from hermes_fs.mind.embeddings import BODY_CHUNKS, skill_texts
from hermes_fs.mind.search import SearchIndex


def test_past_the_budget_relevant_skills_are_described_then_named():
    entries = {f"skill-{i:03d}": f"Does chore number {i} of a long list of chores, step by step." for i in range(300)}
    ranked = ["skill-250", "skill-007", "skill-123"] + [f"skill-{i:03d}" for i in range(200, 240)]
    idx = select_skills(entries, ranked, 2000, described_share=0.5)
    listed = idx.text.split("\n(")[0]
    assert len(listed) <= 2000
    assert idx.described[:3] == ["skill-250", "skill-007", "skill-123"]
    assert all(f"- {n}: Does chore" in idx.text for n in idx.described)
    named = [n for n in idx.shown if n not in idx.described]
    assert named[:5] == ranked[len(idx.described):len(idx.described) + 5]  # relevance order continues
    assert all(f"- {n}:" not in idx.text for n in named) and all(n in idx.text for n in named)
    assert len(idx.shown) > 2 * len(idx.described)
    assert f"({300 - len(idx.shown)} more skills not listed: call skill_search" in idx.text
    # all of it fits: every skill described, no "Also" line
    small = {n: entries[n] for n in list(entries)[:5]}
    assert select_skills(small, [], 2000).described is None and "Also" not in select_skills(small, [], 2000).text


def test_past_the_budget_descriptions_are_cut_to_a_first_sentence_so_more_are_described():
    long = "Optimizes transformer attention with Flash Attention for long contexts. Use it when memory runs out."
    entries = {f"s-{i:03d}": long for i in range(200)}
    idx = select_skills(entries, [f"s-{i:03d}" for i in range(200)], 2000, described_share=0.5, short_chars=50)
    assert "- s-000: Optimizes transformer attention with Flash…" in idx.text
    assert "Use it when" not in idx.text
    whole = select_skills(entries, [f"s-{i:03d}" for i in range(200)], 2000, described_share=0.5, short_chars=1000)
    assert "- s-000: Optimizes transformer attention with Flash Attention for long contexts.\n" in whole.text
    assert len(idx.described) >= len(whole.described) + 5
    assert first_sentence("Short. Second sentence.", 50) == "Short."
    assert first_sentence("v1.2 is out: see it", 50) == "v1.2 is out: see it"  # a dot inside a word ends nothing
    assert first_sentence("one two three four", 12) == "one two…"


def test_related_words_are_mined_from_the_skills(vault):
    docs = {"photo-crop": "Crop a photo image to a region.", "photo-tag": "Tag each photo image with people.",
            "image-resize": "Resize an image for the web.", "deploy-app": "Deploy an app to a server."}
    for name, desc in docs.items():
        (vault.root / "skills" / name).mkdir()
        (vault.root / "skills" / name / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {desc}\n---\nbody\n")
    index = SearchIndex(vault.root)
    try:
        index.refresh("skills")
        assert "imag" in index.related("a photo of my cat")  # co-occurs with 'photo' in two skills
        assert "deploi" not in index.related("a photo of my cat")
        assert index.related("zzzz unknown words") == []
        found = [h.path.split("/")[1] for h in index.search_related("a photo of my cat")]
        assert "image-resize" in found  # reached through the mined word, not the query's
    finally:
        index.close()
    assert "image-resize" in skills_index(vault, "a photo of my cat", 80, semantic=False, related=True).shown


def test_skill_texts_are_the_description_then_body_passages():
    body = "\n".join(f"line {i} " + "word " * 20 for i in range(200)) + "\n```\ncode block line\n```\n"
    texts = skill_texts("ssh-key-rotation", "Rotate SSH keys.", body)
    assert texts[0] == "ssh key rotation: Rotate SSH keys."
    assert 1 < len(texts) <= BODY_CHUNKS + 1
    assert all(len(t.split()) >= 60 for t in texts[1:])
    assert skill_texts("x", "Desc.", "") == ["x: Desc."]
