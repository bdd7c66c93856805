"""The browser recipe end to end, offline: `mcp add browser` (the Playwright MCP server from npm,
installed into tests/.npm-mcp-browser by scripts/browser-test-env.sh) driving Debian's Chromium
headless, called through hermes-fs's own MCP client by the scripted model, against a small web
site this test serves on 127.0.0.1: navigate, read the page, follow a link, click a button, fill
and submit a form that the site receives."""

from __future__ import annotations

import re
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs

import pytest
from conftest import git

from hermes_fs.agent import browser
from hermes_fs.agent.conversation import Conversation, ConversationOptions
from hermes_fs.store.provenance import Act

pytestmark = pytest.mark.chromium
PREFIX = Path(__file__).parent / ".npm-mcp-browser"  # scripts/browser-test-env.sh installs the pinned server here

HOME = ("<html><head><title>Test shop</title></head><body><h1>Test shop</h1>"
        "<p>Today's code word is PELICAN.</p><a href='/order'>Order form</a></body></html>")
ORDER = ("<html><head><title>Order</title></head><body><h1>Order form</h1>"
         "<button onclick=\"document.getElementById('out').textContent='stock: 42 left'\">Check stock</button>"
         "<p id='out'></p><form method='post' action='/order'>"
         "<label>Name <input name='name'></label> <label>Quantity <input name='qty'></label>"
         "<button type='submit'>Send order</button></form></body></html>")


