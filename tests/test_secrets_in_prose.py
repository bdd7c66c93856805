"""Secrets told in prose, without the word "password": a value in a credential's grammar, userinfo in a
URL, a high-entropy token, detect-secrets' detectors. And what must stay: ordinary sentences, paths, UUIDs,
commit ids, digests, the project's own docs and the bench's transcripts (the false-positive rate)."""

from pathlib import Path

import pytest
import yaml

from hermes_fs.errors import SecretError
from hermes_fs.store import secret_context, secrets

ROOT = Path(__file__).resolve().parent.parent

# (sentence, the value that must not survive)
IN_SENTENCES = [
    ("Log in to the staging box as deploy with Tr0ub4dor&3horse, then run make.", "Tr0ub4dor&3horse"),
    ("ssh into the pi as pi with raspberry99 and restart nginx", "raspberry99"),
    ("for the NAS it's user admin / pass Kx7!mq2z", "Kx7!mq2z"),
    ("The router: username: admin, pw Zq81-lamp", "Zq81-lamp"),
    ("creds are grafana:Gr4f4na!2026 for the dashboard", "Gr4f4na!2026"),
    ("login admin/hunter2x on the old jenkins", "hunter2x"),
    ("the wifi passcode is 4471-2290, tell guests", "4471-2290"),
    ("my bank PIN is 0420", "0420"),
    ("sign in as maria@example.org using Maria#1987 until IT resets it", "Maria#1987"),
    ("Connect to the db as app and hunter2-Staging-4471, host db.staging.internal.", "hunter2-Staging-4471"),
    ("use the token q8Zr2mN4xP7vL1kT9wQ3eY6uI0oA5sDf for the build cache", "q8Zr2mN4xP7vL1kT9wQ3eY6uI0oA5sDf"),
    ("my api key for the weather service is 7f3kQ9zLm2Xw8Rt4", "7f3kQ9zLm2Xw8Rt4"),
    ("access the router as root, with s3cr3t!", "s3cr3t!"),
    ("the deploy secret: N0t-So-Secret_99", "N0t-So-Secret_99"),
    # userinfo in URLs, in sentences
    ("Clone from https://bob:Xy9zzq7pw@git.internal/team/app.git please", "Xy9zzq7pw"),
    ("the queue is at amqp://worker:Rabb1tMQ!@10.0.0.5:5672/", "Rabb1tMQ!"),
    ("DB is postgres://app:pg_S3cure_77@db.internal:5432/app, read only", "pg_S3cure_77"),
    # high-entropy tokens with no word around them at all
    ("remember this for later: bA9kQ2mZ7xR4tL8wN3vC6yH1jP5sD0fG", "bA9kQ2mZ7xR4tL8wN3vC6yH1jP5sD0fG"),
    ("the value was Zk3_Pq8-Wm2rT7yXv9Lb4Nc6Hd1Fg5Js0, keep it", "Zk3_Pq8-Wm2rT7yXv9Lb4Nc6Hd1Fg5Js0"),
    ("cache key 4f9Xb2LqZ8mW1vT7cR3nY6kP0dJ5hS9aGe2U", "4f9Xb2LqZ8mW1vT7cR3nY6kP0dJ5hS9aGe2U"),
    # detect-secrets' detectors: provider formats our own patterns do not name
    ("the npm one is npm_" + "a1B2c3D4e5F6g7H8i9J0kLmNoPqRsTuVwXyZ", "npm_a1B2c3D4e5F6g7H8i9J0kLmNoPqRsTuVwXyZ"),
    ("GitLab: glpat-" + "xK9mQ2wZ7rT4yL8vN3bC", "glpat-xK9mQ2wZ7rT4yL8vN3bC"),
    ("pypi upload token pypi-" + "AgEIcHlwaS5vcmcCJDEyMzQ1Njc4LTEyMzQtMTIzNC0xMjM0LTEyMzQ1Njc4OTAxMgACJXsicGVybWlzc2lvbnMiOiAidXNlciIsICJ2ZXJzaW9uIjogMX0AAAYgq7i3KX7HbLZfTHmd8rHLQ4Cf7M4zVT9ZpiSO5YtTpKo",
     "AgEIcHlwaS5vcmcCJDEyMzQ1Njc4LTEyMzQtMTIzNC0xMjM0LTEyMzQ1Njc4OTAxMgACJXsicGVybWlzc2lvbnMi"),
    ("telegram bot 123456789:" + "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw works", "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"),
]

ORDINARY = [
    # a variable naming the file a secret is kept in (restic, Docker secrets), not the secret
    "export POSTGRES_PASSWORD_FILE=/run/secrets/postgres-password",
    "MAIL_TOKEN_PATH=/etc/hermes/mail-token.txt ./send.sh",
    "I prefer pnpm over npm for node projects, always.",
    "Log in as root with sudo, never as yourself.",
    "log in as admin with the key in the vault",
    "sign in with your password manager, not a note",
    "The commit 3f786850e387550fdab836ed7e6dc881de23001b broke the build; revert it.",
    "short id 3f78685 is the release",
    "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "the job id is 123e4567-e89b-12d3-a456-426614174000 in the docs",
    "Moved it to ~/Documents/clients/acme/acme-report-2026-11-30-final-v3.pdf.",
    "see docs/benchmarks/notes/2026-12-03-learning-quality.md for the figures",
    "refine/20261203-101500-pnpm-and-short-answers is pending review",
    "/home/user/projects/hermes-fs/hermes_fs/learning/bisect.py",
    "the password is stored in 1Password, ask Ana",
    "the token is ${GITHUB_TOKEN} from the environment",
    "api_key_env: OPENAI_API_KEY",
    "key = os.environ['API_KEY']",
    "Python 3.11.4 on Debian 12; port 5432; 10,482 users",
    "user: admin (the default) and a password you choose",
    "The pass is 2 km past the village.",
    "postgres://user:pass@db:5432/mydb is the template",
    "https://user:token@host/... carries a token: keep such a URL in the environment",
    "Meeting at 14:30 in room 4B; PIN pad on the left.",
]


