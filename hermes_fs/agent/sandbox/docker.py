"""The Docker backend of the sandbox, through the docker SDK.

One container per session, reused across its commands and removed at the end. Locked down by
default: no network (unless sandbox.network), all capabilities dropped, no-new-privileges, pids,
memory and CPU limits, a non-root user, a read-only root with a tmpfs /tmp, and only the workspace
mounted (read-write) at /workspace. Containers carry labels, so leftovers of a crashed process are
found and removed the next time a sandbox starts.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

from ...store.config import SandboxConfig
from .base import OUTPUT_LIMIT, SandboxError, ShellResult

LABEL = "hermes-fs.sandbox"
log = logging.getLogger(__name__)
CAPTURE_LIMIT = 4 * OUTPUT_LIMIT  # bytes kept per stream; the rest is counted and dropped
PIDS_LIMIT = 256
KEEPALIVE = ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"]


def _client(timeout: int = 10) -> Any:
    import docker
    from docker.errors import DockerException

    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
        return client
    except DockerException as exc:
        raise SandboxError(
            "no reachable Docker engine "
            f"({str(exc).splitlines()[0][:160]}): start Docker (e.g. `sudo systemctl start docker`), "
            "or set sandbox.backend to local or none in hermes.yaml"
        ) from None
    except Exception as exc:  # DOCKER_HOST=ssh://: paramiko's refusals (an unknown host key, a refused key)
        if not type(exc).__module__.startswith("paramiko"):
            raise
        raise SandboxError(f"no reachable Docker engine over ssh ({os.environ.get('DOCKER_HOST', '')}): {exc}; "
                           "the host's key must be in ~/.ssh/known_hosts and your key in its authorized_keys "
                           "(try `ssh` to it once)") from None


NOBODY = "65534:65534"


def sandbox_user(workspace: Path | None = None) -> str:
    """Never root. The host user when it is not root (workspace files stay theirs). As root: the
    workspace folder's owner when that is a person, or nobody, to whom the scratch workspace
    (.hermes/workspace) is then given so that commands can write there."""
    uid, gid = os.getuid(), os.getgid()
    if uid != 0:
        return f"{uid}:{gid}"
    if workspace is None or not workspace.is_dir():
        return NOBODY
    st = workspace.stat()
    if st.st_uid != 0:
        return f"{st.st_uid}:{st.st_gid}"
    if workspace.name == "workspace" and workspace.parent.name == ".hermes":
        os.chown(workspace, 65534, 65534)
    return NOBODY


def remove_leftovers(client) -> int:
    """Remove sandbox containers whose owning process is gone (a crash, a kill -9)."""
    removed = 0
    for c in client.containers.list(all=True, filters={"label": LABEL}):
        pid = c.labels.get("hermes-fs.pid", "")
        if pid.isdigit() and _alive(int(pid)) and c.labels.get("hermes-fs.host") == os.uname().nodename:
            continue
        try:
            c.remove(force=True)
            removed += 1
        except Exception:  # already gone, or the engine refused: the next start tries again
            log.debug("could not remove leftover container %s", c.id, exc_info=True)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


class DockerSandbox:
    mount = "/workspace"  # where commands see the workspace (tools translate it back)

    def __init__(self, config: SandboxConfig, workspace: Path, session_id: str):
        self.config = config
        from ..boundary import is_unsafe_workspace

        if is_unsafe_workspace(Path(workspace)):
            raise SandboxError(f"refusing to mount {workspace} into the sandbox: it is / or holds a home folder; "
                               "run from a project folder or let hermes-fs use .hermes/workspace")
        self.workspace = Path(workspace)
        self.session_id = session_id
        self.client: Any = None
        self.container = None
        self._lock = threading.Lock()
        self.running = threading.Event()  # a command is running (interrupt() has something to kill)
        self.interrupted = False

    def _ensure(self):
        if self.container is not None:
            return self.container
        from docker.errors import APIError, ImageNotFound

        self.client = _client()
        remove_leftovers(self.client)
        try:
            self.client.images.get(self.config.image)
        except ImageNotFound:
            raise SandboxError(
                f"Docker image {self.config.image} is not available here: run `docker pull {self.config.image}`, "
                "or set sandbox.image in hermes.yaml"
            ) from None
        self.workspace.mkdir(parents=True, exist_ok=True)
        try:
            self.container = self.client.containers.run(
                self.config.image, KEEPALIVE, detach=True, user=sandbox_user(self.workspace), working_dir="/workspace",
                network_mode=None if self.config.network else "none", network_disabled=not self.config.network,
                cap_drop=["ALL"], security_opt=["no-new-privileges"], pids_limit=PIDS_LIMIT,
                mem_limit=self.config.memory, memswap_limit=self.config.memory,
                nano_cpus=int(self.config.cpus * 1e9), read_only=True,
                tmpfs={"/tmp": "rw,size=64m,mode=1777"}, environment={"HOME": "/tmp"},
                volumes={str(self.workspace.resolve()): {"bind": "/workspace", "mode": "rw"}},
                labels={LABEL: "1", "hermes-fs.session": self.session_id, "hermes-fs.pid": str(os.getpid()),
                        "hermes-fs.host": os.uname().nodename},
            )
        except APIError as exc:
            raise SandboxError(f"could not start the sandbox container: {exc.explanation or exc}") from None
        return self.container

    def run(self, command: str, timeout_s: float | None = None) -> ShellResult:
        timeout = min(timeout_s or self.config.timeout_s, self.config.timeout_s)
        with self._lock:
            container = self._ensure()
            api = self.client.api
            exec_id = api.exec_create(container.id, ["/bin/sh", "-c", command], workdir="/workspace")["Id"]
            out, err = bytearray(), bytearray()
            dropped = [0, 0]

            def pump():
                for chunk_out, chunk_err in api.exec_start(exec_id, stream=True, demux=True):
                    for i, (buf, chunk) in enumerate(((out, chunk_out), (err, chunk_err))):
                        if chunk:
                            room = CAPTURE_LIMIT - len(buf)
                            buf.extend(chunk[: max(room, 0)])
                            dropped[i] += max(len(chunk) - max(room, 0), 0)

            reader = threading.Thread(target=pump, daemon=True)
            self.interrupted = False
            self.running.set()
            try:
                reader.start()
                reader.join(timeout)
            except KeyboardInterrupt:  # Ctrl-C here: the command must not go on inside the container
                self._kill_all(container)
                raise
            finally:
                self.running.clear()
            timed_out = reader.is_alive() and not self.interrupted
            if reader.is_alive():
                self._kill_all(container)
                reader.join(10)
            code = None if timed_out or self.interrupted else api.exec_inspect(exec_id).get("ExitCode")
            stdout, stderr = _text(out, dropped[0]), _text(err, dropped[1])
            return ShellResult(code, stdout, stderr, timed_out=timed_out, cwd="/workspace", interrupted=self.interrupted)

    def _kill_all(self, container) -> None:
        """Kill every process of the sandbox user; the container's init survives for reuse."""
        api = self.client.api
        api.exec_start(api.exec_create(container.id, ["/bin/sh", "-c", "kill -9 -1"])["Id"])

    def interrupt(self) -> None:
        """From another thread (a warm chat's Ctrl-C): stop the command now running."""
        container = self.container
        if container is not None and self.running.is_set():
            self.interrupted = True
            self._kill_all(container)

    def close(self) -> None:
        with self._lock:
            if self.container is not None:
                try:
                    self.container.remove(force=True)
                except Exception:  # the next sandbox start removes leftovers by label
                    log.warning("could not remove sandbox container %s", self.container.id, exc_info=True)
                self.container = None


