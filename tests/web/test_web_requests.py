"""Results of requests on the web page, over real HTTP (a real `hermes-fs web` process): requests
dropped in inbox/ and a webhook's, answered by the real inbox machinery and committed, are listed
newest first with where they came from; a failed one shows on the Status page's errors and in
`hermes-fs status`."""

from __future__ import annotations

import json

import pytest
from web_helpers import start_web

from hermes_fs.service import inbox
from hermes_fs.service.gateway.core import GATEWAY_DIR, requests_dir


@pytest.fixture
def web(vault):
    procs = []

    def start():
        w = start_web(vault.root)
        procs.append(w)
        return w

    yield start
    for w in procs:
        w.stop()


def answer_inbox_file(vault, name: str, text: str):
    (vault.root / "inbox").mkdir(exist_ok=True)
    (vault.root / "inbox" / name).write_text(text)
    c = inbox.take(vault, f"inbox/{name}", None)
    assert c is not None
    return inbox.process(vault, c)


def answer_webhook_delivery(vault, text: str):
    """A webhook delivery as the gateway claims it: a request file with its origin, answered
    through the same inbox.process path the gateway uses (chat=True)."""
    stamp = inbox.new_stamp()
    path = requests_dir(vault) / f"{stamp}--hook-1.md"
    path.write_text(text)
    c = inbox.TakenRequest(path, "hook-1.md", stamp, GATEWAY_DIR)
    return inbox.process(vault, c, chat=True)


def test_requests_page_lists_results_and_status_shows_failures(vault, web):
    w = web()
    code, _, body = w.request("GET", "/status")
    assert code == 200 and '<p class="ok">none</p>' in body
    code, _, body = w.request("GET", "/requests")
    assert code == 200 and "No requests yet" in body

    bad = answer_inbox_file(vault, "deploy.md", "---\ntype: teleport\n---\nDeploy the site.\n")
    assert bad.status == "error"
    hook = answer_webhook_delivery(vault, "---\ntype: nonsense\norigin: {platform: webhook, chat: github, "
                                          "thread: d-1, sender: github, message: d-1}\n---\nA push <b>event</b>.\n")
    assert hook.status == "error"

    code, _, body = w.request("GET", "/requests")
    assert code == 200
    assert "inbox/deploy.md" in body and "webhook github" in body
    assert body.index("webhook github") < body.index("inbox/deploy.md")  # newest first
    assert "<b>event</b>" not in body  # what a request says is shown as text, never as markup
    [deploy] = [r for r in inbox_results(vault) if r.endswith("-deploy")]
    code, _, page = w.request("GET", f"/requests/{deploy}")
    assert code == 200 and "teleport" in page and "Deploy the site." in page and "error" in page

    code, _, body = w.request("GET", "/status")
    assert code == 200 and '<p class="ok">none</p>' not in body
    assert f'href="/requests/{deploy}"' in body and "inbox/deploy.md" in body
    from click.testing import CliRunner

    from hermes_fs.cli.main import main

    out = CliRunner().invoke(main, ["--vault", str(vault.root), "status"]).output  # the CLI lists the same failures
    [line] = [ln for ln in out.splitlines() if "inbox/deploy.md" in ln]
    assert line.startswith("failed request  inbox/deploy.md (") and "teleport" in line
    assert f"outputs/requests/{deploy}.md" in line
    assert any(ln.startswith("failed request  ") and "webhook github" in ln for ln in out.splitlines())
    st = json.loads(CliRunner().invoke(main, ["--vault", str(vault.root), "status", "--json"]).output)
    assert {r["name"] for r in st["failed_requests"]} == set(inbox_results(vault))


@pytest.mark.parametrize("name", ["..%2F..%2Fhermes.yaml", "nothing-here", "%00", "..", "x" * 300])
def test_a_bad_or_unknown_request_name_is_a_404(vault, web, name):
    w = web()
    code, _, body = w.request("GET", f"/requests/{name}")
    assert code == 404 and "model:" not in body  # never a file outside outputs/requests
    assert "no request result" in body or "%2F" in name  # a path with a slash never reaches the page


def inbox_results(vault) -> list[str]:
    return sorted(p.name[:-3] for p in (vault.root / inbox.RESULTS_DIR).glob("*.md"))
