from pathlib import Path

import pytest

from hermes_fs.errors import ConfigError
from hermes_fs.store.config import Config, load_config, parse_config
from hermes_fs.store.vault import TEMPLATE_DIR


def test_template_config_is_valid_and_covers_every_setting():
    cfg = load_config(TEMPLATE_DIR / "hermes.yaml")
    assert cfg == Config()  # the template documents the defaults, nothing else
    text = (TEMPLATE_DIR / "hermes.yaml").read_text()
    for key in ["model:", "api_base:", "api_key_env:", "models:", "policy:", "every_turns:", "budgets:",
                "prompt_budget_chars:", "backend:", "image:", "network:", "memory:", "cpus:", "timeout_s:",
                "targets:", "events:", "timezone:", "catch_up:", "author:"]:
        assert key in text


def test_missing_keys_take_defaults():
    cfg = parse_config("model: ollama/llama3.1\nrefine:\n  policy: auto\n")
    assert cfg.model == "ollama/llama3.1"
    assert cfg.refine.policy == "auto" and cfg.refine.every_turns == 10
    assert cfg.model_for("refine") == "ollama/llama3.1"


def test_unknown_key_names_key_file_and_line():
    with pytest.raises(ConfigError) as exc:
        parse_config("model: x\nrefine:\n  polcy: auto\n", "v/hermes.yaml")
    msg = str(exc.value)
    assert "v/hermes.yaml:3" in msg and "refine.polcy" in msg


def test_wrong_type_names_key():
    with pytest.raises(ConfigError, match=r"hermes.yaml:2: 'sandbox.cpus' must be a number"):
        parse_config("sandbox:\n  cpus: lots\n")
    with pytest.raises(ConfigError, match="'refine.every_turns' must be an integer"):
        parse_config("refine: {every_turns: 'ten'}")
    with pytest.raises(ConfigError, match="'sandbox.network' must be true or false"):
        parse_config("sandbox: {network: 1}")
    with pytest.raises(ConfigError, match="'memory.budgets.USER.md' must be an integer"):
        parse_config("memory: {budgets: {USER.md: big}}")


def test_choices_are_checked():
    with pytest.raises(ConfigError, match="refine.policy' must be one of additions, auto, review"):
        parse_config("refine: {policy: sometimes}")
    with pytest.raises(ConfigError, match="notify.events"):
        parse_config("notify: {events: [refine_pending, coffee_ready]}")


def test_malformed_yaml_gives_line():
    with pytest.raises(ConfigError, match=r"hermes.yaml:2: invalid YAML"):
        parse_config("model: x\nrefine: policy: auto\n")


def test_top_level_must_be_mapping():
    with pytest.raises(ConfigError, match="must be a mapping"):
        parse_config("- a\n- b\n")


def test_non_utf8_config(tmp_path: Path):
    p = tmp_path / "hermes.yaml"
    p.write_bytes(b"model: \xff\xfe\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(p)


@pytest.mark.parametrize("text, key", [
    ("voice:\n  engine: api\n  api_key_env: {secret}\n", "voice.api_key_env"),
    ("gateway:\n  telegram:\n    token_env: {secret}\n    allow: []\n", "gateway.telegram.token_env"),
    ("gateway:\n  email:\n    imap:\n      password_env: {secret}\n", "gateway.email.imap.password_env"),
])
def test_a_key_pasted_into_any_variable_name_setting_is_refused_unshown(text, key):
    """Every `*_env` setting names a variable: a pasted key or token there would be printed by the
    'is not set' error, so it is refused at load, naming the setting and line, never the value."""
    for secret in ("sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" * 2, "123456789:AAH" + "x7Kp2Qm9" * 4):
        with pytest.raises(ConfigError) as exc:
            parse_config(text.format(secret=secret), "v/hermes.yaml")
        msg = str(exc.value)
        assert f"'{key}' must be the name of an environment variable" in msg, msg
        assert secret not in msg and secret[:9] not in msg and "v/hermes.yaml:" in msg
    parse_config(text.format(secret="MY_KEY_VARIABLE"))  # a variable's name is fine


def test_an_ssh_port_out_of_range_is_refused_at_load():
    with pytest.raises(ConfigError, match=r"hermes.yaml:4: 'sandbox.ssh.port' must be from 1 to 65535, got int 99999"):
        parse_config("sandbox:\n  backend: ssh\n  ssh:\n    port: 99999\n")
    assert parse_config("sandbox:\n  ssh:\n    port: 2222\n").sandbox.ssh.port == 2222
