"""Voice messages through the gateway core: real speech (espeak-ng) transcribed by the offline
engine (pocketsphinx) and by a hosted one (litellm against the scripted model server's
/v1/audio/transcriptions), the transcript run as the message and quoted back, the limits, bad
audio, voice off, and the audio never reaching the vault. The channel is the core tests' loopback
(a real implementation of the channel interface); the platforms' own tests send voice notes
through Telegram's emulator, Synapse and the mail servers."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
import speech
from test_gateway_core import Loopback, setup

from hermes_fs.service.gateway.core import Gateway
from hermes_fs.service.gateway.message import Audio, AudioTooLarge, Inbound, Origin
from hermes_fs.service.gateway.voice import VOICE_NOTE
from hermes_fs.store.vault import Vault

pytestmark = pytest.mark.espeak

ALLOW = "    allow: ['@me:test']\n"


class Fetches:
    """An Audio whose downloads are counted (to prove what was never fetched)."""

    def __init__(self, data: bytes, size: int | None = None, duration_s: float | None = None, name: str = "voice.ogg"):
        self.data, self.calls = data, 0
        self.audio = Audio(self.fetch, "audio/ogg", name, size if size is not None else len(data), duration_s)

    def fetch(self, limit: int) -> bytes:
        self.calls += 1
        if len(self.data) > limit:
            raise AudioTooLarge(f"{len(self.data)} bytes, over the {limit} byte limit")
        return self.data


@pytest.fixture
def voice_gateway(agent_vault, model_server):
    made = []

    def start(voice: str = "", matrix: str = ALLOW) -> tuple[Gateway, Loopback]:
        setup(agent_vault, model_server, matrix, f"voice:\n{voice}" if voice else "")
        ch = Loopback()
        gw = Gateway(Vault(agent_vault.root), channels=[ch])
        gw.start()
        made.append(gw)
        return gw, ch

    yield start
    for gw in made:
        if not gw.stopped.is_set():
            gw.stop()


def send(ch: Loopback, audio: Audio, sender: str = "@me:test", caption: str = "") -> str:
    ch.n = getattr(ch, "n", 0) + 1
    origin = Origin("matrix", "!dm", sender, f"$voice{ch.n}-{time.time_ns()}")
    return ch.sink.submit(Inbound(origin, caption, direct=True, audio=audio))


def users(model_server) -> list[str]:
    return [m["content"] for r in model_server.requests for m in r["messages"] if m["role"] == "user"]


def audio_left_anywhere(vault: Vault, data: bytes) -> list[str]:
    """Files in the vault (work tree, .hermes, .git objects unpacked) that hold the audio's bytes."""
    subprocess.run(["git", "-C", str(vault.root), "gc", "-q", "--prune=now"], check=True)
    probe = data[200:264]
    found = []
    for folder, _, files in os.walk(vault.root):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as fh:
                if probe in fh.read():
                    found.append(path)
    packs = subprocess.run(["git", "-C", str(vault.root), "rev-list", "--all", "--objects"], capture_output=True,
                           text=True, check=True).stdout.split()
    for oid in packs[::2]:
        blob = subprocess.run(["git", "-C", str(vault.root), "cat-file", "-p", oid], capture_output=True).stdout
        if probe in blob:
            found.append(f"git object {oid}")
    return found


def test_offline_engine_hears_real_speech_runs_it_and_quotes_it_back(voice_gateway, model_server, agent_vault):
    note = speech.voice_note("what is the weather today")
    model_server.add({"content": "It is sunny."})
    gw, ch = voice_gateway()
    send(ch, Fetches(note).audio)
    assert gw.wait_idle(180)
    said = users(model_server)
    assert len(said) == 1 and "weather" in said[0].lower() and VOICE_NOTE in said[0]  # keywords only: rough engine
    reply = ch.sent[0].text
    assert reply.startswith("> 🎤 ") and "weather" in reply.splitlines()[0].lower() and reply.endswith("It is sunny.")
    requests = list((agent_vault.root / "outputs" / "requests").glob("*.md"))
    assert len(requests) == 1 and "voice: true" in requests[0].read_text()
    gw.stop()
    assert audio_left_anywhere(agent_vault, note) == []


