import pytest

from hermes_fs.errors import InputError
from hermes_fs.store.config import parse_config
from hermes_fs.store.notify import Notifier, expand


def make(vault, targets: str):
    cfg = parse_config(f"notify:\n  targets: {targets}\n")
    return Notifier(cfg, vault.root / ".hermes" / "secrets.env")


def test_delivers_to_local_receiver_with_env_expansion(vault, receiver, monkeypatch):
    """A name listed in secrets.env may take its value from the environment (which wins)."""
    (vault.root / ".hermes" / "secrets.env").write_text("HOOK_PORT=\n")
    monkeypatch.setenv("HOOK_PORT", str(receiver.port))
    n = make(vault, "{phone: 'json://127.0.0.1:${HOOK_PORT}/phone'}")
    [d] = n.send(["phone"], "Title here", "Body text")
    assert d.ok and d.as_dict() == {"target": "phone", "status": "ok"}
    [got] = receiver.received
    assert got["path"] == "/phone"
    assert got["body"]["title"] == "Title here" and got["body"]["message"] == "Body text"


def test_secrets_env_file_supplies_values(vault, receiver, monkeypatch):
    monkeypatch.delenv("MY_HOOK", raising=False)
    (vault.root / ".hermes").mkdir(exist_ok=True)
    (vault.root / ".hermes" / "secrets.env").write_text(f"# comment\nexport MY_HOOK='{receiver.url('s')}'\n")
    n = make(vault, "{desk: '${MY_HOOK}'}")
    assert [d.ok for d in n.send(["desk"], "t", "b")] == [True]
    assert receiver.received[0]["path"] == "/s"


def test_per_target_results(vault, receiver, monkeypatch):
    monkeypatch.delenv("UNSET_VAR", raising=False)
    n = make(vault, f"{{good: '{receiver.url()}', dead: 'json://127.0.0.1:9/x', unset: '${{UNSET_VAR}}', junk: 'notaurl'}}")
    results = {d.target: d for d in n.send(["good", "dead", "unset", "junk", "nope"], "t", "b")}
    assert results["good"].ok
    assert not results["dead"].ok and results["dead"].error == "delivery failed"
    assert "UNSET_VAR" in results["unset"].error
    assert "not a valid Apprise URL" in results["junk"].error
    assert "unknown notify target 'nope'" in results["nope"].error
    assert len(receiver.received) == 1


def test_events_follow_subscription(vault, receiver):
    cfg = parse_config(f"notify:\n  targets: {{a: '{receiver.url()}'}}\n  events: [cron_failure]\n")
    n = Notifier(cfg, vault.root / ".hermes" / "secrets.env")
    assert n.event("refine_pending", "t", "b") == []
    assert [d.ok for d in n.event("cron_failure", "t", "b")] == [True]
    assert len(receiver.received) == 1


def test_only_names_listed_in_secrets_env_expand(vault, receiver, monkeypatch):
    """A target written into hermes.yaml (by anyone) cannot send out other environment variables."""
    monkeypatch.setenv("FAKE_KEY", "sk-should-never-leave")
    (vault.root / ".hermes" / "secrets.env").write_text(f"PORT={receiver.port}\n")
    n = make(vault, "{leak: 'json://127.0.0.1:${PORT}/${FAKE_KEY}'}")
    [d] = n.send(["leak"], "t", "b")
    assert not d.ok and "FAKE_KEY" in d.error and "not listed" in d.error
    assert receiver.received == []


def test_expand_errors():
    with pytest.raises(InputError, match=r"\$\{X\} is not listed"):
        expand("json://${X}/", {})
    assert expand("json://${X}/", {"X": "h"}) == "json://h/"
