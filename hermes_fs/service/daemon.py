"""The daemon: watches the vault, commits human edits, runs inbox requests, reloads settings.

Event-driven (watchdog: inotify on Linux) with timers, no polling loop, so an idle daemon uses no
CPU. One daemon per vault: a flock on .hermes/daemon.lock, which the kernel frees if the daemon dies.
State for `daemon status` is written to .hermes/daemon.json; the log to .hermes/daemon.log.
"""

from __future__ import annotations

import fcntl
import fnmatch
import json
import os
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from . import inbox  # light: the job code it runs is imported per request
from ..store.config import CONFIG_NAME, load_config
from ..errors import HermesError
from ..store.lock import VaultLock
from ..store.vault import Vault

IGNORED_DIRS = {".git", ".hermes", ".obsidian", ".trash", ".idea", ".vscode"}
# Editor swap, backup and temp files: vim, emacs, VS Code, JetBrains, Obsidian, LibreOffice, ours.
IGNORED_NAMES = ["*.swp", "*.swo", "*.swx", ".*.sw?", "*~", "#*#", ".#*", "4913", "*.tmp", "*.bak", "*.orig",
                 "*.crswap", "*___jb_tmp___", "*___jb_old___", ".~lock.*", ".*.hermes-tmp", ".DS_Store", "*.part"]
# Written by hermes-fs itself and committed on their own schedule, not as human edits.
OWN_DIRS = ("sessions/", "outputs/", "inbox/")
SETTLE_S = 0.15  # an inbox file must be unchanged this long before it is taken


def ignored(rel: str) -> bool:
    parts = rel.split("/")
    if parts[0] in IGNORED_DIRS:
        return True
    return any(fnmatch.fnmatch(parts[-1], pat) for pat in IGNORED_NAMES)


@dataclass
class DaemonOptions:
    debounce_s: float = 1.0
    workers: int = 2


def is_running(vault: Vault) -> bool:
    """True when some process holds the daemon lock (a dead daemon's lock is free)."""
    path = vault.state_dir / "daemon.lock"
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


