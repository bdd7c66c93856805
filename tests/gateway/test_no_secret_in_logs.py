"""No configured secret in anything the daemon writes under `.hermes/`: the daemon is started as a person
starts it (`daemon --detach`, so its stdout and stderr go to .hermes/daemon.out, where httpx logs every
request's URL, the Telegram bot token in its path), a channel driven through its emulator answers a
message, the daemon stops, and every file under `.hermes/` is searched for every value of secrets.env
(as written and percent-encoded). The unit tests below check the redaction itself."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import urllib.parse
from pathlib import Path

import pytest
from conftest import wait_for
from emulated_world import echo

from hermes_fs.store import log_redaction

pytestmark = pytest.mark.slow  # a real detached daemon per channel


@pytest.fixture
def redaction(monkeypatch):
    """log_redaction.install in this test only: the log record factory and the module's redactor
    are put back after it, so later tests in this worker log as before."""
    factory = logging.getLogRecordFactory()
    before = os.environ.get(log_redaction.SECRETS_ENV_VAR)
    monkeypatch.setattr(log_redaction, "_redactor", None)
    yield log_redaction
    logging.setLogRecordFactory(factory)
    if before is None:
        os.environ.pop(log_redaction.SECRETS_ENV_VAR, None)
    else:
        os.environ[log_redaction.SECRETS_ENV_VAR] = before


def secret_values(vault) -> list[str]:
    values = [v for v in vault.secrets().values() if len(v) >= log_redaction.MIN_LITERAL]
    assert values
    return values


def leaks(state_dir: Path, values: list[str]) -> list[tuple[str, str]]:
    found = []
    for path in sorted(p for p in state_dir.rglob("*") if p.is_file() and not p.is_symlink()):
        if path.name == "secrets.env":
            continue  # where the secrets are kept
        data = path.read_bytes()
        for value in values:
            for form in {value, urllib.parse.quote(value, safe=""), urllib.parse.quote(value)}:
                if form.encode() in data:
                    found.append((str(path.relative_to(state_dir)), value[:6] + "..."))
    return found


@contextlib.contextmanager
def debug_log(path: Path):
    """Every log record of this process, at DEBUG, written to `path` (under .hermes/, as the daemon's
    log is) while the block runs."""
    handler = logging.FileHandler(path)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        handler.close()


def run_detached(vault, run_cli, say, wait_answer, connected: str) -> str:
    r = run_cli("--vault", str(vault.root), "daemon", "--detach")
    assert r.returncode == 0, r.stdout + r.stderr
    out = vault.state_dir / "daemon.out"
    log = vault.state_dir / "daemon.log"
    try:
        assert wait_for(lambda: log.exists() and connected in log.read_text(), 180), (
            out.read_text() if out.exists() else "")
        say()
        wait_answer()
    finally:
        r = run_cli("--vault", str(vault.root), "daemon", "stop")
        assert r.returncode == 0, r.stdout + r.stderr
    return out.read_text()


def test_telegram_the_bot_token_is_in_no_file_under_hermes(agent_vault, model_server, run_cli):
    from test_gateway_telegram import ME, World

    world = World(agent_vault, model_server)
    try:
        model_server.responder = echo
        world.configure(allow=[ME])
        daemon_out = run_detached(agent_vault, run_cli, lambda: world.emu.say(ME, "hello over telegram"),
                                  lambda: world.emu.wait_sent(1, chat_id=ME, timeout=180),
                                  "gateway telegram: connected")
    finally:
        world.close()
    assert "getUpdates" in daemon_out  # httpx logged the Bot API URLs: the path the token took
    assert "[REDACTED" in daemon_out
    assert leaks(agent_vault.state_dir, secret_values(agent_vault)) == []


def test_slack_neither_token_is_in_any_file_under_hermes(agent_vault, model_server, run_cli):
    from test_gateway_slack import ME, World, dm

    world = World(agent_vault, model_server)
    try:
        model_server.responder = echo
        world.configure(allow=[ME])
        run_detached(agent_vault, run_cli, lambda: world.emu.say(ME, "hello over slack"),
                     lambda: world.emu.wait_sent(1, channel=dm(ME), timeout=180), "gateway slack: connected")
    finally:
        world.close()
    assert leaks(agent_vault.state_dir, secret_values(agent_vault)) == []


# -- the redaction itself ------------------------------------------------------------------------
TOKEN = "123456789:AAEmulatorTokenNotATelegramOne_0123"


def test_a_configured_value_is_redacted_literally_and_percent_encoded(tmp_path, monkeypatch):
    env = tmp_path / "secrets.env"
    env.write_text("PLAIN_VALUE=correct-horse-battery\n")
    r = log_redaction.Redactor(env)
    assert "correct-horse" not in r("login with correct-horse-battery ok")
    assert "correct-horse" not in r("q=correct-horse-battery&x=1")
    env.write_text("PLAIN_VALUE=correct-horse-battery\nADDED_LATER=s3cr3t-added-while-running\n")
    assert "s3cr3t" not in r("now s3cr3t-added-while-running")  # secrets.env re-read when it changes


def test_a_telegram_token_in_a_url_is_redacted_without_being_configured():
    r = log_redaction.Redactor(None)
    for url in (f"https://api.telegram.org/bot{TOKEN}/getUpdates",
                f"https://api.telegram.org/file/bot{urllib.parse.quote(TOKEN, safe='')}/voice/1.ogg"):
        assert "AAEmulator" not in r(url), url


def test_log_records_and_streams_are_redacted(tmp_path, redaction):
    env = tmp_path / "secrets.env"
    env.write_text(f"TELEGRAM_BOT_TOKEN={TOKEN}\n")
    log_redaction.install(env)
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    logger = logging.getLogger("test.redaction")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        logger.info("HTTP Request: POST %s", f"http://127.0.0.1:1/bot{TOKEN}/getUpdates")
        try:
            raise RuntimeError(f"failed for {TOKEN}")
        except RuntimeError:
            logger.exception("with a traceback")
    finally:
        logger.removeHandler(handler)
    assert "AAEmulator" not in buf.getvalue() and "getUpdates" in buf.getvalue()
    out = io.StringIO()
    stream = log_redaction.RedactingStream(out)
    stream.write(f"partial {TOKEN[:20]}")
    stream.write(f"{TOKEN[20:]} line\n")
    stream.write("tail")
    stream.flush()
    assert "AAEmulator" not in out.getvalue() and out.getvalue().endswith("tail")


@pytest.mark.mail
def test_email_the_password_is_in_no_file_under_hermes(agent_vault, model_server, redaction):
    """The e-mail channel in this process (DKIM's DNS is the test's own zone, which a detached daemon
    could not use), its log records written under .hermes/ as the daemon's are."""
    from mailenv import PASSWORD, dovecot_missing
    from test_email_gateway import AGENT, ME, DkimKey, Gateway, MailEnv, mail, send

    if dovecot_missing():
        pytest.skip(dovecot_missing())
    from model_server import configure_vault

    from hermes_fs.service.gateway import registry
    from hermes_fs.service.gateway.email import EmailChannel
    from hermes_fs.store.provenance import Act
    from hermes_fs.store.vault import Vault

    keys = {"people.example": DkimKey.make("people.example")}
    env = MailEnv([AGENT, ME]).start()
    env.zone.add(keys["people.example"])
    logged = contextlib.ExitStack()
    logged.enter_context(debug_log(agent_vault.state_dir / "email-test.log"))
    try:
        configure_vault(agent_vault.root, model_server, f"""refine:
  every_turns: 0
gateway:
  commit_idle_s: 0.2
  email:
    imap: {{host: 127.0.0.1, port: {env.imap_port}, tls: false, user: {AGENT}, password_env: MAIL_PASSWORD}}
    smtp: {{host: 127.0.0.1, port: {env.smtp_port}, starttls: false, from: {AGENT}}}
    allow: [{ME}]
""")
        agent_vault.secrets_env.write_text(f"MAIL_PASSWORD={PASSWORD}\n")
        agent_vault.git.commit_paths(["hermes.yaml"], "test: e-mail", Act.person())
        log_redaction.install(agent_vault.secrets_env)
        vault = Vault(agent_vault.root)
        channel = EmailChannel(vault, registry.settings(vault, "email"), dns=env.zone)
        gw = Gateway(vault, channels=[channel])
        gw.start()
        try:  # mail that arrives before the first connection is "earlier mail", left alone
            assert wait_for(lambda: channel.state.cursor(channel.mailbox_key), 180), channel.status.error
            model_server.add({"content": "Four."})
            send(env, keys, mail(body="What is 2+2?"))
            assert env.wait_for(ME, 1, timeout=180)
        finally:
            gw.stop()
    finally:
        logged.close()
        env.stop()
    assert leaks(agent_vault.state_dir, [PASSWORD]) == []


