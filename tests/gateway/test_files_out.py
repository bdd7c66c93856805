"""Files out through the gateway core: the send_file tool's confinement, and a reply's files
delivered once each (on their own, or attached to the reply), over-limit files answered in text,
nothing sent twice across a restart. The channel is a real in-process implementation of the
channel interface; the platforms' own uploads are tested with each platform."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from hermes_fs.agent import outgoing
from hermes_fs.agent.tools import ToolBox
from hermes_fs.service.gateway import registry
from hermes_fs.service.gateway.channel import ChannelBase, Inbound, Origin, Outbound
from hermes_fs.service.gateway.core import Gateway
from hermes_fs.service.gateway.ledger import GatewayLedger, file_delivery_id, ledger_path
from hermes_fs.service.gateway.matrix import MatrixSettings
from hermes_fs.store.docs import parse_doc
from hermes_fs.store.provenance import Act
from hermes_fs.store.vault import Vault


class FileLoopback(ChannelBase):
    """A channel whose platform is this test: it takes files up to `max_file_bytes` and keeps
    what it was sent (the bytes of each file as they were at send time)."""

    name = "matrix"
    Settings = MatrixSettings
    idempotent_send = False
    max_file_bytes = 1000

    def __init__(self, fail_files: int = 0):
        super().__init__(None, None)  # type: ignore[arg-type]
        self.sink = None
        self.sent: list[Outbound] = []
        self.files: list[tuple[str, bytes, str]] = []  # name, bytes, caption
        self.fail_files = fail_files
        self.lock = threading.Lock()
        self.n = 0

    def start(self, sink) -> None:
        self.sink = sink
        self.vault = sink.vault
        self.settings = registry.settings(sink.vault, "matrix")

    def stop(self) -> None:
        pass

    def send(self, reply: Outbound) -> str:
        with self.lock:
            self.sent.append(reply)
            for f in reply.files:
                self.files.append((f.name, f.path.read_bytes(), reply.text))
            return f"$text{len(self.sent)}"

    def send_file(self, reply: Outbound) -> str:
        with self.lock:
            if self.fail_files > 0:
                self.fail_files -= 1
                raise ConnectionError("the media repository is down")
            f = reply.files[0]
            self.files.append((f.name, f.path.read_bytes(), reply.text))
            return f"$file{len(self.files)}"

    def say(self, text: str) -> str:
        self.n += 1
        return self.sink.submit(Inbound(Origin("matrix", "!dm", "@me:test", f"$m{self.n}"), text))


class AttachingLoopback(FileLoopback):
    files_in_reply = True  # e-mail's way: files are attachments of the reply itself


class TextOnlyLoopback(FileLoopback):
    max_file_bytes = None


def setup(vault: Vault, model_server) -> None:
    from model_server import configure_vault

    configure_vault(vault.root, model_server, "gateway:\n  commit_idle_s: 0.1\n  retry_base_s: 0.05\n"
                                              "  matrix:\n    allow: ['@me:test']\n")
    vault.git.commit_paths(["hermes.yaml"], "test: gateway", Act.person())
    vault.reload_config()


def workspace(vault: Vault) -> Path:
    ws = vault.state_dir / "workspace"
    ws.mkdir(parents=True, exist_ok=True)
    return ws


@pytest.fixture
def started(agent_vault, model_server):
    made: list[Gateway] = []

    def start(channel: FileLoopback) -> Gateway:
        setup(agent_vault, model_server)
        gw = Gateway(Vault(agent_vault.root), channels=[channel])
        gw.start()
        made.append(gw)
        return gw

    yield start
    for gw in made:
        if not gw.stopped.is_set():
            gw.stop()


def sends(*calls: tuple[str, str]) -> dict:
    return {"tool_calls": [("send_file", {"path": p, "caption": c}) for p, c in calls]}


def tool_results(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


# -- the tool ------------------------------------------------------------------------------------

@pytest.fixture
def box(vault, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    return ToolBox(files=vault.files, config=vault.config, vault_root=vault.root, workspace=ws,
                   outbox=vault.state_dir / "outbox" / "s1", enabled=["send_file"])


def test_send_file_takes_workspace_and_outputs_files_and_stages_a_copy(box, vault):
    ws = box.workspace
    (ws / "report.txt").write_text("the numbers\n")
    (vault.root / "outputs" / "cron" / "daily").mkdir(parents=True)
    (vault.root / "outputs" / "cron" / "daily" / "run.md").write_text("yesterday\n")
    assert box.call("send_file", json.dumps({"path": str(ws / "report.txt"), "caption": "here"})).startswith("ok: report.txt")
    assert box.call("send_file", '{"path": "/workspace/report.txt"}').startswith("ok:")  # the sandbox's name for it
    assert box.call("send_file", '{"path": "outputs/cron/daily/run.md"}').startswith("ok: run.md")
    (ws / "report.txt").write_text("changed after the call\n")
    files = box.take_outgoing()
    assert [f.name for f in files] == ["report.txt", "report.txt", "run.md"]
    assert files[0].path.read_text() == "the numbers\n" and files[0].caption == "here"  # what the model saw
    assert all(f.path.is_relative_to(vault.state_dir / "outbox") for f in files)
    assert box.take_outgoing() == []


@pytest.mark.parametrize("make, path, why", [
    (lambda ws, v: None, "/etc/passwd", "only files in the workspace"),
    (lambda ws, v: os.symlink("/etc/passwd", ws / "link"), "{ws}/link", "only files in the workspace"),
    (lambda ws, v: os.symlink(v / ".hermes", ws / "state"), "{ws}/state/secrets.env", "only files in the workspace"),
    (lambda ws, v: (v / ".hermes" / "secrets.env").write_text("X=1\n"), ".hermes/secrets.env", "only files"),
    (lambda ws, v: None, ".git/config", "only files in the workspace"),
    (lambda ws, v: None, "hermes.yaml", "only files in the workspace"),
    (lambda ws, v: None, "memory/USER.md", "only files in the workspace"),
    (lambda ws, v: None, "../../etc/passwd", "only files in the workspace"),
    (lambda ws, v: (ws / ".env").write_text("TOKEN=abc\n"), "{ws}/.env", "private"),
    (lambda ws, v: (ws / "sub").mkdir(), "{ws}/sub", "not a regular file"),
    (lambda ws, v: os.mkfifo(ws / "pipe"), "{ws}/pipe", "not a regular file"),
    (lambda ws, v: (v / "outputs").mkdir(exist_ok=True) or os.symlink("/etc/passwd", v / "outputs" / "p"),
     "outputs/p", "only files in the workspace"),
    (lambda ws, v: None, "{ws}/missing.pdf", "no such file"),
    (lambda ws, v: (ws / "keys.txt").write_text("aws = AKIAIOSFODNN7REALKEY\n" "sk-proj-" + "a" * 48 + "\n"),
     "{ws}/keys.txt", "holds a secret"),
    (lambda ws, v: None, "", "missing required argument"),
])
def test_send_file_refuses_everything_else_with_a_tool_error(box, vault, make, path, why):
    make(box.workspace, vault.root)
    answer = box.call("send_file", json.dumps({"path": path.format(ws=box.workspace)}))
    assert answer.startswith("error:") and why in answer, answer
    assert box.take_outgoing() == []
    assert not (vault.state_dir / "outbox" / "s1").exists() or not any((vault.state_dir / "outbox" / "s1").rglob("*.*"))


def test_send_file_bounds_size_and_count_and_needs_somewhere_to_send(box, vault, monkeypatch):
    ws = box.workspace
    (ws / "big.bin").write_bytes(b"\0" * 2000)
    monkeypatch.setattr(outgoing, "MAX_STAGED_BYTES", 1000)
    assert "over the 1000 bytes" in box.call("send_file", json.dumps({"path": str(ws / "big.bin")}))
    (ws / "a.txt").write_text("a")
    for _ in range(outgoing.MAX_FILES_PER_TURN):
        assert box.call("send_file", json.dumps({"path": str(ws / "a.txt")})).startswith("ok")
    assert "at most" in box.call("send_file", json.dumps({"path": str(ws / "a.txt")}))
    box.outbox = None
    assert "cannot be sent from here" in box.call("send_file", json.dumps({"path": str(ws / "a.txt")}))


def test_a_hostile_name_is_made_safe():
    assert outgoing.safe_name("../../etc/passwd") == "passwd"
    assert outgoing.safe_name(".bashrc") == "bashrc"
    assert outgoing.safe_name("a\x00b\nc.pdf") == "a_b_c.pdf"
    assert outgoing.safe_name("x" * 300 + ".pdf").endswith(".pdf") and len(outgoing.safe_name("x" * 300 + ".pdf")) == 120


def test_send_file_is_offered_only_where_the_answer_carries_files(agent_vault):
    from hermes_fs.agent.conversation import Conversation, ConversationOptions

    with Conversation(agent_vault, ConversationOptions(source="run")) as conv:
        assert "send_file" not in [s["function"]["name"] for s in conv.tools.schemas()]
    with Conversation(agent_vault, ConversationOptions(source="gateway", send_files=True)) as conv:
        assert "send_file" in [s["function"]["name"] for s in conv.tools.schemas()]


# -- through the gateway -------------------------------------------------------------------------

def test_files_arrive_after_the_answer_once_each_and_the_result_records_them(started, agent_vault, model_server):
    ws = workspace(agent_vault)
    (ws / "summary.txt").write_text("summary\n")
    (ws / "data.csv").write_text("a,b\n1,2\n")
    model_server.add(sends((str(ws / "summary.txt"), "the summary"), (str(ws / "data.csv"), "")),
                     {"content": "Here you are."})
    ch = FileLoopback()
    gw = started(ch)
    rid = ch.say("send me the summary")
    assert gw.wait_idle(180)
    assert [r.text for r in ch.sent] == ["Here you are."]
    assert ch.files == [("summary.txt", b"summary\n", "the summary"), ("data.csv", b"a,b\n1,2\n", "")]
    assert "will be sent with your answer" in tool_results(model_server.requests[1])[0]
    d1 = gw.ledger.delivery(file_delivery_id(rid, 1))
    assert d1.state == "delivered" and d1.platform_id == "$file1"
    assert not d1.files[0].path.exists()  # the staged copy goes once delivered
    gw.stop()
    result = next((agent_vault.root / "outputs" / "requests").glob(f"*-{rid}.md")).read_text()
    meta = parse_doc(result, "r").meta
    assert [f["name"] for f in meta["files"]] == ["summary.txt", "data.csv"]
    assert [(f["name"], f["state"], f["id"]) for f in meta["reply"]["file_deliveries"]] == \
        [("summary.txt", "delivered", "$file1"), ("data.csv", "delivered", "$file2")]
    # a restart does not send any of them again
    ch2 = FileLoopback()
    gw2 = Gateway(Vault(agent_vault.root), channels=[ch2])
    gw2.start()
    assert gw2.wait_idle(180)
    gw2.stop()
    assert ch2.sent == [] and ch2.files == []


def test_a_file_over_the_channels_limit_is_answered_in_text(started, agent_vault, model_server):
    ws = workspace(agent_vault)
    (ws / "huge.bin").write_bytes(b"\1" * 5000)
    (ws / "small.txt").write_text("ok\n")
    model_server.add(sends((str(ws / "huge.bin"), ""), (str(ws / "small.txt"), "")), {"content": "Done."})
    ch = FileLoopback()
    gw = started(ch)
    ch.say("send both")
    assert gw.wait_idle(180)
    assert ch.sent[0].text.startswith("Done.")
    assert "huge.bin was not sent: 5.0 KB is over the 1.0 KB matrix takes" in ch.sent[0].text
    assert [f[0] for f in ch.files] == ["small.txt"]
    assert not any((agent_vault.state_dir / "outbox").rglob("huge.bin"))


def test_a_channel_without_files_says_which_were_not_sent(started, agent_vault, model_server):
    ch = TextOnlyLoopback()
    gw = started(ch)
    model_server.add({"content": "no tool"})
    ch.say("hello")
    assert gw.wait_idle(180)
    assert "send_file" not in [t["function"]["name"] for t in model_server.requests[0].get("tools", [])]


def test_files_in_the_reply_travel_together_within_the_total(started, agent_vault, model_server):
    ws = workspace(agent_vault)
    (ws / "one.txt").write_text("1" * 600)
    (ws / "two.txt").write_text("2" * 600)
    model_server.add(sends((str(ws / "one.txt"), ""), (str(ws / "two.txt"), "")), {"content": "Both attached."})
    ch = AttachingLoopback()
    gw = started(ch)
    rid = ch.say("attach them")
    assert gw.wait_idle(180)
    assert len(ch.sent) == 1 and [f.name for f in ch.sent[0].files] == ["one.txt"]
    assert "two.txt was not sent" in ch.sent[0].text and "in one message" in ch.sent[0].text
    assert gw.ledger.file_deliveries(rid) == []


def test_a_file_send_cut_short_by_a_crash_is_not_sent_again(agent_vault, model_server, tmp_path):
    setup(agent_vault, model_server)
    staged = outgoing.stage(_file(tmp_path, "r.pdf", b"%PDF-1.4 x"), agent_vault.state_dir / "outbox" / "s")
    ledger = GatewayLedger(ledger_path(agent_vault.state_dir))
    origin = Origin("matrix", "!dm", "@me:test", "$x")
    ledger.add_delivery("r1", origin, "answer")
    ledger.mark_sending("r1")
    ledger.mark_delivered("r1", "$t")
    ledger.add_delivery(file_delivery_id("r1", 1), origin, "", files=[staged])
    ledger.mark_sending(file_delivery_id("r1", 1))  # the daemon died while uploading
    ledger.close()
    ch = FileLoopback()
    gw = Gateway(Vault(agent_vault.root), channels=[ch])
    gw.start()
    assert gw.wait_idle(180)
    d = gw.ledger.delivery(file_delivery_id("r1", 1))
    gw.stop()
    assert ch.files == [] and d.state == "failed" and "not sent again" in d.reason
    assert not staged.path.exists()


def test_a_failed_upload_is_retried_then_delivered(started, agent_vault, model_server):
    ws = workspace(agent_vault)
    (ws / "r.txt").write_text("r\n")
    model_server.add(sends((str(ws / "r.txt"), "")), {"content": "ok"})
    ch = FileLoopback(fail_files=2)
    gw = started(ch)
    rid = ch.say("send")
    assert gw.wait_idle(180)
    d = gw.ledger.delivery(file_delivery_id(rid, 1))
    assert d.state == "delivered" and d.attempts == 3 and ch.files == [("r.txt", b"r\n", "")]


def _file(folder: Path, name: str, data: bytes) -> Path:
    p = folder / name
    p.write_bytes(data)
    return p


class SlackLoopback(FileLoopback):
    name = "slack"  # another channel of the same gateway (its access settings: gateway.matrix's)


def test_a_file_goes_to_a_named_destination_only_for_the_senders_it_lists(agent_vault, model_server):
    from model_server import configure_vault

    configure_vault(agent_vault.root, model_server, """gateway:
  commit_idle_s: 0.1
  retry_base_s: 0.05
  destinations:
    desk: {channel: slack, chat: C0DESK, thread: "1700.01", senders: ["matrix:@me:test"]}
    boss: {channel: slack, chat: C0BOSS, senders: ["matrix:@boss:test"]}
  matrix:
    allow: ['@me:test']
