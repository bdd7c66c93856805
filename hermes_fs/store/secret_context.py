"""Secrets told in prose: a credential-shaped value in the grammar of a credential, a high-entropy
token, and detect-secrets' detectors. Used for everything bound for memory, where a person's own
sentence ("log in as deploy with Tr0ub4dor&3") carries the value without the word "password".

Each detector yields (kind, start, end) spans of the value itself, so a redaction keeps the sentence.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache

Span = tuple[str, int, int]

MAX_LINE = 4000  # detect-secrets runs per line; a longer line is cut into windows of this size

# A credential-shaped value: one run of non-space characters that is not a word of prose. It holds a
# digit or a symbol or mixed case (`hunter2`, `Tr0ub4dor&3`, `s3cret!`); a plain word (`sudo`, `the`)
# or a reference (`${VAR}`, `<password>`, `$(cmd)`) is not a value.
_VALUE = r"(?P<value>[^\s\"'`<>()\[\]{}]{4,128})"
_IDENT = r"[A-Za-z0-9_.@+-]{1,64}"
# Nouns that name a credential; the grammar around them decides, not the noun alone.
_CRED_NOUN = (r"(?:pass(?:word|phrase|code|wd)?|pw|pwd|pin|secret|token|api[ _-]?key|access[ _-]?key|key|"
              r"creds?|credentials?|login|otp|passkey)")
GRAMMAR: list[tuple[str, re.Pattern]] = [
    # log in / sign in / ssh / connect ... as USER with VALUE  (also "using", "and", "/")
    ("credential in a sentence", re.compile(
        r"\b(?:log(?:[ \t]*-?[ \t]*in|[ \t]*on)?|sign(?:[ \t]*-?[ \t]*in|[ \t]*on)?|ssh|connect|authenticate|auth|su|access|"
        r"get[ \t]+in|enter)\b[^.\n]{0,40}?\bas[ \t]+" + _IDENT +
        r"[ \t]*(?:,[ \t]*)?(?:with|using|and|/|:|pass(?:word)?)[ \t]+(?:(?:the|a|my|its|pass(?:word)?|pw|key)[ \t]+)*" + _VALUE,
        re.I)),
    # user X / pass Y ; username: X, pw Y ; user bob pass hunter2
    ("credential in a sentence", re.compile(
        r"\b(?:user(?:name)?|login|account|u)\b[ \t]*[:=]?[ \t]*" + _IDENT +
        r"[ \t]*(?:[,;/|][ \t]*|[ \t]+and[ \t]+|[ \t]+)(?:pass(?:word|wd|phrase)?|pw|pwd|p)\b[ \t]*(?:is[ \t]+|[:=][ \t]*)?" + _VALUE,
        re.I)),
    # creds are bob:hunter2 / login admin/hunter2
    ("credential in a sentence", re.compile(
        r"\b(?:creds?|credentials?|login|account)\b[ \t]*(?:are|is|:|=)?[ \t]*" + _IDENT + r"[ \t]*[:/][ \t]*" + _VALUE, re.I)),
    # the wifi passcode is 4471-2290 ; PIN: 0420 ; my token = abc123... ; key q8Zr2m...
    ("credential in a sentence", re.compile(
        r"\b" + _CRED_NOUN + r"\b(?:[ \t]+(?:for|of|to|on|at)(?:[ \t]+[^\s,.;:]{1,30}){1,4}?)?(?:[ \t]+(?:is|was|now)\b|[ \t]*(?:=|:|->))[ \t]*"
        + _VALUE,
        re.I)),
    # ... with (the) password/pin/token VALUE
    ("credential in a sentence", re.compile(
        r"\b(?:with|using|use|enter|type)[ \t]+(?:the[ \t]+|my[ \t]+|a[ \t]+)?" + _CRED_NOUN + r"[ \t]+" + _VALUE, re.I)),
]
_WORDY = re.compile(r"[a-z]+(?:-[a-z]+)*[.,;:!?]*")  # a word of prose (hyphenated too)
_REFERENCE = re.compile(r"\$|%|\*{3,}|x{6,}|\.\.\.|^(?:your|my|the|a|an|its|their|our|same|new|old|that|this|it|"
                        r"here|there|below|above|manager|env|environment|file|vault|prompt)\b", re.I)
_PATHLIKE = re.compile(r"^(?:~|\.{0,2}/|[A-Za-z]:\\)|^[\w.-]+/[\w./-]+$")


def credential_shaped(value: str) -> bool:
    """A value a person would type as a secret, not a word, a path or a reference."""
    v = value.rstrip(".,;:!?")
    if len(v) < 4 or _WORDY.fullmatch(v) or _REFERENCE.search(value) or _PATHLIKE.search(v):
        return False
    if re.fullmatch(r"[A-Za-z]+", v) or re.fullmatch(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+", v):  # a word, a variable
        return False
    if re.match(r"[a-z][a-z0-9+.-]*://", v):  # a reference (op://vault/item) or a link
        return False
    if re.fullmatch(r"[A-Za-z_]\w*(?:\.\w+)+", v) and not re.search(r"\d", v):  # os.environ, self.token
        return False
    if re.fullmatch(r"[A-Z][a-z]+", v) or re.fullmatch(r"[A-Z]+", v):  # a capitalised word, an acronym
        return False
    if re.fullmatch(r"\d{1,3}(?:\.\d+)*", v) or re.fullmatch(r"v?\d+(?:\.\d+)+", v):  # a version, a count
        return False
    if re.fullmatch(r"\d+", v):  # digits only: a PIN of 4+ digits, not a year
        return len(v) >= 4 and not re.fullmatch(r"(?:19|20)\d\d", v)
    classes = sum(bool(re.search(p, v)) for p in (r"[a-z]", r"[A-Z]", r"\d", r"[^A-Za-z0-9]"))
    return classes >= 2


def grammar_spans(text: str) -> Iterator[Span]:
    for kind, pattern in GRAMMAR:
        for m in pattern.finditer(text):
            value = m.group("value").rstrip(".,;:!?")
            if credential_shaped(value):
                yield kind, m.start("value"), m.start("value") + len(value)


# High-entropy tokens: runs of base64 / URL-safe characters. Hex-only runs are ids and digests (a
# git commit, a sha256, a UUID's parts): never flagged by entropy alone, only in a credential's grammar.
_TOKEN = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{20,}={0,2}(?![A-Za-z0-9+/=_-])")
ENTROPY_LIMIT = 4.0  # bits per character (base64 charset); random 20+ character keys are above 4.1
MIN_TOKEN = 20


@lru_cache(maxsize=1)
def _base64_plugin():
    from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString

    return Base64HighEntropyString(limit=ENTROPY_LIMIT)


def entropy(token: str) -> float:
    """Shannon entropy of a token over the base64 charset (detect-secrets' own computation)."""
    return float(_base64_plugin().calculate_shannon_entropy(token))


def _token_like(tok: str) -> bool:
    """Random-looking: not hex (ids, digests), and mostly made of pieces that mix letters and digits,
    so a slug, a path or a file name (`notes/2026-12-03-learning-quality`, `report-v3`) is not."""
    if re.fullmatch(r"[0-9a-fA-F-]+", tok):
        return False
    pieces = re.split(r"[-_/.+]", tok)
    mixed = sum(len(p) for p in pieces if re.search(r"\d", p) and re.search(r"[A-Za-z]", p))
    if mixed < 0.6 * len(tok.replace("-", "").replace("_", "").replace("/", "")):
        return False
    if not (re.search(r"\d", tok) and re.search(r"[A-Za-z]", tok)):
        return False
    return sum(bool(re.search(p, tok)) for p in (r"[a-z]", r"[A-Z]", r"\d")) >= 3 or len(tok) >= 32


_FINGERPRINT = re.compile(r"(?:SHA256|SHA1|MD5):$", re.I)  # ssh-keygen -l, git's signature check: a public key's hash


def entropy_spans(text: str) -> Iterator[Span]:
    for m in _TOKEN.finditer(text):
        tok = m.group(0)
        if _FINGERPRINT.search(text[max(0, m.start() - 7):m.start()]):
            continue
        if _token_like(tok) and entropy(tok) > ENTROPY_LIMIT:
            yield "high-entropy token", m.start(), m.end()


# detect-secrets' detectors, run in-process. Its entropy plugins scan unquoted prose without their
# limits in ad-hoc mode (every word is reported), so entropy is judged above; public IPs are not secrets.
_DS_SKIP = {"Base64HighEntropyString", "HexHighEntropyString", "IPPublicDetector"}


@lru_cache(maxsize=1)
def _ds_plugins() -> tuple[str, ...]:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    classes: list[type] = list(get_mapping_from_secret_type_to_class().values())
    return tuple(sorted(c.__name__ for c in classes if c.__name__ not in _DS_SKIP))


# detectors whose own analyze_string filters what their regexes found (never adds to it)
_DS_FILTERING = {"JwtTokenDetector"}


# detectors whose every regex needs one of these words (case-insensitive): run only on lines holding one
_DS_KEYWORDED = {"CloudantDetector", "IbmCloudIamDetector", "IbmCosHmacDetector", "SoftlayerDetector", "KeywordDetector"}
_DS_KEYWORDS = ("key", "pw", "pass", "token", "secret", "contrase")


@lru_cache(maxsize=1)
def _ds_prefilters() -> tuple[tuple[re.Pattern, bool], ...] | None:
    """Every regex a detector needs to match before it can report anything, made multi-line, to find
    in one pass over a whole text the lines worth handing to detect-secrets (a 1.8 MB memory file has
    ~24,000 lines; each through every detector took seconds). None: a detector that cannot be
    pre-filtered so, and every line goes through."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins import keyword
    from detect_secrets.plugins.base import RegexBasedDetector

    found: list[type] = list(get_mapping_from_secret_type_to_class().values())
    classes = {c.__name__: c for c in found}
    out: list[tuple[re.Pattern, bool]] = []  # (regex, only on lines holding one of _DS_KEYWORDS)
    for name in _ds_plugins():
        cls = classes[name]
        keyed = name in _DS_KEYWORDED
        if name == "KeywordDetector":  # each of its regexes holds one of its keywords
            out.append((re.compile(keyword.DENYLIST_REGEX, re.IGNORECASE | re.MULTILINE), keyed))
        elif (issubclass(cls, RegexBasedDetector) and "analyze_line" not in cls.__dict__
              and ("analyze_string" not in cls.__dict__ or name in _DS_FILTERING)):
            out += [(re.compile(r.pattern, r.flags | re.MULTILINE), keyed) for r in cls().denylist]
        else:
            return None
    return tuple(out)


def _candidate_lines(text: str, starts: list[int]) -> set[int] | None:
    """Indexes of the lines any detector's regex touches (a superset of those it reports on:
    `^`, `$` and the lookbehinds at a line's start mean the same with MULTILINE); None: all."""
    import bisect

    filters = _ds_prefilters()
    if filters is None:
        return None
    lines: set[int] = set()
    if not starts:
        return lines
    keyed: list[int] | None = None
    for rx, only_keyed in filters:
        if only_keyed:  # casefold: re.IGNORECASE matches "ſ" for "s", and so does casefold
            if keyed is None:
                ends = [*starts[1:], len(text)]
                keyed = [i for i, (a, b) in enumerate(zip(starts, ends, strict=True))
                         if any(k in text[a:b].casefold() for k in _DS_KEYWORDS)]
            lines.update(i for i in keyed if rx.search(text[starts[i]:ends[i]]))
            continue
        for m in rx.finditer(text):
            first = bisect.bisect_right(starts, m.start()) - 1
            last = bisect.bisect_right(starts, max(m.end() - 1, m.start())) - 1
            lines.update(range(first, last + 1))
    return lines


def detect_secrets_spans(text: str) -> Iterator[Span]:
    from detect_secrets.core.scan import scan_line
    from detect_secrets.settings import transient_settings

    found: list[Span] = []
    split = text.splitlines(keepends=True)
    starts, at = [], 0
    for line in split:
        starts.append(at)
        at += len(line)
    candidates = _candidate_lines(text, starts)
    if candidates is not None:  # a line after a break other than \n (\r, U+2028): `^` saw no line start there
        candidates.update(i for i in range(1, len(split)) if not split[i - 1].endswith("\n"))
    with transient_settings({"plugins_used": [{"name": n} for n in _ds_plugins()]}):
        offset = 0
        for index, line in enumerate(split):
            if candidates is not None and index not in candidates and len(line) <= MAX_LINE:
                offset += len(line)
                continue
            for w in range(0, max(len(line), 1), MAX_LINE):
                window = line[w:w + MAX_LINE]
                for secret in scan_line(window):
                    value = secret.secret_value or ""
                    at = window.find(value) if value else -1
                    if at < 0 or not credential_shaped(value):
                        continue
                    found.append((f"{secret.type} (detect-secrets)", offset + w + at, offset + w + at + len(value)))
            offset += len(line)
    yield from found


def spans(text: str) -> list[Span]:
    """Every secret told in prose, as non-overlapping spans sorted by start (the earliest, longest first)."""
    out: list[Span] = []
    for span in sorted([*grammar_spans(text), *entropy_spans(text), *detect_secrets_spans(text)],
                       key=lambda s: (s[1], -s[2])):
        if out and span[1] < out[-1][2]:
            if span[2] > out[-1][2]:
                out[-1] = (out[-1][0], out[-1][1], span[2])
            continue
        out.append(span)
    return out
