"""A local OpenAI-compatible HTTP server that replays scripted replies and records every request.

litellm talks to it over real sockets through `api_base`, exactly as it would to vLLM or Ollama.
Script items:
  {"content": "text"}                                 an answer
  {"tool_calls": [("memory", {"action": "add"}), ...]} tool calls (arguments: dict, or raw str)
  {"status": 500, "body": {...}}                       an HTTP error
  "delay": seconds or "wait": threading.Event, with any of these, hold the reply back
Or pass `responder(request_json) -> item` to answer computed replies (used by benchmarks), or set
`by_schema[name] = responder` to answer every structured request of that JSON schema apart from the
script (a question the code asks any number of times, whose answers the test does not script).
Run as a script (`python tests/model_server.py --help`) it serves replies by hand, to try the CLI.

A request with `"stream": true` is answered as a real server streams: Server-Sent Events, one
chunk per word of the content (or the item's "chunks": [pieces]), tool calls as deltas (the name,
then the arguments in pieces), `stream_delay` seconds between chunks (the item's "chunk_delay"
wins), a usage chunk when `stream_options.include_usage` asks for one, then `data: [DONE]`.
A client that closes the connection mid-stream is recorded in `closed_early` (request indexes).
An item's "hold_after": n stops the stream after n chunks and waits (up to "hold_s", 60) until the
client hangs up, without writing: only a client that closes its connection itself is seen gone.

Speech to text as OpenAI's `POST /v1/audio/transcriptions` (multipart: `file`, `model`,
`language`, ...): each request is recorded in `transcriptions` (its fields, the file's name, type
and bytes) and answered `{"text": ...}` with the next of `transcripts` (scripted, like `script`),
or a 400 when none is left. Chat requests and transcriptions are scripted separately.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Transcription:
    """One `/v1/audio/transcriptions` request, as the server received it."""

    fields: dict[str, str]  # model, language, response_format, ...
    filename: str
    content_type: str
    audio: bytes
    headers: dict[str, str]


class ModelServer:
    def __init__(self, script: list | None = None, responder=None, stream_delay: float = 0.0, port: int = 0,
                 then: dict | None = None):
        self.script = list(script or [])
        self.then = then  # the reply once the script is used up (None: a 400, so a test sees it)
        self.responder = responder
        self.by_schema: dict[str, Callable[[dict], dict]] = {}  # structured requests answered apart from the script
        self.stream_delay = stream_delay
        self.closed_early: list[int] = []  # streamed requests whose client hung up before the end
        self.client_gone = threading.Event()
        self.requests: list[dict] = []
        self.raw_sizes: list[int] = []
        self.headers: list[dict[str, str]] = []  # each request's HTTP headers (to check which key was sent)
        self.transcripts: list[str | dict] = []  # scripted transcription answers: text, or {"status": ...}
        self.transcriptions: list[Transcription] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.rstrip("/").endswith("/audio/transcriptions"):
                    status, payload = owner._transcribe(self.headers.get("Content-Type") or "", raw,
                                                        dict(self.headers.items()))
                    data = json.dumps(payload).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"unparsed": raw.decode(errors="replace")}
                with owner._lock:
                    owner.requests.append(body)
                    owner.raw_sizes.append(len(raw))
                    owner.headers.append(dict(self.headers.items()))
                    index = len(owner.requests) - 1
                    item = owner._next(body)
                status, payload = owner._render(item, body)
                if status == 200 and isinstance(body, dict) and body.get("stream"):
                    self._stream(payload, item, body, index)
                    return
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, payload: dict, item: dict, body: dict, index: int) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                delay = item.get("chunk_delay", owner.stream_delay)
                try:
                    for n, event in enumerate(owner._chunks(payload, item, body)):
                        if n == item.get("hold_after"):
                            self._hold(float(item.get("hold_s", 60)))
                        data = f"data: {json.dumps(event)}\n\n".encode()
                        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                        self.wfile.flush()
                        if delay:
                            time.sleep(delay)
                    done = b"data: [DONE]\n\n"
                    self.wfile.write(f"{len(done):x}\r\n".encode() + done + b"\r\n0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    with owner._lock:
                        owner.closed_early.append(index)
                    owner.client_gone.set()
                    self.close_connection = True

            def _hold(self, seconds: float) -> None:
                """Wait without writing until the client closes or shuts down its end (it then
                reads as end of file) or `seconds` pass."""
                import select
                import socket

                deadline = time.monotonic() + seconds
                while time.monotonic() < deadline:
                    if select.select([self.connection], [], [], 0.05)[0]:
                        try:
                            gone = self.connection.recv(1, socket.MSG_PEEK) == b""
                        except OSError:
                            gone = True
                        if gone:
                            raise ConnectionResetError("the client hung up")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False  # a scripted slow reply must not hold up teardown
        self.port = self.server.server_address[1]
        self.api_base = f"http://127.0.0.1:{self.port}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def authorizations(self) -> list[str | None]:
        """The Authorization header of each request, in order."""
        return [next((v for k, v in h.items() if k.lower() == "authorization"), None) for h in self.headers]

    def add(self, *items) -> ModelServer:
        with self._lock:
            self.script.extend(items)
        return self

    def _transcribe(self, content_type: str, raw: bytes, headers: dict[str, str]) -> tuple[int, dict]:
        """A transcription request: recorded, then answered with the next scripted transcript."""
        if not content_type.lower().startswith("multipart/form-data"):
            return 400, {"error": {"message": "expected multipart/form-data", "type": "invalid_request_error"}}
        msg = BytesParser(policy=HTTP).parsebytes(b"content-type: " + content_type.encode() + b"\r\n\r\n" + raw)
        fields: dict[str, str] = {}
        file = ("", "", b"")
        for part in msg.iter_parts():
            name = str(part.get_param("name", header="content-disposition"))
            payload = part.get_payload(decode=True) or b""
            if part.get_filename() is not None:
                file = (part.get_filename(), part.get_content_type(), payload)
            else:
                fields[name] = payload.decode()
        with self._lock:
            self.transcriptions.append(Transcription(fields, *file, headers))
            item = self.transcripts.pop(0) if self.transcripts else \
                {"status": 400, "body": {"error": {"message": "no transcript scripted", "type": "invalid_request_error"}}}
        if not file[2]:
            return 400, {"error": {"message": "no file in the request", "type": "invalid_request_error"}}
        if isinstance(item, dict):
            return item["status"], item.get("body") or {"error": {"message": "scripted", "type": "server_error"}}
        return 200, {"text": item}

    def _next(self, body: dict):
        if self.responder:
            return self.responder(body)
        schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("name")
        if schema in self.by_schema:
            return self.by_schema[schema](body)
        if not self.script and self.then is not None:
            return self.then
        if not self.script:
            return {"status": 400, "body": {"error": {"message": "test script exhausted", "type": "invalid_request_error"}}}
        item = self.script.pop(0)
        return item(body) if callable(item) else item  # a function computes its reply from the request

    def _render(self, item: dict, body: dict) -> tuple[int, dict]:
        if item.get("delay"):
            time.sleep(item["delay"])
        if item.get("wait") is not None:
            item["wait"].wait(60)  # a threading.Event the test sets when it is ready
        if "status" in item:
            return item["status"], item.get("body") or {"error": {"message": f"scripted {item['status']}", "type": "server_error"}}
        message: dict = {"role": "assistant", "content": item.get("content")}
        calls = []
        for i, call in enumerate(item.get("tool_calls") or []):
            name, args = call[0], call[1]
            calls.append({"id": f"call_{len(self.requests)}_{i}", "type": "function",
                          "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}})
        if calls:
            message["tool_calls"] = calls
        return 200, {
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "test"),
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
        }

    def _chunks(self, payload: dict, item: dict, body: dict):
        """The chat.completion.chunk events of a reply, as an OpenAI-compatible server sends them."""
        message = payload["choices"][0]["message"]
        base = {"id": payload["id"], "object": "chat.completion.chunk", "created": payload["created"],
                "model": payload["model"]}

        def chunk(delta: dict, finish: str | None = None) -> dict:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        yield chunk({"role": "assistant", "content": ""})
        content = message.get("content") or ""
        for piece in item.get("chunks") or re.findall(r"\s*\S+|\s+", content):
            yield chunk({"content": piece})
        for i, call in enumerate(message.get("tool_calls") or []):
            yield chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                         "function": {"name": call["function"]["name"], "arguments": ""}}]})
            args = call["function"]["arguments"]
            for start in range(0, len(args), 8):
                yield chunk({"tool_calls": [{"index": i, "function": {"arguments": args[start:start + 8]}}]})
        yield chunk({}, payload["choices"][0]["finish_reason"])
        if (body.get("stream_options") or {}).get("include_usage"):
            yield {**base, "choices": [], "usage": payload["usage"]}

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def configure_vault(vault_root, server: ModelServer, extra: str = "") -> None:
    """Point a vault's hermes.yaml at the server (the key comes from HERMES_TEST_KEY)."""
    (vault_root / "hermes.yaml").write_text(
        f"model: openai/test-model\napi_base: {server.api_base}\napi_key_env: HERMES_TEST_KEY\n"
        f"sandbox:\n  backend: local\n{extra}"
    )


