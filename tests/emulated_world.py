"""One test's world for a gateway channel tested against an emulator in tests/ (Telegram, Slack):
the vault, the scripted model server, the emulator and the real gateway. A channel's test module
subclasses it with the emulator and a `configure` that writes its settings and secrets."""

from __future__ import annotations

from hermes_fs.service.gateway.core import Gateway
from hermes_fs.store.provenance import Act
from hermes_fs.store.vault import Vault


def pdf_reply(markdown: str = "# Summary\n\n- all good", caption: str | None = "the summary",
              answer: str = "Here is the summary."):
    """A scripted model that writes a PDF report, then sends it (with `caption`, when one is
    given), then answers: the tool results drive each step (one file out)."""
    import re

    def respond(body):
        last_user = max(i for i, m in enumerate(body["messages"]) if m["role"] == "user")
        tools = [m["content"] for m in body["messages"][last_user:] if m["role"] == "tool"]
        if not tools:
            return {"tool_calls": [("write_pdf", {"markdown": markdown, "filename": "summary"})]}
        if len(tools) == 1:
            send = {"path": re.search(r"wrote (\S+)", tools[0]).group(1)}
            return {"tool_calls": [("send_file", send if caption is None else {**send, "caption": caption})]}
        return {"content": answer}

    return respond


pdf_then_send = pdf_reply()


def echo(body):
    users = [m["content"] for m in body["messages"] if m["role"] == "user"]
    return {"content": f"echo {users[-1][-60:]} ({len(users)} turns)"}


class EmulatedWorld:
    platform = ""  # the channel's registry name, set by the subclass

    def __init__(self, vault: Vault, model_server, emu):
        self.vault = vault
        self.model_server = model_server
        self.emu = emu
        self.gateway: Gateway | None = None

    def settle_config(self, secrets: str) -> None:
        """Write the channel's secrets (owner-only) and commit the settings `configure` wrote."""
        self.vault.secrets_env.write_text(secrets)
        self.vault.secrets_env.chmod(0o600)
        self.vault.git.commit_paths(["hermes.yaml"], f"test: {self.platform}", Act.person())
        self.vault.reload_config()

    def start(self) -> Gateway:
        self.gateway = Gateway(Vault(self.vault.root))
        self.gateway.start()
        assert self.gateway.states[self.platform].state == "connected", self.gateway.states
        return self.gateway

    def close(self) -> None:
        if self.gateway and not self.gateway.stopped.is_set():
            self.gateway.stop()
        self.emu.close()

    def started(self, allow: list, **kw) -> Gateway:
        """Configured with the echoing model, then started."""
        self.model_server.responder = echo
        self.configure(allow=allow, **kw)
        return self.start()

    def configure(self, allow: list, **kw) -> None:
        raise NotImplementedError
