"""The daemon: commits human edits, runs inbox requests, reloads settings, runs cron jobs.

It composes small parts: a Watcher (watchdog events -> vault paths), a Debouncer for human edits,
a Settler (one thread) for inbox requests, a bounded job queue, the cron Scheduler, the warm-turn
server, and a state file for `daemon status`. One daemon per vault: a flock on .hermes/daemon.lock, which the kernel
frees if the daemon dies. State goes to .hermes/daemon.json; the log to .hermes/daemon.log.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import HermesError
from ..store.config import CONFIG_NAME
from ..store.files import atomic_write
from ..store.private import protect_tree, tighten_umask
from ..store.provenance import Act
from ..store.vault import Vault
from .catch_up import CatchUp
from .daemon_state import daemon_lock, is_running, status
from .priority import favour_waiting_threads, lower_this_thread
from .watcher import IGNORED_DIRS, Debouncer, Settler, Watcher, ignored, open_for_writing

if TYPE_CHECKING:
    from ..store.claims import RefClaims
    from . import inbox
    from .model_worker import ModelWorker
    from .requests import SerialExecutor
    from .scheduler import Scheduler
    from .warm import WarmServer

# Written by hermes-fs itself and committed on their own schedule, not as human edits.
OWN_DIRS = ("sessions/", "outputs/", "inbox/")
SETTLE_S = 0.15  # an inbox file must be unchanged this long before it is taken
EVENT_CHARS = 300  # longest event or error line kept for `daemon status`
LOGGER = "hermes_fs"  # every module's logger is a child: the daemon's log file gets them all
WAKE_S = 1.0  # the main thread wakes this often: a signal caught by another thread runs its handler then
SLOW_STOP_S = 30.0  # a stop that takes longer writes every thread's stack to daemon.log

__all__ = ["Daemon", "DaemonOptions", "ignored", "is_running", "status", "stop"]


@dataclass
class DaemonOptions:
    debounce_s: float = 1.0
    workers: int = 2
    # Serve warm turns and nothing else (the daemon `run` and `chat` start by themselves): no
    # watcher, inbox, cron, gateway or sync, so starting it changes what happens to nothing but speed.
    turns_only: bool = False
    idle_stop_s: float = 0.0  # turns_only: stop after this long without a connection; 0 = never


class DaemonState:
    """Recent events and errors, the queue, written to .hermes/daemon.json for `daemon status`."""

    def __init__(self, path, log: logging.Logger):
        self.path = path
        self.log = log
        self.started = time.time()
        self.events: deque = deque(maxlen=20)
        self.errors: deque = deque(maxlen=20)
        self.queued: set[str] = set()
        self.lock = threading.Lock()
        self.turns_only = False  # `daemon status` tells a person which kind of daemon runs
        self.idle_stop_s = 0.0

    def note(self, message: str) -> None:
        self.log.info(message)
        self._record(self.events, message)

    def error(self, message: str) -> None:
        self.log.error(message)
        self._record(self.errors, message)

    def _record(self, where: deque, message: str) -> None:
        if len(message) > EVENT_CHARS:  # one bulk edit must not make a 66,000-character line
            message = message[:EVENT_CHARS] + f"… ({len(message) - EVENT_CHARS} more characters)"
        with self.lock:
            where.append(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {message}")
        self.write()

    def resolved(self, prefix: str) -> None:
        """Forget errors that no longer hold (hermes.yaml fixed, a refused file committed since)."""
        with self.lock:
            kept = [e for e in self.errors if not e.split(" ", 1)[-1].startswith(prefix)]
            self.errors.clear()
            self.errors.extend(kept)
        self.write()

    def queue(self, name: str, queued: bool) -> None:
        with self.lock:  # worker threads and the watcher change it at once
            (self.queued.add if queued else self.queued.discard)(name)
        self.write()

    def write(self, running: bool = True) -> None:
        with self.lock:  # threads report at once; one writer at a time
            state = {"pid": os.getpid(), "started": self.started, "running": running,
                     "queue": sorted(self.queued), "last_events": list(self.events),
                     "last_errors": list(self.errors), "turns_only": self.turns_only}
            if self.turns_only:
                state["idle_stop_s"] = self.idle_stop_s
            atomic_write(self.path, json.dumps(state, indent=2))


class Daemon:
    def __init__(self, vault: Vault, options: DaemonOptions | None = None):
        self.vault = vault
        self.options = options or DaemonOptions()
        self.lock = daemon_lock(vault)
        self.stop_event = threading.Event()
        self.log = logging.getLogger(LOGGER)
        self.state = DaemonState(vault.state_dir / "daemon.json", self.log)
        self.state.turns_only, self.state.idle_stop_s = self.options.turns_only, self.options.idle_stop_s
        self.edits = Debouncer(self.options.debounce_s, self._commit_edits)
        # hermes.yaml and cron/*.md are re-read once a burst of events is over: one save is several
        # events (created, modified, closed), and a file half-written is not yet worth an error.
        self.reloads = Debouncer(SETTLE_S, self._reload_settings)
        self.settler: Settler | None = None  # started with the watcher
        # one session's requests in order; the inbox and its job code are loaded only by a full
        # daemon: a turns-only one (a first `run` waits for it) never runs a request
        self.executor: SerialExecutor | None = None
        if not self.options.turns_only:
            from .requests import SerialExecutor

            self.executor = SerialExecutor(self.options.workers, "job")
        self.watcher = Watcher(vault.root, self.on_path, on_lost=self._events_lost, skip=IGNORED_DIRS)
        self.looking = 0  # looks at the vault after lost events: running (1) or asked again (2+)
        self.looking_lock = threading.Lock()
        self.jobs: dict = {}
        self.scheduler: Scheduler | None = None
        self.warm: WarmServer | None = None
        self.model_worker: ModelWorker | None = None
        self.services: list = []  # DaemonService objects started by _start_services
        self.catch_up = CatchUp()  # agent work waits for it after a start (sync's first round)
        self.claims: RefClaims | None = None  # the vault's claims on its remote: built once, at start (work.py)

    def note(self, message: str) -> None:
        self.state.note(message)

    def error(self, message: str) -> None:
        self.state.error(message)

    # -- lifecycle -------------------------------------------------------------------------------
    def run(self, on_started: Callable[[], None] = lambda: None) -> None:
        """Run in the foreground until SIGTERM/SIGINT; `on_started` once this daemon owns the vault
        (a second daemon is refused before it says anything)."""
        if not self.options.turns_only:
            make_way(self.vault)  # a person's full daemon replaces one started by `run`
        try:
            self.lock.acquire(timeout=0)
        except HermesError:
            raise HermesError(f"a daemon is already running for this vault (pid {self.lock.holder()})") from None
        on_started()
        tighten_umask()  # every state file it (or a child) makes is 0600: message text lives there
        favour_waiting_threads()  # sync's git calls beside agent work (priority.py)
        if self.options.turns_only:
            self._serve_turns_only()  # it protects the state folder once it serves (_protect_state_later)
            return
        protect_tree(self.vault.state_dir)
        try:
            self._setup_logging()
            self._open_claims()
            self._recover()
            self._start_services(early=True)  # sync: see services.py
            self.settler = Settler(SETTLE_S, self._size_of, self._take,
                                   lambda rel: open_for_writing(self.vault.root / rel))
            self.watcher.start()
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
            self._reload_jobs()
            self._start_scheduler()
            self._start_model_worker()
            self._start_warm()
            self._start_services()
            self.catch_up.all_started()
            self.note("daemon started")
            self._warm_up_model_layer()
            self._scan_inbox()
            while not self.stop_event.wait(WAKE_S):  # never a wait without end: see WAKE_S
                pass
            self.note("stopping")
        finally:
            self._shutdown()

    def _serve_turns_only(self) -> None:
        """The daemon `run` and `chat` start: the warm-turn server and the model layer, until it
        has been idle for idle_stop_s or is stopped."""
        try:
            self._setup_logging()
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
            self._start_model_worker()
            self._warm_up_model_layer(lower=False)  # a turn is waiting for it: before the socket, to overlap
            self._start_warm()
            if self.warm is None:
                return
            self._protect_state_later()
            idle = self.options.idle_stop_s
            self.note("daemon started (turns only: no watcher, inbox, cron, gateway or sync"
                      + (f"; stops after {idle / 60:g} min without a turn)" if idle else ")"))
            while not self.stop_event.wait(WAKE_S):
                if idle and self.warm.idle_s() > idle:
                    self.note(f"no turn for {idle / 60:g} min: stopping")
                    break
            self.note("stopping")
        finally:
            self._shutdown()

    def _protect_state_later(self) -> None:
        """Make the state folder's older files private (protect_tree walks all of .hermes, workspaces
        included) on a low-priority thread once the socket is up, so the first turn of the daemon
        `run` started does not wait for it. What is written meanwhile is private already
        (tighten_umask); what was there before is no less private than before the daemon started."""

        def protect() -> None:
            lower_this_thread()
            protect_tree(self.vault.state_dir)

        threading.Thread(target=protect, name="protect-state", daemon=True).start()

    def _on_signal(self, signum: int, _frame) -> None:
        """The first SIGTERM or Ctrl-C stops in order; a second one, while stopping, exits at once
        (running jobs are cut off; their requests stay claimed and resume at the next start)."""
        if self.stop_event.is_set():
            self.log.error(f"signal {signum} again while stopping: exiting now")
            os._exit(128 + signum)
        self.stop_event.set()

    def _setup_logging(self) -> None:
        handler = logging.FileHandler(self.vault.state_dir / "daemon.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        self.log.addHandler(handler)
        if self.log.level != logging.DEBUG:  # `hermes-fs -v daemon` keeps the debug lines (sync timings)
            self.log.setLevel(logging.INFO)
        # `kill -USR1 <pid>` writes what every thread is doing to daemon.log (the daemon goes on)
        signal.signal(signal.SIGUSR1, lambda *_: self._log_stacks("SIGUSR1"))

    def _log_stacks(self, why: str) -> None:
        """Every thread's stack, to the log: Python's own view, taken with the GIL held (from the
        main thread on SIGUSR1, from a timer on a slow stop). faulthandler's C-level dump reads
        running threads unguarded; in CI it stopped mid-stack and the daemon was gone."""
        import sys
        import traceback

        names = {t.ident: t.name for t in threading.enumerate()}
        parts = [f"{why}: the stack of every thread"]
        for ident, frame in sys._current_frames().items():
            parts.append(f"Thread {names.get(ident, ident)}:\n" + "".join(traceback.format_stack(frame)).rstrip())
        self.log.warning("\n".join(parts))

    def _open_claims(self) -> None:
        """The claims every part shares (scheduler, inbox, sync, decisions), built once this
        daemon owns the vault: what this machine holds is read from .hermes/sync/claims.json."""
        from .work import open_claims

        self.claims = open_claims(self.vault)

    def _recover(self) -> None:
        """After a crash: drop a stale git index lock, commit what was left, re-queue claimed requests."""
        from . import inbox

        if self.vault.git.clear_stale_index_lock():
            self.note("removed a stale .git/index.lock left by a crash")
        orphans = self.vault.git.changed_under("sessions")
        if orphans:  # transcripts of conversations cut short (a killed run): keep them in history
            self.vault.git.commit_paths(orphans, "session: saved after an interruption",
                                        Act.recovered())
            self.note(f"committed {len(orphans)} interrupted session transcript(s)")
        edited = pending_edits(self.vault)
        if edited:  # edits made while no daemon was watching (or lost in a crash before the debounce)
            self._commit_edits(edited)
        for c in inbox.pending_taken(self.vault):
            self.note(f"resuming request {c.name}")
            inbox.resume(c, self.claims)
            self._submit(c)

    def _start_scheduler(self) -> None:
        from .scheduler import Scheduler
        from .work import cron_claims

        self.scheduler = Scheduler(cron_claims(self.vault, self.claims), self._run_cron, on_error=self.error)
        self.scheduler.start(list(self.jobs.values()))

    def _start_warm(self) -> None:
        """Serve `run` and `chat` turns from this warm process (a Unix socket in .hermes/)."""
        from .warm import WarmServer

        try:
            self.warm = WarmServer(self.vault)
            self.warm.start()
        except OSError as exc:  # e.g. a path too long for a Unix socket: the CLI runs turns itself
            self.warm = None
            self.error(f"warm turns unavailable ({exc}); run and chat will start their own process")

    def _start_model_worker(self) -> None:
        """Model calls and skill vectors go to a worker process (model_worker.py): litellm and the
        embedding model never enter the daemon, and the worker is let go after
        daemon.model_worker_idle_s without a call. A turns-only daemon exists for speed: its worker
        is not lowered, and stays until the daemon itself stops when idle."""
        from ..agent.model import serve_from
        from ..mind.embeddings import encode_with
        from .model_worker import ModelWorker
        from .priority import AGENT_NICE

        turns_only = self.options.turns_only  # its worker goes with it (idle_stop_min), never before
        self.model_worker = ModelWorker(lambda: 0 if turns_only else self.vault.config.daemon.model_worker_idle_s,
                                        nice=0 if turns_only else AGENT_NICE, warm=not turns_only)
        serve_from(self.model_worker)
        encode_with(self.model_worker.encode, loaded=self.model_worker.encoder_loaded)  # the skill embedding model lives there too

    def _warm_up_model_layer(self, lower: bool = True) -> None:
        """Start the model worker (it imports litellm: seconds of CPU) in the background once
        everything else has started, so the first turn served (a chat, a cron job due at start, an
        inbox request) is as fast as the later ones. The worker runs at the agent's lower priority,
        so a sync round or the watcher is not held up by it; a turn that comes first simply waits
        for the same worker."""
        if os.environ.get("HERMES_NO_WARM_UP") or self.model_worker is None:
            return
        worker = self.model_worker

        def warm() -> None:
            if lower:
                lower_this_thread()
            try:
                worker.start()  # first: its start and litellm's import overlap loading the turn's modules here
                from ..agent.conversation import Conversation  # noqa: F401  (the turn's own modules)
            except Exception as exc:  # noqa: BLE001 — a turn will start it (and report the error) itself
                self.error(f"warming up the model layer failed: {exc}")
                return
            if worker.wait_ready():
                self.note("model layer warm: the first turn needs no import")

        threading.Thread(target=warm, name="warm-up", daemon=True).start()

    def _start_services(self, early: bool = False) -> None:
        """Gateway, sync, web page, curator: whatever hermes.yaml turns on (`early`: those started
        before the watcher and the scheduler); one failing part is reported and the others run."""
        from .services import services_for

        for service in services_for(self, early):
            self._start_service(service)

    def _start_service(self, service) -> None:
        try:
            service.start()
            self.services.append(service)
            self.note(f"{service.name} started")
        except Exception as exc:
            self.log.exception(f"{service.name}: could not start")
            self.error(f"{service.name} not started: {exc}")

    def _tell_services(self, event: str) -> None:
        """Call `event()` on the parts that listen for it (the skill vectors: `skills_changed`)."""
        for service in list(self.services):
            hook = getattr(service, event, None)
            if hook is not None:
                hook()

    def _run_cron(self, job, due) -> None:
        from .cron_runner import run_job

        lower_this_thread()
        self.catch_up.wait()
        self.note(f"cron started: {job.name} (due {due.isoformat()})")
        try:
            run = run_job(self.vault, job, due)
            self.note(f"cron finished: {job.name} ({run.status})")
            for d in run.delivered:
                if not d.ok:
                    self.error(f"cron {job.name}: delivery to {d.target} failed: {d.error}")
        except HermesError as exc:
            self.error(f"cron {job.name} failed: {exc}")
        except Exception as exc:
            self.log.exception(f"cron {job.name}: unexpected error")
            self.error(f"cron {job.name} failed: {type(exc).__name__}: {exc} (traceback in daemon.log)")

    def _shutdown(self) -> None:
        slow = threading.Timer(SLOW_STOP_S, self._log_stacks, args=(f"stopping for over {SLOW_STOP_S:.0f} s",))
        slow.daemon = True  # a stop that hangs says where, in daemon.log
        slow.start()
        self.catch_up.give_up()  # work still waiting to start does not wait on a part that is stopping
        for service in reversed(self.services):
            try:
                service.stop()
            except Exception:
                self.log.exception(f"{service.name}: error while stopping")
        if self.warm:
            self.warm.stop()
        if self.scheduler:
            self.scheduler.stop()
        self.watcher.stop()
        self.edits.cancel()
        self.reloads.cancel()
        if self.settler:
            self.settler.stop()
        if self.executor is not None:
            self.executor.shutdown(wait=True)  # running jobs finish; queued ones stay claimed
        if self.model_worker is not None:
            from ..agent.model import serve_from
            from ..mind.embeddings import encode_with

            serve_from(None, replacing=self.model_worker)
            encode_with(None, replacing=self.model_worker.encode)
            self.model_worker.stop()
        self.state.write(running=False)
        slow.cancel()
        self.lock.release()

    # -- events ----------------------------------------------------------------------------------
    def on_path(self, rel: str, kind: str = "closed") -> None:
        """A vault file changed (called from the watcher's thread)."""
        from . import inbox

        if inbox.is_request(rel):
            self._inbox_event(rel, kind)
        elif rel == CONFIG_NAME:
            self.reloads.add("config")
        elif rel.startswith("cron/") and rel.endswith(".md"):
            self.reloads.add("jobs")
        elif rel.startswith("skills/") and rel.endswith(".md"):
            self._tell_services("skills_changed")
        if not rel.startswith(OWN_DIRS):
            self.edits.add(rel)

    def _events_lost(self) -> None:
        """The watcher lost file events: look at the vault again, as at start (inbox, a person's
        edits, settings and jobs), off the watcher's thread. Overflows come in storms (watchdog's
        rebuild of its watches can itself overflow a short queue), so one look runs at a time and
        losses meanwhile ask for one more look after it, never a thread each."""
        with self.looking_lock:
            self.looking, again = self.looking + 1, self.looking > 0
        if again:
            return
        self.error("file events were lost (the inotify queue overflowed); looking at the vault again")
        threading.Thread(target=self._look_again, name="look-again", daemon=True).start()

    def _look_again(self) -> None:
        while True:
            with self.looking_lock:
                self.looking = 1  # losses from here on ask for another look
            try:
                self.reloads.add("config", "jobs")
                self.edits.add(*pending_edits(self.vault))
                self._scan_inbox()
            except Exception:
                self.log.exception("looking at the vault again failed")
            with self.looking_lock:
                if self.looking == 1:
                    self.looking = 0
                    return

    def _commit_edits(self, paths: list[str]) -> None:
        """Commit a person's edits, unless a git operation of theirs is under way (then try later)."""
        busy = self.vault.git.operation_in_progress()
        if busy:
            self.note(f"not committing edits while {busy}; will retry")
            retry = threading.Timer(max(self.options.debounce_s, 2.0), self.edits.add, args=paths)
            retry.daemon = True
            retry.start()
            return
        try:
            result = self.vault.git.commit_human_edits(paths)
        except HermesError as exc:
            self.error(f"auto-commit failed: {exc}")
            return
        if result.sha:
            self.note(f"committed human edit: {', '.join(result.committed)}")
        refused = {f.path for f in result.refused}
        for path in paths:  # committed now, or nothing left to commit (the secret taken out, committed elsewhere)
            if path not in refused:
                self.state.resolved(f"not committed: {path}:")
        for f in result.refused:
            self.error(f"not committed: {f}")
            self._notify("hermes-fs: edit not committed", f"{f.path}:{f.line}: {f.kind}; it stays uncommitted")

    def _reload_settings(self, what: list[str]) -> None:
        if "config" in what:
            self._reload_config()
        self._reload_jobs()  # jobs read settings too (timezone, models)

    def _reload_config(self) -> None:
        try:
            self.vault.reload_config()
            if self.claims is not None:  # the claims live on; their expiry follows the settings
                self.claims.ttl_s = self.vault.config.sync.claim_ttl_s
            self.note("reloaded hermes.yaml")
            self.state.resolved("hermes.yaml is invalid")
        except HermesError as exc:
            self.error(f"hermes.yaml is invalid, keeping the last good settings: {exc}")
            return
        self._tell_services("settings_changed")
        self._start_new_services()

    def _start_new_services(self) -> None:
        """Parts hermes.yaml turns on since the daemon started (a first gateway channel)."""
        from .services import started_on_reload

        if self.stop_event.is_set():
            return
        for service in started_on_reload(self, {s.name for s in self.services}):
            self._start_service(service)

    def _reload_jobs(self) -> None:
        """Re-read cron/*.md; a bad file is reported and the other jobs stay loaded."""
        from ..mind.jobs import load_jobs

        jobs, errors = load_jobs(self.vault.files, self.vault.config)
        self.jobs = {j.name: j for j in jobs}
        if self.scheduler:
            self.scheduler.update(jobs)
        self.note(f"loaded {len(jobs)} cron job(s)")
        self.state.resolved("cron job not loaded")
        for e in errors:
            self.error(f"cron job not loaded: {e}")

    # -- inbox -----------------------------------------------------------------------------------
    def _scan_inbox(self) -> None:
        from . import inbox

        d = self.vault.root / inbox.INBOX_DIR
        if d.is_dir():
            for p in sorted(d.iterdir()):
                rel = f"{inbox.INBOX_DIR}/{p.name}"
                if (p.is_file() or p.is_symlink()) and inbox.is_request(rel) and not ignored(rel):
                    self._schedule_inbox(rel)  # a symlink is taken too, and answered without following it

    def _inbox_event(self, rel: str, kind: str) -> None:
        """A request is taken once it has been quiet, with a stable size, for SETTLE_S and no one
        has it open for writing: a file written in chunks is never taken half-done. Any way of
        dropping it starts the wait: written in place (closed), renamed inside the vault (moved),
        moved in from another folder or hard-linked (inotify says only "created" for those)."""
        if kind in ("closed", "moved", "created") or (kind == "modified" and not self.watcher.reports_close):
            self._schedule_inbox(rel)
        elif kind == "modified" and self.settler:
            self.settler.touch(rel)

    def _schedule_inbox(self, rel: str) -> None:
        if self.settler:
            self.settler.add(rel)

    def _size_of(self, rel: str) -> int | None:
        try:
            return os.lstat(self.vault.root / rel).st_size
        except OSError:
            return None

    def _take(self, rel: str) -> None:
        if self.stop_event.is_set() or not os.path.lexists(self.vault.root / rel):
            return
        from . import inbox

        c = inbox.take(self.vault, rel, self.claims)
        if c:
            self.note(f"request taken: {c.name}")
            self._submit(c)

    def take_request(self, rel: str) -> None:
        """Take the inbox request `rel` as if it had just been dropped (the sync service hands
        over a request whose dead claimant's claim it took over: its file did not change)."""
        self._schedule_inbox(rel)

    def _submit(self, c: inbox.TakenRequest) -> None:
        from . import inbox

        assert self.executor is not None  # a full daemon's
        self.state.queue(c.name, True)
        self.executor.submit(inbox.session_key(c), lambda: self._run_claim(c))

    def _run_claim(self, c: inbox.TakenRequest) -> None:
        lower_this_thread()
        self.catch_up.wait()
        self.note(f"request started: {c.name}")
        from . import inbox

        try:
            status = inbox.process(self.vault, c, self.note, claims=self.claims).status
            self.note(f"request finished: {c.name} ({status})")
        except Exception as exc:
            self.log.exception(f"request {c.name}: unexpected error")
            self.error(f"request {c.name} failed before its result was committed: {exc}")
        finally:
            self.state.queue(c.name, False)

    def _notify(self, title: str, body: str) -> None:
        if not self.vault.config.notify.targets:
            return
        try:
            self.vault.notifier.send(sorted(self.vault.config.notify.targets), title, body)
        except Exception:
            self.log.exception("notification failed")


def wait_started(vault: Vault, pid: int, timeout: float = 15.0) -> bool:
    """After `daemon --detach`: wait until that daemon holds the lock and has written its state."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        st = status(vault)
        if st.get("running") and st.get("pid") == pid and not st.get("starting"):
            return True
        time.sleep(0.05)
    return False


def pending_edits(vault: Vault) -> list[str]:
    """A person's uncommitted edits: changed files outside what hermes-fs writes and commits itself
    (sessions, outputs, inbox) and outside editors' swap and backup files."""
    return [p for p in vault.git.dirty_paths() if not p.startswith(OWN_DIRS) and not ignored(p)]


def make_way(vault: Vault) -> bool:
    """Stop a turns-only daemon (the one `run` and `chat` start) so a full one can take the vault;
    True if one was stopped. A full daemon is never stopped here."""
    st = status(vault)
    if not st.get("running") or not st.get("turns_only"):
        return False
    return stop(vault)


def stop(vault: Vault, timeout: float = 60) -> bool:
    """SIGTERM the daemon and wait for its lock to free; False if none was running."""
    if not is_running(vault):
        return False
    pid = daemon_lock(vault).holder()
    if pid:
        os.kill(pid, signal.SIGTERM)
    deadline = time.time() + timeout
    while is_running(vault) and time.time() < deadline:
        time.sleep(0.1)
    return not is_running(vault)


def unit_name(vault: Vault) -> str:
    """`hermes-fs-<folder>-<hash of the full path>`: two vaults named alike get two units."""
    import hashlib
    import re

    digest = hashlib.sha256(os.fsencode(vault.root)).hexdigest()[:8]
    folder = re.sub(r"[^A-Za-z0-9_.-]+", "-", vault.root.name).strip("-.") or "vault"
    return f"hermes-fs-{folder[:40]}-{digest}"


def systemd_quote(arg: str) -> str:
    """One ExecStart argument: double-quoted (spaces), with systemd's `%` specifiers and `$`
    expansion escaped, so a path is passed exactly as it is."""
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def unit_text(vault: Vault, exe: str) -> str:
    command = " ".join(systemd_quote(a) for a in (exe, "--vault", str(vault.root), "daemon"))
    description = str(vault.root).replace("%", "%%").replace("\n", " ")
    return f"""[Unit]
Description=hermes-fs daemon for {description}

[Service]
ExecStart={command}
Restart=on-failure

[Install]
WantedBy=default.target
"""


def plist_text(vault: Vault, exe: str) -> str:
    from xml.sax.saxutils import escape

    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0"><dict>
  <key>Label</key><string>io.{escape(unit_name(vault))}</string>
  <key>ProgramArguments</key><array><string>{escape(exe)}</string><string>--vault</string><string>{escape(str(vault.root))}</string><string>daemon</string></array>
  <key>RunAtLoad</key><true/><key>KeepAlive</key><true/>
</dict></plist>
"""
