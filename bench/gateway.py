"""The gateway against a real Synapse (from .venv-synapse) and the real daemon, scripted model.

Figures (issue 23):
- Matrix message -> request durable (the claim fsynced and its ledger row written: what
  `Sink.submit` waits for), p50/p95: the time from just before the person's send to the row's
  `created` (one clock, one machine);
- Matrix message -> reply visible in the person's room (a long-polling client), p50/p95, with a
  scripted model that answers at once (so this is the gateway, the agent loop and Synapse);
- N messages from 3 senders in 4 rooms (3 DMs and one shared room) while the daemon is killed
  with SIGKILL K times at random: lost (a message with no reply), answered twice (a message with
  two replies or two results), replies sent twice (two reply events for one request id);
- the idle daemon with the gateway connected: CPU over 30 s, as a share of one core.

Usage: python bench/gateway.py [--quick]   (writes bench/results/gateway_matrix.json)
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from common import cpu_seconds, percentile, write_results  # noqa: E402
from model_server import ModelServer, configure_vault  # noqa: E402
from synapse_server import Person, Synapse, available  # noqa: E402

from hermes_fs.service.gateway.channel import Origin  # noqa: E402
from hermes_fs.service.gateway.ledger import GatewayLedger, ledger_path, message_key  # noqa: E402
from hermes_fs.store.provenance import Act  # noqa: E402
from hermes_fs.store.vault import init_vault  # noqa: E402


def responder(body: dict) -> dict:
    last = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
    return {"content": f"re: {last[-40:]}"}


class Daemon:
    def __init__(self, root: Path):
        self.root = root
        (root / ".hermes" / "daemon.json").unlink(missing_ok=True)
        env = {**os.environ, "HERMES_TEST_KEY": "sk-bench-not-a-key", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        self.proc = subprocess.Popen([sys.executable, "-m", "hermes_fs", "--vault", str(root), "daemon"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        deadline = time.time() + 120
        while time.time() < deadline:
            log = root / ".hermes" / "daemon.log"
            if log.exists() and log.read_text().count("gateway matrix: connected") > self._connected_before:
                return
            time.sleep(0.1)
        raise RuntimeError("the daemon's gateway did not connect")

    _connected_before = 0

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(120)


def start_daemon(root: Path) -> Daemon:
    log = root / ".hermes" / "daemon.log"
    Daemon._connected_before = log.read_text().count("gateway matrix: connected") if log.exists() else 0
    return Daemon(root)


def setup(workdir: Path, synapse: Synapse, server: ModelServer, senders: int):
    vault = init_vault(workdir / "vault").vault
    bot = synapse.register("hermesbench", "bot-password")
    people = [Person(synapse.url, synapse.register(f"person{i}", "pw"), "pw") for i in range(senders)]
    allow = [p.user_id for p in people]
    configure_vault(vault.root, server, f"""gateway:
  commit_idle_s: 2
  sender_rate_per_min: 1000
  matrix:
    homeserver: {synapse.url}
    user_id: "{bot}"
    password_env: MATRIX_PASSWORD
    allow: {allow!r}
""")
    vault.secrets_env.write_text("MATRIX_PASSWORD=bot-password\n")
    vault.git.commit_paths(["hermes.yaml"], "bench: gateway", Act.person())
    return vault, bot, people


def wait_joined(person: Person, room: str, bot: str, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if bot in person.members(room):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{bot} did not join {room}")


def latency(vault, person: Person, room: str, bot: str, n: int) -> dict:
    ledger = GatewayLedger(ledger_path(vault.state_dir))
    durable, visible = [], []
    for i in range(n):
        t0 = time.time()
        event = person.say(room, f"latency probe {i}")
        got = None
        while got is None:
            for e in person.sync(5000):
                rel = e["content"].get("m.relates_to", {}).get("m.in_reply_to", {})
                if e["sender"] == bot and rel.get("event_id") == event:
                    got = time.time()
        visible.append(got - t0)
        row = ledger.message(message_key(Origin("matrix", room, person.user_id, event)))
        durable.append(row.created - t0)
    ledger.close()
    return {"n": n, "to_request_durable_s": {"p50": percentile(durable, 50), "p95": percentile(durable, 95)},
            "to_reply_visible_s": {"p50": percentile(visible, 50), "p95": percentile(visible, 95)}}


def idle_cpu(pid: int, seconds: float) -> float:
    a = cpu_seconds(pid)
    time.sleep(seconds)
    return (cpu_seconds(pid) - a) / seconds * 100


def replies_in(sent: dict[str, tuple[Person, str]], bot: str) -> dict[str, dict[str, dict]]:
    """message event id -> {reply event id: event}, from each room's whole history."""
    replies: dict[str, dict[str, dict]] = {}
    for room in {room for _p, room in sent.values()}:
        reader = next(p for p, r in sent.values() if r == room)
        for e in reader.history(room):
            rel = (e.get("content") or {}).get("m.relates_to", {}).get("m.in_reply_to", {})
            if e.get("sender") == bot and rel.get("event_id") in sent:
                replies.setdefault(rel["event_id"], {})[e["event_id"]] = e
    return replies


