"""The model layer: every call goes through litellm, so any provider works.

litellm is imported lazily (it takes seconds), with its bundled cost map so no network is needed.
Transient failures (timeouts, 429, 5xx, a server not answering yet) are retried with exponential
backoff; a bad key, an unknown model or a server that stays unreachable is one clear error.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Protocol

from ..errors import HermesError
from .request import Cancelled, Request

if TYPE_CHECKING:  # the model worker never reads hermes.yaml: the daemon sends it the settings
    from ..store.config import Config


class ModelError(HermesError):
    """A model call failed for good (after retries where retrying makes sense)."""


class TurnCancelled(HermesError):
    """The person interrupted the turn (Ctrl-C): the model request was closed, the turn stops."""


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text, as the model wrote it
    error: str | None = None  # refused before running (a text call naming no offered tool, bad arguments)


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        if other.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + other.cost_usd

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class Reply:
    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)

    def as_message(self) -> dict:
        msg: dict = {"role": "assistant", "content": self.content or ""}
        if self.tool_calls:
            msg["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return msg


OnText = Callable[[str], None]  # told each piece of the answer's text as the model writes it


class Model(Protocol):
    name: str

    def complete(self, messages: list[dict], tools: list[dict], response_format: dict | None = None,
                 on_text: OnText | None = None, temperature: float | None = None) -> Reply:
        """One model call; `response_format` (an OpenAI `json_schema` document) constrains the answer;
        with `on_text` the answer is streamed to it as it comes; `temperature` (None: the provider's
        default) lets a caller draw several different samples of one answer."""
        ...


# The variable each hosted provider's key is read from when hermes.yaml names none.
# providers whose `client` litellm hands to an OpenAI SDK object, never to its own HTTP handler:
# for them a Ctrl-C closes the connection when the next piece of the answer arrives
OPENAI_SDK_CLIENTS = frozenset({"azure", "azure_text", "text-completion-openai", "text-completion-inception"})
PROVIDER_KEYS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "openrouter": "OPENROUTER_API_KEY",
                 "gemini": "GEMINI_API_KEY", "groq": "GROQ_API_KEY", "xai": "XAI_API_KEY",
                 "mistral": "MISTRAL_API_KEY", "deepseek": "DEEPSEEK_API_KEY", "together_ai": "TOGETHERAI_API_KEY"}
KEYLESS = ("ollama", "ollama_chat", "lm_studio", "hosted_vllm", "vllm", "llamafile")


@dataclass
class ModelSettings:
    model: str
    api_base: str | None = None
    api_key_env: str | None = None
    timeout_s: float = 120.0
    max_tokens: int | None = None  # most tokens in one answer (None: the provider's default)
    retries: int = 4
    retry_base_s: float = 1.0
    secrets: dict[str, str] = field(default_factory=dict)  # .hermes/secrets.env (the environment wins)
    setting: str = "model"  # the hermes.yaml key this model comes from, named when its key is missing
    # The environment keys are read from: this process's, or the CLI's that handed the turn to a
    # daemon (so a warm turn uses the caller's key, exactly as a cold one would).
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ, repr=False)

    @classmethod
    def from_config(cls, config: Config, task: str | None = None, override: str | None = None,
                    secrets: dict[str, str] | None = None, environ: Mapping[str, str] | None = None) -> ModelSettings:
        env = os.environ if environ is None else environ
        base = float(env.get("HERMES_RETRY_BASE_S", "1.0"))
        return cls(
            model=override or (config.model_for(task) if task else config.model),
            api_base=config.api_base,
            api_key_env=config.api_key_env,
            retry_base_s=base,
            secrets=secrets or {},
            environ=env,
        )

    @classmethod
    def for_vault(cls, vault, task: str | None = None, override: str | None = None,
                  environ: Mapping[str, str] | None = None) -> ModelSettings:
        """Settings from hermes.yaml, with model keys also read from .hermes/secrets.env."""
        return cls.from_config(vault.config, task, override, vault.secrets(), environ)

    @property
    def provider(self) -> str:
        return self.model.split("/", 1)[0] if "/" in self.model else "openai"

    def key_variable(self) -> str | None:
        return self.api_key_env or PROVIDER_KEYS.get(self.provider)

    def api_key(self) -> str | None:
        """The key from the environment or .hermes/secrets.env; a missing one that a hosted
        provider needs is a clear error at once, before litellm is even imported."""
        var = self.key_variable()
        key = (self.environ.get(var) or self.secrets.get(var)) if var else None
        needs_key = self.api_key_env is not None or (self.api_base is None and self.provider not in KEYLESS)
        if not key and var and needs_key:
            prefix = self.setting.rpartition(".")[0]
            where = f"{prefix + '.' if prefix else ''}api_key_env in hermes.yaml" if self.api_key_env \
                else f"the {self.provider} key"
            local = " (e.g. ollama_chat/llama3.1 for a local model)" if self.setting == "model" else ""
            raise ModelError(f"model {self.model}: no API key: {var} ({where}) is not set. Put `{var}=...` in "
                             f".hermes/secrets.env or the environment, or change `{self.setting}` in hermes.yaml"
                             f"{local}")
        return key or None


CALLER_VARIABLES = ("HERMES_RETRY_BASE_S",)  # besides key variables, what a model call reads from the environment


def caller_environment(config: Config, override: str | None = None,
                       environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """The variables of this process's environment that a model call of this vault would read:
    the key variable of every model hermes.yaml names (and of `override`). A CLI hands them to the
    daemon with a warm turn, so the turn sees the caller's keys. None when some model's key would
    be read by litellm itself from its own environment (a provider hermes-fs does not know the
    variable of): then only an in-process turn behaves like a cold one."""
    env = os.environ if environ is None else environ
    models = {config.model, override, *(getattr(config.models, f.name) for f in fields(config.models))}
    names = set(CALLER_VARIABLES)
    for model in filter(None, models):
        settings = ModelSettings(str(model), api_base=config.api_base, api_key_env=config.api_key_env)
        var = settings.key_variable()
        if var:
            names.add(var)
        elif settings.provider not in KEYLESS and not config.api_base:
            return None
    return {name: env[name] for name in sorted(names) if name in env}


def check_model(vault, environ: Mapping[str, str] | None = None) -> tuple[bool, str]:
    """`doctor`'s model check: one tiny call without retries; (ok, what happened)."""
    settings = ModelSettings.for_vault(vault, environ=environ)
    settings.retries = 0
    try:
        reply = LiteLLMModel(settings).complete([{"role": "user", "content": "Answer with one word: ok"}], [])
    except HermesError as exc:
        return False, str(exc)
    return True, f"{settings.model} answered ({(reply.content or '').strip()[:40]!r})"


