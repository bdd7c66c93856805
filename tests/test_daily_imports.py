"""The commands a person runs every day never import litellm or torch (seconds of CPU each): each
runs in a real CLI process with an import hook that records any attempt to import them, even one
that a `try` would swallow. A `run` served by a running daemon is on that path too: the model
layer is imported in the daemon, never in the CLI process."""

from __future__ import annotations

import pytest
from conftest import DaemonProc, git, wait_for
from import_watch import heavy, watched


def test_everyday_commands_import_neither_litellm_nor_torch(vault):
    for args in (["--help"], ["status"], ["status", "--json"], ["review"], ["log"], ["sessions"],
                 ["sessions", "list"], ["memory", "add", "MEMORY.md", "A fact worth keeping."], ["memory", "show"],
                 ["skills", "list"], ["cron", "list"], ["daemon", "status"]):
        r = watched(vault, *args)
        assert r.returncode == 0, (args, r.stderr)
        assert heavy(r) == "HEAVY-IMPORTS []", args


@pytest.mark.slow
def test_the_hook_sees_a_heavy_import(agent_vault, model_server, tmp_path):
    """The check can fail: a cold `run` (no daemon) imports litellm, and the hook says so."""
    model_server.add({"content": "cold hello"})
    r = watched(agent_vault, "run", "hi", env={"HERMES_NO_DAEMON": "1"}, cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, "cold hello\n"), r.stderr
    assert "'litellm'" in heavy(r)


@pytest.mark.slow
def test_a_run_through_the_daemon_imports_no_model_layer_in_the_cli(agent_vault, model_server, daemons, tmp_path):
    d = DaemonProc(agent_vault.root)
    daemons.append(d)
    assert wait_for(lambda: (agent_vault.root / ".hermes" / "daemon.sock").exists(), 10)
    model_server.add({"content": "warm hello"}, {"content": "warm again"})
    for text, answer in (("hi", "warm hello"), ("again", "warm again")):
        r = watched(agent_vault, "run", text, cwd=tmp_path)
        assert (r.returncode, r.stdout) == (0, f"{answer}\n"), r.stderr
        assert heavy(r) == "HEAVY-IMPORTS []"
    r = watched(agent_vault, "sessions", "list")
    assert r.returncode == 0 and heavy(r) == "HEAVY-IMPORTS []"


def tone_wav(seconds: float = 1.0) -> bytes:
    """A WAV of a 440 Hz tone: audio the daemon decodes and the scripted server "hears"."""
    import math
    from array import array

    from hermes_fs.agent.audio import Pcm

    samples = array("h", (int(8000 * math.sin(2 * math.pi * 440 * i / 16_000)) for i in range(int(16_000 * seconds))))
    return Pcm(samples.tobytes()).wav()


@pytest.mark.slow
def test_the_daemon_s_daily_work_leaves_litellm_and_torch_to_its_model_worker(agent_vault, model_server, daemons):
    """A real daemon with a gateway (Telegram's emulator), voice by a hosted model, the web page
    and a cron job: after a watcher event, a cron tick with nothing due, a web request, a message
    answered by the scripted model and a voice note transcribed by it, the daemon itself (asked
    over its socket, `daemon status --memory`) has imported neither litellm nor torch: its model
    worker did the model's work."""
    import datetime
    import http.client
    import json
    import socket

    from emulated_world import echo
    from model_server import configure_vault
    from telegram_emulator import TelegramEmulator

    from hermes_fs.service.web.security import TOKEN_NAME
    from hermes_fs.store.notify import read_secrets_env
    from hermes_fs.store.provenance import Act

    emu = TelegramEmulator()
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        root = agent_vault.root
        configure_vault(root, model_server, f"""refine:
  every_turns: 0
gateway:
  commit_idle_s: 0.2
  telegram:
    token_env: TELEGRAM_BOT_TOKEN
    api_base: {emu.url}
    allow: [1001]
voice:
  engine: api
  model: openai/whisper-1
  api_base: {model_server.api_base}
  api_key_env: HERMES_TEST_KEY
web:
  enabled: true
  listen: 127.0.0.1:{port}
""")
        later = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=2)).replace(microsecond=0)
        (root / "cron" / "later.md").write_text(f"---\nschedule: \"at {later.isoformat()}\"\n---\nNot yet.\n")
        agent_vault.secrets_env.write_text(f"TELEGRAM_BOT_TOKEN={emu.token}\n")
        agent_vault.secrets_env.chmod(0o600)
        agent_vault.git.commit_paths(["hermes.yaml", "cron/later.md"], "test: the daily daemon", Act.person())
        model_server.responder = echo
        model_server.transcripts.append("what is on today")

        d = DaemonProc(root)
        daemons.append(d)
        assert wait_for(lambda: "gateway telegram: connected" in d.output(), 60), d.output()
        assert wait_for(lambda: any("web page started" in e for e in d.state().get("last_events", [])), 30), d.output()

        (root / "notes.md").write_text("A person's edit.\n")  # the watcher commits it
        assert wait_for(lambda: git(agent_vault, "status", "--porcelain", "notes.md") == "" and
                        "notes.md" in git(agent_vault, "log", "--name-only", "--format="), 30), d.output()

        token = read_secrets_env(agent_vault.secrets_env)[TOKEN_NAME]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=180)
        for page in ("/status", "/"):
            conn.request("GET", page, headers={"Authorization": f"Bearer {token}"})
            r = conn.getresponse()
            assert r.status == 200, (page, r.status)
            r.read()

        emu.say(1001, "hello there")
        assert emu.wait_sent(1, chat_id=1001, timeout=120)[0].visible == "echo hello there (1 turns)"
        emu.say_voice(1001, tone_wav(), duration=1, kind="audio", file_name="note.wav", mime_type="audio/wav")
        [_, voiced] = emu.wait_sent(2, chat_id=1001, timeout=120)
        assert voiced.visible.startswith("🎤 what is on today") or "what is on today" in voiced.visible.split("\n")[0]
        assert "echo" in voiced.visible and "what is on today" in voiced.visible.split("\n", 1)[1]
        assert len(model_server.transcriptions) == 1 and model_server.transcriptions[0].audio[:4] == b"RIFF"

        r = watched(agent_vault, "daemon", "status", "--memory", "--json")
        assert r.returncode == 0 and heavy(r) == "HEAVY-IMPORTS []", r.stderr
        held = json.loads(r.stdout)["footprint"]
        assert held["pid"] == d.proc.pid
        assert held["worker_pid"] not in (None, d.proc.pid)  # the model's work was done there
        assert not {"litellm", "torch", "openai", "sentence_transformers"} & set(held["heavy"]), held
        assert held["rss_kib"] > 0
        r = watched(agent_vault, "daemon", "status", "--memory")
        line = next(x for x in r.stdout.splitlines() if x.strip().startswith("memory daemon"))
        assert f"model worker pid {held['worker_pid']}" in line and "litellm" not in line, line
        assert d.stop() == 0
    finally:
        emu.close()


def test_the_web_page_on_its_own_imports_neither(vault):
    """`hermes-fs web` without a daemon, its pages requested: the server process stays light."""
    from import_watch import WATCHED
    from web_helpers import read_every_page, start_web

    web = start_web(vault.root, timeout=180, program=WATCHED)
    try:
        read_every_page(web)
    finally:
        web.stop()
    lines = [line.strip() for line in web.output().splitlines()]
    assert "IMPORT-WATCH-ON" in lines
    assert [x for x in lines if x.startswith("HEAVY-IMPORT ")] == []