def faults(vault, people: list[Person], rooms: list[tuple[Person, str]], bot: str, total: int, kills: int,
           daemon: Daemon) -> tuple[dict, Daemon]:
    rng = random.Random(23)
    kill_at = sorted(rng.sample(range(5, total - 5), kills))
    sent: dict[str, tuple[Person, str]] = {}  # event id -> (person, room)
    for i in range(total):
        person, room = rooms[i % len(rooms)]
        if room.startswith("shared:"):
            person = people[i % len(people)]
            room = room.split(":", 1)[1]
        sent[person.say(room, f"message {i}")] = (person, room)
        time.sleep(rng.uniform(0.0, 0.15))
        if i in kill_at:
            time.sleep(rng.uniform(0.0, 1.0))  # somewhere in a turn, a commit or a send
            daemon.kill()
            daemon = start_daemon(vault.root)
    # every reply, as a person's client sees the rooms' whole history (paged through /messages)
    replies: dict[str, dict[str, dict]] = {}
    deadline = time.time() + 300
    while time.time() < deadline and len(replies) < len(sent):
        time.sleep(5)
        replies = replies_in(sent, bot)
    time.sleep(5)  # a late duplicate would show up now
    replies = replies_in(sent, bot)
    counts = {eid: len(v) for eid, v in replies.items()}
    results = list((vault.root / "outputs" / "requests").glob("*.md"))
    per_request: dict[str, int] = {}
    for r in results:
        rid = r.stem.split("-", 3)[-1]
        per_request[rid] = per_request.get(rid, 0) + 1
    return {"messages": total, "kills": kills, "senders": len(people), "rooms": len(rooms),
            "lost": sum(1 for eid in sent if eid not in replies),
            "answered_twice": sum(1 for n in per_request.values() if n > 1),
            "replies_sent_twice": sum(1 for n in counts.values() if n > 1),
            "result_files": len(results)}, daemon


def main(quick: bool = False) -> dict:
    why = available()
    if why:
        print(f"skipped: {why}")
        return {"skipped": why}
    total, kills, probes = (60, 3, 20) if quick else (200, 10, 50)
    work = Path(tempfile.mkdtemp(prefix="hermes-bench-gateway-"))
    synapse = Synapse(work / "synapse")
    server = ModelServer(responder=responder)
    people: list[Person] = []
    daemon = None
    try:
        vault, bot, people = setup(work, synapse, server, senders=3)
        daemon = start_daemon(vault.root)
        dms = []
        for p in people:
            room = p.dm(bot)
            wait_joined(p, room, bot)
            dms.append((p, room))
        shared = people[0].room([bot] + [p.user_id for p in people[1:]], name="shared")
        for p in people[1:]:
            p.join(shared)
        wait_joined(people[0], shared, bot)
        lat = latency(vault, people[0], dms[0][1], bot, probes)
        print(f"message -> request durable p95 {lat['to_request_durable_s']['p95']:.3f} s; "
              f"-> reply visible p95 {lat['to_reply_visible_s']['p95']:.3f} s")
        time.sleep(15)  # let the commit cadence and litellm's background work settle
        cpu = idle_cpu(daemon.proc.pid, 30)
        print(f"idle daemon with the gateway connected: {cpu:.3f}% of a core over 30 s")
        rooms = dms + [(people[0], f"shared:{shared}")]
        fault, daemon = faults(vault, people, rooms, bot, total, kills, daemon)
        print(f"{fault['messages']} messages, {fault['kills']} kill -9: lost {fault['lost']}, answered twice "
              f"{fault['answered_twice']}, replies sent twice {fault['replies_sent_twice']}")
        results = {"latency": lat, "idle_cpu_percent_of_core": cpu, "faults": fault, "quick": quick}
        write_results("gateway_matrix", results)
        return results
    finally:
        if daemon and daemon.proc.poll() is None:
            daemon.stop()
        for p in people:
            p.close()
        server.close()
        synapse.stop()


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
