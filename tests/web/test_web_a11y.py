"""The web page on a phone and on a desktop: every page checked with axe-core (injected into real
Chromium; serious and critical violations fail), and no page wider than a 390 px phone."""

from __future__ import annotations

import pytest
from web_helpers import (
    DESKTOP,
    PHONE,
    axe_problems,
    browser_context,
    make_session,
    overflow,
    refine_change,
    small_targets,
    start_web,
)

from hermes_fs.service import inbox
from hermes_fs.store.provenance import Act

pytestmark = pytest.mark.chromium
playwright_api = pytest.importorskip("playwright.sync_api")


def test_every_page_is_accessible_and_fits_a_phone(agent_vault, model_server, tmp_path):
    branch = refine_change(agent_vault, model_server, tmp_path)
    sid = make_session(agent_vault, model_server, tmp_path, "Remember that my staging cluster is called kestrel.")
    (agent_vault.root / "cron").mkdir(exist_ok=True)
    (agent_vault.root / "cron/brief.md").write_text("---\nschedule: every day at 07:00\n---\nSay good morning.\n")
    agent_vault.git.commit_paths(["cron/brief.md"], "test: a job", Act.person())
    (agent_vault.root / "memory/USER.md").write_text("# User\n\n- Prefers short answers.\n")
    agent_vault.git.commit_paths(["memory/USER.md"], "test: memory", Act.person())
    (agent_vault.root / "inbox").mkdir(exist_ok=True)
    (agent_vault.root / "inbox/deploy.md").write_text("---\ntype: teleport\n---\nDeploy the site.\n")
    taken = inbox.take(agent_vault, "inbox/deploy.md", None)
    assert taken is not None
    assert inbox.process(agent_vault, taken).status == "error"  # a failed request: Requests and Status show it
    failed = next((agent_vault.root / "outputs" / "requests").glob("*deploy.md")).stem
    pages = ["", f"changes/{branch}", "log", "memory", "memory/USER.md", "skills", "jobs", "sessions",
             f"sessions/{sid}", "sessions?q=kestrel", "requests", f"requests/{failed}", "status"]
    w = start_web(agent_vault.root)
    problems: dict[str, list[str]] = {}
    checked = 0
    try:
        with playwright_api.sync_playwright() as pw:
            ctx = browser_context(pw, bypass_csp=True)  # axe is injected: the page's own CSP allows no such script
            try:
                page = ctx.new_page()
                page.goto(w.url)
                for size, name in ((PHONE, "phone"), (DESKTOP, "desktop")):
                    page.set_viewport_size(size)
                    for path in pages:
                        page.goto(w.base + path)
                        page.wait_for_load_state("networkidle")
                        found = axe_problems(page) + small_targets(page)
                        if size is PHONE and overflow(page) > 0:
                            found.append(f"{overflow(page)} px wider than the phone")
                        checked += page.locator("input[type=checkbox]").count()
                        if found:
                            problems[f"{name} /{path}"] = found
            finally:
                ctx.close()
    finally:
        w.stop()
    assert checked >= 1  # the change page's "merge ticked files" boxes were among the targets measured
    assert problems == {}, "\n".join(f"{k}: {v}" for k, v in problems.items())