def main(argv: list[str] | None = None) -> None:
    """Serve scripted replies from the command line, to try the CLI by hand against it."""
    import argparse

    parser = argparse.ArgumentParser(
        description="Serve scripted OpenAI-compatible chat replies on 127.0.0.1 (prints the api_base).",
        epilog="Then in hermes.yaml: model: openai/test-model, api_base: <printed URL>, and any key "
               "(e.g. OPENAI_API_KEY=x in .hermes/secrets.env).")
    parser.add_argument("--port", type=int, default=0, help="port to bind (default: a free one)")
    parser.add_argument("--reply", action="append", default=[], metavar="TEXT",
                        help="an answer, in order (repeat the option for more)")
    parser.add_argument("--script", metavar="FILE.json",
                        help='a JSON list of items: {"content": ...}, {"tool_calls": [[name, {args}]]}, {"status": 500}')
    parser.add_argument("--then", default="ok", metavar="TEXT",
                        help="the answer once the script is used up (default: ok)")
    args = parser.parse_args(argv)
    script: list = [{"content": text} for text in args.reply]
    if args.script:
        with open(args.script, encoding="utf-8") as f:
            script += json.load(f)
    server = ModelServer(script, port=args.port, then={"content": args.then})
    print(f"api_base: {server.api_base}  (Ctrl-C to stop)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.close()


if __name__ == "__main__":
    main()
