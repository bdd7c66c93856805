"""The curator on a grown library: a vault grown by 300 scripted refines (through the real learning
pipeline, policy auto) with planted near-duplicate skills, planted stale skills (made 60 days ago and
never used since), contradicting memory entries and a USER.md at 3x its budget -> one curate run.

Figures: duplicate pairs found (recall and precision against the planted ones), stale skills found
(the same), USER.md size against its budget before/after with every planted fact still present (its
newest value), the per-turn system prompt bytes before/after, and what the model-free part costs:
a cold usage refresh (whole history) against an incremental one after 5 more sessions (it reads
only those commits). The model is the scripted server over HTTP; its merge and consolidation
answers are computed by a fixed rule (union of steps; same subject -> one entry, newest value), so
the figures measure the curator's own machinery, not a model's judgement.

Usage: python bench/curate.py [REFINES]
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from common import write_results  # noqa: E402
from model_server import ModelServer, configure_vault  # noqa: E402

from hermes_fs.agent.prompt import system_prompt  # noqa: E402
from hermes_fs.learning import pipeline  # noqa: E402
from hermes_fs.learning.curate import CurateOptions, curate, plan  # noqa: E402
from hermes_fs.learning.pipeline import Description  # noqa: E402
from hermes_fs.learning.refine import snapshot  # noqa: E402
from hermes_fs.mind import memory, skills, usage  # noqa: E402
from hermes_fs.mind.sessions import Transcript  # noqa: E402
from hermes_fs.store.provenance import Act, refine_trailers  # noqa: E402
from hermes_fs.store.vault import Vault, init_vault  # noqa: E402

TOPICS = ["postgres backups", "nginx reload", "python packaging", "docker cleanup", "ssh keys rotation",
          "kubernetes rollout", "terraform plan", "git bisect", "log rotation", "tls renewal", "redis failover",
          "cron debugging", "disk usage", "dns records", "s3 sync", "npm audit", "rust release", "go modules",
          "elastic reindex", "kafka topics", "grafana alerts", "vault secrets", "helm upgrade", "ansible facts",
          "systemd units", "mysql replication", "ci caching", "pdf export", "image resize", "csv import"]
VERBS = ["run", "check", "plan", "fix", "audit"]
VOCAB = ("ledger quota replica cursor bucket shard token lease socket schema index backlog rollback canary "
         "artifact manifest registry snapshot mirror archive tarball checksum digest keyring fixture sandbox "
         "runner worker scheduler webhook tunnel proxy firewall subnet gateway cache warmup eviction retention "
         "watermark offset partition cluster namespace quorum leader follower failover heartbeat probe "
         "dashboard panel metric histogram trace span sampler exporter collector pipeline stage matrix "
         "lockfile vendor wheel sdist bundle chunk sprite thumbnail codec bitrate subtitle locale glossary "
         "invoice receipt refund ledgerline payout voucher coupon basket wishlist inventory warehouse courier").split()
NOUNS = ["billing", "search", "auth", "checkout", "reports", "mobile", "admin", "gateway", "analytics", "media"]
SUBJECTS = ["editor", "shell", "timezone", "package manager", "browser", "terminal", "keyboard layout",
            "language", "laptop", "coffee order", "test runner", "formatter", "cloud provider", "os",
            "git host", "chat tool", "calendar", "notes app", "font", "theme"]
DAYS = 86400
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HERMES_TEST_KEY", "sk-test-not-a-real-key")  # the scripted server's key (configure_vault)


def skill_text(name: str, description: str, steps: list[str]) -> str:
    body = "\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1))
    return skills.stamp_metadata(f"---\nname: {name}\ndescription: {description}\n---\n# {name}\n\n{body}\n",
                                 {"created-by": "refine"})


class Grower:
    """One scripted refine: a skill, or memory entries, on its own branch, merged by policy."""

    kind = "refine"
    task = None

    def __init__(self, session: str, edit):
        self.session, self.edit = session, edit

    def base(self, vault: Vault) -> str:
        self.vault = vault
        return snapshot(vault, self.session)

    def propose(self, ov) -> None:
        self.edit(ov, self.vault)

    def describe(self, changes) -> Description:
        return Description("grow the library", ["- bench"], refine_trailers(self.session, None, None, "bench"), "grow")

    def context(self) -> dict:
        return {}


def session(vault: Vault, used: list[str]) -> str:
    """A transcript in which the agent viewed `used` skills (committed by the refine's snapshot)."""
    t = Transcript.start(vault.root, "bench", "cli", "bench")
    t.append({"role": "user", "content": "help"})
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": "skill_view", "arguments": json.dumps({"name": n})}}
             for i, n in enumerate(used)]
    t.append({"role": "assistant", "content": "", **({"tool_calls": calls} if calls else {})})
    for i in range(len(used)):
        t.append({"role": "tool", "tool_call_id": f"c{i}", "name": "skill_view", "content": "ok"})
    t.append({"role": "assistant", "content": "done"})
    return t.id


