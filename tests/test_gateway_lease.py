"""One gateway consumer per channel account across machines: a lease ref on a real `git daemon`
remote, compare-and-swap writes, takeover after the holder stops renewing, the journal that lets
the next holder neither skip nor repeat; then real daemons on two clones consuming one real
mailbox (Dovecot + SMTP), the holder killed with SIGKILL."""

from __future__ import annotations

import json
import signal
import threading
import time

import pytest
from conftest import DaemonProc, wait_for
from gitserver import GitDaemon, Proxy
from test_sync import first_machine

from hermes_fs.service.gateway.holder import DONE, SENDING, TAKEN, ChannelHolder, Journal, NotHeld
from hermes_fs.store.lease import RefLease, lease_ref
from hermes_fs.store.remote import RefUpdate, Remote


@pytest.fixture
def server(tmp_path):
    d = GitDaemon(tmp_path / "srv")
    yield d
    d.close()


class Consumer:
    """What the gateway does on acquire and release, recorded (the channel side of a holder)."""

    def __init__(self, name: str):
        self.name = name
        self.cursor = "0"
        self.acquired: list[float] = []
        self.journals: list[Journal] = []
        self.released: list[str] = []
        self.consuming = threading.Event()

    def on_acquire(self, journal: Journal) -> None:
        if journal.cursor is not None:
            self.cursor = journal.cursor
        self.journals.append(journal)
        self.acquired.append(time.time())
        self.consuming.set()

    def on_release(self, why: str) -> None:
        self.released.append(why)
        self.consuming.clear()


def holder(v, url: str, host: str, consumer: Consumer, lease_s: float) -> ChannelHolder:
    lease = RefLease(v.git, Remote(v.root, url, timeout_s=5), "email/agent@test", host)
    return ChannelHolder(lease, lease_s, lambda: consumer.cursor, consumer.on_acquire, consumer.on_release)


def test_lease_writes_are_compare_and_swap(tmp_path, server):
    a = first_machine(tmp_path, server)
    lease = RefLease(a.git, Remote(a.root, server.url()), "matrix/@bot:example.org", "a")
    assert lease.ref == "refs/hermes/leases/matrix/%40bot%3Aexample.org"
    assert lease.read() is None
    first = lease.write(None, time.time() + 10, {"cursor": "s1"})
    assert first and lease.write(None, time.time() + 10, {}) is None  # "must not exist": refused
    other = RefLease(a.git, Remote(a.root, server.url()), lease.name, "b")
    assert other.write("0" * 40, time.time() + 10, {}) is None  # a wrong old value: refused
    rec = other.read()
    assert rec and rec.sha == first and rec.host == "a" and rec.journal == {"cursor": "s1"} and not rec.expired()
    remote = Remote(a.root, server.url())
    assert not remote.push([RefUpdate(lease.ref, a.git.head(), None)]).ok  # a plain create never moves it
    assert remote.refs("refs/hermes/leases/")[lease_ref(lease.name)] == first


def test_journal_watermark_and_pruning():
    j = Journal()
    j.entries.update({f"r{i}": _entry(DONE, str(i)) for i in range(300)})
    j.entries["open"] = _entry(TAKEN, "300")
    j.entries["after"] = _entry(SENDING, "301")
    data = j.data("305")
    assert data["cursor"] == "300"  # from before the oldest message still being worked on
    kept = [row[0] for row in data["entries"]]
    assert kept[-2:] == ["open", "after"] and len(kept) == 202  # 200 settled ones before it stay
    j.entries["open"].state = DONE
    assert j.data("305")["cursor"] == "305"
    assert Journal({"cursor": 5, "entries": [["x", "bogus", None, "h"], "junk", ["y", TAKEN, "1", "h"]]}).entries.keys() == {"y"}


def _entry(state, cursor):
    from hermes_fs.service.gateway.holder import Entry

    return Entry(state, cursor, "a")