class Site:
    """The local test site; `orders` is what its form handler received."""

    def __init__(self):
        self.orders: list[dict[str, list[str]]] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self._page({"/": HOME, "/order": ORDER}.get(self.path), 200)

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                form = parse_qs(body)
                site.orders.append(form)
                name = (form.get("name") or ["?"])[0]
                self._page(f"<html><body><h1>Thank you, {name}</h1><p>Order number 7.</p></body></html>", 200)

            def _page(self, html: str | None, status: int):
                data = (html or "<h1>not found</h1>").encode()
                self.send_response(status if html else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


def ref(body: dict, pattern: str) -> str:
    """The element reference the last page snapshot gives for `pattern` (what a model reads)."""
    text = [m["content"] for m in body["messages"] if m["role"] == "tool"][-1]
    found = re.search(pattern + r"[^\n]*\[ref=([A-Za-z0-9]+)\]", text)
    assert found, f"{pattern!r} not in the snapshot:\n{text[:2000]}"
    return found.group(1)


def call(name: str, args: dict | None = None) -> tuple[str, dict]:
    return (f"browser__browser_{name}", args or {})


@pytest.fixture
def installed():
    if browser.installed(PREFIX) is None or not shutil.which("/usr/bin/chromium"):
        pytest.fail("the browser recipe's server or Chromium is missing: run `bash scripts/browser-test-env.sh`")
    return PREFIX


def test_the_agent_browses_a_local_site_through_the_recipe(agent_vault, model_server, tmp_path, installed):
    setup = browser.add_browser(agent_vault, prefix=installed)
    assert setup.added and not setup.installed and setup.chromium == "/usr/bin/chromium"
    site = Site()
    model_server.add(
        {"tool_calls": [call("navigate", {"url": site.url + "/"})]},
        {"tool_calls": [call("snapshot")]},
        lambda b: {"tool_calls": [call("click", {"element": "Order form link", "target": ref(b, r'link "Order form"')})]},
        {"tool_calls": [call("snapshot")]},
        lambda b: {"tool_calls": [
            call("click", {"element": "Check stock", "target": ref(b, r'button "Check stock"')}),
            call("fill_form", {"fields": [
                {"name": "Name", "type": "textbox", "target": ref(b, r'textbox "Name"'), "value": "Ada"},
                {"name": "Quantity", "type": "textbox", "target": ref(b, r'textbox "Quantity"'), "value": "3"}]})]},
        {"tool_calls": [call("snapshot")]},
        lambda b: {"tool_calls": [call("click", {"element": "Send order", "target": ref(b, r'button "Send order"')})]},
        {"tool_calls": [call("snapshot")]},
        {"tool_calls": [call("navigate", {"url": "file:///etc/passwd"}),  # what a hostile page might ask for
                        call("snapshot", {"filename": "../../../escape.yml"})]},
        {"content": "Ordered 3 for Ada: order number 7."})
    try:
        with Conversation(agent_vault, ConversationOptions(source="run", workspace=tmp_path)) as c:
            assert c.ask("order 3 for Ada on the test shop").answer == "Ordered 3 for Ada: order number 7."
    finally:
        site.server.shutdown()
    offered = {t["function"]["name"] for t in model_server.requests[0]["tools"]}
    assert {f"browser__{t}" for t in browser.TOOLS} <= offered
    assert not {"browser__browser_run_code_unsafe", "browser__browser_file_upload", "browser__browser_evaluate"} & offered
    results = [m["content"] for m in model_server.requests[-1]["messages"] if m["role"] == "tool"]
    results, hostile = results[:-2], results[-2:]
    assert not [r for r in results if r.startswith("error")], "\n----\n".join(results)
    assert hostile[0].startswith("error") and "file:" in hostile[0] and "root:" not in hostile[0]
    assert hostile[1].startswith("error") and "outside allowed roots" in hostile[1]
    assert not (installed.parent / "escape.yml").exists()
    assert f"Page URL: {site.url}/" in results[0]
    assert "PELICAN" in results[1]  # the page's text, read
    assert "Order form" in results[3] and "/order" in results[2]  # the link followed
    assert "stock: 42 left" in results[6]  # the button's script ran in Chromium
    assert "Thank you, Ada" in results[-1] and "Order number 7" in results[-1]
    assert site.orders == [{"name": ["Ada"], "qty": ["3"]}]  # the site got the form
    assert not any(installed.joinpath("work").iterdir())  # nothing saved where the session runs


def test_mcp_add_browser_command_and_doctor(vault, run_cli, installed):
    (vault.root / "hermes.yaml").write_text((vault.root / "hermes.yaml").read_text()
                                            + "sandbox:\n  backend: none\nmcp:\n  servers:\n    other: {command: /bin/true}\n")
    vault.git.commit_paths(["hermes.yaml"], "test: no sandbox", Act.person())
    r = run_cli("--vault", str(vault.root), "mcp", "add", "browser", "--prefix", str(installed))
    assert r.returncode == 0, r.stderr
    assert "added mcp.servers.browser" in r.stdout and "unattended: true" in r.stdout
    vault._config = None
    entry = vault.config.mcp.servers["browser"]
    assert entry.unattended is False and "--headless" in entry.args and "--isolated" in entry.args
    assert set(vault.config.mcp.servers) == {"other", "browser"}
    assert git(vault, "log", "-1", "--format=%s").startswith("mcp: add the browser")
    again = run_cli("--vault", str(vault.root), "mcp", "add", "browser", "--prefix", str(installed))
    assert again.returncode == 0 and "already set" in again.stdout
    bad = run_cli("--vault", str(vault.root), "mcp", "add", "browser", "--name", "web", "--chromium", "/nonexistent/chromium")
    assert bad.returncode != 0 and "no Chromium at" in bad.stderr
    text = (vault.root / "hermes.yaml").read_text()
    (vault.root / "hermes.yaml").write_text(text.replace("other: {command: /bin/true}", "").replace("timeout_s: 60", "timeout_s: 90"))
    clash = run_cli("--vault", str(vault.root), "mcp", "add", "browser", "--prefix", str(installed))
    assert clash.returncode != 0 and "already set, differently" in clash.stderr
    r = run_cli("--vault", str(vault.root), "doctor", "--no-model")
    assert "ok  mcp server browser: 13 tool(s)" in r.stdout, r.stdout + r.stderr
    assert re.search(r"ok  browser node: v\d+", r.stdout)
    assert "ok  browser chromium: /usr/bin/chromium: Chromium" in r.stdout
    assert "ok  browser page: opened about:blank headless" in r.stdout