""")
    agent_vault.git.commit_paths(["hermes.yaml"], "test: destinations", Act.person())
    ws = workspace(agent_vault)
    (ws / "report.pdf").write_bytes(b"%PDF-1.4 report")
    model_server.add({"tool_calls": [("send_file", {"path": str(ws / "report.pdf"), "caption": "weekly",
                                                    "to": ["desk"]}),
                                     ("send_file", {"path": str(ws / "report.pdf"), "to": ["boss"]}),
                                     ("send_file", {"path": str(ws / "report.pdf"), "to": "desk"})]},
                     {"content": "Sent to your desk."})
    chat, slack = FileLoopback(), SlackLoopback()
    gw = Gateway(Vault(agent_vault.root), channels=[chat, slack])
    gw.start()
    try:
        rid = chat.say("send the report to my desk")
        assert gw.wait_idle(180)
        offered = next(t for t in model_server.requests[0]["tools"] if t["function"]["name"] == "send_file")
        assert offered["function"]["parameters"]["properties"]["to"]["items"]["enum"] == ["desk"]  # not boss
        ok, boss, bad = tool_results(model_server.requests[1])
        assert ok.startswith("ok: report.pdf") and "to desk" in ok
        assert "unknown destination(s) boss" in boss and "must be a list of names" in bad
        assert [r.text for r in chat.sent] == ["Sent to your desk.\n\n(report.pdf is sent to desk.)"]
        assert chat.files == [] and slack.files == [("report.pdf", b"%PDF-1.4 report", "weekly")]
        d = gw.ledger.delivery(f"{file_delivery_id(rid, 1)}~desk")
        assert d.state == "delivered" and d.origin.chat == "C0DESK" and d.origin.thread == "1700.01"
    finally:
        gw.stop()
    assert not any((agent_vault.state_dir / "outbox").rglob("report.pdf"))
    gw2 = Gateway(Vault(agent_vault.root), channels=[FileLoopback(), again := SlackLoopback()])
    gw2.start()
    assert gw2.wait_idle(180)
    gw2.stop()
    assert again.files == []  # delivered once, never again


def test_files_read_back_from_a_result_stay_inside_the_outbox(tmp_path):
    outbox = tmp_path / "outbox"
    (outbox / "s" / "ab").mkdir(parents=True)
    (outbox / "s" / "ab" / "r.pdf").write_bytes(b"%PDF")
    good = outgoing.OutgoingFile(outbox / "s" / "ab" / "r.pdf", "r.pdf", 4, "application/pdf", "cap", ("desk",))
    meta = outgoing.files_meta([good], outbox)
    assert meta == [{"name": "r.pdf", "size": 4, "mime": "application/pdf", "staged": "s/ab/r.pdf", "caption": "cap",
                     "to": ["desk"]}]
    assert outgoing.files_from_meta(meta, outbox)[0].path == Path(os.path.realpath(good.path))
    hostile = [{"name": "x", "size": 1, "staged": "../../etc/passwd"}, {"name": "y", "size": 1, "staged": "/etc/passwd"},
               {"name": "z", "size": "1", "staged": "s/ab/r.pdf"}, "not a file", {"name": "../../w", "size": 4,
                                                                                  "staged": "s/ab/r.pdf"}]
    back = outgoing.files_from_meta(hostile, outbox)
    assert [(f.name, f.path.name) for f in back] == [("w", "r.pdf")]  # only the one inside, its name made safe
    assert outgoing.files_from_meta("junk", outbox) == []
