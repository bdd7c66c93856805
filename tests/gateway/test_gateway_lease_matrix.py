"""One Matrix consumer across machines: two real daemons on two clones of a `git daemon` remote,
one bot account on a real Synapse; the holder of the account's lease is killed with SIGKILL and
the other machine goes on from the since-token in the lease: every message answered once."""

from __future__ import annotations

import json
import signal
import time

import pytest
from conftest import DaemonProc, wait_for
from gitserver import GitDaemon
from synapse_server import Person, available
from test_gateway_lease import two_machines
from test_gateway_matrix import synapse  # noqa: F401  (the session's Synapse)

pytestmark = [pytest.mark.synapse, pytest.mark.gitdaemon,
              pytest.mark.skipif(available() is not None, reason=available() or "")]


def matrix_state(root) -> str | None:
    try:
        return json.loads((root / ".hermes/gateway/state.json").read_text())["channels"]["matrix"]["state"]
    except (OSError, ValueError, KeyError):
        return None


def test_two_daemons_one_matrix_account_kill_the_holder_every_message_answered_once(tmp_path, synapse,  # noqa: F811
                                                                                     model_server):
    server = GitDaemon(tmp_path / "srv")
    server.bare()
    bot = synapse.register("hermeslease", "bot-password")
    me_id = synapse.register("melease", "pw")
    procs: list[DaemonProc] = []
    me = None
    try:
        model_server.responder = lambda body: {"content": "echo " + [m["content"] for m in body["messages"]
                                                                      if m["role"] == "user"][-1][-40:]}
        a, b = two_machines(tmp_path, server, model_server, f"""  matrix:
    homeserver: {synapse.url}
    user_id: "{bot}"
    password_env: MATRIX_PASSWORD
    allow: ["{me_id}"]
""", "MATRIX_PASSWORD=bot-password\n")
        procs += [DaemonProc(v.root) for v in (a, b)]
        roots = {"a": a.root, "b": b.root}

        def holder() -> str | None:
            held = [n for n, r in roots.items() if matrix_state(r) == "connected"]
            return held[0] if len(held) == 1 else None

        assert wait_for(lambda: holder() is not None, 60)
        first = holder()
        me = Person(synapse.url, me_id, "pw")
        room = me.dm(bot)
        assert wait_for(lambda: bot in me.members(room), 60)
        me.say(room, "one")
        assert [e["content"]["body"] for e in me.wait_messages(1, room=room)] == ["echo one"]

        procs[list(roots).index(first)].stop(signal.SIGKILL)
        killed = time.time()
        me.say(room, "two")
        other = "b" if first == "a" else "a"
        assert wait_for(lambda: matrix_state(roots[other]) == "connected", 3 + 5 + 30)
        took = time.time() - killed
        me.wait_messages(2, room=room)
        time.sleep(3.0)  # a repeated answer to "one" would be here by now
        me.sync(1000)
        bodies = sorted(e["content"]["body"] for e in me.seen if e["room_id"] == room and e["sender"] == bot)
        assert bodies == ["echo one", "echo two"]
        print(f"machine {other} consumed the Matrix account {took:.1f} s after {first} was killed (lease 3 s)")
    finally:
        for d in procs:
            if d.proc.poll() is None:
                d.stop()
        if me is not None:
            me.close()
        server.close()