class Remote(Protocol):
    """Where a process's model calls (completions and speech to text) go instead of an in-process
    litellm: the daemon's model worker (service/model_worker.py), a process of its own so the
    daemon stays small."""

    def complete(self, settings: ModelSettings, key: str | None, messages: list[dict], tools: list[dict],
                 response_format: dict | None, on_text: OnText | None, cancel: threading.Event | None,
                 temperature: float | None = None) -> Reply:
        ...

    def transcribe(self, settings: ModelSettings, key: str | None, wav: bytes, language: str | None) -> str:
        """A voice note's words from a hosted speech model (agent.transcription.transcribe_wav there)."""
        ...


_REMOTE: Remote | None = None


def serve_from(remote: Remote | None, replacing: Remote | None = None) -> None:
    """Route this process's model calls to `remote` (None: litellm in this process again). With
    `replacing`, only if that is still the one in use (one of several daemons in a process stopping)."""
    global _REMOTE
    if replacing is None or _REMOTE is replacing:
        _REMOTE = remote


def remote() -> Remote | None:
    return _REMOTE


def import_litellm():
    """litellm, imported with the cyclic garbage collector paused: its import makes hundreds of
    thousands of objects (pydantic models) and nothing to collect, so each collection the
    allocations trigger meanwhile is wasted work (bench/cold_start.py shows the share). Once it is
    in, those objects are moved out of the collector's sight (gc.freeze): they live as long as the
    process, and otherwise every full collection of the calls that follow walks them all again."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import gc
    import sys

    first = "litellm" not in sys.modules  # (a thread importing it already put it there: that thread freezes)
    collecting = gc.isenabled()
    gc.disable()  # process-wide: whoever paused it resumes it (a second importer waits on the module lock)
    try:
        import litellm

        if first:
            gc.freeze()
            _skip_file_ids(litellm)
            _no_price_at_stream_start()
    finally:
        if collecting:
            gc.enable()

    litellm.suppress_debug_info = True
    quiet_litellm_logs()
    return litellm


def _skip_file_ids(litellm) -> None:
    """litellm's every completion passes the messages through its proxy's file-id mapping, whose
    first use imports the proxy's types (about 0.1 s of CPU in a cold call's or a worker's first
    model call); it changes only messages with content parts (files), which are the ones still
    handed to it."""
    main = getattr(litellm, "main", None)
    original = getattr(main, "update_messages_with_model_file_ids", None)
    if original is None or getattr(original, "_hermes_skips", False):
        return

    def update_messages_with_model_file_ids(messages, *args, **kwargs):
        if any(isinstance(m, dict) and isinstance(m.get("content"), list) for m in messages or ()):
            return original(messages, *args, **kwargs)
        return messages

    update_messages_with_model_file_ids._hermes_skips = True  # type: ignore[attr-defined]
    setattr(main, "update_messages_with_model_file_ids", update_messages_with_model_file_ids)  # noqa: B010


def _no_price_at_stream_start() -> None:
    """litellm prices a streamed call the moment the stream opens, before any answer: it counts the
    prompt's tokens with tiktoken (loading its cl100k table: 0.1 s of CPU on a model it has no
    price for, 0.3 s on one it has) for a figure it keeps on the stream object and nobody reads.
    The call's price is worked out from the finished response's usage (`_reply`), as before."""
    try:
        from litellm.litellm_core_utils.litellm_logging import Logging
        from litellm.litellm_core_utils.streaming_handler import CustomStreamWrapper
    except ImportError:  # another litellm layout: left as it is
        return
    original = Logging.response_cost_calculator
    if getattr(original, "_hermes_skips", False):
        return

    def response_cost_calculator(self, result, *args, **kwargs):
        if isinstance(result, CustomStreamWrapper):
            return None
        return original(self, result, *args, **kwargs)

    response_cost_calculator._hermes_skips = True  # type: ignore[attr-defined]
    setattr(Logging, "response_cost_calculator", response_cost_calculator)  # noqa: B010


def import_litellm_in_background() -> None:
    """Start importing litellm on a thread while this process reads the vault and builds the
    prompt; the turn's own `import_litellm` then waits only for what is left of it (the import
    lock makes the two one import). A failure here is left for the turn's import to report."""

    def run() -> None:
        try:
            import_litellm()
        except Exception:  # noqa: BLE001, S110 — reported by the turn's own import
            pass

    threading.Thread(target=run, name="import-litellm", daemon=True).start()


