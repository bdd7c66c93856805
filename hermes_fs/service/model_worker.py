"""The daemon's model layer in a process of its own, let go when idle.

litellm is most of a busy daemon's memory and all of its import time. The daemon keeps the agent
loop and hands each model call to this worker: a child process that imports litellm once and
runs `LiteLLMModel.complete` for it. After `daemon.model_worker_idle_s` without a call the worker
is stopped, and the daemon is small again; the next call starts a new one. The daemon starts it in
the background once everything else is up, and it runs litellm's call path once before it says it
is ready, so the first turn finds it as warm as the later ones.

The skill embedding model (mind/embeddings.py) is run there too when `skills.embeddings` is on:
the daemon's vector fills and a turn's query are encoded by the worker, so the model's weights
are also let go with it.

A voice note's hosted transcription (`voice.engine: api`) runs there too, so a voice note does
not bring litellm into the daemon either.

The protocol is JSON lines over the child's stdin and a dedicated copy of its stdout (what
litellm prints goes to stderr). The daemon sends {"id": n, "op": "complete", "settings": {...},
"key": ..., "messages": [...], "tools": [...], "response_format": ..., "stream": bool},
{"id": n, "op": "transcribe", "settings": {...}, "key": ..., "audio": base64 WAV, "language": ...},
{"id": n, "op": "encode", "texts": [...]} and {"id": n, "op": "cancel"}; the worker sends
{"ready": pid, "protocol": PROTOCOL} once litellm is imported, then per request {"id": n, "text": piece} while
streaming and one {"id": n, "done": reply | transcript | base64 float32 vectors} or {"id": n, "error":
{"type": name, "message": text}}. Requests run concurrently, one thread each.

Invariants: the worker never outlives the daemon (it exits when its stdin closes, and it watches for
the daemon's end); a cancelled call returns at once in the daemon while the worker
closes the request's connection; a worker that dies mid-call fails that call with a clear
ModelError, and the next call starts a fresh worker. Keys reach the worker only through the pipe.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..agent.model import ModelError, ModelSettings, OnText, Reply, ToolCall, TurnCancelled, Usage
from ..errors import HermesError
from .priority import AGENT_NICE

log = logging.getLogger(__name__)
POLL_S = 0.05  # how often a waiting call looks at its cancel event
PROTOCOL = 2  # the worker's words; a worker from other code (an upgrade under a running daemon) is refused
UNKNOWN_ANSWER = ("the model worker answered in a form this daemon does not know (was hermes-fs upgraded while "
                  "it ran?); restart the daemon")
PARENT_CHECK_S = 1.0  # how often the worker looks whether the daemon is still there
STOP_WAIT_S = 5.0  # a worker told to stop that is still there after this is killed
SETTINGS_FIELDS = ("model", "api_base", "api_key_env", "timeout_s", "max_tokens", "retries", "retry_base_s")
ERRORS: dict[str, type[HermesError]] = {"ModelError": ModelError, "TurnCancelled": TurnCancelled,
                                        "HermesError": HermesError}


@dataclass
class Call:
    """One call in flight: what the worker sent back for it, read by the calling thread."""

    id: int
    events: queue.Queue = field(default_factory=queue.Queue)


class ModelWorker:
    """The daemon's side: starts the worker, sends it calls, stops it after `idle_s()` seconds
    without one (0: never)."""

    def __init__(self, idle_s: Callable[[], float], command: list[str] | None = None, nice: int = AGENT_NICE,
                 warm: bool = True):
        self.idle_s = idle_s
        self.nice = nice  # the worker runs this much nicer than the daemon (its agent work's priority)
        # run litellm's call path once before saying ready (warm_call_path); not when a turn is
        # already waiting for the worker (the daemon `run` starts): its call warms the same path
        self.warm = warm
        self.command = command or [sys.executable, "-m", "hermes_fs.service.model_worker"]
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.calls: dict[int, Call] = {}
        self.next_id = 0
        self.last_used = time.monotonic()
        self.ready = threading.Event()  # the current worker has imported litellm
        self.starts = 0  # workers started so far (the daemon's log and tests read it)
        self.encoder_pid: int | None = None  # the worker that has the embedding model loaded
        self.stopped = threading.Event()
        self._reaper: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        """Start a worker if none runs (returns at once; `ready` is set when litellm is in)."""
        with self.lock:
            self._spawn_locked()
        if self._reaper is None:
            self._reaper = threading.Thread(target=self._reap, name="model-worker-idle", daemon=True)
            self._reaper.start()

    def wait_ready(self, timeout: float | None = None) -> bool:
        """True once the worker has imported litellm; False if it went away first, or on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.ready.wait(POLL_S * 4):
            if self.pid() is None or (deadline is not None and time.monotonic() > deadline):
                return False
        return True

    def pid(self) -> int | None:
        with self.lock:
            return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def stop(self) -> None:
        """Stop the idle watch, and the worker once no call is in flight (the daemon is stopping).
        A turn still waiting on the model is not failed: it ends with the daemon's process, as it
        would with litellm in the daemon (the client says the daemon went away), and the worker,
        seeing the daemon gone, exits too."""
        self.stopped.set()
        with self.lock:
            busy = bool(self.calls)
        if not busy:
            self.release()
            return

        def when_done() -> None:
            while True:
                with self.lock:
                    if not self.calls:
                        break
                time.sleep(POLL_S)
            self.release()

        threading.Thread(target=when_done, name="model-worker-stop", daemon=True).start()

    def release(self) -> None:
        """Let the worker go now; calls in flight fail as if it had died."""
        with self.lock:
            proc, self.proc = self.proc, None
            self.ready.clear()
        if proc is not None:
            _end(proc)

    def _spawn_locked(self) -> subprocess.Popen:
        if self.proc is not None and self.proc.poll() is None:
            return self.proc
        # one BLAS thread, as in the daemon (mind/embeddings.py): set before the worker's NumPy loads
        env = {"OPENBLAS_NUM_THREADS": "1", **os.environ, "HERMES_MODEL_WORKER_PARENT": str(os.getpid()),
               "HERMES_MODEL_WORKER_NICE": str(self.nice), "HERMES_MODEL_WORKER_WARM": "1" if self.warm else "0"}
        proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                start_new_session=False)
        self.proc = proc
        self.ready.clear()
        self.starts += 1
        self.last_used = time.monotonic()
        threading.Thread(target=self._read, args=(proc,), name="model-worker-read", daemon=True).start()
        log.info(f"model worker started (pid {proc.pid})")
        return proc

    def _reap(self) -> None:
        """Stop the worker once it has been idle `idle_s()` seconds with no call in flight."""
        while not self.stopped.wait(_reap_interval(self.idle_s())):
            limit = self.idle_s()
            with self.lock:
                idle = (self.proc is not None and self.ready.is_set() and not self.calls and limit > 0
                        and time.monotonic() - self.last_used >= limit)  # idle from when it was ready
                proc = self.proc if idle else None
                if idle:
                    self.proc = None
                    self.ready.clear()
            if proc is not None:
                log.info(f"model worker let go after {limit:g} s idle (pid {proc.pid}); the next model call starts one")
                _end(proc)

    # -- calls ------------------------------------------------------------------------------------
    def complete(self, settings: ModelSettings, key: str | None, messages: list[dict], tools: list[dict],
                 response_format: dict | None, on_text: OnText | None, cancel: threading.Event | None,
                 temperature: float | None = None) -> Reply:
        """One model call in the worker (agent.model.Remote): LiteLLMModel.complete there, at the
        caller's temperature (refine's samples and its forced choices at 0 depend on it)."""
        request: dict[str, Any] = {"op": "complete", "settings": {f: getattr(settings, f) for f in SETTINGS_FIELDS},
                                   "key_variable": settings.key_variable(), "key": key, "messages": messages,
                                   "tools": tools, "response_format": response_format, "stream": on_text is not None,
                                   "temperature": temperature}
        return _reply(self._call(request, f"model {settings.model}", on_text, cancel))

    def transcribe(self, settings: ModelSettings, key: str | None, wav: bytes, language: str | None) -> str:
        """A voice note's words (agent.transcription in the daemon): litellm's `transcription` runs
        in the worker, so a voice note never brings litellm into the daemon."""
        import base64

        request = {"op": "transcribe", "settings": {f: getattr(settings, f) for f in SETTINGS_FIELDS}, "key": key,
                   "audio": base64.b64encode(wav).decode("ascii"), "language": language}
        text = self._call(request, f"transcription by {settings.model}")
        if not isinstance(text, str):
            raise ModelError(UNKNOWN_ANSWER)
        return text

    def encode(self, texts: list[str]):
        """Sentence vectors made in the worker (mind.embeddings' encoder in the daemon): the
        embedding model's weights live there, and go with it when it is let go."""
        import base64

        import numpy as np

        from ..mind.embeddings import DIM

        pid = self.pid()
        value = self._call({"op": "encode", "texts": list(texts)}, "skill embeddings")
        self.encoder_pid = pid if pid is not None else self.pid()  # this worker has the model loaded now
        return np.frombuffer(base64.b64decode(value), dtype=np.float32).reshape(-1, DIM)

    def encoder_loaded(self) -> bool:
        """The running worker has answered an encode, so it holds the model: a query costs no load."""
        pid = self.pid()
        return pid is not None and pid == self.encoder_pid

    def _call(self, request: dict[str, Any], what: str, on_text: OnText | None = None,
              cancel: threading.Event | None = None) -> Any:
        """Send one request and wait for its answer (text pieces go to `on_text` meanwhile)."""
        if self._reaper is None:
            self.start()
        with self.lock:
            self.next_id += 1
            call = Call(self.next_id)
            request["id"] = call.id
            try:
                line = json.dumps(request) + "\n"
            except (TypeError, ValueError) as exc:
                raise ModelError(f"{what}: the request cannot be sent to the model worker ({exc})") from None
            proc = self._spawn_locked()
            self.calls[call.id] = call
            self.last_used = time.monotonic()
        try:
            self._write(proc, line)
            return self._wait(proc, call, what, on_text, cancel)
        finally:
            with self.lock:
                self.calls.pop(call.id, None)
                self.last_used = time.monotonic()

    def _wait(self, proc: subprocess.Popen, call: Call, what: str, on_text: OnText | None,
              cancel: threading.Event | None) -> Any:
        try:
            return self._next(proc, call, what, on_text, cancel)
        except (TurnCancelled, KeyboardInterrupt):
            self._write(proc, json.dumps({"id": call.id, "op": "cancel"}) + "\n")  # the worker closes the request
            raise

    def _next(self, proc: subprocess.Popen, call: Call, what: str, on_text: OnText | None,
              cancel: threading.Event | None) -> Any:
        while True:
            if cancel is not None and cancel.is_set():
                raise TurnCancelled("the turn was interrupted")
            try:
                kind, value = call.events.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if kind == "text":
                if on_text is not None:
                    on_text(value)
            elif kind == "done":
                return value
            elif kind == "error":
                raise _error_class(value.get("type"))(str(value.get("message")))
            elif kind == "died":
                raise ModelError(f"{what}: the model worker (pid {proc.pid}) {value} during the "
                                 "request; the next model call starts a new one")

    def _write(self, proc: subprocess.Popen, line: str) -> None:
        try:
            assert proc.stdin is not None
            with self.lock:  # one writer at a time: lines must not interleave
                proc.stdin.write(line.encode("utf-8"))
                proc.stdin.flush()
        except (OSError, ValueError):
            pass  # the worker is gone: its reader reports that to every call in flight

    def _read(self, proc: subprocess.Popen) -> None:
        """Hand each line from the worker to its call; at the end, fail the calls still waiting."""
        assert proc.stdout is not None
        for raw in proc.stdout:
            try:
                event = json.loads(raw)
            except ValueError:
                log.warning("model worker: a line that is not JSON was ignored")
                continue
            if "ready" in event:
                if event.get("protocol") != PROTOCOL:  # hermes-fs was upgraded under a running daemon
                    log.error(f"model worker (pid {proc.pid}): {UNKNOWN_ANSWER}")
                    _end(proc)
                    continue
                with self.lock:
                    if self.proc is proc:
                        self.ready.set()
                        self.last_used = time.monotonic()
                log.info(f"model worker ready (pid {proc.pid}): the model layer is warm")
                continue
            with self.lock:
                call = self.calls.get(event.get("id"))
            if call is None:
                continue  # a cancelled call's late words
            kinds = [kind for kind in ("text", "done", "error") if kind in event]
            for kind in kinds:
                call.events.put((kind, event[kind]))
            if not kinds:  # never a call left waiting on words it cannot read
                call.events.put(("error", {"type": "ModelError", "message": UNKNOWN_ANSWER}))
        code = proc.wait()
        with self.lock:
            if self.proc is proc:
                self.proc = None
                self.ready.clear()
            waiting = list(self.calls.values())
        how = f"was killed by signal {-code}" if code < 0 else f"stopped (exit code {code})"
        for call in waiting:
            call.events.put(("died", how))
        if waiting:
            log.error(f"model worker (pid {proc.pid}) {how} with {len(waiting)} call(s) in flight")


