"""Helpers for the web page's tests: a real `hermes-fs web` process, learned changes made by the
real refine pipeline (scripted reviewer over HTTP), and Debian's Chromium driven by Playwright."""

from __future__ import annotations

import http.client
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from test_refine import SKILL  # noqa: F401  (one skill text for the refine and web tests)

CHROMIUM = "/usr/bin/chromium"
# The flags this machine needs (no background networking: its connections are refused here).
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@dataclass
class WebProc:
    proc: subprocess.Popen
    url: str  # the sign-in URL, token included
    base: str  # http://127.0.0.1:PORT/
    token: str
    host: str  # 127.0.0.1:PORT
    log: Path  # what the process wrote to stderr

    def output(self) -> str:
        return self.log.read_text()

    def request(self, method: str, path: str, body: str | None = None, headers: dict | None = None,
                cookie: bool = True) -> tuple[int, dict, str]:
        conn = http.client.HTTPConnection(self.host, timeout=180)  # generous: a loaded machine
        h = {"Host": self.host, **(headers or {})}
        if cookie:
            h.setdefault("Authorization", f"Bearer {self.token}")
        if body is not None:
            h.setdefault("Content-Type", "application/x-www-form-urlencoded")
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        data = r.read().decode("utf-8", "replace")
        conn.close()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_web(root: Path, *args: str, timeout: float = 30, program: str | None = None) -> WebProc:
    """`hermes-fs web --listen 127.0.0.1:0` (a free port), waiting for the URL it prints; `program`, a
    `python -c` text that ends by calling the CLI, runs it under a hook of the caller's (an import watch)."""
    err = tempfile.NamedTemporaryFile("w+", delete=False, suffix=".log")
    launcher = ["-c", program] if program else ["-m", "hermes_fs"]
    proc = subprocess.Popen([sys.executable, *launcher, "--vault", str(root), "web",
                             "--listen", "127.0.0.1:0", *args], stdout=subprocess.DEVNULL, stderr=err, text=True)
    deadline = time.time() + timeout
    text = ""
    while time.time() < deadline:
        text = Path(err.name).read_text()
        m = re.search(r"open (http://(127\.0\.0\.1:\d+)/\?token=(\S+))", text)
        if m:
            return WebProc(proc, m.group(1), f"http://{m.group(2)}/", m.group(3), m.group(2), Path(err.name))
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"hermes-fs web did not start: {text}")


PAGES = ("/", "/status", "/memory", "/skills", "/jobs")


def read_every_page(web: WebProc) -> None:
    """Request each page of the web UI as a signed-in person; each must answer 200."""
    for page in PAGES:
        status, _, _ = web.request("GET", page)
        assert status == 200, (page, status)


def make_session(vault, model_server, workspace: Path, text: str = "I always use tabs, not spaces. Now deploy the app to fly.io please.") -> str:
    from hermes_fs.agent.conversation import Conversation, ConversationOptions

    model_server.add({"content": "Deployed with `fly deploy --strategy rolling`; all machines healthy."})
    with Conversation(vault, ConversationOptions(source="run", workspace=workspace)) as c:
        c.ask(text)
        return c.id


def refine_change(vault, model_server, workspace: Path, summary: str = "remember tabs and the fly.io deploy",
                  entry: str = "Prefers tabs over spaces.", skill: bool = True, focus: str | None = None) -> str:
    """A real refine: a session, then the scripted reviewer adds a USER.md entry (and a skill)."""
    from hermes_fs.learning.refine import RefineOptions, refine

    make_session(vault, model_server, workspace)
    calls = [("memory", {"action": "add", "file": "USER.md", "text": entry})]
    lines = f"Summary: {summary}\n- memory/USER.md: {entry} (because the user said so twice)"
    if skill:
        calls.append(("skill_manage", {"action": "create", "name": "deploy-fly", "content": SKILL}))
        lines += "\n- skills/deploy-fly/SKILL.md: new skill (because the rolling deploy worked)"
    model_server.add({"tool_calls": calls}, {"content": lines})
    result = refine(vault, RefineOptions(focus=focus))
    assert result.status == "pending", result.reason
    return result.branch


def browser_context(playwright, **kwargs):
    """Debian's Chromium with a fresh profile; never a downloaded browser."""
    if not os.access(CHROMIUM, os.X_OK):
        raise AssertionError(f"{CHROMIUM} is missing: run scripts/browser-test-env.sh (make test does)")
    return playwright.chromium.launch_persistent_context(
        tempfile.mkdtemp(prefix="hermes-chromium-"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS,
        viewport={"width": 1200, "height": 900}, **kwargs)


AXE = Path(__file__).resolve().parent / ".npm-axe" / "node_modules" / "axe-core" / "axe.min.js"
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1200, "height": 900}
ALWAYS = {"empty-table-header", "target-size"}  # fail at any impact: a header read as nothing, a target too small
TARGETS = "input[type=checkbox], input[type=radio], button, nav a"


def small_targets(page) -> list[str]:
    """Controls shown smaller than 24 x 24 px (WCAG 2.2's minimum target size)."""
    boxes = page.eval_on_selector_all(TARGETS, """els => els.filter(e => e.offsetParent !== null).map(e => {
        const b = e.getBoundingClientRect();
        return [e.outerHTML.slice(0, 80), Math.round(b.width), Math.round(b.height)]; })""")
    return [f"{html}: {w} x {h} px" for html, w, h in boxes if w < 24 or h < 24]


def axe_problems(page) -> list[str]:
    """The serious and critical accessibility violations axe-core finds on the page as shown now
    (axe-core installed by scripts/browser-test-env.sh; never fetched at test time)."""
    if not AXE.is_file():
        raise AssertionError(f"{AXE} is missing: run scripts/browser-test-env.sh (make test does)")
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(content=AXE.read_text(encoding="utf-8"))
    found = page.evaluate("""async () => {
        const r = await axe.run(document, {resultTypes: ["violations"],
            rules: {"target-size": {enabled: true}, "empty-table-header": {enabled: true}}});
        return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                                       nodes: v.nodes.map(n => n.target.join(" ") + ": " + n.failureSummary)}));
    }""")
    return [f"{v['impact']} {v['id']} ({v['help']}): " + "; ".join(v["nodes"][:3])
            for v in found if v["impact"] in ("serious", "critical") or v["id"] in ALWAYS]


def overflow(page) -> int:
    """How many pixels the page is wider than the window (0: no sideways scrolling)."""
    return int(page.evaluate("document.documentElement.scrollWidth - window.innerWidth"))
