"""Audio from a chat decoded to what speech recognition reads: 16 kHz mono 16-bit PCM.

Voice notes come as OGG/Opus (Telegram, Matrix clients), M4A/AAC (iPhone Matrix clients), and
mail can carry WAV, MP3, OGG, FLAC or WebM. PyAV decodes them all (its wheels bundle FFmpeg).

Audio from a chat is hostile input, so:
- the container is named by its own first bytes, from a short list of audio formats, and FFmpeg
  is told that format: it never probes, so a playlist or concat file (formats that make FFmpeg
  open other files or URLs) is refused, never followed;
- decoding stops at `max_seconds` of sound, whatever the file claims about itself;
- anything FFmpeg cannot decode, or that holds no audio, is an `AudioError` saying so.
The bytes are read from memory and nothing is written to disk.
"""

from __future__ import annotations

import io
import struct
import sys
from array import array
from dataclasses import dataclass

from ..errors import InputError

RATE = 16_000  # samples a second: what pocketsphinx's model (and Whisper) listen at
SAMPLE_BYTES = 2  # signed 16-bit little-endian
SILENT_PEAK = 200  # of 32767 (about -44 dBFS): quieter throughout is silence, where engines invent words

FORMATS = "OGG (Opus, Vorbis), M4A/MP4 (AAC), MP3, WAV, FLAC, WebM/Matroska, AMR"


class AudioError(InputError):
    """Audio that cannot be used: not audio, an unknown format, broken, or over a limit."""


class AudioTooLong(AudioError):
    """More seconds of sound than allowed."""


@dataclass(frozen=True)
class Pcm:
    """Decoded sound: 16 kHz mono 16-bit little-endian samples."""

    data: bytes

    @property
    def seconds(self) -> float:
        return len(self.data) / (RATE * SAMPLE_BYTES)

    @property
    def silent(self) -> bool:
        """No sample louder than SILENT_PEAK: nothing was said (speech engines hear words in
        silence, so silence is told before they are asked)."""
        samples = array("h", self.data[: len(self.data) // SAMPLE_BYTES * SAMPLE_BYTES])
        if sys.byteorder == "big":
            samples.byteswap()
        return not samples or max(max(samples), -min(samples)) < SILENT_PEAK

    def wav(self) -> bytes:
        """The sound as a WAV file (a canonical file for a hosted model: never the sender's own
        bytes, with whatever else their container carried)."""
        header = struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", 36 + len(self.data), b"WAVE", b"fmt ", 16, 1, 1, RATE,
                             RATE * SAMPLE_BYTES, SAMPLE_BYTES, 8 * SAMPLE_BYTES, b"data", len(self.data))
        return header + self.data


def container_format(data: bytes) -> str | None:
    """FFmpeg's demuxer for these bytes, told by their first bytes; None: not an audio format
    read here."""
    head = data[:16]
    if head.startswith(b"OggS"):
        return "ogg"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "wav"
    if head.startswith(b"fLaC"):
        return "flac"
    if head[4:8] == b"ftyp":
        return "mov"  # MP4, M4A, 3GP (external data references stay off: FFmpeg's default)
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "matroska"  # also WebM
    if head.startswith(b"#!AMR"):
        return "amr"
    if head.startswith(b"ID3"):
        return "mp3"
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0:
        return "aac" if head[1] & 0x06 == 0 else "mp3"  # ADTS (AAC) has layer bits 00; MPEG audio does not
    return None


def decode(data: bytes, max_seconds: float) -> Pcm:
    """The sound in `data` as 16 kHz mono PCM; AudioError when it is not audio read here, is
    broken, holds no sound, or is longer than `max_seconds`."""
    fmt = container_format(data)
    if fmt is None:
        raise AudioError(f"this is not an audio file hermes-fs can read (it reads {FORMATS})")
    import av

    limit = int(max_seconds * RATE) * SAMPLE_BYTES
    out = bytearray()
    try:
        with av.open(io.BytesIO(data), mode="r", format=fmt) as container:
            if not container.streams.audio:
                raise AudioError("the file holds no audio")
            resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
            for frame in container.decode(container.streams.audio[0]):
                for piece in resampler.resample(frame):
                    out += _samples(piece)
                if len(out) > limit:
                    raise AudioTooLong(f"the audio is longer than {max_seconds:g} seconds")
            for piece in resampler.resample(None):
                out += _samples(piece)
    except AudioError:
        raise
    except (av.FFmpegError, ValueError, EOFError, OSError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        raise AudioError(f"the audio could not be decoded ({fmt}: {why})") from None
    if len(out) > limit:
        raise AudioTooLong(f"the audio is longer than {max_seconds:g} seconds")
    if not out:
        raise AudioError("the audio holds no sound (nothing could be decoded)")
    return Pcm(bytes(out))


def _samples(frame) -> bytes:
    """A packed s16 mono frame's samples (its plane may be padded past them)."""
    return bytes(frame.planes[0])[: frame.samples * SAMPLE_BYTES]


__all__ = ["RATE", "AudioError", "AudioTooLong", "Pcm", "container_format", "decode"]
