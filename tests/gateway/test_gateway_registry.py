"""The channel contract: a channel is one adapter file plus one registry line, its settings are its
own (validated as strictly as the rest of hermes.yaml, errors with the dotted key and the line),
and channels follow hermes.yaml while the daemon runs (started, restarted, stopped on a reload),
shown with the real webhook channel in a real daemon."""

from __future__ import annotations

import ast
import re
import socket
import time
from pathlib import Path

import httpx
import pytest
from conftest import wait_for

import hermes_fs
from hermes_fs.errors import ConfigError, HermesError
from hermes_fs.service.gateway import registry
from hermes_fs.service.gateway.channel import ChannelBase, ChatSettings
from hermes_fs.service.gateway.webhook import sign_standard
from hermes_fs.store.config import parse_config
from hermes_fs.store.provenance import Act
from hermes_fs.store.vault import Vault, init_vault

PACKAGE = Path(hermes_fs.__file__).parent
# the stdlib's `email` package and git's author e-mail are not the e-mail channel; POSIX signals
# (a handler's name, "killed by signal 9", an f-string's "signal {n}") are not the Signal channel
NOT_A_PLATFORM = re.compile(r"user\.email|GIT_(AUTHOR|COMMITTER)_EMAIL|<email>|^email\.(utils|policy|message|parser)$"
                            r"|_on_signal|killed by signal|^signal $|^webhook_id$")  # Discord's field, not the channel
STDLIB_NAMESAKES = ("email", "signal")  # stdlib modules named like a channel: their own uses are not the channel


def _adapter_files() -> dict[str, str]:
    """Module file (relative to the package) -> channel name, for every registered adapter."""
    return {module.removeprefix("hermes_fs.").replace(".", "/") + ".py": name
            for name, spec in registry.CHANNELS.items() for module in [spec.partition(":")[0]]}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