def quiet_litellm_logs() -> None:
    """litellm logs each call at INFO on its own handler *and* through the root logger (so a daemon
    printed every call twice), and httpx logs each request: only their warnings are worth keeping."""
    import logging

    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm", "httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)


class LiteLLMModel:
    def __init__(self, settings: ModelSettings, cancel: threading.Event | None = None):
        self.settings = settings
        self.name = settings.model
        self.usage = Usage()  # running total for this model object
        self.calls = 0
        self.cancel = cancel  # set from another thread (Ctrl-C): the request in flight is closed at once

    def complete(self, messages: list[dict], tools: list[dict], response_format: dict | None = None,
                 on_text: OnText | None = None, temperature: float | None = None) -> Reply:
        key = self.settings.api_key()  # before the import: a missing key is reported at once
        if _REMOTE is not None:  # the daemon: litellm lives in its model worker
            try:
                reply = _REMOTE.complete(self.settings, key, messages, tools, response_format, on_text, self.cancel,
                                         temperature)
            except KeyboardInterrupt:
                if self.cancel is not None:
                    self.cancel.set()
                raise TurnCancelled("the turn was interrupted") from None
            self.usage.add(reply.usage)
            self.calls += 1
            return reply
        litellm = import_litellm()
        kwargs = dict(model=self.settings.model, messages=messages, timeout=self.settings.timeout_s, num_retries=0)
        if tools:
            kwargs["tools"] = tools
        if response_format:
            kwargs["response_format"] = response_format
        if self.settings.max_tokens:
            kwargs["max_tokens"] = self.settings.max_tokens
        if temperature is not None:
            kwargs["temperature"] = temperature
        if self.settings.api_base:
            kwargs["api_base"] = self.settings.api_base
            if not key and self.settings.provider == "openai":
                key = "no-key"  # a keyless OpenAI-compatible server (Ollama, vLLM): litellm's client wants one
        if key:
            kwargs["api_key"] = key
        attempt = 0
        shown: list[str] = []  # text already streamed: a call that failed after it is not tried again

        def show(text: str) -> None:
            shown.append(text)
            if on_text is not None:
                on_text(text)

        while True:
            try:
                reply = self._attempt(litellm, kwargs, show, streaming=on_text is not None)
                break
            except (Cancelled, KeyboardInterrupt):
                if self.cancel is not None:
                    self.cancel.set()
                raise TurnCancelled("the turn was interrupted") from None
            except Exception as exc:  # litellm maps provider errors onto its own classes
                kind = classify(exc)
                if not shown and attempt < retries_for(kind, self.settings.retries):
                    time.sleep(self.settings.retry_base_s * (2**attempt))
                    attempt += 1
                    continue
                raise ModelError(describe(exc, kind, self.settings, attempt)) from None
        self.calls += 1
        return reply

    def _attempt(self, litellm, kwargs: dict, on_text: OnText, streaming: bool) -> Reply:
        """One request: in this thread when nothing can interrupt it; otherwise in a worker, with its
        connection shut down the moment the turn is cancelled (a local server stops generating)."""
        if self.cancel is None and not streaming:
            return self._reply(litellm, litellm.completion(**kwargs))
        request = Request(self.cancel)
        call = dict(kwargs)
        if self.settings.provider == "openai":
            import openai

            call["client"] = openai.OpenAI(api_key=kwargs.get("api_key") or "no-key", base_url=kwargs.get("api_base"),
                                           http_client=request.http_client(self.settings.timeout_s), max_retries=0)
            if streaming:
                call["stream_options"] = {"include_usage": True}
        elif self.settings.provider not in OPENAI_SDK_CLIENTS:
            from litellm.llms.custom_httpx.http_handler import HTTPHandler

            # litellm's own HTTP path (most providers) takes this client: its socket is ours to shut down
            call["client"] = HTTPHandler(timeout=self.settings.timeout_s,
                                         client=request.http_client(self.settings.timeout_s))
        if not streaming:
            return request.run(lambda emit: self._reply(litellm, litellm.completion(**call)))
        return request.run(lambda emit: self._streamed(litellm, call, emit, request), on_text)

    def _streamed(self, litellm, kwargs: dict, emit: OnText, request: Request) -> Reply:
        """Read a streamed answer, handing on its text as it comes; the chunks (tool-call pieces
        included) are put together by litellm into one response at the end."""
        stream = litellm.completion(**kwargs, stream=True)
        chunks = []
        try:
            for chunk in stream:
                if request.aborted.is_set():
                    break
                chunks.append(chunk)
                choices = getattr(chunk, "choices", None) or []
                text = getattr(choices[0].delta, "content", None) if choices else None
                if text:
                    emit(text)
        finally:
            close = getattr(stream, "close", None)
            if callable(close):
                close()
        if request.aborted.is_set():
            raise Cancelled()
        if not chunks:
            raise ModelError(f"model {self.name} returned an empty stream")
        return self._reply(litellm, litellm.stream_chunk_builder(chunks, messages=kwargs["messages"]))

    def _reply(self, litellm, response) -> Reply:
        try:
            message = response.choices[0].message
        except (AttributeError, IndexError, TypeError):
            raise ModelError(f"model {self.name} returned no message") from None
        calls = [
            ToolCall(c.id or f"call_{i}", c.function.name or "", c.function.arguments or "")
            for i, c in enumerate(getattr(message, "tool_calls", None) or [])
        ]
        u = getattr(response, "usage", None)
        usage = Usage(getattr(u, "prompt_tokens", 0) or 0, getattr(u, "completion_tokens", 0) or 0)
        try:
            usage.cost_usd = float(litellm.completion_cost(completion_response=response))
        except Exception:
            usage.cost_usd = None  # unknown model or local server: litellm has no price
        self.usage.add(usage)
        content = message.content if isinstance(message.content, str) else None
        return Reply(content, calls, usage)


