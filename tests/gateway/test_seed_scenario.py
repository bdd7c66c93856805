"""The seed's scenario end to end, in one test: "start a research task via a voice message on
Telegram while commuting … execute the task in a sandboxed Docker environment … and send a
formatted PDF summary to the user's Slack channel or email."

Real parts throughout: speech made by espeak-ng, the python-telegram-bot library against the Bot
API emulator (tests/telegram_emulator.py), the offline speech engine, the gateway core, the Docker
sandbox on a real engine, the PDF made by write_pdf, the e-mail channel's SMTP to a real Dovecot
read back over IMAP, and the Slack channel's real client library against the Slack emulator. The
scripted model server drives the turns, and acts only on what the transcript says."""

from __future__ import annotations

import io
import re

import pytest
import speech
from conftest import wait_for
from pypdf import PdfReader
from slack_emulator import BOT_USER, SlackEmulator
from telegram_emulator import TelegramEmulator
from test_docker_sandbox import IMAGE, PROBLEM

from hermes_fs.service.gateway import registry
from hermes_fs.service.gateway.core import Gateway
from hermes_fs.service.gateway.email import EmailChannel
from hermes_fs.service.gateway.slack import SlackChannel
from hermes_fs.service.gateway.telegram import TelegramChannel
from hermes_fs.store.provenance import Act
from hermes_fs.store.vault import Vault
from tests.mailenv import PASSWORD, MailEnv, dovecot_missing

pytestmark = [pytest.mark.docker, pytest.mark.mail, pytest.mark.espeak, pytest.mark.slow,
              pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or ""),
              pytest.mark.skipif(dovecot_missing() is not None, reason=dovecot_missing() or ""),
              pytest.mark.skipif(not speech.available(), reason="espeak-ng is missing (scripts/voice-test-env.sh)")]

ME = 1001  # the person's Telegram user id
MY_SLACK = "C0MINE"  # the person's Slack channel (the bot is a member)
AGENT = "agent@test.example"
MY_MAIL = "me@people.example"
PHRASE = "what is the weather today"  # what the person says; pocketsphinx's dictation is rough: a keyword is checked


def model(body):
    """The scripted model: it acts on the transcript (the weather asked about), then, step by step
    from its tool results: a command in the sandbox, a PDF of what it found, the PDF sent to the
    person's mailbox and Slack channel, and the answer."""
    messages = body["messages"]
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    asked = messages[last]["content"].lower()
    done = [m["content"] for m in messages[last:] if m["role"] == "tool"]
    if "weather" not in asked:
        return {"content": "Sorry, I did not catch what you want."}
    if not done:
        return {"tool_calls": [("shell", {"command": "echo files-counted: $(ls / | wc -l); ls -a / | grep dockerenv; "
                                                     "ls /sys/class/net"})]}
    if len(done) == 1:
        counted = re.search(r"files-counted: \d+", done[0])
        return {"tool_calls": [("write_pdf", {"filename": "summary.pdf", "markdown": (
            "# Research summary\n\nWhat the sandbox found:\n\n"
            f"- {counted.group(0) if counted else 'nothing'}\n- no network inside\n")})]}
    if len(done) == 2:
        path = re.search(r"wrote (\S+)", done[1]).group(1)
        return {"tool_calls": [("send_file", {"path": path, "caption": "Research summary",
                                              "to": DESTINATIONS})]}
    return {"content": "Done: the summary is on its way."}


DESTINATIONS = ["my-slack", "my-mail"]


@pytest.fixture
def mail():
    env = MailEnv([AGENT, MY_MAIL]).start()
    yield env
    env.stop()


