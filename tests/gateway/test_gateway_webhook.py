"""The signed webhook channel and the gateway core behind it, with a real HTTP client (httpx)
against the real listener (uvicorn), the scripted model server, and real git vaults."""

from __future__ import annotations

import base64
import time

import httpx
import pytest
from conftest import git, wait_for

from hermes_fs.service.gateway.core import Gateway
from hermes_fs.service.gateway.ledger import GatewayLedger, ledger_path
from hermes_fs.service.gateway.webhook import MAX_BODY, sign_github, sign_standard
from hermes_fs.store.provenance import Act
from hermes_fs.store.vault import Vault

STANDARD_SECRET = "whsec_" + base64.b64encode(b"a test secret of 32 bytes long!!").decode()
GITHUB_SECRET = "gh-test-secret"


def configure(vault: Vault, model_server, extra: str = "", reply_to: str | None = None) -> None:
    from model_server import configure_vault

    reply = ", reply_to: hook" if reply_to else ""
    configure_vault(vault.root, model_server, f"""gateway:
  commit_idle_s: 0.2
  webhook:
    listen: 127.0.0.1:0
    routes:
      deploys: {{secret_env: DEPLOY_SECRET, prompt: "A deploy event arrived: {{payload}}", rate_per_min: 5{reply}}}
      github: {{secret_env: GH_SECRET, scheme: github}}
      open: {{}}
      missing: {{secret_env: NOT_SET_ANYWHERE}}
{extra}""")
    if reply_to:
        with open(vault.root / "hermes.yaml", "a") as f:
            f.write(f"notify:\n  targets: {{hook: '{reply_to}'}}\n")
    vault.secrets_env.write_text(f"DEPLOY_SECRET={STANDARD_SECRET}\nGH_SECRET={GITHUB_SECRET}\n")
    vault.secrets_env.chmod(0o600)
    vault.git.commit_paths(["hermes.yaml"], "test: gateway settings", Act.person())
    vault.reload_config()


@pytest.fixture
def hook(agent_vault, model_server):
    configure(agent_vault, model_server)
    gateways = []

    def start() -> tuple[Gateway, str]:
        gw = Gateway(Vault(agent_vault.root))
        gw.start()
        gateways.append(gw)
        port = gw.channels["webhook"].bound_port
        return gw, f"http://127.0.0.1:{port}"

    yield start
    for gw in gateways:
        if not gw.stopped.is_set():
            gw.stop()


def post(base: str, route: str, body: bytes, headers: dict) -> httpx.Response:
    return httpx.post(f"{base}/hooks/{route}", content=body, headers=headers, timeout=180)


def signed(body: bytes, msg_id: str, **kw) -> dict:
    return sign_standard(STANDARD_SECRET, msg_id, body, **kw)


def test_a_signed_delivery_is_run_answered_and_committed(hook, agent_vault, model_server):
    model_server.add({"content": "Deploy 42 looks fine."})
    gw, base = hook()
    body = b'{"deploy": 42, "status": "done"}'
    r = post(base, "deploys", body, signed(body, "msg_1"))
    assert r.status_code == 202, r.text
    rid = r.json()["id"]
    assert rid.startswith("webhook-")
    assert gw.wait_idle(180)
    status = httpx.get(f"{base}/hooks/deploys/requests/{rid}", headers=signed(b"", "poll_1"), timeout=180)
    assert status.status_code == 200 and status.json() == {"status": "ok", "answer": "Deploy 42 looks fine."}
    # the prompt of the route framed the payload, which reached the model as the person's message
    assert model_server.requests[-1]["messages"][-1]["content"] == 'A deploy event arrived: {"deploy": 42, "status": "done"}'
    # the result (with its origin) and the transcript are committed together by the cadence
    assert wait_for(lambda: git(agent_vault, "log", "-1", "--format=%s").startswith("gateway: 1 request"), 30)
    shown = git(agent_vault, "show", "--name-only", "--format=%B", "HEAD")
    assert "outputs/requests/" in shown and "sessions/" in shown and "Hermes-Change: gateway" in shown
    result = next((agent_vault.root / "outputs" / "requests").glob(f"*-{rid}.md")).read_text()
    assert "status: ok" in result and "Deploy 42 looks fine." in result and "platform: webhook" in result
    assert "reply:\n  state: none" in result  # no reply_to: the answer is there to GET
    assert git(agent_vault, "status", "--porcelain") == ""


