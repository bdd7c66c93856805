"""GitHub's own example payloads (tests/data/github/, from octokit/webhooks) signed the way GitHub
signs them, against the real webhook listener and gateway: every event runs or is refused with a
reason (never a 202 for nothing), the model gets the event name, its fields and the whole body
as a file, `ping` needs no model, form-encoded deliveries are decoded, a body replayed under a
fresh delivery id is refused, and an over-long delivery id is refused rather than cut."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from test_gateway_webhook import GITHUB_SECRET, configure, post

from hermes_fs.service.gateway.core import Gateway
from hermes_fs.service.gateway.ledger import GatewayLedger, ledger_path
from hermes_fs.service.gateway.webhook import sign_github
from hermes_fs.store.vault import Vault

DATA = Path(__file__).resolve().parent.parent / "data" / "github"


def example(name: str) -> bytes:
    return (DATA / f"{name}.json").read_bytes()


def github(body: bytes, event: str, delivery: str | None = None, form: bool = False) -> tuple[bytes, dict]:
    """The body and headers GitHub sends: JSON, or `payload=` form-encoded (its default)."""
    if form:
        body = urlencode({"payload": body.decode()}).encode()
    headers = sign_github(GITHUB_SECRET, delivery or str(uuid.uuid4()), body)
    headers["X-GitHub-Event"] = event
    headers["Content-Type"] = "application/x-www-form-urlencoded" if form else "application/json"
    headers["User-Agent"] = "GitHub-Hookshot/044aadd"
    return body, headers


@pytest.fixture
def hook(agent_vault, model_server):
    started = []

    def start(extra: str = "") -> tuple[Gateway, str]:
        configure(agent_vault, model_server, extra)
        gw = Gateway(Vault(agent_vault.root))
        gw.start()
        started.append(gw)
        return gw, f"http://127.0.0.1:{gw.channels['webhook'].bound_port}"

    yield start
    for gw in started:
        if not gw.stopped.is_set():
            gw.stop()


def test_githubs_large_events_run_with_their_name_fields_and_body_as_a_file(hook, model_server):
    model_server.responder = lambda body: {"content": "seen"}
    gw, base = hook()
    sent = {}
    for name, event in [("pull_request.opened", "pull_request"), ("pull_request_review.submitted", "pull_request_review"),
                        ("workflow_run.completed", "workflow_run")]:
        raw = example(name)
        assert len(raw) > 16_000  # over a chat message's limit: webhook bodies have their own
        body, headers = github(raw, event)
        r = post(base, "github", body, headers)
        assert r.status_code == 202, (name, r.text)
        sent[r.json()["id"]] = (event, raw)
    assert gw.wait_idle(180)
    prompts = [r["messages"][-1]["content"] for r in model_server.requests]
    assert len(prompts) == 3
    for rid, (event, raw) in sent.items():
        status = httpx.get(f"{base}/hooks/github/requests/{rid}", headers=sign_github(GITHUB_SECRET, "poll", b""),
                           timeout=180)
        assert status.json() == {"status": "ok", "answer": "seen"}
        prompt = next(p for p in prompts if f"event: {event}\n" in p)
        data = json.loads(raw)
        assert f"action: {data['action']}" in prompt
        assert f"repository: full_name={data['repository']['full_name']}" in prompt
        assert f"sender: login={data['sender']['login']}" in prompt
        path = Path(prompt.split("read it whole from the file ")[1].split(")")[0])
        assert path.read_bytes() == raw  # the whole body, byte for byte, where the run can read it
    pr = json.loads(example("pull_request.opened"))["pull_request"]
    opened = next(p for p in prompts if "event: pull_request\n" in p)
    assert f"number={pr['number']}" in opened and f"title={pr['title']}" in opened
    assert f"head.ref={pr['head']['ref']}" in opened
    run = json.loads(example("workflow_run.completed"))["workflow_run"]
    assert f"conclusion={run['conclusion']}" in next(p for p in prompts if "event: workflow_run\n" in p)


def test_ping_is_answered_without_the_model(hook, agent_vault, model_server):
    gw, base = hook()
    body, headers = github(example("ping"), "ping")
    r = post(base, "github", body, headers)
    assert r.status_code == 200 and r.json()["status"] == "pong"
    assert r.json()["zen"] == json.loads(example("ping"))["zen"]
    assert model_server.requests == [] and gw.ledger.count_messages("webhook") == 0


def test_a_form_encoded_delivery_reaches_the_model_decoded(hook, model_server):
    model_server.responder = lambda body: {"content": "pushed"}
    gw, base = hook()
    raw = example("push")
    body, headers = github(raw, "push", form=True)
    assert b"%22" in body  # really form-encoded, as GitHub's default content type sends it
    assert post(base, "github", body, headers).status_code == 202
    assert gw.wait_idle(180)
    prompt = model_server.requests[-1]["messages"][-1]["content"]
    data = json.loads(raw)
    assert "event: push" in prompt and f"ref: {data['ref']}" in prompt and "%22" not in prompt
    path = Path(prompt.split("read it whole from the file ")[1].split(")")[0])
    assert json.loads(path.read_text()) == data
    bare = b"other=1"
    headers = {**sign_github(GITHUB_SECRET, "no-payload", bare), "X-GitHub-Event": "push",
               "Content-Type": "application/x-www-form-urlencoded"}
    r = post(base, "github", bare, headers)
    assert r.status_code == 400 and "payload=" in r.json()["error"]


def test_a_body_replayed_under_a_fresh_delivery_id_is_refused_even_after_a_restart(hook, agent_vault, model_server):
    model_server.responder = lambda body: {"content": "once"}
    gw, base = hook()
    raw = example("pull_request.synchronize")
    body, headers = github(raw, "pull_request", delivery="d-first")
    assert post(base, "github", body, headers).status_code == 202
    again = post(base, "github", body, headers)  # GitHub's own redelivery reuses the id
    assert again.status_code == 200 and again.json()["status"] == "duplicate"
    _, fresh = github(raw, "pull_request", delivery="d-captured")
    r = post(base, "github", body, fresh)
    assert r.status_code == 409 and "d-first" in r.json()["error"]
    assert gw.wait_idle(180)
    gw.stop()
    gw2, base2 = hook()  # the window of body digests is in the ledger
    _, later = github(raw, "pull_request", delivery="d-later")
    assert post(base2, "github", body, later).status_code == 409
    other, headers = github(example("pull_request.opened"), "pull_request", delivery="d-other")
    assert post(base2, "github", other, headers).status_code == 202  # another body runs
    assert gw2.wait_idle(180)
    assert len(model_server.requests) == 2


def test_an_over_long_delivery_id_is_refused_not_cut(hook, model_server):
    model_server.responder = lambda body: {"content": "ok"}
    gw, base = hook()
    stem = "a" * 200
    first, headers = github(b'{"action": "one"}', "issues", delivery=stem)
    assert post(base, "github", first, headers).status_code == 202
    second, headers = github(b'{"action": "two"}', "issues", delivery=stem + "-second")
    r = post(base, "github", second, headers)
    assert r.status_code == 400 and "at most 200" in r.json()["error"]  # not taken for a duplicate of the first
    third, headers = github(b'{"action": "three"}', "issues", delivery="tab\there")
    assert post(base, "github", third, headers).status_code == 400  # a control character: never an id
    assert gw.wait_idle(180)
    assert len(model_server.requests) == 1


def test_a_delivery_the_core_refuses_is_never_answered_202_nor_retried(hook, agent_vault, model_server):
    model_server.responder = lambda body: {"content": "ran"}
    gw, base = hook("  sender_rate_per_min: 2\n")
    codes, answers = [], []
    for i in range(3):
        body, headers = github(b'{"action": "n%d"}' % i, "issues")
        r = post(base, "github", body, headers)
        codes.append(r.status_code)
        answers.append(r.json())
    assert codes == [202, 202, 429], answers
    assert "not run" in answers[2]["error"] and "2 messages a minute" in answers[2]["error"]
    assert gw.wait_idle(180)
    assert len(model_server.requests) == 2
    ledger = GatewayLedger(ledger_path(agent_vault.state_dir))
    assert ledger.db.execute("SELECT COUNT(*) FROM deliveries").fetchone()[0] == 0  # no notice with nowhere to go