def _reap_interval(idle_s: float) -> float:
    return min(5.0, max(0.1, idle_s / 4)) if idle_s > 0 else 5.0


def _end(proc: subprocess.Popen) -> None:
    """Close the worker's stdin (it exits), kill it if it does not."""
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _reply(value: dict) -> Reply:
    usage = Usage(**value.get("usage", {}))
    calls = [ToolCall(**c) for c in value.get("tool_calls", [])]
    return Reply(value.get("content"), calls, usage)


# -- the worker process ------------------------------------------------------------------------------
class Server:
    """The child's side: one thread per call, replies written one line at a time."""

    def __init__(self, out):
        self.out = out
        self.out_lock = threading.Lock()
        self.cancels: dict[int, threading.Event] = {}
        self.lock = threading.Lock()

    def send(self, message: dict) -> None:
        with self.out_lock:
            self.out.write(json.dumps(message) + "\n")
            self.out.flush()

    def serve(self, lines) -> None:
        for raw in lines:
            try:
                request = json.loads(raw)
            except ValueError:
                continue
            op, ident = request.get("op"), request.get("id")
            if op == "cancel":
                with self.lock:
                    event = self.cancels.get(ident)
                if event is not None:
                    event.set()
            elif op == "complete":
                cancel = threading.Event()
                with self.lock:
                    self.cancels[ident] = cancel
                threading.Thread(target=self.complete, args=(request, cancel), daemon=True).start()
            elif op == "encode":
                threading.Thread(target=self.encode, args=(request,), daemon=True).start()
            elif op == "transcribe":
                threading.Thread(target=self.transcribe, args=(request,), daemon=True).start()
            else:  # never a call left waiting on an answer that will not come
                self.send({"id": ident, "error": {"type": "ModelError", "message": f"model worker: unknown op {op!r}"}})

    def complete(self, request: dict, cancel: threading.Event) -> None:
        from ..agent.model import LiteLLMModel

        ident = int(request.get("id") or 0)
        try:
            settings = ModelSettings(**{k: v for k, v in request["settings"].items() if k in SETTINGS_FIELDS})
            variable, key = request.get("key_variable"), request.get("key")
            settings.environ = {variable: key} if variable and key else {}  # the key the daemon resolved, only
            stream = bool(request.get("stream"))
            temperature = request.get("temperature")
            reply = LiteLLMModel(settings, cancel).complete(
                request.get("messages") or [], request.get("tools") or [], request.get("response_format"),
                (lambda piece: self.send({"id": ident, "text": piece})) if stream else None,
                float(temperature) if isinstance(temperature, (int, float)) else None)
            self.send({"id": ident, "done": {"content": reply.content, "usage": asdict(reply.usage),
                                             "tool_calls": [asdict(c) for c in reply.tool_calls]}})
        except HermesError as exc:
            self.send({"id": ident, "error": {"type": type(exc).__name__, "message": str(exc)}})
        except Exception as exc:  # a bug: the daemon's turn gets one clear line
            self.send({"id": ident, "error": {"type": "ModelError",
                                              "message": f"model worker: unexpected {type(exc).__name__}: {exc}"}})
        finally:
            with self.lock:
                self.cancels.pop(ident, None)

    def transcribe(self, request: dict) -> None:
        """The words of one WAV (base64) from the hosted speech model the settings name."""
        import base64

        from ..agent.transcription import transcribe_wav

        ident = int(request.get("id") or 0)
        try:
            settings = ModelSettings(**{k: v for k, v in request["settings"].items() if k in SETTINGS_FIELDS})
            wav = base64.b64decode(str(request.get("audio") or ""), validate=True)
            language = request.get("language")
            text = transcribe_wav(settings, request.get("key"), wav, str(language) if language else None)
            self.send({"id": ident, "done": text})
        except HermesError as exc:
            self.send({"id": ident, "error": {"type": type(exc).__name__, "message": str(exc)}})
        except Exception as exc:  # a bug or a malformed request: the voice note's reply says one clear line
            self.send({"id": ident, "error": {"type": "ModelError",
                                              "message": f"model worker: unexpected {type(exc).__name__}: {exc}"}})

    def encode(self, request: dict) -> None:
        """Vectors of the texts, as base64 of float32 rows. A batch of several texts is a skill
        fill: it runs below the turns' priority, as it would in the daemon; a query is one text."""
        import base64

        from ..mind import embeddings
        from .priority import lower_this_thread
        from .skill_vectors import FILL_NICE

        ident = int(request.get("id") or 0)
        texts = [str(t) for t in request.get("texts") or []]
        try:
            if len(texts) > 1:
                lower_this_thread(FILL_NICE - AGENT_NICE)
            vectors = embeddings.encode(texts)
            self.send({"id": ident, "done": base64.b64encode(vectors.astype("float32").tobytes()).decode("ascii")})
        except HermesError as exc:
            self.send({"id": ident, "error": {"type": type(exc).__name__, "message": str(exc)}})
        except Exception as exc:  # a bug: the fill or the turn reports one clear line
            self.send({"id": ident, "error": {"type": "ModelError",
                                              "message": f"model worker: unexpected {type(exc).__name__}: {exc}"}})


