"""Screenshots of the web page for the README (docs/web/*.png), made from a real vault: sessions with
the scripted model server of the tests, learned changes made by the real refine and learn pipelines,
one merged and one rejected, a job with a run, then Debian's Chromium (Playwright) on `hermes-fs web`.

    python bench/web_screens.py [OUT_DIR]      # default: docs/web
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HERMES_TEST_KEY", "sk-test-not-a-real-key")

from model_server import ModelServer, configure_vault  # noqa: E402
from web_helpers import SKILL, browser_context  # noqa: E402

from hermes_fs.learning import changes  # noqa: E402
from hermes_fs.store.provenance import Act  # noqa: E402
from hermes_fs.store.vault import Vault, init_vault  # noqa: E402

OUT = ROOT / "docs" / "web"


def session(vault: Vault, model: ModelServer, workspace: Path, user: str, answer: str) -> str:
    from hermes_fs.agent.conversation import Conversation, ConversationOptions

    model.add({"content": answer})
    with Conversation(vault, ConversationOptions(source="cli", workspace=workspace)) as c:
        c.ask(user)
        return c.id


def refine(vault: Vault, model: ModelServer, calls: list, report: str, focus: str | None = None) -> str:
    from hermes_fs.learning.refine import RefineOptions
    from hermes_fs.learning.refine import refine as run

    model.add({"tool_calls": calls}, {"content": report})
    result = run(vault, RefineOptions(focus=focus))
    assert result.status == "pending", result.reason
    return result.branch


def build(root: Path, model: ModelServer, workspace: Path) -> dict[str, str]:
    vault = init_vault(root).vault
    configure_vault(vault.root, model)
    vault.git.commit_paths(["hermes.yaml"], "point at the model", Act.person())
    vault._config = None
    session(vault, model, workspace, "Remember that the staging cluster is called kestrel and lives in eu-west-1.",
            "Noted: staging is `kestrel` in eu-west-1.")
    merged = refine(vault, model, [("memory", {"action": "add", "file": "MEMORY.md",
                                               "text": "Staging cluster: kestrel (eu-west-1)."})],
                    "Summary: remember the staging cluster\n- memory/MEMORY.md: staging is kestrel in eu-west-1 "
                    "(because the user asked to remember it)")
    changes.merge(vault.git, merged)
    session(vault, model, workspace, "Write all the answers in French from now on.", "D'accord.")
    rejected = refine(vault, model, [("memory", {"action": "add", "file": "USER.md", "text": "Answers in French."})],
                      "Summary: answer in French\n- memory/USER.md: French answers (because the user asked once)")
    changes.reject(vault.git, rejected)
    session(vault, model, workspace, "I always use tabs, not spaces, and keep answers short. Now deploy the app to "
            "fly.io please.", "Deployed with `fly deploy --strategy rolling`; all machines healthy.")
    main_change = refine(vault, model, [
        ("memory", {"action": "add", "file": "USER.md", "text": "Prefers tabs over spaces in every language."}),
        ("memory", {"action": "add", "file": "USER.md", "text": "Reads times in UTC; never convert to local time."}),
        ("skill_manage", {"action": "create", "name": "deploy-fly", "content": SKILL})],
        "Summary: remember the tabs preference and the fly.io rolling deploy\n"
        "- memory/USER.md: prefers tabs over spaces (because the user said so twice)\n"
        "- memory/USER.md: times in UTC (because the user corrected a local time)\n"
        "- skills/deploy-fly/SKILL.md: new skill for the rolling deploy (because it worked first time)",
        focus="preferences and deploys")
    session(vault, model, workspace, "Please give me long, detailed answers with background.", "Will do.")
    conflicting = refine(vault, model, [("memory", {"action": "replace", "file": "USER.md", "old_text": "Prefers concise",
                                                    "text": "Prefers long, detailed answers with background."})],
                         "Summary: longer answers\n- memory/USER.md: wants detail (because the user asked)")
    user = vault.root / "memory/USER.md"
    user.write_text(user.read_text().replace("Prefers concise answers", "Prefers answers in plain English"))
    vault.git.commit_human_edits(["memory/USER.md"])
    (vault.root / "cron").mkdir(exist_ok=True)
    (vault.root / "cron/morning-brief.md").write_text(
        "---\nschedule: \"0 7 * * 1-5\"\ntimezone: Europe/Paris\n---\nSummarise what changed in the repos I follow.\n")
    vault.git.commit_paths(["cron/morning-brief.md"], "a job", Act.person())
    from hermes_fs.mind.jobs import load_jobs
    from hermes_fs.service.cron_runner import run_job

    model.add({"content": "Three repos moved overnight: hermes-fs merged the web page; ..."})
    [job] = load_jobs(vault.files, vault.config)[0]
    run_job(vault, job, datetime.now(UTC))
    return {"change": main_change, "conflict": conflicting}


def shoot(root: Path, branches: dict[str, str], out: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    err = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    proc = subprocess.Popen([sys.executable, "-m", "hermes_fs", "--vault", str(root), "web", "--listen", "127.0.0.1:0"],
                            stdout=subprocess.DEVNULL, stderr=err)
    try:
        for _ in range(600):
            m = re.search(r"open (http://127\.0\.0\.1:\d+/)\?token=\S+", Path(err.name).read_text())
            if m:
                break
            time.sleep(0.05)
        url = re.search(r"open (\S+)", Path(err.name).read_text()).group(1)
        base = m.group(1)
        out.mkdir(parents=True, exist_ok=True)
        shots = []
        with sync_playwright() as p:
            ctx = browser_context(p)
            page = ctx.new_page()
            page.goto(url)
            for name, path, full in [("pending", "", False), ("change", f"changes/{branches['change']}", True),
                                     ("conflict", f"changes/{branches['conflict']}", False), ("log", "log", False),
                                     ("memory", "memory/USER.md", False), ("jobs", "jobs", False),
                                     ("status", "status", False)]:
                page.goto(base + path)
                page.wait_for_selector("#live.on")
                target = out / f"{name}.png"
                page.screenshot(path=str(target), full_page=full)
                shots.append(target)
            ctx.close()
        return shots
    finally:
        proc.terminate()
        proc.wait(15)


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    model = ModelServer()
    try:
        with tempfile.TemporaryDirectory(prefix="hermes-screens-") as d:
            branches = build(Path(d) / "my-vault", model, Path(d) / "work")
            for shot in shoot(Path(d) / "my-vault", branches, out):
                print(f"wrote {shot.relative_to(ROOT) if shot.is_relative_to(ROOT) else shot}")
    finally:
        model.close()


if __name__ == "__main__":
    main()
