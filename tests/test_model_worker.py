"""The daemon's model layer in a worker process (service/model_worker.py): calls go through it to
litellm, over HTTP to the scripted model server, exactly as they would in-process."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
from array import array
from pathlib import Path

import pytest
from conftest import DaemonProc, wait_for
from model_server import ModelServer, configure_vault

from hermes_fs.agent.audio import Pcm
from hermes_fs.agent.model import LiteLLMModel, ModelError, ModelSettings, TurnCancelled, remote, serve_from
from hermes_fs.agent.transcription import transcribe
from hermes_fs.mind import embeddings
from hermes_fs.service.model_worker import ModelWorker
from hermes_fs.store.config import VoiceConfig

ENV_KEY = "sk-test-worker-key"


@pytest.fixture(scope="module")
def worker():
    """One worker for the tests that do not restart it (each start imports litellm)."""
    w = ModelWorker(lambda: 0)
    w.start()
    yield w
    w.stop()


def settings_for(server: ModelServer) -> ModelSettings:
    return ModelSettings("openai/test-model", api_base=server.api_base, api_key_env="HERMES_TEST_KEY",
                         retries=0, environ={"HERMES_TEST_KEY": ENV_KEY})


def through(worker: ModelWorker, server: ModelServer, cancel: threading.Event | None = None) -> LiteLLMModel:
    """A model whose calls this test process sends to `worker` (as the daemon's are)."""
    serve_from(worker)
    return LiteLLMModel(settings_for(server), cancel)


@pytest.fixture(autouse=True)
def in_process_afterwards():
    yield
    serve_from(None)


def test_a_streamed_answer_comes_through_the_worker_piece_by_piece(worker, model_server):
    model_server.add({"content": "hello there from the worker"})
    pieces: list[str] = []
    model = through(worker, model_server)
    reply = model.complete([{"role": "user", "content": "hi"}], [], on_text=pieces.append)
    assert reply.content == "hello there from the worker"
    assert len(pieces) > 1 and "".join(pieces) == reply.content
    assert model_server.requests[0]["stream"] is True  # the worker asked the server for a stream
    assert model_server.authorizations == [f"Bearer {ENV_KEY}"]  # the key the daemon resolved
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (11, 7)
    assert model.calls == 1 and model.usage.total_tokens == 18  # counted on the daemon's side
    assert worker.pid() != os.getpid()


def test_tool_calls_and_the_tools_offered_go_both_ways(worker, model_server):
    model_server.add({"tool_calls": [("memory", {"action": "add", "text": "likes tea"})]})
    tools = [{"type": "function", "function": {"name": "memory", "description": "remember",
                                               "parameters": {"type": "object", "properties": {}}}}]
    reply = through(worker, model_server).complete([{"role": "user", "content": "remember tea"}], tools)
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("memory", '{"action": "add", "text": "likes tea"}')]
    assert model_server.requests[0]["tools"][0]["function"]["name"] == "memory"


def test_the_callers_temperature_reaches_the_server_through_the_worker(worker, model_server):
    """refine's samples (0.7) and its forced choices (0) are drawn in the daemon's worker too."""
    model_server.add({"content": "a"}, {"content": "b"}, {"content": "c"})
    model = through(worker, model_server)
    model.complete([{"role": "user", "content": "hi"}], [], temperature=0.7)
    model.complete([{"role": "user", "content": "hi"}], [], temperature=0.0)
    model.complete([{"role": "user", "content": "hi"}], [])
    assert [r.get("temperature") for r in model_server.requests] == [0.7, 0.0, None]


def test_an_error_from_the_model_server_is_the_same_error_as_in_process(worker, model_server):
    model_server.add({"status": 401, "body": {"error": {"message": "bad key", "type": "invalid_request_error"}}},
                     {"status": 401, "body": {"error": {"message": "bad key", "type": "invalid_request_error"}}})
    with pytest.raises(ModelError) as far:
        through(worker, model_server).complete([{"role": "user", "content": "hi"}], [])
    serve_from(None)
    with pytest.raises(ModelError) as near:
        LiteLLMModel(settings_for(model_server)).complete([{"role": "user", "content": "hi"}], [])
    assert type(far.value) is type(near.value) and str(far.value) == str(near.value)
    assert "API key was refused" in str(far.value)


def test_an_interrupted_request_returns_at_once_and_the_worker_closes_the_connection(worker, model_server):
    model_server.add({"content": " ".join(f"word{i}" for i in range(200)), "chunk_delay": 0.05})
    cancel = threading.Event()
    pieces: list[str] = []

    def on_text(piece: str) -> None:
        pieces.append(piece)
        if len(pieces) == 3:
            cancel.set()  # as Ctrl-C does, from the turn's side

    model = through(worker, model_server, cancel)
    with pytest.raises(TurnCancelled):
        model.complete([{"role": "user", "content": "talk"}], [], on_text=on_text)
    assert len(pieces) < 200
    assert wait_for(lambda: model_server.closed_early == [0], 30)  # the server saw the client go
    model_server.add({"content": "still here"})
    assert through(worker, model_server).complete([{"role": "user", "content": "again"}], []).content == "still here"


def tone(seconds: float = 1.0) -> bytes:
    """A WAV of a 440 Hz tone: sound the decoder takes and the scripted server "hears"."""
    samples = array("h", (int(8000 * math.sin(2 * math.pi * 440 * i / 16_000)) for i in range(int(16_000 * seconds))))
    return Pcm(samples.tobytes()).wav()