def test_one_holder_and_takeover_within_the_lease_after_it_stops_renewing(tmp_path, server):
    a = first_machine(tmp_path, server)
    lease_s = 2.0
    ca, cb = Consumer("a"), Consumer("b")
    ha, hb = holder(a, server.url(), "a", ca, lease_s), holder(a, server.url(), "b", cb, lease_s)
    try:
        ha.start()
        assert ca.consuming.wait(20)
        hb.start()
        time.sleep(lease_s * 1.5)  # a renews; b only waits
        assert not cb.consuming.is_set() and hb.holder() == "a"
        ca.cursor = "41"
        ha.take("email-1")  # published before it can be answered
        ha.take("email-2")
        assert ha.sending("email-1") == "go"
        ha.settled("email-1")
        with pytest.raises(NotHeld):
            hb.take("email-3")  # b does not hold it: nothing is taken there
        ha.stopped.set()  # a dies: no more renewals, no hand-over
        ha.wake.set()
        ha.thread.join(10)
        died = time.time()
        assert cb.consuming.wait(lease_s + 5 + 10)
        took = cb.acquired[0] - died
        assert hb.state("email-2").state == TAKEN  # interrupted on a: b runs it
        assert hb.state("email-1").state == SENDING  # a was sending: b never sends it again
        assert hb.sending("email-1") == "answered"
        assert cb.journals[0].cursor == "41"  # from before email-2, the oldest one open
        print(f"takeover {took:.2f} s after the holder stopped renewing (lease {lease_s} s)")
        assert ha.sending("email-2") == "wait" or ha.lease.read().host == "b"
        with pytest.raises(NotHeld):  # a comes back: its stale write is refused, it learns it lost
            ha._write()
    finally:
        for h in (ha, hb):
            h.stop()
        hb.hand_over()


def test_a_holder_cut_off_stops_consuming_before_its_lease_runs_out(tmp_path, server):
    a = first_machine(tmp_path, server)
    proxy = Proxy(server.port)
    lease_s = 3.0
    ca, cb = Consumer("a"), Consumer("b")
    ha = holder(a, server.url(port=proxy.port), "a", ca, lease_s)
    hb = holder(a, server.url(), "b", cb, lease_s)
    try:
        ha.start()
        assert ca.consuming.wait(20)
        hb.start()
        proxy.cut()
        assert wait_for(lambda: ca.released, lease_s + 10)
        stopped_a = time.time()
        assert cb.consuming.wait(lease_s + 10)
        assert cb.acquired[0] >= stopped_a - 0.05  # never two consumers at once
        assert "cut off" in ca.released[0]
        proxy.heal()
        time.sleep(lease_s)
        assert not ca.consuming.is_set() and ha.holder() == "b"  # b renews: a stands by
    finally:
        for h in (ha, hb):
            h.stop()
        proxy.close()


def test_a_clean_stop_hands_over_at_once(tmp_path, server):
    a = first_machine(tmp_path, server)
    ca, cb = Consumer("a"), Consumer("b")
    ha, hb = holder(a, server.url(), "a", ca, 30.0), holder(a, server.url(), "b", cb, 30.0)
    try:
        ha.start()
        assert ca.consuming.wait(20)
        hb.start()
        ha.take("m1")
        ha.stop()
        ha.hand_over()
        assert cb.consuming.wait(15)  # far less than the 30 s lease
        assert hb.state("m1").state == TAKEN
    finally:
        hb.stop()


# --- real daemons, one real mailbox -----------------------------------------------------------

def two_machines(tmp_path, server, model_server, channel_yaml: str, secrets: str):
    """Vault a (pushed to the git daemon) and its clone b, both with `remote:`, a 3 s lease and
    the gateway channel of `channel_yaml`; `secrets` in each machine's .hermes/secrets.env."""
    from model_server import configure_vault

    from hermes_fs.service.sync import Syncer, clone_vault
    from hermes_fs.store.provenance import Act
    from hermes_fs.store.vault import init_vault

    a = init_vault(tmp_path / "a").vault
    configure_vault(a.root, model_server, f"""refine:
  every_turns: 0
remote:
  url: {server.url()}
  branch: main
sync:
  interval_s: 0.5
  lease_s: 3
gateway:
  commit_idle_s: 0.2
{channel_yaml}""")
    a.git.commit_paths(["hermes.yaml"], "test: remote and gateway", Act.person())
    a.reload_config()
    assert Syncer(a).round(work=False).pushed
    b = clone_vault(server.url(), tmp_path / "b")
    for v in (a, b):
        v.secrets_env.parent.mkdir(exist_ok=True)
        v.secrets_env.write_text(secrets)
        v.secrets_env.chmod(0o600)
    return a, b


