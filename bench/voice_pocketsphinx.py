"""What the offline voice engine (pocketsphinx with the model its package ships) hears of real
synthetic speech: espeak-ng speaks each phrase, PyAV encodes it as a Telegram voice note
(OGG/Opus), and hermes-fs transcribes it exactly as the gateway does (agent/transcription.py).

Per phrase: the transcript, the phrase's words recognised (recall of content words, in any
order), whether its keyword was heard, and the seconds the transcription took (decode + recognise).

Usage: python bench/voice_pocketsphinx.py [--speed WPM]   (needs espeak-ng: scripts/voice-test-env.sh)
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))

from common import write_results  # noqa: E402

# (phrase, the keyword a request would need heard)
PHRASES = [
    ("what is the weather today", "weather"),
    ("remember that my favourite colour is green", "green"),
    ("remind me to call my mother tomorrow", "mother"),
    ("how many people live in paris", "paris"),
    ("set a timer for ten minutes", "timer"),
    ("tell me a joke", "joke"),
    ("send me the report", "report"),
    ("please write a summary of the meeting", "summary"),
    ("remember the meeting tomorrow morning", "meeting"),
    ("good morning", "morning"),
]
STOP = {"a", "the", "of", "to", "me", "my", "is", "that", "for", "in", "what", "how", "please"}


def words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--speed", type=int, default=130, help="espeak-ng words a minute (the tests use 130)")
    args = ap.parse_args()
    import speech

    from hermes_fs.agent.transcription import NothingHeard, transcribe
    from hermes_fs.store.config import VoiceConfig

    config = VoiceConfig()
    transcribe(config, speech.voice_note("hello"))  # the model loads once per process: not counted
    rows = []
    for phrase, keyword in PHRASES:
        note = speech.encode(speech.speak(phrase, args.speed), "ogg")
        t0 = time.perf_counter()
        try:
            heard = transcribe(config, note)
            text, seconds = heard.text, heard.seconds
        except NothingHeard:
            text, seconds = "", 0.0
        took = time.perf_counter() - t0
        content = [w for w in words(phrase) if w not in STOP]
        got = set(words(text))
        recall = sum(w in got for w in content) / len(content)
        rows.append({"phrase": phrase, "heard": text, "keyword": keyword, "keyword_heard": keyword in got,
                     "content_word_recall": round(recall, 2), "audio_s": round(seconds, 2), "transcribe_s": round(took, 2)})
        print(f"{'yes' if keyword in got else 'no ':3} {recall:4.0%}  {took:5.2f}s  {phrase!r} -> {text!r}")
    keywords = sum(r["keyword_heard"] for r in rows)
    recall = sum(r["content_word_recall"] for r in rows) / len(rows)
    speed = sum(r["audio_s"] for r in rows) / max(sum(r["transcribe_s"] for r in rows), 1e-9)
    print(f"keywords heard: {keywords}/{len(rows)}; content words recognised: {recall:.0%}; "
          f"{speed:.1f}x real time")
    write_results("voice_pocketsphinx", {"engine": "pocketsphinx", "voice": f"espeak-ng en-us, {args.speed} wpm",
                                         "format": "OGG/Opus", "keywords_heard": keywords, "phrases": len(rows),
                                         "content_word_recall": round(recall, 3),
                                         "times_real_time": round(speed, 2), "rows": rows})


if __name__ == "__main__":
    main()