def test_a_voice_note_is_transcribed_by_the_worker_as_it_would_be_here(worker, model_server):
    model_server.transcripts += ["  turn the heating down  ", {"status": 401}]
    config = VoiceConfig(engine="api", model="openai/whisper-1", api_base=model_server.api_base,
                         api_key_env="HERMES_TEST_KEY", language="en")
    serve_from(worker)
    heard = transcribe(config, tone(), environ={"HERMES_TEST_KEY": ENV_KEY})
    assert (heard.text, heard.engine) == ("turn the heating down", "api")
    sent = model_server.transcriptions[0]
    assert sent.fields["model"] == "whisper-1" and sent.fields["language"] == "en"
    assert sent.audio == tone()  # the WAV made here crossed the pipe whole
    assert {k.lower(): v for k, v in sent.headers.items()}["authorization"] == f"Bearer {ENV_KEY}"
    with pytest.raises(ModelError, match="transcription by openai/whisper-1 failed"):  # the same error as in-process
        transcribe(config, tone(), environ={"HERMES_TEST_KEY": ENV_KEY})
    assert len(model_server.transcriptions) == 2 and model_server.requests == []


def test_a_request_the_worker_does_not_know_is_answered_not_left_waiting(worker):
    with pytest.raises(ModelError, match="unknown op 'nonsense'"):
        worker._call({"op": "nonsense"}, "a test")


def test_the_worker_is_let_go_when_idle_and_started_again_by_the_next_call(model_server):
    w = ModelWorker(lambda: 0.5)
    try:
        model_server.add({"content": "one"}, {"content": "two"})
        assert through(w, model_server).complete([{"role": "user", "content": "1"}], []).content == "one"
        first = w.pid()
        assert first is not None
        assert wait_for(lambda: w.pid() is None, 30)
        assert wait_for(lambda: not Path(f"/proc/{first}").exists(), 10)  # the process is gone, not just forgotten
        assert through(w, model_server).complete([{"role": "user", "content": "2"}], []).content == "two"
        assert w.starts == 2 and w.pid() not in (None, first)
    finally:
        w.stop()


def test_a_worker_killed_mid_call_is_a_clear_error_and_the_next_call_works(model_server):
    w = ModelWorker(lambda: 0)
    held = threading.Event()
    try:
        w.start()
        model_server.add({"content": "never seen", "wait": held}, {"content": "after the crash"})
        outcome: list[BaseException] = []

        def call() -> None:
            try:
                through(w, model_server).complete([{"role": "user", "content": "slow"}], [])
            except BaseException as exc:  # noqa: BLE001 — the test looks at it
                outcome.append(exc)

        t = threading.Thread(target=call)
        t.start()
        assert wait_for(lambda: len(model_server.requests) == 1, 120)
        os.kill(w.pid() or 0, signal.SIGKILL)
        t.join(30)
        held.set()
        assert len(outcome) == 1 and isinstance(outcome[0], ModelError)
        assert "model worker" in str(outcome[0]) and "killed by signal 9" in str(outcome[0])
        assert "next model call starts a new one" in str(outcome[0])
        reply = through(w, model_server).complete([{"role": "user", "content": "again"}], [])
        assert reply.content == "after the crash" and w.starts == 2
    finally:
        held.set()
        w.stop()


@pytest.mark.slow
def test_a_daemon_serves_turns_through_its_worker_which_lets_go_when_idle_and_dies_with_it(vault, model_server, daemons):
    configure_vault(vault.root, model_server, "daemon:\n  model_worker_idle_s: 1\n")
    env = {**os.environ, "HERMES_TEST_KEY": ENV_KEY}
    d = DaemonProc(vault.root, env=env)
    daemons.append(d)

    def run(text: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "hermes_fs", "--vault", str(vault.root), "run", text],
                              capture_output=True, text=True, env=env, timeout=180)

    model_server.add({"content": "first answer"})
    out = run("hi")
    assert out.returncode == 0 and "first answer" in out.stdout, out.stderr + d.output()
    assert "model worker started" in d.output()
    assert wait_for(lambda: "let go after 1 s idle" in d.output(), 60), d.output()
    assert not workers_of(d.proc.pid)
    model_server.add({"content": "second answer"})
    out = run("again")
    assert out.returncode == 0 and "second answer" in out.stdout, out.stderr + d.output()
    assert (vault.root / ".hermes" / "daemon.log").read_text().count("model worker started") == 2
    assert model_server.authorizations == [f"Bearer {ENV_KEY}"] * 2
    # a killed daemon takes its worker with it
    (vault.root / "hermes.yaml").write_text((vault.root / "hermes.yaml").read_text().replace("idle_s: 1", "idle_s: 0"))
    model_server.add({"content": "third"})
    assert run("three").returncode == 0
    kids = workers_of(d.proc.pid)
    assert kids, d.output()
    d.proc.kill()
    d.proc.wait()
    assert wait_for(lambda: not any(Path(f"/proc/{k}").exists() for k in kids), 30)


def workers_of(pid: int) -> list[int]:
    """The model-worker processes whose parent is `pid`."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"model_worker" in cmd:
            out.append(int(entry.name))
    return out


def test_in_process_again_once_the_daemon_lets_go():
    w = ModelWorker(lambda: 0)
    serve_from(w)
    serve_from(None, replacing=ModelWorker(lambda: 0))  # another daemon's stop does not undo this one's
    assert remote() is w
    serve_from(None, replacing=w)
    assert remote() is None


@pytest.mark.skipif(not embeddings.available(), reason="the embedding model package is not installed")
def test_skill_vectors_are_made_in_the_worker_as_they_would_be_here(worker):
    import numpy as np

    texts = ["replace the old rsa keys on all our servers", "a", "rotate ssh keys"]
    embeddings.encode_with(worker.encode)
    try:
        far = embeddings.encode(texts)
    finally:
        embeddings.encode_with(None)
    near = embeddings.encode(texts)
    assert far.shape == near.shape == (3, embeddings.DIM)
    assert np.abs(far - near).max() < 1e-5