def _gateway_state(v) -> dict:
    try:
        return json.loads((v.root / ".hermes" / "gateway" / "state.json").read_text())["channels"]["email"]
    except (OSError, ValueError, KeyError):
        return {}


def test_two_daemons_one_mailbox_kill_the_holder_every_mail_answered_once(tmp_path, server, model_server):
    from test_email_gateway import AGENT, ME, mail, send

    from tests.mailenv import AUTHSERV, PASSWORD, DkimKey, MailEnv, dovecot_missing

    if dovecot_missing():
        pytest.skip(dovecot_missing() or "")
    keys = {"people.example": DkimKey.make("people.example")}
    env = MailEnv([AGENT, ME]).start()
    for k in keys.values():
        env.zone.add(k)
    server.bare()
    procs: list[DaemonProc] = []
    try:
        model_server.responder = lambda body: {"content": "re: " + str(body["messages"][-1]["content"]).split("\n\n")[-1]}
        a, b = two_machines(tmp_path, server, model_server, f"""  email:
    imap: {{host: 127.0.0.1, port: {env.imap_port}, tls: false, user: {AGENT}, password_env: MAIL_PASSWORD}}
    smtp: {{host: 127.0.0.1, port: {env.smtp_port}, starttls: false, from: {AGENT}}}
    allow: [{ME}]
    authserv_id: {AUTHSERV}
""", f"MAIL_PASSWORD={PASSWORD}\n")
        procs += [DaemonProc(v.root) for v in (a, b)]
        vaults = {"a": a, "b": b}

        def holder_name() -> str | None:
            held = [n for n, v in vaults.items() if _gateway_state(v).get("state") == "connected"]
            return held[0] if len(held) == 1 else None

        assert wait_for(lambda: holder_name() is not None, 30)
        first = holder_name()
        assert wait_for(lambda: (vaults[first].root / ".hermes/gateway/email.sqlite").exists(), 20)
        time.sleep(1.0)  # the first holder's first start records the mailbox's position
        send(env, keys, mail(subject="one", body="first"))
        assert [r.text.strip() for r in env.wait_for(ME, 1)] == ["re: first"]

        dead = procs[list(vaults).index(first)]
        dead.stop(signal.SIGKILL)
        killed = time.time()
        for body in ("second", "third"):
            send(env, keys, mail(subject=body, body=body))
        other = "b" if first == "a" else "a"
        assert wait_for(lambda: _gateway_state(vaults[other]).get("state") == "connected", 3 + 5 + 10)
        took = time.time() - killed
        replies = env.wait_for(ME, 3, timeout=60)
        print(f"machine {other} consumed the mailbox {took:.1f} s after {first} was killed (lease 3 s)")

        # the killed machine comes back and stands by; the holder is killed while it works on a mail
        procs.append(DaemonProc(vaults[first].root))
        slow = threading.Event()

        def answer(body: dict) -> dict:
            text = str(body["messages"][-1]["content"]).split("\n\n")[-1]
            if text == "slow" and not slow.is_set():
                slow.set()
                time.sleep(4)  # the holder is killed meanwhile: this answer is never sent
            return {"content": "re: " + text}

        model_server.responder = answer
        send(env, keys, mail(subject="slow", body="slow"))
        assert slow.wait(30)
        procs[list(vaults).index(other)].stop(signal.SIGKILL)
        assert wait_for(lambda: _gateway_state(vaults[first]).get("state") == "connected", 3 + 5 + 10)
        replies = env.wait_for(ME, 4, timeout=60)
        time.sleep(5.0)  # the killed holder's slow answer, or a second answer to anything, would be here by now
        replies = env.wait_for(ME, 4, timeout=0)
        assert sorted(r.text.strip() for r in replies) == ["re: first", "re: second", "re: slow", "re: third"]
    finally:
        for d in procs:
            if d.proc.poll() is None:
                d.stop()
        env.stop()
