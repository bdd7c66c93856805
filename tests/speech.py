"""Real speech for the voice tests: Debian's espeak-ng speaking a phrase, re-encoded with PyAV
into the containers chat platforms send (OGG/Opus for Telegram and Matrix voice notes, M4A/AAC
from iPhones, MP3 and WAV by mail). Tests using it are marked `espeak`
(scripts/voice-test-env.sh installs it)."""

from __future__ import annotations

import io
import shutil
import subprocess

# (container, codec, sample rate) as each kind of file is made by clients
KINDS = {"ogg": ("ogg", "libopus", 48_000), "m4a": ("ipod", "aac", 44_100), "mp3": ("mp3", "libmp3lame", 22_050),
         "flac": ("flac", "flac", 22_050), "webm": ("webm", "libopus", 48_000)}


def available() -> bool:
    return shutil.which("espeak-ng") is not None


def speak(text: str, speed: int = 130) -> bytes:
    """`text` spoken by espeak-ng's American English voice, as a WAV file's bytes."""
    return subprocess.run(["espeak-ng", "-v", "en-us", "-s", str(speed), "--stdout", text],
                          capture_output=True, check=True, timeout=180).stdout


def encode(wav: bytes, kind: str) -> bytes:
    """A WAV file re-encoded as `kind` (a key of KINDS)."""
    import av

    fmt, codec, rate = KINDS[kind]
    out = io.BytesIO()
    with av.open(io.BytesIO(wav)) as src, av.open(out, "w", format=fmt) as dst:
        stream = dst.add_stream(codec, rate=rate)
        stream.layout = "mono"
        resampler = av.AudioResampler(format=stream.format, layout="mono", rate=rate)
        for frame in src.decode(audio=0):
            frame.pts = None
            for piece in resampler.resample(frame):
                for packet in stream.encode(piece):
                    dst.mux(packet)
        for piece in resampler.resample(None):
            for packet in stream.encode(piece):
                dst.mux(packet)
        for packet in stream.encode(None):
            dst.mux(packet)
    return out.getvalue()


def voice_note(text: str) -> bytes:
    """`text` as a Telegram voice note: OGG/Opus."""
    return encode(speak(text), "ogg")