def test_a_voice_note_on_telegram_runs_in_docker_and_a_pdf_summary_arrives_in_slack_and_by_mail(
        agent_vault, model_server, mail):
    from model_server import configure_vault

    emu = TelegramEmulator()
    slack = SlackEmulator()
    slack.channel(MY_SLACK, {"U0ME", BOT_USER})
    configure_vault(agent_vault.root, model_server, f"""sandbox:
  backend: docker
  image: {IMAGE}
  network: false
refine:
  every_turns: 0
voice:
  engine: pocketsphinx
  max_seconds: 30
gateway:
  commit_idle_s: 0.2
  retry_base_s: 0.1
  destinations:
    my-slack: {{channel: slack, chat: {MY_SLACK}, senders: ["telegram:{ME}"]}}
    my-mail: {{channel: email, chat: {MY_MAIL}, senders: ["telegram:{ME}"]}}
  telegram:
    token_env: TELEGRAM_BOT_TOKEN
    api_base: {emu.url}
    allow: [{ME}]
  email:
    imap: {{host: 127.0.0.1, port: {mail.imap_port}, tls: false, user: {AGENT}, password_env: MAIL_PASSWORD}}
    smtp: {{host: 127.0.0.1, port: {mail.smtp_port}, starttls: false, from: {AGENT}}}
    allow: [{MY_MAIL}]
  slack:
    api_base: {slack.url}
    allow: [U0ME]
""")
    agent_vault.secrets_env.write_text(f"TELEGRAM_BOT_TOKEN={emu.token}\nMAIL_PASSWORD={PASSWORD}\n"
                                       f"SLACK_BOT_TOKEN={slack.bot_token}\nSLACK_APP_TOKEN={slack.app_token}\n")
    agent_vault.git.commit_paths(["hermes.yaml"], "test: the seed scenario", Act.person())
    vault = Vault(agent_vault.root)
    channels = [TelegramChannel(vault, registry.settings(vault, "telegram")),
                EmailChannel(vault, registry.settings(vault, "email"), dns=mail.zone),
                SlackChannel(vault, registry.settings(vault, "slack"))]
    model_server.responder = model
    gw = Gateway(vault, channels=channels)
    gw.start()
    try:
        # 1. a voice note on Telegram, real speech
        asked = emu.say_voice(ME, speech.voice_note(PHRASE), duration=3)
        [answer] = emu.wait_sent(1, chat_id=ME, timeout=180)
        assert answer.reply_to == asked and "🎤" in answer.visible  # the transcript, quoted back
        assert "Done: the summary is on its way." in answer.visible
        assert "summary.pdf is sent to my-slack, my-mail" in answer.visible
        # the transcript was the request the model acted on
        first = model_server.requests[0]["messages"]
        assert "weather" in [m for m in first if m["role"] == "user"][-1]["content"].lower()
        # 2. the task ran in the Docker sandbox: no network, a container's marker file
        shell = [m["content"] for m in model_server.requests[1]["messages"] if m["role"] == "tool"][-1]
        assert "exit code: 0" in shell and ".dockerenv" in shell and "files-counted:" in shell
        assert [line for line in shell.split("stdout:\n", 1)[1].splitlines() if line.strip()][-1] == "lo"
        counted = re.search(r"files-counted: \d+", shell).group(0)
        # 3. the PDF summary arrived in the Slack channel (uploaded, then shared there with its caption)
        assert wait_for(lambda: slack.shared, 120)
        [shared] = slack.shared
        assert (shared.name, shared.channel, shared.visible) == ("summary.pdf", MY_SLACK, "Research summary")
        text = "\n".join(p.extract_text() for p in PdfReader(io.BytesIO(shared.data)).pages)
        assert "Research summary" in text and counted in text
        # 4. and by e-mail, read back from Dovecot
        [got] = mail.wait_for(MY_MAIL, 1, timeout=120)
        msg = got.obj
        assert msg["Subject"] == "Research summary" and msg["From"] == AGENT
        [pdf] = [p for p in msg.walk() if p.get_content_type() == "application/pdf"]
        assert pdf.get_filename() == "summary.pdf"
        text = "\n".join(p.extract_text() for p in PdfReader(io.BytesIO(pdf.get_payload(decode=True))).pages)
        assert "Research summary" in text and counted in text
        assert gw.wait_idle(180)
        assert wait_for(lambda: not any((vault.state_dir / "outbox").rglob("*.pdf")), 30)
    finally:
        gw.stop()
        emu.close()
        slack.close()
    # nothing of the voice note reached the vault; the result records where the file went
    result = next((vault.root / "outputs" / "requests").glob("*telegram-*.md")).read_text()
    assert "summary.pdf" in result and "state: delivered" in result
