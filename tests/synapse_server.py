"""A real Matrix homeserver for tests and benchmarks: Synapse from PyPI (installed into
.venv-synapse by scripts/synapse-test-env.sh), on 127.0.0.1 at a free port, SQLite, no federation.
Users are registered through the shared-secret admin API (what `register_new_matrix_user` does).
`Person` is a Matrix user driven with matrix-nio, as a person's client would be."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import socket
import subprocess
import time
from pathlib import Path

import httpx
from deadlines import deadline as generous

ROOT = Path(__file__).resolve().parents[1]
SYNAPSE_PY = ROOT / ".venv-synapse" / "bin" / "python"
SERVER_NAME = "test.local"
SHARED_SECRET = "hermes-fs-test-registration-secret"

CONFIG = """server_name: "{name}"
pid_file: {dir}/homeserver.pid
listeners:
  - port: {port}
    bind_addresses: ['127.0.0.1']
    type: http
    tls: false
    x_forwarded: false
    resources:
      - names: [client]
        compress: false
database:
  name: sqlite3
  args: {{database: {dir}/homeserver.db}}
log_config: {dir}/log.config
media_store_path: {dir}/media
signing_key_path: {dir}/signing.key
registration_shared_secret: "{secret}"
macaroon_secret_key: "hermes-fs-test-macaroon"
form_secret: "hermes-fs-test-form"
report_stats: false
trusted_key_servers: []
suppress_key_server_warning: true
enable_registration: false
presence: {{enabled: false}}
url_preview_enabled: false
encryption_enabled_by_default_for_room_type: off
rc_message: {{per_second: 10000, burst_count: 10000}}
rc_login:
  address: {{per_second: 10000, burst_count: 10000}}
  account: {{per_second: 10000, burst_count: 10000}}
  failed_attempts: {{per_second: 10000, burst_count: 10000}}
rc_joins:
  local: {{per_second: 10000, burst_count: 10000}}
  remote: {{per_second: 10000, burst_count: 10000}}
rc_invites:
  per_room: {{per_second: 10000, burst_count: 10000}}
  per_user: {{per_second: 10000, burst_count: 10000}}
  per_issuer: {{per_second: 10000, burst_count: 10000}}
rc_registration: {{per_second: 10000, burst_count: 10000}}
"""

LOG_CONFIG = """version: 1
formatters:
  precise: {format: '%(asctime)s %(name)s %(levelname)s %(message)s'}
handlers:
  file: {class: logging.FileHandler, formatter: precise, filename: DIR/homeserver.log}
root: {level: WARNING, handlers: [file]}
disable_existing_loggers: false
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def available() -> str | None:
    """None when Synapse can run here, else why not."""
    if not SYNAPSE_PY.exists():
        return "Synapse is not installed (run scripts/synapse-test-env.sh; `make test` does)"
    return None