def retries_for(kind: str, configured: int) -> int:
    """Retry only what can succeed on retry: rate limits and server errors fully, an unreachable
    server once (a local server may be starting), everything else never."""
    return {"retry": configured, "unreachable": 1}.get(kind, 0)


# litellm's own words for "the server answered 200, but not with an OpenAI-style body": no class tells it.
_NOT_AN_LLM = ("Empty or invalid response", "Invalid response object")
# Errors of the network itself, wherever litellm wraps them (it reports a refused connection as an
# InternalServerError 500 whose cause is httpx.ConnectError).
_CONNECT_ERRORS = ("ConnectError", "ConnectTimeout", "ConnectionRefusedError", "ConnectionResetError",
                   "ConnectionAbortedError", "gaierror", "RemoteProtocolError", "NetworkError")
_TIMEOUTS = ("ReadTimeout", "WriteTimeout", "PoolTimeout", "TimeoutError", "APITimeoutError", "Timeout")


def causes(exc: BaseException) -> list[BaseException]:
    """The exception and every cause under it (litellm wraps openai's, which wraps httpx's)."""
    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in chain:
        chain.append(e)
        e = e.__cause__ or e.__context__
    return chain


def http_status(chain: list[BaseException]) -> int | None:
    """The HTTP status the server really sent, if a response came back (an httpx/openai status
    error in the chain); litellm's own `status_code` is made up for errors that had no response."""
    for e in chain:
        response = getattr(e, "response", None)
        status = getattr(response, "status_code", None)
        if type(e).__module__.startswith("litellm"):
            continue  # litellm's classes carry a made-up response
        if isinstance(status, int) and type(e).__name__ in ("HTTPStatusError", *_STATUS_ERRORS):
            return status
    return None


