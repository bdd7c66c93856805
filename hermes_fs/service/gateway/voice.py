"""A voice message in the gateway: bounded, fetched, transcribed; the transcript is the message.

The core (core.py) hears a message's `Audio` once access is decided (a stranger's audio is never
fetched) and before the message becomes a request. Limits (`voice.max_bytes`, `voice.max_seconds`)
are checked against what the platform declares before anything is downloaded, then against the
bytes and the decoded sound. The audio lives in memory only: the request file holds the transcript
with a line saying it came from a voice message, and the reply begins with the transcript quoted
(`transcript_quote`), so the person sees what was heard.
"""

from __future__ import annotations

from ...agent.transcription import VoiceOff, transcribe
from ...errors import HermesError, InputError
from ...store.vault import Vault
from .message import Audio, AudioTooLarge

VOICE_NOTE = "(a voice message, transcribed automatically: a word may have been misheard)"
QUOTE_CHARS = 1_000  # of the transcript quoted back in the reply


class Unheard(InputError):
    """A voice message that is not run: why, in words for the person who sent it."""


def hear(vault: Vault, audio: Audio) -> str:
    """The words spoken in `audio`; Unheard (with the reason) when voice is off, the audio is over
    a limit, cannot be fetched or decoded, or holds no words."""
    config = vault.config.voice
    if config.engine_name == "off":
        raise Unheard("voice messages are off here (voice.engine: off): please type the message")
    what = f"the voice message{f' ({audio.name})' if audio.name else ''}"
    if audio.size is not None and audio.size > config.max_bytes:
        raise Unheard(f"{what} is {audio.size} bytes; at most {config.max_bytes} are taken")
    if audio.duration_s is not None and audio.duration_s > config.max_seconds:
        raise Unheard(f"{what} is {audio.duration_s:g} seconds long; at most {config.max_seconds} are taken")
    try:
        data = audio.fetch(config.max_bytes)
    except AudioTooLarge as exc:
        raise Unheard(f"{what} is too large ({exc})") from None
    except Exception as exc:  # the platform's download failed: said, never a crash of the channel
        raise Unheard(f"{what} could not be downloaded ({type(exc).__name__}: {str(exc)[:200]})") from None
    if len(data) > config.max_bytes:
        raise Unheard(f"{what} is {len(data)} bytes; at most {config.max_bytes} are taken")
    try:
        return transcribe(config, data, vault.secrets()).text
    except VoiceOff as exc:
        raise Unheard(str(exc)) from None
    except HermesError as exc:  # not audio, broken, too long, no words, the hosted model failed
        raise Unheard(f"{what} could not be transcribed: {exc}") from None


def request_text(caption: str, transcript: str) -> str:
    """The message a voice note becomes: its caption (if any), the note, the transcript."""
    said = f"{VOICE_NOTE}\n{transcript}"
    return f"{caption.strip()}\n\n{said}" if caption.strip() else said


def transcript_of(text: str) -> str | None:
    """The transcript in a voice request's text (None: the text has no voice note)."""
    head, sep, tail = text.partition(VOICE_NOTE + "\n")
    if not sep or (head and not head.endswith("\n\n")):
        return None
    return tail.strip() or None


def transcript_quote(transcript: str) -> str:
    """The reply's first lines: what was heard, quoted, so a misheard word shows at once."""
    text = transcript if len(transcript) <= QUOTE_CHARS else transcript[:QUOTE_CHARS] + " …"
    lines = text.splitlines() or [""]
    return "\n".join([f"> 🎤 {lines[0]}"] + [f"> {line}" for line in lines[1:]])


def refusal_reply(reason: str) -> str:
    return f"Your voice message was not run: {reason}."


__all__ = ["VOICE_NOTE", "Unheard", "hear", "refusal_reply", "request_text", "transcript_of", "transcript_quote"]
