"""The secret scanner on a large memory file: the shortcuts that make a 1.8 MB save take seconds, not
minutes (a literal every pattern's match holds; detect-secrets only on the lines its detectors' regexes
touch; one scan of the same bytes) find exactly what the full scan finds."""

from __future__ import annotations

from pathlib import Path

from test_scanner_quality import MORE_KEYS, negatives
from test_secrets import PLANTED

from hermes_fs.store import secret_context, secrets

DATA = Path(__file__).parent / "data"

# lines in the shapes detect-secrets' detectors look for (values made up here)
DETECTOR_LINES = [
    'password = "hunter2x9"', "db_pass: 'S3cr3t!!x'", "my_secret_value := \"a8Fk2mQ9z\"", 'contraseña = "Cl4ve!9xy"',
    "PaSSWord: Tr0ub4dor&3", "api_key => \"k3y-0f-mine-77\"", "private_key='abc123XYZ789'",
    'cloudant_password = "abcdefghijklmnopqrstuvwx"', "ibm_cloud_iam_key: 'abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH'",
    "softlayer_api_key = " + "a" * 64, "cos_hmac_secret_access_key = " + "0123456789abcdef" * 3,
    "artifactory: AKCp5budTFpbypBqQbGJPz3pGCi28pPivfWczqjfYb9drAmd9LbRZbj6UpKFxJXA8ksWGc9fM",
    "token 1234567890:AAEhBP0av28Xvmn1M7bVG6GsVYnj2gU3y7A", "twilio SK" + "0123456789abcdef" * 2,
    "mailchimp 0123456789abcdef0123456789abcdef-us12", "npm //registry.npmjs.org/:_authToken=abcdef12-3456-7890-abcd-ef1234567890",
    "https://user:p4ssw0rd@example.org/x", "sendgrid SG.abcdefghijklmnopqrstuv.abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG",
    "AKIAIOSFODNN7EXAMPLE", "xoxb-123456789012-123456789012-abcdefghijklmnopqrstuvwx",
    "AccountKey=" + "abcdefghij" * 8 + "abcd==", "pypi-AgEIcHlwaS5vcmcCJGFiY2RlZmdoLWlqa2wtbW5vcC1xcnN0LXV2d3h5ejEyMzQ1",
    "discord MTIzNDU2Nzg5MDEyMzQ1Njc4.GaBcDe.abcdefghijklmnopqrstuvwxyz0123456",
    "glpat-abcdefghij0123456789", "sq0atp-abcdefghijklmnopqrstuv", "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "line ending in a lone CR\rpassword = \"aFter-cr-9\"", "a paragraph\u2028secret: \"s3p-line-99\"",
]


def corpus() -> str:
    lines = [*PLANTED.values(), *MORE_KEYS.values(), *negatives(), *DETECTOR_LINES]
    skills = DATA / "hermes-home" / "skills"
    lines += [p.read_text(errors="replace") for p in sorted(skills.rglob("*.md"))]
    filler = [f"- note {i}: plain prose about the build, the key points and a pass at it" for i in range(300)]
    return "\n".join(x for pair in zip(lines, filler * (len(lines) // len(filler) + 1), strict=False) for x in pair)


def test_the_shortcuts_find_exactly_what_the_full_scan_finds(monkeypatch):
    text = corpus()
    fast_ds = list(secret_context.detect_secrets_spans(text))
    fast_matches = sorted(secrets._matches(text))
    fast_redacted = secrets.redact(text)
    assert fast_ds and fast_matches  # the corpus holds secrets of both kinds
    monkeypatch.setattr(secret_context, "_ds_prefilters", lambda: None)
    monkeypatch.setattr(secrets, "NEEDLES", {})
    assert list(secret_context.detect_secrets_spans(text)) == fast_ds
    assert sorted(secrets._matches(text)) == fast_matches
    assert secrets.redact(text) == fast_redacted


def test_detect_secrets_sees_only_the_lines_that_may_hold_a_secret(monkeypatch):
    import detect_secrets.core.scan as ds_scan

    seen: list[str] = []
    real = ds_scan.scan_line

    def counting(line):
        seen.append(line)
        return real(line)

    monkeypatch.setattr(ds_scan, "scan_line", counting)
    prose = [f"- note {i}: the build server runs nightly backups to the archive at slot {i % 97}" for i in range(24000)]
    text = "\n".join(prose[:12000] + ['db_password = "hunter2x9"'] + prose[12000:]) + "\n"
    spans = list(secret_context.detect_secrets_spans(text))
    assert len(seen) == 1 and "hunter2x9" in seen[0]
    assert [text[a:b] for _k, a, b in spans] == ["hunter2x9"]


def test_the_same_bytes_are_scanned_once(monkeypatch):
    calls = []
    real = secrets._scan
    monkeypatch.setattr(secrets, "_scan", lambda path, data: calls.append(path) or real(path, data))
    data = b"# notes\n- deploy with token ghp_" + b"a1B2c3D4e5F6g7H8i9J0kLmNoPqRsTuVwXyZ12" + b"\n"
    first = secrets.scan("memory/x.md", data)
    assert first and secrets.scan("memory/x.md", data) == first and calls == ["memory/x.md"]
    assert secrets.scan("memory/y.md", data) == [secrets.Finding("memory/y.md", f.line, f.kind) for f in first]
    assert calls == ["memory/x.md", "memory/y.md"]  # another path is another scan (its name is scanned too)