def test_whatsapp_the_token_and_the_app_secret_are_in_no_file_under_hermes(agent_vault, model_server, receiver,
                                                                           redaction):
    """The WhatsApp channel in this process (its webhook on a port the test chooses at random), every
    log record at DEBUG written under .hermes/ as the daemon's are, a customer answered: neither the
    access token, the app secret nor the verify token is found in any file there."""
    from test_gateway_whatsapp import CUSTOMER, ME, World

    world = World(agent_vault, model_server, receiver)
    logged = contextlib.ExitStack()
    logged.enter_context(debug_log(agent_vault.state_dir / "whatsapp-test.log"))
    try:
        model_server.responder = echo
        gw = world.started([ME], admins=[ME])
        log_redaction.install(agent_vault.secrets_env)
        logging.getLogger("hermes-fs.test").debug("sending to %s/messages with Bearer %s", world.emu.api_base,
                                                 world.emu.token)
        world.say(CUSTOMER, "do you ship to Norway?")
        world.emu.wait_sent(1, to=CUSTOMER, timeout=180)
        assert gw.wait_idle(180)
    finally:
        logged.close()
        world.close()
    assert "[REDACTED" in (agent_vault.state_dir / "whatsapp-test.log").read_text()
    assert leaks(agent_vault.state_dir, secret_values(agent_vault)) == []