def grow(vault: Vault, refines: int) -> dict:
    """`refines` scripted refines; returns what was planted."""
    planted = {"duplicates": set(), "stale": set(), "facts": {}}
    made: list[str] = []
    spec: list[tuple[str, str, str]] = []  # (topic, noun, verb) per skill made, by index
    taken: set[int] = set()  # originals that have a planted duplicate
    dup_of: set[int] = set()  # indexes that are planted duplicates
    extras: dict[int, str] = {}  # skill index -> the words that make its description its own
    n_entries = 0
    old_phase = refines // 3  # the first third is dated 60 days ago
    for i in range(refines):
        if i < old_phase:
            when = f"@{int(time.time() - 60 * DAYS) + i} +0000"
            os.environ["GIT_COMMITTER_DATE"] = os.environ["GIT_AUTHOR_DATE"] = when
        else:
            os.environ.pop("GIT_COMMITTER_DATE", None)
            os.environ.pop("GIT_AUTHOR_DATE", None)
        kind = i % 3
        used: list[str] = []
        if kind == 0 or kind == 1:  # a skill (every 10th a planted near-duplicate of an earlier one)
            k = len(made)
            if k and k % 10 == 9:
                src_k = next(j for j in range(k) if j not in taken and j not in dup_of)  # an earlier original
                taken.add(src_k)
                dup_of.add(k)
                topic, noun, verb = spec[src_k]
                name = f"{noun}-{topic.replace(' ', '-')}"
                desc = f"For the {noun} team, how to {verb} {topic} ({extras[src_k]}), in order."
                planted["duplicates"].add(frozenset((made[src_k], name)))
            else:
                n = len(spec) - len(dup_of)  # originals made so far
                topic, noun = TOPICS[n % len(TOPICS)], NOUNS[(n // len(TOPICS)) % len(NOUNS)]
                verb = VERBS[(n // len(TOPICS)) % len(VERBS)]
                name = f"{topic.replace(' ', '-')}-{noun}"
                words = [VOCAB[(n * 4 + j) % len(VOCAB)] for j in range(4)]  # what this skill is about
                extras[len(spec)] = ", ".join(words)
                desc = f"{verb.capitalize()} {topic} for {noun} ({extras[len(spec)]})."
            spec.append((topic, noun, verb))
            steps = [f"{verb} {topic} step {j}" for j in range(3)]
            made.append(name)

            def edit(ov, v, name=name, desc=desc, steps=steps):
                skills.create(ov, name, skill_text(name, desc, steps))
        else:  # memory: a fact, sometimes restated or contradicted later
            subject = SUBJECTS[n_entries % len(SUBJECTS)]
            value = f"v{n_entries // len(SUBJECTS)}"
            restated = n_entries % 7 == 3
            if restated and subject in planted["facts"]:
                value = planted["facts"][subject]
                text = f"{subject.capitalize()}: {value} (said again)."
            else:
                text = f"The user's {subject} is {value}."
                planted["facts"][subject] = value  # the newest value is the one that must survive
            n_entries += 1

            def edit(ov, v, text=text):
                memory.add(ov, v.config, "USER.md", text, check_budget=False)
        # sessions after the old phase use a few recent skills (so those are not stale)
        if i >= old_phase and made:
            used = [made[-1]] + ([made[i % len(made)]] if i % 4 == 0 else [])
        out = pipeline.run(vault, Grower(session(vault, used), edit), policy="auto")
        assert out.status == "merged", out.line()
    os.environ.pop("GIT_COMMITTER_DATE", None)
    os.environ.pop("GIT_AUTHOR_DATE", None)
    figures = usage.refresh(vault)
    old = {n for n in skills.names(vault.files)
           if (figures.skills.get(n) and figures.skills[n].created and figures.skills[n].created < time.time() - 30 * DAYS
               and not figures.skills[n].uses)}
    pair_members = {m for p in planted["duplicates"] for m in p}
    planted["stale"] = old - pair_members
    return planted


def responder(request: dict) -> dict:
    """The scripted model: a rule-based merge of two SKILL.md files, or of memory entries by subject."""
    prompt = request["messages"][-1]["content"]
    if "Merge them into ONE SKILL.md named" in prompt:
        keep = re.search(r"named `([^`]+)`", prompt).group(1)
        steps: list[str] = []
        desc = ""
        for part in prompt.split("### skills/")[1:]:
            desc = desc or (re.search(r"^description: (.*)$", part, re.M) or [None, ""])[1]
            for m in re.finditer(r"^\d+\. (.*)$", part, re.M):
                if m.group(1) not in steps:
                    steps.append(m.group(1))
        body = "\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1))
        return {"content": f"---\nname: {keep}\ndescription: {desc}\n---\n# {keep}\n\n{body}\n"}
    groups: dict[str, list[tuple[int, str]]] = {}
    for m in re.finditer(r"^\[(\d+)\](?: \([^)]*\))? - (.*)$", prompt, re.M):
        text = m.group(2)
        found = re.match(r"^The user's (.+) is (\S+)\.$", text) or re.match(r"^(.+): (\S+) \(said again\)\.$", text)
        if found:
            groups.setdefault(found.group(1).lower(), []).append((int(m.group(1)), found.group(2)))
    merge, contradictions = [], []
    for subject, items in groups.items():
        values = [v for _i, v in items]
        if len(set(values)) > 1:  # the newest is kept by the curator; the older values go
            contradictions.append({"ids": [i for i, _v in items], "reason": f"{subject}: {', '.join(values)}"})
        elif len(items) > 1:
            merge.append({"ids": [i for i, _v in items], "text": f"The user's {subject} is {values[0]}.",
                          "reason": "the same fact"})
    return {"content": json.dumps({"merge": merge, "drop": [], "contradictions": contradictions})}


def run(refines: int = 300) -> dict:
    server = ModelServer(responder=responder)
    root = Path(tempfile.mkdtemp(prefix="hermes-curate-")) / "vault"
    vault = init_vault(root).vault
    configure_vault(root, server)
    vault.git.commit_paths(["hermes.yaml"], "bench: model server", Act.person())
    vault._config = None
    user = root / "memory/USER.md"  # room to grow: the person lowers the budget afterwards
    user.write_text(user.read_text().replace("title: User\n", "title: User\nbudget: 50000\n", 1))
    vault.git.commit_human_edits()
    t0 = time.perf_counter()
    planted = grow(vault, refines)
    grow_s = time.perf_counter() - t0
    # the person lowers USER.md's budget to a third of its size (a file at 3x its budget)
    mem = memory.load(vault.files, "USER.md", vault.config)
    budget = mem.size // 3
    text = (root / "memory/USER.md").read_text().replace("budget: 50000\n", f"budget: {budget}\n", 1)
    (root / "memory/USER.md").write_text(text)
    vault.git.commit_human_edits()
    before_user = memory.load(vault.files, "USER.md", vault.config)
    prompt_before = len(system_prompt(vault).encode())
    # model-free costs: a cold refresh (whole history) and an incremental one
    (vault.state_dir / "cache" / usage.CACHE).unlink(missing_ok=True)
    t0 = time.perf_counter()
    cold = usage.refresh(vault)
    cold_s, cold_commits = time.perf_counter() - t0, cold.commits_read
    names = skills.names(vault.files)
    for k in range(5):
        sid = session(vault, [names[k]])
        vault.git.commit_paths([f"sessions/{sid[:4]}/{sid[4:6]}/{sid}.md"], "session", Act.session(sid))
    t0 = time.perf_counter()
    warm = usage.refresh(vault)
    warm_s, warm_commits = time.perf_counter() - t0, warm.commits_read
    t0 = time.perf_counter()
    found = plan(vault)
    plan_s = time.perf_counter() - t0
    pairs = {frozenset((d.keep, d.other)) for d in found.duplicates}
    for p in sorted(pairs - planted["duplicates"], key=sorted):
        print("not planted, found:", sorted(p))
    for p in sorted(planted["duplicates"] - pairs, key=sorted):
        print("planted, missed:", sorted(p))
    stale = set(found.stale)
    requests_before = len(server.requests)
    t0 = time.perf_counter()
    out = curate(vault, CurateOptions(policy="auto"))
    curate_s = time.perf_counter() - t0
    assert out.status == "merged", out.line()
    after_user = memory.load(vault.files, "USER.md", vault.config)
    body = after_user.doc.body
    facts_kept = sum(1 for subject, value in planted["facts"].items()
                     if re.search(rf"(?i)\b{re.escape(subject)}\b[^\n]*\b{re.escape(value)}\b", body))
    prompt_after = len(system_prompt(vault).encode())
    server.close()

    def score(found_set, planted_set) -> tuple[float, float]:
        hit = len(found_set & planted_set)
        return (hit / len(planted_set) if planted_set else 1.0, hit / len(found_set) if found_set else 1.0)

    dup_recall, dup_precision = score(pairs, planted["duplicates"])
    stale_recall, stale_precision = score(stale, planted["stale"])
    result = {
        "refines": refines, "skills": len(names), "sessions": len(cold.sessions), "grow_s": round(grow_s, 1),
        "duplicates_planted": len(planted["duplicates"]), "duplicates_found": len(pairs),
        "duplicate_recall": round(dup_recall, 3), "duplicate_precision": round(dup_precision, 3),
        "stale_planted": len(planted["stale"]), "stale_found": len(stale),
        "stale_recall": round(stale_recall, 3), "stale_precision": round(stale_precision, 3),
        "user_md_before": before_user.size, "user_md_budget": before_user.budget, "user_md_after": after_user.size,
        "user_md_under_budget": after_user.size <= after_user.budget,
        "facts_planted": len(planted["facts"]), "facts_kept": facts_kept,
        "prompt_bytes_before": prompt_before, "prompt_bytes_after": prompt_after,
        "usage_cold_s": round(cold_s, 3), "usage_cold_commits": cold_commits,
        "usage_incremental_s": round(warm_s, 3), "usage_incremental_commits": warm_commits,
        "plan_s": round(plan_s, 3), "curate_s": round(curate_s, 2),
        "model_calls": len(server.requests) - requests_before, "curate_summary": out.summary,
    }
    print(vault.git.commit_info(vault.git.log(grep="^merge curate/", limit=1)[0].parents[1]).body)
    for k, v in result.items():
        print(f"{k:>28}: {v}")
    write_results("curate", result)
    return result


if __name__ == "__main__":
    run(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