def test_hosted_engine_gets_a_wav_and_the_agent_acts_on_the_transcript(voice_gateway, model_server, agent_vault):
    phrase = "remember that my favourite colour is green"
    model_server.transcripts.append(phrase)
    model_server.add({"tool_calls": [("memory", {"action": "add", "file": "USER.md",
                                                 "text": "Favourite colour: green."})]},
                     {"content": "Noted: green."})
    gw, ch = voice_gateway(f"  engine: api\n  model: openai/whisper-1\n  api_base: {model_server.api_base}\n"
                           "  api_key_env: HERMES_TEST_KEY\n  language: en\n")
    note = speech.encode(speech.speak(phrase), "m4a")
    send(ch, Fetches(note, name="voice.m4a").audio, caption="from the car")
    assert gw.wait_idle(180)
    heard = model_server.transcriptions[0]
    assert heard.fields["model"] == "whisper-1" and heard.fields["language"] == "en"
    assert heard.audio.startswith(b"RIFF") and heard.audio[8:12] == b"WAVE"  # decoded sound, never the sender's file
    assert {k.lower(): v for k, v in heard.headers.items()}["authorization"] == "Bearer sk-test-not-a-real-key"
    assert users(model_server)[0] == f"from the car\n\n{VOICE_NOTE}\n{phrase}"
    assert ch.sent[0].text == f"> 🎤 {phrase}\n\nNoted: green."
    assert "green" in (agent_vault.root / "memory" / "USER.md").read_text()
    gw.stop()
    assert audio_left_anywhere(agent_vault, note) == []


@pytest.mark.parametrize("case", ["declared size", "declared length", "actual size", "decoded length"])
def test_limits_are_answered_and_nothing_runs(voice_gateway, model_server, case):
    note = speech.voice_note("what is the weather today")  # about two seconds
    voice = {"declared size": "  max_bytes: 1000\n", "actual size": "  max_bytes: 1000\n",
             "declared length": "  max_seconds: 60\n", "decoded length": "  max_seconds: 1\n"}[case]
    gw, ch = voice_gateway(voice)
    audio = {"declared size": Fetches(note), "actual size": Fetches(note, size=500),
             "declared length": Fetches(note, duration_s=3600), "decoded length": Fetches(note)}[case]
    send(ch, audio.audio)
    assert gw.wait_idle(180)
    assert model_server.requests == [] and len(ch.sent) == 1
    reply = ch.sent[0].text
    assert reply.startswith("Your voice message was not run:")
    expected = {"declared size": "at most 1000 are taken", "actual size": "too large",
                "declared length": "3600 seconds long; at most 60", "decoded length": "longer than 1 seconds"}[case]
    assert expected in reply
    assert audio.calls == (0 if case.startswith("declared") else 1)  # over a declared limit: never downloaded


@pytest.mark.parametrize("case", ["random bytes", "truncated", "text named .ogg", "huge", "silence"])
def test_bad_audio_gets_a_clear_answer(voice_gateway, model_server, case):
    import struct

    note = speech.voice_note("what is the weather today")
    data = {"random bytes": os.urandom(20_000), "truncated": note[:60],
            "text named .ogg": b"#EXTM3U\n#EXTINF:1,\nfile:///etc/passwd\n",
            "huge": b"OggS" + os.urandom(3_000_000),
            "silence": speech.encode(b"RIFF" + struct.pack("<I", 36 + 64000) + b"WAVEfmt " + struct.pack(
                "<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16) + b"data" + struct.pack("<I", 64000) + bytes(64000), "ogg")}[case]
    gw, ch = voice_gateway("  max_bytes: 2000000\n")
    send(ch, Fetches(data).audio)
    assert gw.wait_idle(180)
    assert model_server.requests == [] and len(ch.sent) == 1
    reply = ch.sent[0].text
    expected = {"random bytes": "not an audio file", "truncated": "could not be transcribed",
                "text named .ogg": "not an audio file", "huge": "at most 2000000",
                "silence": "is silent"}[case]
    assert reply.startswith("Your voice message was not run:") and expected in reply, reply


def test_voice_off_says_so_and_fetches_nothing(voice_gateway, model_server):
    gw, ch = voice_gateway("  engine: off\n")
    audio = Fetches(b"OggS" + bytes(100))
    send(ch, audio.audio)
    assert gw.wait_idle(180)
    assert audio.calls == 0 and model_server.requests == []
    assert "voice messages are off here" in ch.sent[0].text


def test_a_strangers_audio_is_never_fetched(voice_gateway, model_server):
    gw, ch = voice_gateway()
    audio = Fetches(b"OggS" + bytes(100))
    send(ch, audio.audio, sender="@stranger:test")
    assert gw.wait_idle(180)
    assert audio.calls == 0 and ch.sent == [] and model_server.requests == []


def test_a_failed_download_is_answered(voice_gateway, model_server):
    def broken(limit: int) -> bytes:
        raise ConnectionError("the media server is down")

    gw, ch = voice_gateway()
    send(ch, Audio(broken, "audio/ogg", "voice.ogg"))
    assert gw.wait_idle(180)
    assert model_server.requests == [] and "could not be downloaded (ConnectionError" in ch.sent[0].text


def test_a_hosted_engine_failure_is_answered(voice_gateway, model_server):
    model_server.transcripts.append({"status": 500})
    gw, ch = voice_gateway(f"  engine: api\n  api_base: {model_server.api_base}\n  api_key_env: HERMES_TEST_KEY\n")
    send(ch, Fetches(speech.voice_note("hello")).audio)
    assert gw.wait_idle(180)
    assert "could not be transcribed: transcription by whisper-1 failed" in ch.sent[0].text
    assert model_server.requests == []