def _words(node: ast.AST, docstrings: set[int]) -> str | None:
    """The identifier or string literal a node writes (docstrings are prose, not code)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
        return node.value
    for kind, attr in ((ast.Name, "id"), (ast.Attribute, "attr"), (ast.alias, "name"), (ast.arg, "arg"),
                       (ast.FunctionDef, "name"), (ast.AsyncFunctionDef, "name"), (ast.ClassDef, "name")):
        if isinstance(node, kind):
            return getattr(node, attr)
    return None


def platform_mentions(path: Path, names: list[str]) -> list[tuple[int, str]]:
    """(line, text) of every identifier or string in `path` that names a platform."""
    word = re.compile(r"(?<![a-z])(" + "|".join(map(re.escape, names)) + r")(?![a-z])", re.I)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    stdlib = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names} & \
        set(STDLIB_NAMESAKES)
    docstrings = _docstrings(tree)
    hits = []
    for node in ast.walk(tree):
        text = _words(node, docstrings)
        if not text or NOT_A_PLATFORM.search(text):
            continue
        if text in stdlib and isinstance(node, (ast.Name, ast.alias, ast.Attribute)):
            continue  # `import signal; signal.signal(...)`: the stdlib module
        if word.search(text.replace("_", " ")):
            hits.append((getattr(node, "lineno", 0), text[:80]))
    return hits


def test_no_module_outside_its_adapter_and_the_registry_line_names_a_platform():
    adapters = _adapter_files()
    names = [*registry.CHANNELS, "telegram", "slack", "signal", "discord"]  # and the next adapters' platforms
    own_helpers = {"service/gateway/mailauth.py": "email"}  # a helper module only its adapter imports
    # platforms named for what they are elsewhere, not as channels: token shapes to keep out of
    # commits, and the notification URL schemes (Apprise) a secret can hide in
    not_channels = {"store/secrets.py"}
    registry_file = PACKAGE / "service/gateway/registry.py"
    tree = ast.parse(registry_file.read_text())
    [table] = [n for n in ast.walk(tree) if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "CHANNELS"]
    table_lines = range(table.lineno, (table.end_lineno or table.lineno) + 1)
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in not_channels:
            continue
        owner = adapters.get(rel) or own_helpers.get(rel)
        for line, text in platform_mentions(path, names):
            if path == registry_file and line in table_lines:
                continue
            if owner is not None and owner in text.lower():
                continue  # an adapter names its own platform
            found.append(f"{rel}:{line}: {text!r}")
    assert found == []
    for rel in own_helpers:  # the helper stays its adapter's: nobody else imports it
        module = Path(rel).stem
        importers = [p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
                     if re.search(rf"(from \.|import .*\b){module}\b", p.read_text())]
        assert importers == [k for k, v in adapters.items() if v == own_helpers[rel]]


def test_the_grep_would_see_a_platform_named_elsewhere(tmp_path):
    """The check above can fail: a module naming a channel in code (not prose) is found."""
    bad = tmp_path / "bad.py"
    bad.write_text('"""Matrix in a docstring is prose."""\n\nif cfg.matrix or name == "telegram":\n    pass\n'
                   'def author(): return "user.email"  # git\'s, not a channel\n')
    assert sorted(t for _, t in platform_mentions(bad, ["matrix", "telegram", "email"])) == ["matrix", "telegram"]


def test_every_channel_declares_its_settings_and_overrides_only_what_the_base_declares():
    base = {n for n in dir(ChannelBase) if not n.startswith("__")}
    for name in registry.CHANNELS:
        cls = registry.channel_class(name)
        assert issubclass(cls, ChannelBase) and cls.name == name
        assert isinstance(cls.Settings, type) and cls.Settings()  # every setting has a default
        # a member the core would ask for under another spelling is a typo, not an override
        public = {n for n in vars(cls) if not n.startswith("_")}
        for member in public - base:
            assert member not in {"idempotent_sends", "lease", "replies", "per_sender_in_room", "retry"}, member


def _yaml(gateway: str) -> str:
    return f"model: openai/x\ngateway:\n  workers: 1\n{gateway}"


def _vault_with(tmp_path: Path, text: str) -> Vault:
    v = init_vault(tmp_path / "v").vault
    (v.root / "hermes.yaml").write_text(text)
    v.reload_config()
    return v


def test_a_channel_setting_is_checked_by_its_adapter_with_the_key_and_line(tmp_path):
    v = _vault_with(tmp_path, _yaml("  matrix:\n    user_id: '@a:b'\n    alow: ['@me:b']\n"))
    with pytest.raises(ConfigError) as err:
        registry.settings(v, "matrix")
    assert "hermes.yaml:6: unknown key 'gateway.matrix.alow'" in str(err.value)
    v = _vault_with(tmp_path / "2", _yaml("  matrix:\n    pairing: 'yes'\n"))
    with pytest.raises(ConfigError, match=r"hermes.yaml:5: 'gateway.matrix.pairing' must be true or false"):
        registry.settings(v, "matrix")
    v = _vault_with(tmp_path / "3", _yaml("  telgram:\n    token_env: X\n"))
    assert registry.configured(v) == ["telgram"]
    with pytest.raises(ConfigError, match=r"hermes.yaml:4: unknown gateway channel 'gateway.telgram' \(known: .*matrix"):
        registry.settings(v, "telgram")
    v = _vault_with(tmp_path / "4", _yaml("  email:\n    imap: {host: h, port: 993}\n    allow: [me@x]\n"))
    s = registry.settings(v, "email")
    assert isinstance(s, ChatSettings) and s.imap.host == "h" and s.allow == ["me@x"]
    with pytest.raises(ConfigError, match="'gateway.webhook' must be a mapping"):
        parse_config(_yaml("  webhook: [a]\n"))
    assert parse_config(_yaml("  matrix:\n")).gateway.channels == {}  # a section set to null is off


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gateway_row(root: Path, name: str) -> dict:
    """The channel's row of `gateway status`, with hermes.yaml as it is now."""
    from hermes_fs.service.gateway.status import collect

    return next((r for r in collect(Vault(root)) if r["channel"] == name), {})