def test_every_refusal_has_its_exact_answer(hook, agent_vault, model_server):
    gw, base = hook()
    body = b"hello"
    bad = signed(body, "msg_bad")
    bad["webhook-signature"] = "v1," + base64.b64encode(b"x" * 32).decode()
    assert post(base, "deploys", body, bad).status_code == 401
    assert post(base, "deploys", body, {}).status_code == 401  # no signature at all
    assert post(base, "deploys", body, {**signed(body, "m"), "webhook-signature": "garbage"}).status_code == 401
    old = signed(body, "msg_old", timestamp=time.time() - 301)
    r = post(base, "deploys", body, old)
    assert r.status_code == 401 and "300 s" in r.json()["error"]
    future = signed(body, "msg_future", timestamp=time.time() + 400)
    assert post(base, "deploys", body, future).status_code == 401
    assert post(base, "open", body, signed(body, "m2")).status_code == 403  # no secret configured: no insecure mode
    assert post(base, "missing", body, signed(body, "m3")).status_code == 403  # secret_env names nothing
    assert post(base, "nowhere", body, signed(body, "m4")).status_code == 404
    big = b"x" * (MAX_BODY + 1)
    r = post(base, "deploys", big, signed(big, "m5"))
    assert r.status_code == 413
    assert post(base, "deploys", b"\xff\xfe\x00binary", signed(b"", "m6")).status_code == 400
    # GitHub's scheme: HMAC of the body, compared in constant time
    assert post(base, "github", body, {**sign_github(GITHUB_SECRET, "d1", body), "X-Hub-Signature-256": "sha256=00"}).status_code == 401
    assert post(base, "github", body, {"X-GitHub-Delivery": "d2"}).status_code == 401
    # nothing above became a request, nor reached the model
    assert model_server.requests == []
    assert not list((agent_vault.root / ".hermes" / "gateway" / "requests").glob("*.md"))


def test_a_replayed_delivery_is_a_duplicate_even_after_a_restart(hook, agent_vault, model_server):
    model_server.add({"content": "first"})
    gw, base = hook()
    body = b"deploy 7"
    headers = signed(body, "msg_replayed")
    first = post(base, "deploys", body, headers)
    assert first.status_code == 202
    again = post(base, "deploys", body, headers)
    assert again.status_code == 200 and again.json() == {"status": "duplicate", "id": first.json()["id"]}
    assert gw.wait_idle(180)
    gw.stop()
    gw2, base2 = hook()  # the seen ids live in the ledger, not in memory
    third = post(base2, "deploys", body, signed(body, "msg_replayed"))
    assert third.status_code == 200 and third.json()["status"] == "duplicate"
    assert len(model_server.requests) == 1


def test_github_scheme_and_the_route_rate(hook, agent_vault, model_server):
    model_server.responder = lambda body: {"content": "ok"}
    gw, base = hook()
    body = b'{"action": "opened"}'
    assert post(base, "github", body, sign_github(GITHUB_SECRET, "gh-1", body)).status_code == 202
    codes = [post(base, "deploys", b"n%d" % i, signed(b"n%d" % i, f"rate_{i}")).status_code for i in range(7)]
    assert codes == [202] * 5 + [429, 429]  # rate_per_min: 5
    assert gw.wait_idle(180)
    rows = GatewayLedger(ledger_path(agent_vault.state_dir))
    assert rows.count_messages("webhook") == 6


def test_get_needs_the_signature_and_the_right_route(hook, agent_vault, model_server):
    model_server.add({"content": "done"})
    gw, base = hook()
    r = post(base, "deploys", b"x", signed(b"x", "g1"))
    rid = r.json()["id"]
    assert httpx.get(f"{base}/hooks/deploys/requests/{rid}", timeout=180).status_code == 401
    gh = sign_github(GITHUB_SECRET, "poll", b"")
    assert httpx.get(f"{base}/hooks/github/requests/{rid}", headers=gh, timeout=180).status_code == 404  # another route's
    assert httpx.get(f"{base}/hooks/deploys/requests/nope", headers=signed(b"", "p"), timeout=180).status_code == 404


def test_reply_to_gets_the_answer(agent_vault, model_server, receiver):
    configure(agent_vault, model_server, reply_to=receiver.url("hook"))
    model_server.add({"content": "The answer for the notify target."})
    gw = Gateway(Vault(agent_vault.root))
    gw.start()
    try:
        base = f"http://127.0.0.1:{gw.channels['webhook'].bound_port}"
        r = post(base, "deploys", b"go", signed(b"go", "r1"))
        assert r.status_code == 202
        assert wait_for(lambda: receiver.received, 60)
        assert receiver.received[0]["body"]["message"] == "The answer for the notify target."
        assert gw.wait_idle(180)
        d = gw.ledger.delivery(r.json()["id"])
        assert d.state == "delivered" and d.platform_id == "notify:hook"
    finally:
        gw.stop()
    result = next((agent_vault.root / "outputs" / "requests").glob("*.md")).read_text()
    assert "state: delivered" in result
