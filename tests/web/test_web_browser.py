"""The web page end to end in a real browser: Debian's Chromium driven by Playwright, against a real
`hermes-fs web` process on a free loopback port, over changes made by the real refine pipeline."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import git, wait_for
from web_helpers import browser_context, refine_change, start_web

from hermes_fs.learning import changes
from hermes_fs.store.provenance import Act

pytestmark = pytest.mark.chromium

playwright_api = pytest.importorskip("playwright.sync_api")
USER = "memory/USER.md"


@pytest.fixture
def pw():
    with playwright_api.sync_playwright() as p:
        yield p


@pytest.fixture
def web(agent_vault):
    procs = []

    def start(*args):
        w = start_web(agent_vault.root, *args)
        procs.append(w)
        return w

    yield start
    for w in procs:
        w.stop()


@pytest.fixture
def page(pw):
    ctx = browser_context(pw)
    pg = ctx.new_page()
    pg.on("dialog", lambda d: d.accept())  # confirm() of Reject / Revert
    yield pg
    ctx.close()


def test_pending_list_change_page_and_merge(agent_vault, model_server, tmp_path, web, page):
    branch = refine_change(agent_vault, model_server, tmp_path)
    w = web()
    page.goto(w.url)  # signs in: the cookie is set and the token leaves the address bar
    assert page.url == w.base
    row = page.locator("table.list tbody tr")
    assert row.count() == 1 and "remember tabs and the fly.io deploy" in row.inner_text()
    assert USER in row.inner_text() and "skills/deploy-fly/SKILL.md" in row.inner_text()
    page.click("a.change")
    assert page.url == f"{w.base}changes/{branch}"
    entry = page.locator("table.entries tr.added")
    assert "Prefers tabs over spaces." in entry.inner_text()
    assert "because the user said so twice" in entry.locator(".reason").inner_text()  # the reason, per entry
    assert "+name: deploy-fly" in page.locator("pre.diff").inner_text()  # the skill as a diff
    assert "I always use tabs, not spaces." in page.locator(".transcript").inner_text()  # the conversation
    assert "Merges cleanly" in page.inner_text("main")
    page.click("button[value=all]")
    assert page.url.startswith(w.base + "?flash="), page.content()
    assert f"merged {branch}" in page.inner_text(".flash")
    assert git(agent_vault, "log", "-1", "--format=%s", "main").startswith(f"merge {branch}: ")
    assert "Prefers tabs over spaces." in (agent_vault.root / USER).read_text()
    assert changes.pending(agent_vault.git) == []
    assert "No pending changes" in page.inner_text("main")


def test_merge_ticked_file_only_keeps_the_rest_pending(agent_vault, model_server, tmp_path, web, page):
    branch = refine_change(agent_vault, model_server, tmp_path)
    w = web()
    page.goto(w.url)
    page.goto(f"{w.base}changes/{branch}")
    page.uncheck("input[name=file][value='skills/deploy-fly/SKILL.md']")
    page.click("button[value=ticked]")
    assert "the rest stays pending" in page.inner_text(".flash")
    assert page.url.startswith(f"{w.base}changes/{branch}")
    assert "Prefers tabs over spaces." in (agent_vault.root / USER).read_text()
    assert not (agent_vault.root / "skills/deploy-fly").exists()
    [left] = changes.pending(agent_vault.git)
    assert left.branch == branch and left.files == ["skills/deploy-fly/SKILL.md"]
    assert [f.strip() for f in page.locator("section.file h2 code").all_inner_texts()] == ["skills/deploy-fly/SKILL.md"]


@pytest.mark.slow
def test_reject_then_revert_from_the_log(agent_vault, model_server, tmp_path, web, page):
    rejected = refine_change(agent_vault, model_server, tmp_path, summary="first idea", skill=False, focus="first")
    merged = refine_change(agent_vault, model_server, tmp_path, summary="second idea", entry="Works in UTC.",
                           skill=False, focus="second")
    w = web()
    page.goto(w.url)
    page.goto(f"{w.base}changes/{rejected}")
    page.click("button.danger")  # Reject (the confirm dialog is accepted)
    assert f"rejected {rejected}" in page.inner_text(".flash")
    assert agent_vault.git.rev(f"refs/hermes/rejected/{rejected}")
    assert not agent_vault.git.rev(f"refs/heads/{rejected}")
    page.goto(f"{w.base}changes/{merged}")
    page.click("button[value=all]")
    assert "Works in UTC." in (agent_vault.root / USER).read_text()
    page.click("nav a[href='/log']")
    page.wait_for_url(f"{w.base}log")  # count() does not wait: on the page before, it counted 0 rows (a CI run)
    rows = page.locator("table.list").first.locator("tbody tr")  # the changes, not the spend table below
    rows.first.wait_for()
    assert rows.count() == 2
    assert "merged" in rows.nth(0).inner_text() and "second idea" in rows.nth(0).inner_text()  # newest first
    assert "rejected" in rows.nth(1).inner_text()
    rows.nth(0).locator("button", has_text="Revert").click()
    assert f"reverted {merged}" in page.inner_text(".flash")
    assert "Works in UTC." not in (agent_vault.root / USER).read_text()
    assert git(agent_vault, "log", "-1", "--format=%s", "main").strip() == f"revert {merged}"
    assert "reverted" in page.locator("table.list").first.locator("tbody tr").nth(0).inner_text()


def test_edit_user_md_while_it_changed_on_disk_loses_nothing(agent_vault, web, page):
    w = web()
    page.goto(w.url)
    page.goto(f"{w.base}memory/USER.md")
    path = agent_vault.root / USER
    original = path.read_text()
    assert page.input_value("textarea") == original  # the editor holds the file byte for byte
    page.wait_for_selector("#live.on")
    elsewhere = original + "- Written in another editor while the page was open.\n"
    path.write_text(elsewhere)
    page.wait_for_selector("#stale", state="visible")  # the watcher told the page
    mine = original + "- Typed in the page.\n"
    page.fill("textarea", mine)
    page.click("form.editor button")
    # nothing overwritten: the file on disk is the other editor's, the page shows both, keeps mine
    assert path.read_text() == elsewhere
    assert "changed since this page loaded it" in page.inner_text("#save-result")
    assert "Written in another editor" in page.inner_text("pre.on-disk")
    assert "Typed in the page." in page.inner_text("pre.yours")
    assert page.input_value("textarea").replace("\r\n", "\n") == mine
    # saving again, having seen both, is a person's edit (one commit, no CRLF from the browser)
    page.fill("textarea", elsewhere + "- Typed in the page.\n")
    page.click("form.editor button")
    assert "saved and committed as your edit" in page.inner_text(".flash")
    assert path.read_text() == elsewhere + "- Typed in the page.\n"
    assert git(agent_vault, "log", "-1", "--format=%s%n%(trailers:key=Hermes-Change)", "main").split("\n")[:2] == [
        "edit: memory/USER.md", "Hermes-Change: human-edit"]
    assert git(agent_vault, "status", "--porcelain", "--", USER) == ""


def test_cross_origin_post_is_refused(agent_vault, model_server, tmp_path, web, page):
    branch = refine_change(agent_vault, model_server, tmp_path, skill=False)
    w = web()
    page.goto(w.url)  # this browser is signed in (it has the cookie)
    evil = f"""<form id=f method=post action="{w.base}changes/{branch}/merge">
      <input name=how value=all><input name=csrf value=guess></form><script>f.submit()</script>"""

    class Evil(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(evil.encode())

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Evil)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with page.expect_response(lambda r: "/merge" in r.url) as answer:
            page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
        assert answer.value.status == 403
    finally:
        server.shutdown()
    assert agent_vault.git.rev(f"refs/heads/{branch}")  # still pending
    assert not git(agent_vault, "log", "--format=%s", "main").startswith("merge ")


def test_no_token_is_401(agent_vault, web, pw):
    w = web()
    ctx = browser_context(pw)
    try:
        pg = ctx.new_page()
        response = pg.goto(w.base)
        assert response.status == 401
        assert "not signed in" in pg.inner_text("body")
        assert pg.goto(f"{w.base}?token=wrong").status == 401
        assert pg.goto(f"{w.base}memory/USER.md").status == 401
    finally:
        ctx.close()


def test_xss_in_a_reviewer_summary_shows_as_text(agent_vault, model_server, tmp_path, web, page):
    attack = "<script>window.pwned=1</script><img src=x onerror=\"window.pwned=2\">"
    branch = refine_change(agent_vault, model_server, tmp_path, summary=f"tabs {attack}",
                           entry=f"Prefers tabs {attack}", skill=False)
    w = web()
    page.goto(w.url)
    assert attack in page.locator("a.change").inner_text()  # shown literally, as text
    page.goto(f"{w.base}changes/{branch}")
    assert attack in page.inner_text("h1")
    assert attack in page.locator("table.entries").inner_text()
    assert page.evaluate("typeof window.pwned") == "undefined"
    assert page.locator("main script, main img").count() == 0


def test_page_updates_itself_when_a_change_arrives(agent_vault, model_server, tmp_path, web, page):
    w = web()
    page.goto(w.url)
    page.wait_for_selector("#live.on")
    assert "No pending changes" in page.inner_text("main")
    branch = refine_change(agent_vault, model_server, tmp_path, skill=False)  # a new branch ref under .git/
    page.wait_for_selector(f"a[href='/changes/{branch}']", timeout=15000)  # no reload by anyone
    assert page.locator("nav .count").inner_text() == "1"


@pytest.mark.slow
def test_run_a_job_now_and_see_its_output(agent_vault, model_server, web, page):
    (agent_vault.root / "cron").mkdir(exist_ok=True)
    (agent_vault.root / "cron/brief.md").write_text("---\nschedule: every day at 07:00\n---\nSay good morning.\n")
    agent_vault.git.commit_paths(["cron/brief.md"], "test: a job", Act.person())
    model_server.add({"content": "Good morning from the job."})
    w = web()
    page.goto(w.url)
    page.goto(f"{w.base}jobs")
    assert "every day at 07:00" in page.inner_text("section.job")
    page.click("section.job button", )
    assert "brief started" in page.inner_text(".flash")
    # the job's own process writes and commits the output; the page shows it without a reload
    page.wait_for_selector("table.runs", timeout=60000)
    assert "ok" in page.inner_text("table.runs")
    assert wait_for(lambda: "cron: brief (ok)" in git(agent_vault, "log", "--format=%s", "main"), 30)


@pytest.mark.slow
def test_search_a_session_and_refine_it(agent_vault, model_server, tmp_path, web, page):
    from web_helpers import make_session

    sid = make_session(agent_vault, model_server, tmp_path, "Remember that my staging cluster is called kestrel.")
    model_server.add({"tool_calls": [("memory", {"action": "add", "file": "MEMORY.md", "text": "Staging cluster: kestrel."})]},
                     {"content": "Summary: remember the staging cluster\n- memory/MEMORY.md: staging is kestrel (because the user said so)"})
    w = web()
    page.goto(w.url)
    page.goto(f"{w.base}sessions")
    page.fill("input[name=q]", "kestrel")
    page.press("input[name=q]", "Enter")
    page.click(f"a[href='/sessions/{sid}']")
    assert "my staging cluster is called kestrel" in page.inner_text(".transcript")
    page.click("button.primary")  # refine this session: the CLI's background refine
    assert f"refine of {sid} running" in page.inner_text(".flash")
    page.wait_for_selector("a.change", timeout=60000)  # the new change arrives on the pending page by itself
    assert "remember the staging cluster" in page.inner_text("a.change")