@pytest.mark.slow
def test_channels_follow_hermes_yaml_while_the_daemon_runs(agent_vault, model_server, daemon):
    """No gateway at the daemon's start; a webhook section added -> the gateway starts and the
    real listener answers; a route added -> the channel restarts with it; a bad key -> the
    running channel stays and the daemon says why; the section removed -> the listener stops."""
    from model_server import configure_vault

    model_server.responder = lambda body: {"content": "echo " + str(body["messages"][-1]["content"]).split()[-1]}
    configure_vault(agent_vault.root, model_server, "refine:\n  every_turns: 0\n")
    agent_vault.secrets_env.write_text("HOOK_SECRET=whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY" + "\n")
    agent_vault.git.commit_paths(["hermes.yaml"], "test: settings", Act.person())
    base_yaml = (agent_vault.root / "hermes.yaml").read_text()
    d = daemon()
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    root = agent_vault.root

    def settings(routes: str, extra: str = "") -> None:
        (agent_vault.root / "hermes.yaml").write_text(
            base_yaml + f"gateway:\n  commit_idle_s: 0.1\n  webhook:\n    listen: 127.0.0.1:{port}\n{extra}"
                        f"    routes:\n{routes}")

    def post(route: str, msg_id: str) -> httpx.Response:
        body = f"hello {msg_id}".encode()
        secret = "whsec_QUJDREVGR0hJSktMTU5PUFFSU1RVVldY"
        return httpx.post(f"{base}/hooks/{route}", content=body, headers=sign_standard(secret, msg_id, body), timeout=180)

    def answer(route: str, rid: str) -> dict:
        secret = "whsec_QUJDREVGR0hJSktMTU5PUFFSU1RVVldY"
        return httpx.get(f"{base}/hooks/{route}/requests/{rid}", headers=sign_standard(secret, "poll", b""),
                         timeout=180).json()

    with pytest.raises(httpx.ConnectError):
        post("a", "m0")
    settings("      a: {secret_env: HOOK_SECRET}\n")
    assert wait_for(lambda: _gateway_row(root, "webhook").get("state") == "connected", 30), d.output()
    r = post("a", "m1")
    assert r.status_code == 202, r.text
    rid = r.json()["id"]
    assert wait_for(lambda: answer("a", rid)["status"] == "ok", 60), (answer("a", rid), d.output())
    assert answer("a", rid)["answer"] == "echo m1"
    assert post("b", "m2").status_code == 404  # no such route yet

    settings("      a: {secret_env: HOOK_SECRET}\n      b: {secret_env: HOOK_SECRET}\n")
    assert wait_for(lambda: any("gateway webhook: started after hermes.yaml changed" in e
                                for e in d.state().get("last_events", [])[-5:]) and
                    _post_ok(post, "b", "m3"), 30), d.output()

    settings("      a: {secret_env: HOOK_SECRET}\n", extra="    lisen: typo\n")
    assert wait_for(lambda: any("gateway.webhook.lisen" in e for e in d.state().get("last_errors", [])), 30), d.output()
    assert post("b", "m4").status_code == 202  # the running channel (with route b) was kept

    (agent_vault.root / "hermes.yaml").write_text(base_yaml)
    assert wait_for(lambda: _refused(post), 30), d.output()
    assert wait_for(lambda: _gateway_row(root, "webhook") == {}, 10)  # `gateway status`: no channel configured
    assert d.proc.poll() is None
    assert "Traceback" not in d.output()


def _post_ok(post, route: str, msg_id: str) -> bool:
    try:
        return post(route, msg_id).status_code == 202
    except httpx.HTTPError:
        return False


def _refused(post) -> bool:
    try:
        post("a", f"late-{time.time_ns()}")
    except httpx.ConnectError:
        return True
    return False


def test_a_bad_channel_section_is_an_error_of_that_channel_only(tmp_path):
    v = _vault_with(tmp_path, _yaml("  webhook:\n    listen: nowhere\n  matrix:\n    user_id: 3\n"))
    with pytest.raises(HermesError, match="HOST:PORT"):
        registry.load_channel(v, "webhook")
    with pytest.raises(ConfigError, match="'gateway.matrix.user_id' must be a string"):
        registry.load_channel(v, "matrix")