@pytest.mark.parametrize("sentence,value", IN_SENTENCES)
def test_a_secret_in_a_sentence_is_found_and_redacted_value_only(sentence, value):
    findings = secrets.find_secrets(sentence, "lesson")
    assert findings and findings[0].line == 1
    assert value not in str(findings[0])
    redacted, n = secrets.redact(sentence, context=True)
    assert n >= 1 and value[:12] not in redacted and "[REDACTED" in redacted
    assert redacted.split()[0] == sentence.split()[0]  # the sentence is kept, the value goes


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_ids_paths_and_placeholders_are_not_secrets(text):
    assert secrets.find_secrets(text) == []
    assert secrets.redact(text, context=True) == (text, 0)


def test_a_memory_file_is_scanned_as_prose_at_commit_other_files_as_before():
    text = "# Notes\n\n- staging: log in as deploy with Tr0ub4dor&3horse\n"
    with pytest.raises(SecretError) as exc:
        secrets.check({"memory/MEMORY.md": text.encode()})
    assert "memory/MEMORY.md:3" in str(exc.value) and "Tr0ub4dor" not in str(exc.value)
    assert secrets.scan("skills/x/SKILL.md", text.encode()) == []  # skills keep the key-format scanner
    assert secrets.scan("memory/projects/acme.md", b"- commit 3f786850e387550fdab836ed7e6dc881de23001b\n") == []


def test_huge_and_malformed_input_is_bounded():
    line = "x" * 50_000 + " log in as a with Zz9!qqqq " + "\x00\ufffd" * 1000
    assert secrets.find_secrets(line)
    assert secrets.find_secrets("") == [] and secrets.redact("", context=True) == ("", 0)


def test_entropy_threshold_separates_keys_from_words():
    assert secret_context.entropy("bA9kQ2mZ7xR4tL8wN3vC6yH1jP5sD0fG") > secret_context.ENTROPY_LIMIT
    assert secret_context.entropy("internationalization-readiness") < secret_context.ENTROPY_LIMIT


def _lines(pattern: str) -> list[tuple[Path, int, str]]:
    out = []
    for path in sorted(ROOT.glob(pattern)):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                out.append((path, n, line))
    return out


def _secret_traps() -> dict[str, list[str]]:
    """case name -> every value its `kind: secret` traps name (the bench plants these on purpose)."""
    out: dict[str, list[str]] = {}
    for spec in ROOT.glob("bench/learning/**/*.yaml"):
        doc = yaml.safe_load(spec.read_text()) or {}
        for trap in doc.get("traps") or []:
            if trap.get("kind") == "secret":
                out.setdefault(spec.stem, []).extend(v for group in trap.get("all") or [] for v in group)
    return out


def test_false_positive_rate_on_the_docs_and_the_bench_transcripts():
    """Every flagged line of docs/**/*.md is a false positive; in the bench's transcripts only a line
    holding a value its secret traps plant may be flagged, and each such trap is found (recall)."""
    traps = _secret_traps()
    docs, bench = _lines("docs/**/*.md"), _lines("bench/learning/**/*.md")
    false_pos, caught = [], set()
    for path, n, line in docs + bench:
        if secrets.find_secrets(line):
            in_bench = path.is_relative_to(ROOT / "bench")
            if in_bench and any(v in line for v in traps.get(path.stem, [])):
                caught.add(path.stem)
            else:
                false_pos.append(f"{path.relative_to(ROOT)}:{n}: {line[:80]}")
    rate = len(false_pos) / len(docs + bench)
    print(f"memory scanner: {len(false_pos)} false positives in {len(docs + bench)} lines "
          f"({len(docs)} of docs, {len(bench)} of bench transcripts), rate {rate:.5f}; "
          f"bench cases with a secret trap caught {len(caught)}/{len(traps)}")
    assert false_pos == []
    # the held-out folders (bench/learning/test-fresh*) are measured, never fitted: a secret of theirs the
    # scanner misses is a figure of the run (printed), not a change to make to the scanner for them
    held_out = {p.stem for p, _n, _l in bench if p.parent.name.startswith("test-fresh")}
    missed = sorted(n for n, v in traps.items() if n in held_out and n not in caught and max(map(len, v)) >= 8)
    print(f"held-out cases whose planted secret the scanner missed in the transcript: {len(missed)}")
    transcripts = {p.stem for p, _n, _l in bench} - held_out
    # a trap of a few characters (22's `6c2f`, a digest's prefix shown by `fly secrets list`) names no
    # credential in the transcript: it is the model's proposal that it judges
    # a short one may still be caught (a six-digit one-time code is a PIN to the scanner): more is fine
    assert caught >= {name for name, values in traps.items() if name in transcripts and max(map(len, values)) >= 8}
    assert caught <= set(traps)


def test_a_public_keys_fingerprint_is_not_a_secret_a_token_like_it_is():
    fp = "k3VqT0b9xW2fLr8nYp4sJm6cHd1aZe5uGo7iNt3QvXk"
    assert secrets.find_secrets(f'Good "git" signature with ED25519 key SHA256:{fp}') == []
    assert secrets.find_secrets(f"ssh-keygen -lf id.pub: 256 SHA256:{fp} me@host (ED25519)") == []
    assert secrets.find_secrets(f"the deploy token is {fp}")
