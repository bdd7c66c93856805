"""Speech to text: a voice message's transcript, by the engine `voice.engine` names.

- `pocketsphinx`: offline, with the English acoustic model, language model and dictionary its
  PyPI package ships. Nothing leaves the machine. Its free dictation is rough (see
  docs/guide/voice.md): good for short, plain requests spoken clearly, not for dictating text.
- `api`: a hosted speech model (Whisper and the like) through litellm's `transcription`,
  imported lazily as every litellm call is; in a daemon it runs in the model worker (as every
  model call there does), so litellm never enters the daemon. The model gets a WAV made from the decoded sound,
  never the sender's own file.
- `off`: no transcription; the caller says voice is off.

Every engine hears the audio only after `audio.decode` read it (a known format, at most
`voice.max_seconds`): garbage is refused before any engine sees it. Nothing is written to disk.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from ..errors import InputError
from ..store.config import VoiceConfig
from .audio import Pcm, decode
from .model import ModelError, ModelSettings, import_litellm, remote

ENGINES = ("pocketsphinx", "api", "off")
API_TIMEOUT_S = 120.0


class VoiceOff(InputError):
    """`voice.engine: off`: voice messages are not transcribed."""


class NothingHeard(InputError):
    """The engine recognised no words in the audio."""


@dataclass(frozen=True)
class Transcript:
    text: str
    seconds: float  # the sound's length
    engine: str


def transcribe(config: VoiceConfig, data: bytes, secrets: Mapping[str, str] | None = None,
               environ: Mapping[str, str] | None = None) -> Transcript:
    """The words spoken in `data` (an audio file's bytes). Raises VoiceOff, an AudioError (not
    audio, broken, too long), NothingHeard, or ModelError (the hosted model failed)."""
    engine = config.engine_name
    if engine not in ENGINES:
        raise InputError(f"voice.engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "off":
        raise VoiceOff("voice messages are off here (voice.engine: off in hermes.yaml): please type the message")
    pcm = decode(data, config.max_seconds)
    if pcm.silent:
        raise NothingHeard("the voice message is silent: nothing was said")
    text = _pocketsphinx(pcm) if engine == "pocketsphinx" else _api(config, pcm, secrets or {}, environ)
    text = " ".join(text.split())
    if not text:
        raise NothingHeard("no words were recognised in the voice message: please say it again, or type it")
    return Transcript(text, pcm.seconds, engine)


def check(config: VoiceConfig, secrets: Mapping[str, str] | None = None) -> tuple[bool, str]:
    """`doctor`: can voice messages be transcribed as set up (no audio sent anywhere: the offline
    model is loaded, the hosted model's key is looked for)."""
    engine = config.engine_name
    if engine not in ENGINES:
        return False, f"voice.engine must be one of {', '.join(ENGINES)}, got {engine!r}"
    if engine == "off":
        return True, "off: voice messages are answered that voice is off"
    limits = f"at most {config.max_seconds} s and {config.max_bytes} bytes"
    try:
        import av  # noqa: F401

        if engine == "pocketsphinx":
            _decoder()
            return True, f"pocketsphinx, offline, with the English model its package ships ({limits})"
        ModelSettings(config.model, api_base=config.api_base, api_key_env=config.api_key_env,
                      setting="voice.model", secrets=dict(secrets or {})).api_key()
    except ImportError as exc:
        return False, f"{exc.name} is not installed (pip install av pocketsphinx)"
    except ModelError as exc:
        return False, str(exc)
    return True, f"{config.model} through litellm{f' at {config.api_base}' if config.api_base else ''} ({limits})"


# -- pocketsphinx ---------------------------------------------------------------------------------

_decoder_lock = threading.Lock()  # a pocketsphinx Decoder holds one utterance at a time


@cache
def _decoder():
    """One decoder per process: the shipped model is loaded once, not per message."""
    from pocketsphinx import Config, Decoder

    config = Config()  # the package's own en-us model, its language model and dictionary
    config["loglevel"] = "FATAL"  # its chatter is not ours to print
    return Decoder(config)


def _pocketsphinx(pcm: Pcm) -> str:
    try:
        import pocketsphinx  # noqa: F401
    except ImportError:
        raise InputError("voice.engine: pocketsphinx needs the pocketsphinx package (pip install pocketsphinx)") from None
    with _decoder_lock:
        decoder = _decoder()
        decoder.start_utt()
        decoder.process_raw(pcm.data, full_utt=True)
        decoder.end_utt()
        hyp = decoder.hyp()
    return hyp.hypstr if hyp is not None else ""


# -- a hosted model through litellm ---------------------------------------------------------------

def _api(config: VoiceConfig, pcm: Pcm, secrets: Mapping[str, str], environ: Mapping[str, str] | None) -> str:
    settings = ModelSettings(config.model, api_base=config.api_base, api_key_env=config.api_key_env,
                             setting="voice.model", secrets=dict(secrets))
    if environ is not None:
        settings.environ = environ
    key = settings.api_key()  # a missing key is said before litellm is imported
    elsewhere = remote()
    if elsewhere is not None:  # a daemon: litellm lives in its model worker, never in the daemon
        return elsewhere.transcribe(settings, key, pcm.wav(), config.language)
    return transcribe_wav(settings, key, pcm.wav(), config.language)


def transcribe_wav(settings: ModelSettings, key: str | None, wav: bytes, language: str | None) -> str:
    """The words in `wav` from the hosted model `settings` names, through litellm in this process
    (the CLI's, or the daemon's model worker)."""
    litellm = import_litellm()
    kwargs: dict = {"model": settings.model, "file": ("voice.wav", wav, "audio/wav"),
                    "timeout": API_TIMEOUT_S, "max_retries": 2}
    if settings.api_base:
        kwargs["api_base"] = settings.api_base
        key = key or "no-key"  # a keyless OpenAI-compatible server: the client still wants one
    if key:
        kwargs["api_key"] = key
    if language:
        kwargs["language"] = language
    try:
        response = litellm.transcription(**kwargs)
    except Exception as exc:  # litellm maps every provider's errors onto its own classes
        raise ModelError(f"transcription by {settings.model} failed: {type(exc).__name__}: {str(exc)[:300]}") from None
    text = getattr(response, "text", None)
    if not isinstance(text, str):
        raise ModelError(f"transcription by {settings.model}: the answer held no text")
    return text


__all__ = ["ENGINES", "NothingHeard", "Transcript", "VoiceOff", "check", "transcribe", "transcribe_wav"]