def _error_class(name: str | None) -> type[HermesError]:
    from ..mind.embeddings import EmbeddingsUnavailable

    return {**ERRORS, "EmbeddingsUnavailable": EmbeddingsUnavailable}.get(name or "", ModelError)


def _die_with_parent() -> None:
    """Exit as soon as the daemon is gone, even by SIGKILL and mid-import (stdin's end is seen
    only between calls). Watched from a thread: PR_SET_PDEATHSIG follows the *thread* that started
    this process, and the daemon starts it from whichever turn needed it first."""
    parent = int(os.environ.get("HERMES_MODEL_WORKER_PARENT") or os.getppid())

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_S)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _lower_priority() -> None:
    """Run at the priority of the daemon's agent work, wherever it was started from (a process
    started by a lowered thread is already at least that nice: never raised, which needs privilege)."""
    try:
        by = int(os.environ.get("HERMES_MODEL_WORKER_NICE") or AGENT_NICE)
        parent = os.getpriority(os.PRIO_PROCESS, os.getppid())
        own = os.getpriority(os.PRIO_PROCESS, 0)
        if own < min(19, parent + by):
            os.setpriority(os.PRIO_PROCESS, 0, min(19, parent + by))
    except (OSError, ValueError):
        pass


def warm_call_path() -> None:
    """Run litellm's streamed call once on a mock answer (nothing leaves the process) and make one
    HTTP client, before saying ready: the first real call would otherwise import about a hundred
    modules (the HTTP client's, litellm's streaming and logging types, the tokenizer's table) while
    a person waits for the daemon's first turn. A failure here only leaves that to the first call."""
    from ..agent.model import import_litellm
    from ..agent.request import Request

    litellm = import_litellm()
    messages = [{"role": "user", "content": "warm up"}]
    try:
        stream = litellm.completion(model="openai/warm-up", messages=messages, mock_response="ok", stream=True)
        litellm.stream_chunk_builder(list(stream), messages=messages)
        Request().http_client(5.0).close()
    except Exception as exc:  # noqa: BLE001 — the first real call reports its own errors
        log.debug(f"model worker: warming the call path failed ({type(exc).__name__}: {exc})")


def main() -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C on a foreground daemon: the daemon stops it
    _lower_priority()
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")  # the protocol's own copy of stdout
    os.dup2(2, 1)  # whatever litellm prints goes to stderr
    from ..store import log_redaction

    secrets_env = os.environ.get(log_redaction.SECRETS_ENV_VAR)  # the daemon's: its stderr is daemon.out
    log_redaction.install(Path(secrets_env) if secrets_env else None, streams=("stdout", "stderr"))
    from ..agent.model import import_litellm

    import_litellm()
    if os.environ.get("HERMES_MODEL_WORKER_WARM") != "0":
        warm_call_path()
    server = Server(out)
    server.send({"ready": os.getpid(), "protocol": PROTOCOL})
    server.serve(sys.stdin.buffer)
    os._exit(0)  # stdin closed: the daemon let this worker go (calls still running are dropped)


if __name__ == "__main__":
    main()
