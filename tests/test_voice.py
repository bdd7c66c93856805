"""Speech to text below the gateway: audio of every format chat platforms send decoded with PyAV,
hostile bytes refused before any engine hears them, the offline engine (pocketsphinx) on real
speech made by espeak-ng, the hosted engine through litellm against the scripted model server,
and the `voice:` settings. The gateway's side: tests/gateway/test_gateway_voice.py."""

from __future__ import annotations

import os

import pytest
import speech
from model_server import ModelServer

from hermes_fs.agent import audio
from hermes_fs.agent.model import ModelError
from hermes_fs.agent.transcription import NothingHeard, VoiceOff, transcribe
from hermes_fs.errors import ConfigError
from hermes_fs.store.config import VoiceConfig, parse_config

pytestmark = pytest.mark.espeak


@pytest.fixture(scope="module")
def spoken() -> bytes:
    return speech.speak("what is the weather today")


@pytest.mark.parametrize("kind", ["ogg", "m4a", "mp3", "flac", "webm"])
def test_every_format_a_platform_sends_decodes_to_the_same_sound(spoken, kind):
    data = speech.encode(spoken, kind)
    pcm = audio.decode(data, 60)
    assert abs(pcm.seconds - audio.decode(spoken, 60).seconds) < 0.1  # codec padding aside, the same length
    assert not pcm.silent
    wav = pcm.wav()
    assert wav[:4] == b"RIFF" and audio.decode(wav, 60).data == pcm.data  # the canonical WAV round-trips


@pytest.mark.parametrize("data, why", [
    (b"", "not an audio file"),
    (os.urandom(50_000), "not an audio file"),
    (b"#EXTM3U\n#EXTINF:1,\nhttp://127.0.0.1:1/x.ogg\n", "not an audio file"),  # a playlist is never followed
    (b"ffconcat version 1.0\nfile /etc/passwd\n", "not an audio file"),
    (b"OggS" + os.urandom(4000), "could not be decoded"),
    (b"ID3" + os.urandom(4000), "could not be decoded"),
    (b"\x00\x00\x00\x18ftypM4A " + os.urandom(4000), "could not be decoded"),
    (b"RIFF\x24\x00\x00\x00WAVEfmt ", "could not be decoded"),
])
def test_what_is_not_audio_is_refused_with_the_reason(data, why):
    with pytest.raises(audio.AudioError, match=why):
        audio.decode(data, 60)


def test_a_truncated_file_and_a_long_one(spoken):
    note = speech.encode(spoken, "ogg")
    with pytest.raises(audio.AudioError):
        audio.decode(note[:200], 60)
    with pytest.raises(audio.AudioError, match="could not be decoded"):  # cut mid-stream: refused, never half heard
        audio.decode(note[: len(note) // 2], 60)
    with pytest.raises(audio.AudioTooLong, match="longer than 1 seconds"):
        audio.decode(note, 1)


def test_the_offline_engine_hears_the_keyword_of_real_speech(spoken):
    heard = transcribe(VoiceConfig(), speech.encode(spoken, "ogg"))
    assert "weather" in heard.text.split() and heard.engine == "pocketsphinx" and 2 < heard.seconds < 3


def test_silence_and_off_are_said_not_guessed():
    silence = audio.Pcm(bytes(32_000)).wav()
    with pytest.raises(NothingHeard, match="silent"):
        transcribe(VoiceConfig(), silence)
    with pytest.raises(VoiceOff):
        transcribe(VoiceConfig(engine=False), silence)


def test_the_hosted_engine_sends_a_wav_and_says_what_went_wrong(spoken):
    server = ModelServer()
    try:
        server.transcripts += ["  What is the weather today?  ", {"status": 401}]
        config = VoiceConfig(engine="api", model="openai/whisper-1", api_base=server.api_base,
                             api_key_env="HERMES_TEST_KEY", language="en")
        heard = transcribe(config, speech.encode(spoken, "mp3"))
        assert heard.text == "What is the weather today?" and heard.engine == "api"
        sent = server.transcriptions[0]
        assert sent.filename == "voice.wav" and sent.fields["language"] == "en"
        assert audio.decode(sent.audio, 60).data == audio.decode(speech.encode(spoken, "mp3"), 60).data
        with pytest.raises(ModelError, match="transcription by openai/whisper-1 failed"):
            transcribe(config, spoken)
    finally:
        server.close()
    with pytest.raises(ModelError, match="no API key: OPENAI_API_KEY"):  # said before any request is made
        transcribe(VoiceConfig(engine="api"), spoken, secrets={}, environ={})


def test_voice_settings():
    assert parse_config("voice:\n  engine: off\n").voice.engine_name == "off"  # YAML's unquoted off
    assert parse_config("voice:\n  engine: 'off'\n").voice.engine_name == "off"
    assert parse_config("").voice.engine_name == "pocketsphinx"
    config = parse_config("voice:\n  engine: api\n  model: groq/whisper-large-v3\n  max_seconds: 60\n").voice
    assert (config.engine_name, config.model, config.max_seconds) == ("api", "groq/whisper-large-v3", 60)
    with pytest.raises(ConfigError, match="voice.engine"):
        parse_config("voice:\n  engine: whisper\n")
    with pytest.raises(ConfigError, match="voice.max_bytes"):
        parse_config("voice:\n  max_bytes: lots\n")


def test_doctor_says_whether_voice_messages_can_be_transcribed(vault, run_cli):
    gateway = "sandbox:\n  backend: none\ngateway:\n  webhook:\n    routes: {}\n"
    (vault.root / "hermes.yaml").write_text(gateway)
    r = run_cli("--vault", str(vault.root), "doctor", "--no-model")
    assert "ok  voice: pocketsphinx, offline, with the English model its package ships" in r.stdout, r.stdout + r.stderr
    (vault.root / "hermes.yaml").write_text(gateway + "voice:\n  engine: api\n  api_key_env: VOICE_KEY_NOT_SET\n")
    r = run_cli("--vault", str(vault.root), "doctor", "--no-model")
    assert "BAD voice: model whisper-1: no API key: VOICE_KEY_NOT_SET" in r.stdout and r.returncode == 1, r.stdout
    line = next(x for x in r.stdout.splitlines() if x.startswith("BAD voice"))  # the voice settings, not the chat model's
    assert "(voice.api_key_env in hermes.yaml)" in line and "change `voice.model`" in line, line
    assert "ollama_chat" not in line, line
    (vault.root / "hermes.yaml").write_text("sandbox:\n  backend: none\nvoice:\n  engine: api\n")
    assert "voice:" not in run_cli("--vault", str(vault.root), "doctor", "--no-model").stdout  # no chats, no voice
