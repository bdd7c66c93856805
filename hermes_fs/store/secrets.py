"""The commit-time secret scanner. Every commit path calls `scan`; a hit refuses the commit.

Findings name the file, the line and the kind, never the secret itself. Memory files, and anything
code writes into memory (`find_secrets`, `redact(..., context=True)`), are also scanned for secrets
told in prose (store/secret_context.py): a credential-shaped value in a credential's grammar, a
high-entropy token, and detect-secrets' detectors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from ..errors import SecretError
from . import secret_context

# Apprise schemes whose URLs carry tokens in the path (e.g. tgram://bottoken/chatid).
APPRISE_TOKEN_SCHEMES = (
    "tgram|discord|slack|msteams|pover|pushover|pbul|gotify|gotifys|ntfys?|matrixs?|mmosts?|rocket|rockets|"
    "join|ifttt|zulip|signal|signals|twilio|sns|ses|mailgun|sendgrid|sparkpost|opsgenie|pagerduty|pushbullet|"
    "line|lametric|flock|guilded|ryver|spontit|techulus|webex|wxteams|apprise|apprises|bark|barks|revolt|kumulos"
)

# Start of a token: not glued to a word, except after a JSON/escape sequence like \n (tool arguments).
_B = r"(?:(?<![A-Za-z0-9])|(?<=\\[nrt]))"

PATTERNS: list[tuple[str, re.Pattern]] = [
    # the whole block first, so redaction removes the key body too, not just its first line
    ("private key", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY( BLOCK)?-----[\s\S]*?"
                               r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY( BLOCK)?-----|\Z)")),
    ("Anthropic API key", re.compile(_B + r"sk-ant-[A-Za-z0-9_-]{20,}")),
    ("OpenRouter API key", re.compile(_B + r"sk-or-v1-[A-Za-z0-9]{20,}")),
    ("OpenAI API key", re.compile(_B + r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}")),
    ("AWS access key", re.compile(_B + r"(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("GitHub token", re.compile(_B + r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})")),
    ("Google API key", re.compile(_B + r"AIza[0-9A-Za-z_-]{35}")),
    ("Slack token", re.compile(_B + r"xox[abposr]-[A-Za-z0-9-]{10,}")),
    ("Groq API key", re.compile(_B + r"gsk_[A-Za-z0-9]{20,}")),
    ("Hugging Face token", re.compile(_B + r"hf_[A-Za-z0-9]{30,}")),
    ("Stripe key", re.compile(_B + r"[rs]k_(?:live|test)_[A-Za-z0-9]{20,}")),
    ("xAI API key", re.compile(_B + r"xai-[A-Za-z0-9]{30,}")),
    ("AWS secret key", re.compile(r"aws_?secret_?(?:access_?)?key[\"']?\s*[:=]\s*[\"']?[A-Za-z0-9/+]{40}\b", re.I)),
    ("JSON Web Token", re.compile(_B + r"eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}")),
    ("URL with a token parameter",
     re.compile(r"\b[a-z][a-z0-9+.-]{1,15}://[^\s'\"<>]*?[?&](?:access_token|token|api_?key|apikey|key|secret|password|pass)"
                r"=(?!\$\{)[^\s&'\"$]{12,}", re.I)),
    ("password in settings",
     re.compile(r"^\s*[\"']?(?:password|passwd|secret|api_?key|auth_?token)[\"']?\s*:\s*[\"']?(?!\$\{)"
                r"[^\s\"'#]{8,}[\"']?,?[ \t]*(?:#.*)?$", re.I | re.M)),  # the value ends the line: not prose
    # user:password@ in a URL; template and regex characters (<user>, [^@]*, \(...\)) are documentation
    ("URL with credentials", re.compile(r"\b[a-z][a-z0-9+.-]{1,15}://[^\s/:@${}<>\[\]()*\\]+:[^\s/@${}<>\[\]()*\\]{3,}@",
                                        re.I)),
    (
        "Apprise URL with a token",
        re.compile(rf"\b(?:{APPRISE_TOKEN_SCHEMES})://(?![^\s]*\$\{{)[^\s]*[A-Za-z0-9_-]{{16,}}", re.I),
    ),
    (
        ".env secret assignment",
        re.compile(
            # a name ending in _FILE, _PATH or _DIR names where the secret is kept
            # (RESTIC_PASSWORD_FILE=/root/.restic-pass, POSTGRES_PASSWORD_FILE=/run/secrets/db), not the secret
            r"\b[A-Z][A-Z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD)[A-Z0-9_]*(?<!_FILE)(?<!_PATH)(?<!_DIR)\s*=\s*"
            r"(?![\"']?\$\{)[\"']?[^\s\"'#$]{12,}",
        ),
    ),
]

# A literal every match of a pattern holds (one of them): a pattern whose literals are all absent
# cannot match, and is not run (most of a 1.8 MB memory file's scan was these regexes finding nothing).
NEEDLES: dict[str, tuple[str, ...]] = {
    "private key": ("PRIVATE KEY",), "Anthropic API key": ("sk-ant-",), "OpenRouter API key": ("sk-or-v1-",),
    "OpenAI API key": ("sk-",), "AWS access key": ("AKIA", "ASIA"),
    "GitHub token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"), "Google API key": ("AIza",),
    "Slack token": ("xox",), "Groq API key": ("gsk_",), "Hugging Face token": ("hf_",),
    "Stripe key": ("k_live_", "k_test_"), "xAI API key": ("xai-",), "JSON Web Token": ("eyJ",),
    "URL with a token parameter": ("://",), "URL with credentials": ("://",), "Apprise URL with a token": ("://",),
    ".env secret assignment": ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD"),
    # case-insensitive patterns: looked for in the lower-cased text
    "AWS secret key": ("aws",), "password in settings": ("password", "passwd", "secret", "api", "auth"),
}
_CASELESS_NEEDLES = {"AWS secret key", "password in settings"}


def _may_match(kind: str, text: str, lower: list[str]) -> bool:
    needles = NEEDLES.get(kind)
    if not needles:
        return True
    if kind in _CASELESS_NEEDLES:
        if not lower:
            lower.append(text.lower())
        text = lower[0]
    return any(n in text for n in needles)


ENV_FILE_NAMES = {".env", ".envrc", "secrets.env"}


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    kind: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.kind}"


# Documentation writes placeholders where a value goes: those are not secrets.
_PLACEHOLDER = re.compile(r"your|xxxx|example|changeme|placeholder|<[^>]*>|\.\.\.|redacted|dummy|\*\*\*|\{[^}]*\}",
                          re.I)
_ASSIGNMENTS = {".env secret assignment", "password in settings", "URL with a token parameter", "AWS secret key"}
_VALUE = re.compile(r"[:=]\s*[\"']?([^\s\"'#]+)")


def _is_placeholder(kind: str, match: str) -> bool:
    """A documentation placeholder or a reference in code, not a value: `sk-xxxxxxxx`,
    `KEY=your_key_here`, `SECRET_PATH = HERMES_HOME / ...`, `"api_key": self.api_key`,
    `SECRET=generate-a-strong-secret-here`."""
    if re.search(r"[xX*]{8,}", match):  # sk-xxxxxxxxxxxx, ********
        return True
    if kind == "URL with credentials":  # postgres://user:pass@db/mydb
        creds = re.search(r"://[^:/]*:([^@]*)@", match)
        return bool(creds and creds.group(1).lower() in {"pass", "password", "passwd", "pwd", "secret", "changeme",
                                                                "token", "key", "apikey", "api_key"})
    if kind not in _ASSIGNMENTS:
        return False
    if kind == "URL with a token parameter":
        # a Firebase Storage download link (`alt=media&token=`) is a public link by design
        return "alt=media" in match or bool(_PLACEHOLDER.search(match.rsplit("=", 1)[-1]))
    if _PLACEHOLDER.search(match):
        return True
    m = _VALUE.search(match)
    value = m.group(1).rstrip(",;)") if m else ""
    return bool(re.fullmatch(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+", value)  # another variable's name
                or re.match(r"[a-z][a-z0-9+.-]*://", value)  # a reference (op://vault/item, vault://...)
                or re.search(r"password|passwd", value, re.I)  # `mypassword`: an example, not a password
                or re.fullmatch(r"[A-Za-z_]\w*(?:\.\w+)+", value)  # self.api_key, creds.token
                or "(" in value  # os.getenv("API_TOKEN"): a call, not a value
                or re.fullmatch(r"[a-z]+(?:-[a-z]+){2,}", value))  # words-joined-by-hyphens


SPLIT_SCAN_CHARS = 2_000_000  # the split-key pass keeps an offset per character: bounded
# A line break inside a key: the next line is one run of key characters (with a digit or a capital),
# as when a paste wraps; a following word of prose is never glued on.
_SPLIT = re.compile(r"(?<=[A-Za-z0-9_-]{6})[ \t]*\r?\n[ \t>]*"
                    r"(?=(?=[A-Za-z0-9_-]*[0-9A-Z])[A-Za-z0-9_-]{8,}[ \t]*(?:\r?\n|$))")
_TOKEN_KINDS = {k for k, _p in PATTERNS} - _ASSIGNMENTS - {"private key", "URL with credentials", "Apprise URL with a token"}


def _matches(text: str, kinds: set[str] | None = None):
    """(kind, start, end) of every secret in text that is not a documentation placeholder."""
    lower: list[str] = []
    for kind, pattern in PATTERNS:
        if (kinds is None or kind in kinds) and _may_match(kind, text, lower):
            for m in pattern.finditer(text):
                if not _is_placeholder(kind, m.group(0)):
                    yield kind, m.start(), m.end()


def _split_matches(text: str):
    """(kind, start, end) in `text` of keys broken over two lines (a wrapped paste). The joined copy
    is built only when a line break sits inside a run of key characters, and for bounded texts."""
    if "\n" not in text or len(text) > SPLIT_SCAN_CHARS or not _SPLIT.search(text):
        return
    pieces: list[str] = []
    origin: list[int] = []  # for each character of the joined text, its offset in `text`
    last = 0
    for m in _SPLIT.finditer(text):
        pieces.append(text[last:m.start()])
        origin.extend(range(last, m.start()))
        last = m.end()
    pieces.append(text[last:])
    origin.extend(range(last, len(text)))
    for kind, start, end in _matches("".join(pieces), _TOKEN_KINDS):
        yield kind, origin[start], origin[end - 1] + 1


def scan_text(path: str, text: str) -> list[Finding]:
    return _by_line(path, text, [*_matches(text), *_split_matches(text)])


def find_secrets(text: str, where: str = "text") -> list[Finding]:
    """Every secret in text bound for memory: the key formats of `scan_text`, and secrets told in
    prose (a value after "log in as USER with", userinfo in a URL, a high-entropy token,
    detect-secrets' detectors). One finding per line; the value is never in the finding."""
    return _by_line(where, text, _memory_spans(text))


def secret_values(text: str) -> set[str]:
    """The secret values themselves that `find_secrets` sees in text: a conversation's ("the repo
    key is VALUE"), to find the same value where nothing around it says it is one (`printf '%s'
    'VALUE' > key`). Never logged or written: only compared."""
    return {v for _kind, start, end in _memory_spans(text) if len(v := text[start:end].strip(" \t'\"`.,;:")) >= 4}


def _memory_spans(text: str) -> list[tuple[str, int, int]]:
    """The key formats first, then secrets told in prose: on a line both find, the key's kind is named."""
    return [*_matches(text), *_split_matches(text), *secret_context.spans(text)]


def _by_line(where: str, text: str, spans: list[tuple[str, int, int]]) -> list[Finding]:
    findings: dict[int, Finding] = {}
    for kind, start, _end in spans:
        line = text.count("\n", 0, start) + 1
        findings.setdefault(line, Finding(where, line, kind))  # one finding per line is enough
    return sorted(findings.values(), key=lambda f: f.line)


MEMORY_DIR = "memory/"  # files under it are what the agent knows: scanned as prose too


_SCANNED: dict[tuple[str, str], list[Finding]] = {}  # (path, sha-256 of the bytes) -> findings, the last few


def scan(path: str, data: bytes | None) -> list[Finding]:
    """Findings for one file about to be committed (None = deletion, never a secret). The same bytes
    under the same path are scanned once: the web editor checks a save, then commits it, and the
    commit scans it again (seconds for a memory file of megabytes)."""
    if data is None:
        return []
    import hashlib

    key = (path, hashlib.sha256(data).hexdigest())
    if key not in _SCANNED:
        _SCANNED[key] = _scan(path, data)
        while len(_SCANNED) > 16:
            _SCANNED.pop(next(iter(_SCANNED)))
    return list(_SCANNED[key])


def _scan(path: str, data: bytes) -> list[Finding]:
    name = PurePosixPath(path).name
    if name in ENV_FILE_NAMES or name.startswith(".env."):
        return [Finding(path, 1, ".env file (keep it untracked)")]
    in_name = [Finding(path, 0, f"{f.kind} in the file name") for f in scan_text(path, path)]
    text = data.decode("utf-8", errors="replace")
    return in_name + (find_secrets(text, path) if path.startswith(MEMORY_DIR) else scan_text(path, text))


def redact(text: str, context: bool = False) -> tuple[str, int]:
    """Replace every secret in text with [REDACTED <kind>]; returns the text and how many.
    `context=True` (text bound for memory) also replaces secrets told in prose, value only, so
    "log in as deploy with [REDACTED ...]" keeps its sentence."""
    count = 0
    for kind, pattern in PATTERNS:
        if not _may_match(kind, text, []):
            continue

        def sub(m: re.Match, kind: str = kind) -> str:
            nonlocal count
            if _is_placeholder(kind, m.group(0)):
                return m.group(0)
            count += 1
            return f"[REDACTED {kind}]"

        text = pattern.sub(sub, text)
    spans = sorted(_split_matches(text), key=lambda m: m[1], reverse=True)
    for kind, start, end in spans:  # a key broken over lines: the lines it spans go, whole
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", end)
        text = text[:line_start] + f"[REDACTED {kind}]" + (text[line_end:] if line_end != -1 else "")
    count += len(spans)
    if context:
        for kind, start, end in reversed(secret_context.spans(text)):
            if "[REDACTED" not in text[start:end]:
                text = text[:start] + f"[REDACTED {kind}]" + text[end:]
                count += 1
    return text, count


def check_text(where: str, text: str) -> None:
    """Refuse a string bound for git (a branch name, a trailer) that holds a secret."""
    findings = scan_text(where, text)
    if findings:
        raise SecretError(f"refusing to put a secret into git ({where}: {findings[0].kind})")


def check(files: dict[str, bytes | None]) -> None:
    """Raise SecretError naming every file, line and kind found; the values are never shown."""
    findings = [f for path, data in files.items() for f in scan(path, data)]
    if findings:
        listed = "; ".join(str(f) for f in findings[:10])
        more = f" (and {len(findings) - 10} more)" if len(findings) > 10 else ""
        raise SecretError(
            f"refusing to commit a secret: {listed}{more}. Move it to the environment or .hermes/secrets.env "
            "and refer to it as ${NAME}."
        )
