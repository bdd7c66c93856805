import pytest

from hermes_fs.errors import SecretError
from hermes_fs.store import secrets

PLANTED = {
    "OpenAI API key": "sk-proj-" + "a1B2c3D4e5F6g7H8i9J0kLmN",
    "Anthropic API key": "sk-ant-api03-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2",
    "OpenRouter API key": "sk-or-v1-" + "0123456789abcdef0123456789abcdef",
    "AWS access key": "AKIA" + "IOSFODNN7EXAMPLE",
    "GitHub token": "ghp_" + "1234567890abcdefghijABCDEFGHIJklmnop",
    "Google API key": "AIza" + "SyA1234567890abcdefghijklmnopqrstuv",
    "Slack token": "xoxb-" + "123456789012-abcdefghij",
    "private key": "-----BEGIN OPENSSH " + "PRIVATE KEY-----",
    "URL with credentials": "mailtos://" + "me:hunter2secret@example.com",
    "Apprise URL with a token": "tgram://" + "123456789:AAFakeTokenValue1234567890/987",
    ".env secret assignment": "OPENAI_API_" + "KEY=abcdefghijklmnop",
}


@pytest.mark.parametrize("kind,value", PLANTED.items())
def test_each_kind_is_found_and_never_printed(kind, value):
    text = f"# notes\n\nsome text\nhere it is: {value}\n"
    findings = secrets.scan("memory/MEMORY.md", text.encode())
    assert findings and findings[0].line == 4 and findings[0].kind == kind
    with pytest.raises(SecretError) as exc:
        secrets.check({"memory/MEMORY.md": text.encode()})
    assert "memory/MEMORY.md:4" in str(exc.value) and kind in str(exc.value)
    assert value not in str(exc.value)


@pytest.mark.parametrize("safe", [
    'targets: {phone: "${HERMES_NOTIFY_PHONE}"}',
    "ntfys://${NTFY_TOPIC}",
    "OPENAI_API_KEY=${OPENAI_API_KEY}",
    "Use a key that starts with sk- followed by characters.",
    "api_key_env: OPENAI_API_KEY",
    "json://127.0.0.1:8080/notify",
    "https://example.com/path/to/page",
])
def test_placeholders_and_prose_are_not_secrets(safe):
    assert secrets.scan("hermes.yaml", safe.encode()) == []


def test_env_files_are_refused_whole():
    assert secrets.scan(".env", b"A=1\n")[0].kind.startswith(".env file")
    assert secrets.scan("sub/.env.local", b"")[0].kind.startswith(".env file")
    assert secrets.scan("gone.md", None) == []