class Daemon:
    def __init__(self, vault: Vault, options: DaemonOptions | None = None):
        import logging  # here, not at module level: `status` imports this module and must stay fast
        from concurrent.futures import ThreadPoolExecutor

        self.vault = vault
        self.options = options or DaemonOptions()
        self.state_path = vault.state_dir / "daemon.json"
        self.lock = VaultLock(vault.state_dir / "daemon.lock")
        self.stop_event = threading.Event()
        self.pending: set[str] = set()
        self.pending_lock = threading.Lock()
        self.debounce_timer: threading.Timer | None = None
        self.inbox_timers: dict[str, threading.Timer] = {}
        self.executor = ThreadPoolExecutor(max_workers=self.options.workers, thread_name_prefix="job")
        self.queued: set[str] = set()
        self.events: deque = deque(maxlen=20)
        self.errors: deque = deque(maxlen=20)
        self.state_lock = threading.Lock()
        self.started = time.time()
        self.log = logging.getLogger("hermes_fs.daemon")
        self.observer = None
        self.jobs: dict = {}
        self.scheduler = None

    # -- lifecycle -------------------------------------------------------------------------------
    def run(self) -> None:
        """Run in the foreground until SIGTERM/SIGINT."""
        try:
            self.lock.acquire(timeout=0)
        except HermesError:
            raise HermesError(f"a daemon is already running for this vault (pid {self.lock.holder()})") from None
        try:
            self._setup_logging()
            self._recover()
            self._start_observer()
            signal.signal(signal.SIGTERM, lambda *_: self.stop_event.set())
            signal.signal(signal.SIGINT, lambda *_: self.stop_event.set())
            self._reload_jobs()
            self._start_scheduler()
            self.note("daemon started")
            self._scan_inbox()
            self.stop_event.wait()
            self.note("stopping")
        finally:
            self._shutdown()

    def _setup_logging(self) -> None:
        import logging

        handler = logging.FileHandler(self.vault.state_dir / "daemon.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        self.log.addHandler(handler)
        self.log.setLevel(logging.INFO)

    def _recover(self) -> None:
        """After a crash: drop a stale git index lock, re-queue requests that were claimed."""
        index_lock = self.vault.root / ".git" / "index.lock"
        if index_lock.exists() and time.time() - index_lock.stat().st_mtime > 5:
            index_lock.unlink(missing_ok=True)
            self.note("removed a stale .git/index.lock left by a crash")
        orphans = self.vault.git.changed_under("sessions")
        if orphans:  # transcripts of conversations cut short (a killed run): keep them in history
            self.vault.git.commit_paths(orphans, "session: saved after an interruption", {"Hermes-Change": "recovered"})
            self.note(f"committed {len(orphans)} interrupted session transcript(s)")
        edited = [p for p in self.vault.git.dirty_paths() if not p.startswith(OWN_DIRS) and not ignored(p)]
        if edited:  # edits made while no daemon was watching (or lost in a crash before the debounce)
            with self.pending_lock:
                self.pending.update(edited)
            self._commit_edits()
        for c in inbox.pending_claims(self.vault):
            self.note(f"resuming request {c.name}")
            self._submit(c)

    def _start_observer(self) -> None:
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer

        daemon = self

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event):
                if event.event_type in ("opened", "closed_no_write"):
                    return
                for attr in ("src_path", "dest_path"):
                    path = getattr(event, attr, None)
                    if path and not event.is_directory:
                        daemon.on_path(os.fsdecode(path))

        self.observer = Observer()
        self.observer.schedule(Handler(), str(self.vault.root), recursive=True)
        self.observer.start()

    def _start_scheduler(self) -> None:
        from .scheduler import Ledger, Scheduler

        self.scheduler = Scheduler(Ledger(self.vault.state_dir / "cron-ledger.json"), self._run_cron)
        self.scheduler.start(list(self.jobs.values()))

    def _run_cron(self, job, due) -> None:
        from ..mind import jobs as cron

        self.note(f"cron started: {job.name} (due {due.isoformat()})")
        try:
            meta = cron.run_job(self.vault, job, due)
            self.note(f"cron finished: {job.name} ({meta['status']})")
            for d in meta.get("delivered") or []:
                if d["status"] != "ok":
                    self.error(f"cron {job.name}: delivery to {d['target']} failed: {d.get('error')}")
        except Exception as exc:
            self.error(f"cron {job.name} failed: {exc}")

    def _shutdown(self) -> None:
        if self.scheduler:
            self.scheduler.stop()
        if self.observer:
            self.observer.stop()
            self.observer.join(5)
        for t in [self.debounce_timer, *self.inbox_timers.values()]:
            if t:
                t.cancel()
        self.executor.shutdown(wait=True, cancel_futures=True)  # running jobs finish; queued ones stay claimed
        self._write_state(running=False)
        self.lock.release()

    # -- events ----------------------------------------------------------------------------------
    def on_path(self, abs_path: str) -> None:
        try:
            rel = Path(abs_path).resolve().relative_to(self.vault.root).as_posix()
        except ValueError:
            return
        if ignored(rel):
            return
        if inbox.is_request(rel):
            self._schedule_inbox(rel)
        elif rel == CONFIG_NAME:
            self._reload_config()
            self._reload_jobs()
        elif rel.startswith("cron/") and rel.endswith(".md"):
            self._reload_jobs()
        if rel.startswith(OWN_DIRS):
            return
        with self.pending_lock:
            self.pending.add(rel)
            if self.debounce_timer:
                self.debounce_timer.cancel()
            self.debounce_timer = threading.Timer(self.options.debounce_s, self._commit_edits)
            self.debounce_timer.daemon = True
            self.debounce_timer.start()

    def _commit_edits(self) -> None:
        with self.pending_lock:
            paths, self.pending = sorted(self.pending), set()
        try:
            result = self.vault.git.commit_human_edits(paths)
        except HermesError as exc:
            self.error(f"auto-commit failed: {exc}")
            return
        if result.sha:
            self.note(f"committed human edit: {', '.join(result.committed)}")
        for f in result.refused:
            self.error(f"not committed, holds a secret: {f}")
            self._notify("hermes-fs: edit not committed", f"{f.path}:{f.line} holds a {f.kind}; it stays uncommitted")

    def _reload_config(self) -> None:
        try:
            self.vault._config = load_config(self.vault.root / CONFIG_NAME)
            self.note("reloaded hermes.yaml")
        except HermesError as exc:
            self.error(f"hermes.yaml is invalid, keeping the last good settings: {exc}")

    def _reload_jobs(self) -> None:
        """Re-read cron/*.md; a bad file is reported and the other jobs stay loaded."""
        from ..mind import jobs as cron

        jobs, errors = cron.load_jobs(self.vault.files, self.vault.config)
        self.jobs = {j.name: j for j in jobs}
        if self.scheduler:
            self.scheduler.update(jobs)
        self.note(f"loaded {len(jobs)} cron job(s)")
        for e in errors:
            self.error(f"cron job not loaded: {e}")

    # -- inbox -----------------------------------------------------------------------------------
    def _scan_inbox(self) -> None:
        d = self.vault.root / inbox.INBOX_DIR
        if d.is_dir():
            for p in sorted(d.iterdir()):
                rel = f"{inbox.INBOX_DIR}/{p.name}"
                if p.is_file() and inbox.is_request(rel):
                    self._schedule_inbox(rel)

    def _schedule_inbox(self, rel: str) -> None:
        """Take the file once it has been quiet for SETTLE_S (editors write, then rename)."""
        old = self.inbox_timers.pop(rel, None)
        if old:
            old.cancel()
        timer = threading.Timer(SETTLE_S, self._take, args=(rel,))
        timer.daemon = True
        self.inbox_timers[rel] = timer
        timer.start()

    def _take(self, rel: str) -> None:
        self.inbox_timers.pop(rel, None)
        if self.stop_event.is_set() or not (self.vault.root / rel).is_file():
            return
        c = inbox.claim(self.vault, rel)
        if c:
            self.note(f"request taken: {c.name}")
            self._submit(c)

    def _submit(self, c: inbox.Claim) -> None:
        self.queued.add(c.name)
        self._write_state()
        self.executor.submit(self._run_claim, c)

    def _run_claim(self, c: inbox.Claim) -> None:
        self.note(f"request started: {c.name}")
        try:
            status = inbox.process(self.vault, c, self.note)
            self.note(f"request finished: {c.name} ({status})")
        except Exception as exc:
            self.error(f"request {c.name} failed before its result was committed: {exc}")
        finally:
            self.queued.discard(c.name)
            self._write_state()

    # -- state and reporting ---------------------------------------------------------------------------
    def note(self, message: str) -> None:
        self.events.append(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {message}")
        self.log.info(message)
        self._write_state()

    def error(self, message: str) -> None:
        self.errors.append(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {message}")
        self.log.error(message)
        self._write_state()

    def _notify(self, title: str, body: str) -> None:
        if not self.vault.config.notify.targets:
            return
        try:
            from ..store.notify import Notifier

            Notifier(self.vault.config, self.vault.state_dir / "secrets.env").send(
                sorted(self.vault.config.notify.targets), title, body)
        except Exception as exc:
            self.log.error(f"notification failed: {exc}")

    def _write_state(self, running: bool = True) -> None:
        with self.state_lock:  # threads report at once; one writer at a time
            state = {"pid": os.getpid(), "started": self.started, "running": running,
                     "queue": sorted(self.queued), "last_events": list(self.events), "last_errors": list(self.errors)}
            tmp = self.state_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(state, indent=2))
            os.replace(tmp, self.state_path)


def status(vault: Vault) -> dict:
    try:
        state = json.loads((vault.state_dir / "daemon.json").read_text())
    except (OSError, ValueError):
        state = {}
    running = is_running(vault)
    state["running"] = running
    if running and state.get("started"):
        state["uptime_s"] = round(time.time() - state["started"], 1)
    return state


def stop(vault: Vault, timeout: float = 60) -> bool:
    """SIGTERM the daemon and wait for its lock to free; False if none was running."""
    if not is_running(vault):
        return False
    pid = VaultLock(vault.state_dir / "daemon.lock").holder()
    if pid:
        os.kill(pid, signal.SIGTERM)
    deadline = time.time() + timeout
    while is_running(vault) and time.time() < deadline:
        time.sleep(0.1)
    return not is_running(vault)


def unit_text(vault: Vault, exe: str) -> str:
    return f"""[Unit]
Description=hermes-fs daemon for {vault.root}

[Service]
ExecStart={exe} --vault {vault.root} daemon
Restart=on-failure

[Install]
WantedBy=default.target
"""


def plist_text(vault: Vault, exe: str) -> str:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0"><dict>
  <key>Label</key><string>io.hermes-fs.{vault.root.name}</string>
  <key>ProgramArguments</key><array><string>{exe}</string><string>--vault</string><string>{vault.root}</string><string>daemon</string></array>
  <key>RunAtLoad</key><true/><key>KeepAlive</key><true/>
</dict></plist>
"""
