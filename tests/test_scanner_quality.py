"""The secret scanner's precision and recall: every real-format key planted in the tests is caught,
and no line of documentation or code from real skills is refused (tests/data/secret-negatives.tsv
holds the lines of the hermes-agent 0.19.0 skills an earlier scanner refused)."""

from pathlib import Path

from test_secrets import PLANTED

from hermes_fs.store import secrets

DATA = Path(__file__).parent / "data"

MORE_KEYS = {
    "AWS secret key": "aws_secret_access_key = " + "wJalrXUtnFEMI/K7MDENG/bPxRfiCY0123456789",
    "JSON Web Token": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "password in settings": "password: Tr0ub4dor&3horse",
    "URL with a token parameter": "json://127.0.0.1:8080/x?token=" + "abcdef0123456789abcdef",
    "Stripe key": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "Groq API key": "gsk_" + "a1B2c3D4e5F6g7H8i9J0kLmNoP",
    "Hugging Face token": "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
    "private key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAq1\n-----END RSA PRIVATE KEY-----",
}

DOC_PLACEHOLDERS = [
    "export WANDB_API_KEY=your_api_key_here", 'API_TOKEN = os.getenv("API_TOKEN")', "Bearer sk-xxxxxxxxxxxxxxxxxxxx",
    "postgres://user:pass@db:5432/mydb", "OPENAI_API_KEY=${OPENAI_API_KEY}", "password: <your password>",
    "aws_secret_access_key = YOUR_SECRET_ACCESS_KEY", "url: https://host/api?token=${API_TOKEN}",
    "SECRET_KEY = settings.SECRET_KEY", "api_key: ...", "GITHUB_TOKEN=$(gh auth token)",
]


def negatives() -> list[str]:
    rows = [ln.split("\t", 1)[1] for ln in (DATA / "secret-negatives.tsv").read_text().splitlines()
            if ln and not ln.startswith("#")]
    return rows + DOC_PLACEHOLDERS


def test_recall_and_precision():
    positives = {**PLANTED, **MORE_KEYS}
    caught = {kind for kind, value in positives.items() if secrets.scan("f.md", f"notes:\n{value}\n".encode())}
    false_positives = [line for line in negatives() if secrets.scan("f.md", line.encode())]
    recall = len(caught) / len(positives)
    precision = len(caught) / (len(caught) + len(false_positives))
    print(f"scanner: recall {recall:.2f} ({len(caught)}/{len(positives)}), precision {precision:.2f} "
          f"({len(false_positives)} false positives in {len(negatives())} documentation lines)")
    assert sorted(set(positives) - caught) == []
    assert false_positives == []


def test_the_vendored_real_skills_are_clean():
    home = DATA / "hermes-home" / "skills"
    for path in home.rglob("*"):
        if path.is_file():
            assert secrets.scan(str(path), path.read_bytes()) == [], path