def _text(buf: bytearray, dropped: int) -> str:
    text = bytes(buf).decode("utf-8", errors="replace")
    return text + (f"\n[... {dropped} more bytes not captured ...]" if dropped else "")


def doctor(config: SandboxConfig) -> list[tuple[str, bool, str]]:
    """(check, ok, detail) rows for `hermes-fs doctor`."""
    rows = []
    try:
        client = _client(timeout=5)
        version = client.version().get("Version", "?")
        rows.append(("docker engine", True, f"reachable, version {version}"))
    except SandboxError as exc:
        return [("docker engine", False, str(exc))]
    from docker.errors import ImageNotFound

    try:
        client.images.get(config.image)
        rows.append(("sandbox image", True, config.image))
    except ImageNotFound:
        rows.append(("sandbox image", False, f"{config.image} missing: run `docker pull {config.image}`, or offline "
                                              f"`hermes-fs sandbox build-image` and set sandbox.image to {LOCAL_IMAGE}"))
    return rows


LOCAL_IMAGE = "hermes-fs-sandbox:busybox"


def build_local_image(tag: str = LOCAL_IMAGE, busybox: Path = Path("/bin/busybox")) -> str:
    """An image for offline machines: a root filesystem of the host's static busybox (Debian's
    busybox-static), imported into the local engine. No registry is contacted."""
    import io
    import tarfile

    if not busybox.is_file():
        raise SandboxError(f"{busybox} not found: install busybox-static (apt-get install busybox-static)")
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add_dir(name: str, mode: int = 0o755) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)

        for name, mode in (("bin", 0o755), ("etc", 0o755), ("tmp", 0o1777), ("workspace", 0o777)):
            add_dir(name, mode)
        tar.add(str(busybox), "bin/busybox")
        for applet in applets:
            if applet != "busybox":
                link = tarfile.TarInfo(f"bin/{applet}")
                link.type, link.linkname = tarfile.SYMTYPE, "busybox"
                tar.addfile(link)
        passwd = b"nobody:x:65534:65534:nobody:/tmp:/bin/sh\n"
        info = tarfile.TarInfo("etc/passwd")
        info.size = len(passwd)
        tar.addfile(info, io.BytesIO(passwd))
    repository, _, version = tag.partition(":")
    _client().api.import_image_from_data(buf.getvalue(), repository=repository, tag=version or "latest")
    return tag