class Synapse:
    def __init__(self, directory: Path):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        (self.dir / "homeserver.yaml").write_text(CONFIG.format(name=SERVER_NAME, dir=self.dir, port=self.port,
                                                                secret=SHARED_SECRET))
        (self.dir / "log.config").write_text(LOG_CONFIG.replace("DIR", str(self.dir)))
        subprocess.run([str(SYNAPSE_PY), "-m", "synapse.app.homeserver", "--config-path",
                        str(self.dir / "homeserver.yaml"), "--generate-keys"], check=True, capture_output=True)
        self.proc = subprocess.Popen([str(SYNAPSE_PY), "-m", "synapse.app.homeserver", "--config-path",
                                      str(self.dir / "homeserver.yaml")],
                                     stdout=open(self.dir / "stdout.log", "w"), stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"synapse exited: {(self.dir / 'stdout.log').read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/_matrix/client/versions", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        else:
            raise RuntimeError("synapse did not start within 120 s")

    def register(self, localpart: str, password: str, admin: bool = False) -> str:
        """Create a user with the shared secret (the admin API's nonce + HMAC); its user id."""
        url = f"{self.url}/_synapse/admin/v1/register"
        nonce = httpx.get(url, timeout=180).json()["nonce"]
        mac = hmac.new(SHARED_SECRET.encode(), digestmod=hashlib.sha1)
        mac.update(b"\x00".join([nonce.encode(), localpart.encode(), password.encode(),
                                 b"admin" if admin else b"notadmin"]))
        r = httpx.post(url, json={"nonce": nonce, "username": localpart, "password": password, "admin": admin,
                                  "mac": mac.hexdigest()}, timeout=180)
        if r.status_code != 200 and "User ID already taken" not in r.text:
            raise RuntimeError(f"register {localpart}: {r.status_code} {r.text}")
        return f"@{localpart}:{SERVER_NAME}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Person:
    """A Matrix user with a client (matrix-nio), driven step by step from synchronous test code."""

    def __init__(self, homeserver: str, user_id: str, password: str):
        from nio import AsyncClient, AsyncClientConfig

        self.loop = asyncio.new_event_loop()
        self.user_id = user_id
        self.client = AsyncClient(homeserver, user_id, store_path=None,
                                  config=AsyncClientConfig(encryption_enabled=False, store_sync_tokens=False))
        resp = self.run(self.client.login(password))
        assert hasattr(resp, "access_token"), resp
        self.since = self.run(self.client.sync(timeout=0)).next_batch
        self.seen: list[dict] = []
        self.typing: list[tuple[str, list[str]]] = []  # (room, users typing) of each typing notice seen

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def dm(self, bot: str) -> str:
        """A direct chat with the bot, unencrypted (E2EE is not supported by hermes-fs)."""
        from nio import RoomPreset

        resp = self.run(self.client.room_create(is_direct=True, invite=[bot], preset=RoomPreset.trusted_private_chat))
        assert hasattr(resp, "room_id"), resp
        return resp.room_id

    def room(self, invite: list[str], encrypted: bool = False, name: str = "room") -> str:
        initial = [{"type": "m.room.encryption", "state_key": "", "content": {"algorithm": "m.megolm.v1.aes-sha2"}}] \
            if encrypted else []
        resp = self.run(self.client.room_create(name=name, invite=invite, initial_state=initial))
        assert hasattr(resp, "room_id"), resp
        return resp.room_id

    def invite(self, room_id: str, user_id: str) -> None:
        resp = self.run(self.client.room_invite(room_id, user_id))
        assert not getattr(resp, "status_code", None), resp

    def event(self, room_id: str, event_id: str) -> dict:
        """One event as the homeserver stores it (GET /rooms/{room}/event/{id})."""
        resp = self.run(self.client.room_get_event(room_id, event_id))
        assert hasattr(resp, "event"), resp
        return dict(resp.event.source)

    def join(self, room_id: str) -> None:
        resp = self.run(self.client.join(room_id))
        assert hasattr(resp, "room_id"), resp

    def say(self, room_id: str, text: str, thread: str | None = None, content: dict | None = None,
            event_type: str = "m.room.message") -> str:
        body = content if content is not None else {"msgtype": "m.text", "body": text}
        if thread:
            body["m.relates_to"] = {"rel_type": "m.thread", "event_id": thread}
        resp = self.run(self.client.room_send(room_id, event_type, body))
        assert hasattr(resp, "event_id"), resp
        return resp.event_id

    def send_audio(self, room_id: str, data: bytes, duration_ms: int, mimetype: str = "audio/ogg",
                   filename: str = "voice-message.ogg", caption: str | None = None) -> str:
        """A voice message as Element sends one: the file uploaded to the media repository, then an
        m.audio event pointing at it (with MSC3245's voice marker)."""
        import io

        upload, _ = self.run(self.client.upload(io.BytesIO(data), content_type=mimetype, filename=filename,
                                                filesize=len(data)))
        assert hasattr(upload, "content_uri"), upload
        content = {"msgtype": "m.audio", "body": caption or filename, "url": upload.content_uri,
                   "info": {"mimetype": mimetype, "size": len(data), "duration": duration_ms},
                   "org.matrix.msc1767.audio": {"duration": duration_ms}, "org.matrix.msc3245.voice": {}}
        if caption:
            content["filename"] = filename
        return self.say(room_id, "", content=content)

    def members(self, room_id: str) -> list[str]:
        resp = self.run(self.client.joined_members(room_id))
        return [m.user_id for m in getattr(resp, "members", [])]

    def sync(self, timeout_ms: int = 1000) -> list[dict]:
        """New m.room.message events from others since the last call (raw event dicts, with room_id)."""
        resp = self.run(self.client.sync(timeout=timeout_ms, since=self.since))
        self.since = resp.next_batch
        new = []
        for room_id, info in resp.rooms.join.items():
            for ev in info.ephemeral:
                if getattr(ev, "users", None) is not None:  # m.typing
                    self.typing.append((room_id, list(ev.users)))
            for ev in info.timeline.events:
                src = dict(ev.source)
                if src.get("type") == "m.room.message" and src.get("sender") != self.user_id:
                    src["room_id"] = room_id
                    new.append(src)
        self.seen.extend(new)
        return new

    def wait_messages(self, n: int, timeout: float = 60.0, room: str | None = None,
                      sender: str | None = None) -> list[dict]:
        """Wait until `n` messages (in `room`, from `sender`, if given) from others were seen in all."""
        timeout = generous(timeout)  # tests/deadlines.py: a deadline, generous under load
        def mine() -> list[dict]:
            return [e for e in self.seen if (room is None or e["room_id"] == room)
                    and (sender is None or e["sender"] == sender)]

        deadline = time.time() + timeout
        while time.time() < deadline:
            if len(mine()) >= n:
                return mine()
            self.sync(1000)
        return mine()

    def history(self, room_id: str) -> list[dict]:
        """Every m.room.message event of a room, oldest first, paged back from now through
        /messages (a sync after a long pause gives only the newest events: a "limited" timeline)."""
        from nio import MessageDirection

        self.sync(0)  # the newest position; a sync token is also a /messages token
        events: list[dict] = []
        token = self.since
        while token:
            page = self.run(self.client.room_messages(room_id, token, direction=MessageDirection.back, limit=500))
            chunk = getattr(page, "chunk", None)
            if not chunk:
                break
            events = [dict(e.source) for e in reversed(chunk)] + events
            token = page.end
        return [e for e in events if e.get("type") == "m.room.message"]

    def close(self) -> None:
        self.run(self.client.close())
        self.loop.close()