_STATUS_ERRORS = ("APIStatusError", "AuthenticationError", "PermissionDeniedError", "NotFoundError",
                  "BadRequestError", "RateLimitError", "InternalServerError", "UnprocessableEntityError",
                  "ConflictError")


def classify(exc: Exception) -> str:
    """unreachable | retry | auth | not_found | not_llm | bad_request | internal | other, from what
    litellm raised and what it wraps: no connection or a timeout, an HTTP status the server sent,
    or an error inside litellm (or the provider's client) before anything was sent."""
    chain = causes(exc)
    names = {type(e).__name__ for e in chain}
    text = str(exc)
    if "Missing credentials" in text or "api_key client option must be set" in text:
        return "auth"  # the openai client refused to send without a key
    if names & set(_CONNECT_ERRORS):
        return "unreachable"
    if names & set(_TIMEOUTS):
        return "retry"
    status = http_status(chain)
    if status is None and type(exc).__name__ in ("AuthenticationError", "PermissionDeniedError"):
        status = getattr(exc, "status_code", None)
    if status is not None:
        if status in (401, 403):
            return "auth"
        if status == 404:
            return "not_found" if "model" in text.lower() else "not_llm"
        if status in (405, 501):
            return "not_llm"
        if status == 429 or status >= 500:
            return "retry"
        if 400 <= status < 500:
            return "not_found" if "LLM Provider NOT provided" in text else "bad_request"
    if any(s in text for s in _NOT_AN_LLM):
        return "not_llm"
    if "LLM Provider NOT provided" in text:
        return "not_found"
    if type(exc).__module__.startswith("litellm") or len(chain) > 1:
        return "internal"  # no response and no network error: it failed inside litellm
    return "other"


def describe(exc: Exception, kind: str, settings: ModelSettings, attempts: int) -> str:
    where = f" at {settings.api_base}" if settings.api_base else ""
    first = one_line(exc)
    if kind == "auth":
        var = settings.key_variable()
        hint = f"check {var}" + (" (api_key_env in hermes.yaml)" if settings.api_key_env else "") if var else \
            "check the provider's API key variable"
        return f"model {settings.model}: the API key was refused or missing ({hint}, in .hermes/secrets.env or the environment)"
    if kind == "not_llm":
        return (f"model {settings.model}: the server{where} answered, but not as an OpenAI-compatible model server "
                f"({first[:120]}); check `api_base` in hermes.yaml")
    if kind == "unreachable":
        return f"model {settings.model}: cannot reach the model server{where or ''} ({attempts + 1} tries); " \
               + ("check `api_base` in hermes.yaml and that the server is running" if where else "check your network")
    if kind == "not_found":
        return f"model {settings.model}: unknown model{where}; check `model` in hermes.yaml ({first})"
    if kind == "retry":
        return f"model {settings.model}: still failing after {attempts + 1} tries: {first}"
    if kind == "internal":
        chain = causes(exc)
        inner = f"{type(chain[1]).__name__}: {one_line(chain[1])}" if len(chain) > 1 else first
        return (f"model {settings.model}: litellm failed before getting an answer ({inner}); "
                f"litellm said: {first}. Check `model` (the provider prefix) in hermes.yaml")
    return f"model {settings.model}: {first}"


def one_line(exc: BaseException, width: int = 300) -> str:
    """An exception's own message on one line (litellm appends tracebacks to some)."""
    text = str(exc).split("Traceback (most recent call last)", 1)[0]
    return " ".join(text.split())[:width] or type(exc).__name__


def parse_arguments(raw: str) -> dict:
    """Tool arguments from the model: a JSON object, or a ValueError the model can act on."""
    if raw is None or not str(raw).strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"arguments are not valid JSON ({exc.msg} at position {exc.pos}); send a JSON object") from None
    if not isinstance(value, dict):
        raise ValueError("arguments must be a JSON object")
    return value
