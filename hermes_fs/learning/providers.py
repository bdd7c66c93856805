"""Hermes Agent's model providers as litellm routes, for `import hermes-agent`.

Hermes Agent names a provider (`model.provider` in config.yaml: `openrouter`, `anthropic`,
`custom` for an OpenAI-compatible server such as Ollama, vLLM or LM Studio, `custom:<name>` for a
named one under `providers:`, ...) and a model. litellm wants one model string whose prefix picks
the client: a native prefix where litellm has one (`openrouter/`, `anthropic/`, `gemini/`...),
otherwise `openai/` (or `anthropic/` for Anthropic-compatible endpoints) with `api_base`. Where the
key lives under a name litellm would not read by itself, `api_key_env` names it.

The table follows Hermes Agent's provider registry (hermes_cli/auth.py, PROVIDER_REGISTRY).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import InputError

# The variable litellm itself reads for each native prefix (hermes-fs passes it the same way).
NATIVE_KEYS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "openrouter": "OPENROUTER_API_KEY",
               "gemini": "GEMINI_API_KEY", "deepseek": "DEEPSEEK_API_KEY", "xai": "XAI_API_KEY"}


@dataclass(frozen=True)
class Provider:
    prefix: str  # the litellm prefix
    api_base: str | None = None  # for a compatible endpoint; None = litellm's own default
    keys: tuple[str, ...] = ()  # where Hermes Agent reads the key, in its order
    note: str = ""  # what a person must still do


def _compat(url: str, *keys: str, note: str = "") -> Provider:
    return Provider("openai", url, keys, note)


def _anthropic_compat(url: str, *keys: str, note: str = "") -> Provider:
    return Provider("anthropic", url, keys, note)


_OAUTH = "Hermes Agent signs in to it with OAuth, which hermes-fs does not; put an API key in {key}"
PROVIDERS: dict[str, Provider] = {
    "openrouter": Provider("openrouter", None, ("OPENROUTER_API_KEY",)),
    "openai": Provider("openai", None, ("OPENAI_API_KEY",)),
    "openai-api": Provider("openai", None, ("OPENAI_API_KEY",)),
    "anthropic": Provider("anthropic", None, ("ANTHROPIC_API_KEY", "ANTHROPIC_TOKEN")),
    "gemini": Provider("gemini", None, ("GEMINI_API_KEY", "GOOGLE_API_KEY")),
    "deepseek": Provider("deepseek", None, ("DEEPSEEK_API_KEY",)),
    "xai": Provider("xai", None, ("XAI_API_KEY",)),
    "bedrock": Provider("bedrock", None, (), "AWS credentials come from the usual AWS variables or profile"),
    "vertex": Provider("vertex_ai", None, (), "Vertex AI needs VERTEXAI_PROJECT and Google credentials"),
    "azure-foundry": Provider("azure_ai", None, ("AZURE_FOUNDRY_API_KEY",)),
    "lmstudio": _compat("http://127.0.0.1:1234/v1", "LM_API_KEY"),
    "nvidia": _compat("https://integrate.api.nvidia.com/v1", "NVIDIA_API_KEY"),
    "zai": _compat("https://api.z.ai/api/paas/v4", "GLM_API_KEY", "ZAI_API_KEY", "Z_AI_API_KEY"),
    "kimi-coding": _compat("https://api.moonshot.ai/v1", "KIMI_API_KEY", "KIMI_CODING_API_KEY"),
    "kimi-coding-cn": _compat("https://api.moonshot.cn/v1", "KIMI_CN_API_KEY"),
    "stepfun": _compat("https://api.stepfun.ai/step_plan/v1", "STEPFUN_API_KEY"),
    "arcee": _compat("https://api.arcee.ai/api/v1", "ARCEEAI_API_KEY"),
    "gmi": _compat("https://api.gmi-serving.com/v1", "GMI_API_KEY"),
    "actual": _compat("https://api.actual.inc/v1", "ACTUAL_API_KEY"),
    "alibaba": _compat("https://dashscope-intl.aliyuncs.com/compatible-mode/v1", "DASHSCOPE_API_KEY"),
    "alibaba-coding-plan": _compat("https://coding-intl.dashscope.aliyuncs.com/v1", "ALIBABA_CODING_PLAN_API_KEY",
                                   "DASHSCOPE_API_KEY"),
    "ai-gateway": _compat("https://ai-gateway.vercel.sh/v1", "AI_GATEWAY_API_KEY"),
    "opencode-zen": _compat("https://opencode.ai/zen/v1", "OPENCODE_ZEN_API_KEY"),
    "opencode-go": _compat("https://opencode.ai/zen/go/v1", "OPENCODE_GO_API_KEY"),
    "opencode-free": _compat("https://opencode.ai/zen/v1"),
    "kilocode": _compat("https://api.kilo.ai/api/gateway", "KILOCODE_API_KEY"),
    "huggingface": _compat("https://router.huggingface.co/v1", "HF_TOKEN"),
    "xiaomi": _compat("https://api.xiaomimimo.com/v1", "XIAOMI_API_KEY"),
    "tencent-tokenhub": _compat("https://tokenhub.tencentmaas.com/v1", "TOKENHUB_API_KEY"),
    "ollama-cloud": _compat("https://ollama.com/v1", "OLLAMA_API_KEY"),
    "copilot": _compat("https://api.githubcopilot.com", "COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN"),
    "minimax": _anthropic_compat("https://api.minimax.io/anthropic", "MINIMAX_API_KEY"),
    "minimax-cn": _anthropic_compat("https://api.minimaxi.com/anthropic", "MINIMAX_CN_API_KEY"),
    "tencent-tokenplan": _anthropic_compat("https://api.lkeap.cloud.tencent.com/plan/anthropic", "TOKENPLAN_API_KEY"),
    "nous": _compat("https://inference-api.nousresearch.com/v1", "NOUS_API_KEY", note=_OAUTH.format(key="NOUS_API_KEY")),
    "openai-codex": Provider("openai", None, ("OPENAI_API_KEY",), _OAUTH.format(key="OPENAI_API_KEY")),
    "xai-oauth": Provider("xai", None, ("XAI_API_KEY",), _OAUTH.format(key="XAI_API_KEY")),
    "qwen-oauth": _compat("https://portal.qwen.ai/v1", "QWEN_API_KEY", note=_OAUTH.format(key="QWEN_API_KEY")),
    "minimax-oauth": _anthropic_compat("https://api.minimax.io/anthropic", "MINIMAX_API_KEY",
                                       note=_OAUTH.format(key="MINIMAX_API_KEY")),
}
UNSUPPORTED = {"copilot-acp": "it runs GitHub's copilot process, which hermes-fs does not"}
CUSTOM_KEY = "CUSTOM_API_KEY"  # where an inline `api_key` of a custom endpoint goes


@dataclass
class ModelRoute:
    model: str
    api_base: str | None = None
    api_key_env: str | None = None
    key_value: tuple[str, str] | None = None  # (variable, value): an inline key, for .hermes/secrets.env
    notes: list[str] = field(default_factory=list)


Validate = Callable[[str, object], str]


def route_for(cfg: dict, env: dict[str, str], valid: Validate) -> ModelRoute | None:
    """The litellm route for Hermes Agent's config.yaml `model` (None when it names none). `env` is
    the keys its .env holds; `valid(what, value)` refuses a value that is not one line of a value."""
    model = cfg.get("model")
    spec: dict = model if isinstance(model, dict) else {"default": model}
    default = spec.get("default") or spec.get("model")
    if default in (None, ""):
        return None
    default = valid("model", default)
    provider = str(spec.get("provider") or "auto").strip().lower()
    base_url = valid("base_url", spec["base_url"]) if spec.get("base_url") else None
    inline = spec.get("api_key")
    if provider == "custom" or provider.startswith("custom:"):
        return _custom(cfg, provider, default, base_url, inline, valid)
    if provider in UNSUPPORTED:
        raise InputError(f"provider {provider}: {UNSUPPORTED[provider]}; set `model` in hermes.yaml yourself")
    if provider == "auto":
        return _auto(default, base_url, env)
    p = PROVIDERS.get(provider)
    if p is None:
        raise InputError(f"unknown Hermes Agent provider {provider!r}; set `model` in hermes.yaml yourself")
    route = ModelRoute(default if default.startswith(f"{p.prefix}/") and p.api_base is None else f"{p.prefix}/{default}",
                       base_url or p.api_base)
    route.api_key_env = _key_variable(p, env)
    if isinstance(inline, str) and inline:
        var = route.api_key_env or (p.keys[0] if p.keys else CUSTOM_KEY)
        route.key_value, route.api_key_env = (var, inline), (None if NATIVE_KEYS.get(p.prefix) == var else var)
    if p.note:
        route.notes.append(f"model {route.model}: {p.note}")
    if p.keys and not route.key_value and not any(k in env for k in p.keys):
        route.notes.append(f"model {route.model}: no key in the home's .env; put "
                           f"`{route.api_key_env or p.keys[0]}=...` in .hermes/secrets.env")
    return route


def _key_variable(p: Provider, env: dict[str, str]) -> str | None:
    """The variable to name in `api_key_env`: None when litellm reads the key by itself."""
    have = next((k for k in p.keys if k in env), p.keys[0] if p.keys else None)
    if have is None:
        return None
    return None if NATIVE_KEYS.get(p.prefix) == have and p.api_base is None else have


def _custom(cfg: dict, provider: str, default: str, base_url: str | None, inline: object,
            valid: Validate) -> ModelRoute:
    """An OpenAI-compatible endpoint: `openai/<model>` with `api_base`; its key by name or inline."""
    key_env: str | None = None
    if provider.startswith("custom:"):
        name = provider.split(":", 1)[1]
        named = _named_provider(cfg, name)
        if named is None:
            raise InputError(f"provider {provider} is not listed under `providers:` in config.yaml")
        url = named.get("base_url") or named.get("api") or named.get("url")
        base_url = valid("base_url", url) if url else base_url
        inline = named.get("api_key") or inline
        env_name = named.get("key_env") or named.get("api_key_env")
        if isinstance(env_name, str) and env_name:
            key_env = valid("model", env_name)  # a variable name: the same safe characters
    if base_url is None:
        raise InputError(f"provider {provider} has no base_url")
    route = ModelRoute(f"openai/{default}", base_url, key_env)
    if isinstance(inline, str) and inline:
        var = key_env or CUSTOM_KEY
        route.key_value, route.api_key_env = (var, inline), var
    return route


def _named_provider(cfg: dict, name: str) -> dict | None:
    named = cfg.get("providers")
    if isinstance(named, dict) and isinstance(named.get(name), dict):
        return named[name]
    for entry in cfg.get("custom_providers") or []:  # the older list form
        if isinstance(entry, dict) and entry.get("name") == name:
            return entry
    return None


def _auto(default: str, base_url: str | None, env: dict[str, str]) -> ModelRoute:
    """No provider named: Hermes Agent picks by the keys it finds (OpenRouter first)."""
    if base_url:
        return ModelRoute(f"openai/{default}", base_url)
    if "OPENROUTER_API_KEY" in env:
        return ModelRoute(default if default.startswith("openrouter/") else f"openrouter/{default}")
    prefix = default.split("/", 1)[0]
    if prefix in NATIVE_KEYS and "/" in default:
        return ModelRoute(default)
    route = ModelRoute(f"openrouter/{default}")
    route.notes.append(f"model {route.model}: Hermes Agent chose its provider by the keys it found; put "
                       "`OPENROUTER_API_KEY=...` in .hermes/secrets.env, or set `model` in hermes.yaml")
    return route
