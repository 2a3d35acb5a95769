"""Crow's home, its config file, and the settings every layer reads.

The home (``CROW_HOME``, default ``~/.agents/crow``) holds ``config.toml``, the
session store (``crow.db``) and ``logs/``.  Zero config works: without a config
file the one model comes from ``CROW_MODEL``, ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY``, falling back to ollama's OpenAI-compatible endpoint on
localhost.  ``crow serve --model NAME --base-url URL`` overrides both.

A config error names the file, the key and what is expected:
``~/.agents/crow/config.toml: models.fast.context_window: expected a positive integer, got "big"``.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CAPABILITIES",
    "Config",
    "ConfigError",
    "ModelSpec",
    "Paths",
    "ProviderSpec",
    "load_config",
    "write_default_config",
]

DEFAULT_BASE_URL = "http://localhost:11434/v1"  # ollama's OpenAI-compatible API
DEFAULT_MODEL = "qwen3:8b"
DEFAULT_CONTEXT_WINDOW = 32_768
DEFAULT_MAX_OUTPUT = 4_096
CAPABILITIES = frozenset({"tools", "image", "audio", "reasoning"})


class ConfigError(Exception):
    """The config file (or an override) is wrong; the message says where and how."""

    def __init__(self, source: str, key: str, expected: str, got: Any = None) -> None:
        got_text = "" if got is None else f", got {got!r}"
        super().__init__(f"{source}: {key}: expected {expected}{got_text}")


@dataclass(frozen=True, kw_only=True)
class Paths:
    home: Path

    @classmethod
    def from_env(cls) -> Paths:
        raw = os.environ.get("CROW_HOME")
        return cls(home=Path(raw).expanduser() if raw else Path.home() / ".agents" / "crow")

    @property
    def config_file(self) -> Path:
        return self.home / "config.toml"

    @property
    def store(self) -> Path:
        return self.home / "crow.db"

    @property
    def logs(self) -> Path:
        return self.home / "logs"


@dataclass(frozen=True, kw_only=True)
class ProviderSpec:
    name: str
    base_url: str
    api_key_env: str | None = None  # read at call time, never stored
    api_key: str | None = None  # only from OPENAI_API_KEY in zero-config mode


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    name: str  # what users and the config call it
    provider: str
    model_id: str  # what the provider calls it
    capabilities: frozenset[str] = frozenset({"tools"})
    context_window: int = DEFAULT_CONTEXT_WINDOW
    max_output_tokens: int = DEFAULT_MAX_OUTPUT


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    attempts: int = 3  # per model, before falling to the next one
    backoff_s: float = 0.5  # doubled after each failed attempt
    timeout_s: float = 300.0  # one model request, first byte to last


@dataclass(frozen=True, kw_only=True)
class Config:
    paths: Paths
    providers: dict[str, ProviderSpec]
    models: dict[str, ModelSpec]
    chain: tuple[str, ...]  # default model first, then the fallbacks
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    system_prompt: str | None = None
    max_steps: int = 25


def load_config(
    paths: Paths | None = None, *, model: str | None = None, base_url: str | None = None
) -> Config:
    """Read ``config.toml`` (if any), then the environment, then the overrides."""
    paths = paths or Paths.from_env()
    source = str(paths.config_file)
    data: dict[str, Any] = {}
    if paths.config_file.exists():
        try:
            data = tomllib.loads(paths.config_file.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(source, "(file)", "valid TOML", str(exc)) from None
    providers = _providers(source, data.get("providers", {}))
    models = _models(source, data.get("models", {}), providers)
    section = _table(source, "model", data.get("model", {}))
    chain = _chain(source, section, models)
    if not models:  # zero config: one model, from the overrides or the environment
        providers, models, chain = _zero_config(model, base_url)
    elif model is not None or base_url is not None:
        providers, models, chain = _override(providers, models, chain, model, base_url)
    return Config(
        paths=paths,
        providers=providers,
        models=models,
        chain=chain,
        retry=_retry(source, data.get("retry", {})),
        system_prompt=_opt_str(source, "model.system_prompt", section.get("system_prompt")),
        max_steps=_positive_int(source, "model.max_steps", section.get("max_steps", 25)),
    )


def _zero_config(
    model: str | None, base_url: str | None
) -> tuple[dict[str, ProviderSpec], dict[str, ModelSpec], tuple[str, ...]]:
    provider = ProviderSpec(
        name="default",
        base_url=base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL,
        api_key=os.environ.get("OPENAI_API_KEY"),
    )
    name = model or os.environ.get("CROW_MODEL") or DEFAULT_MODEL
    spec = ModelSpec(name=name, provider="default", model_id=name)
    return {"default": provider}, {name: spec}, (name,)


def _override(
    providers: dict[str, ProviderSpec],
    models: dict[str, ModelSpec],
    chain: tuple[str, ...],
    model: str | None,
    base_url: str | None,
) -> tuple[dict[str, ProviderSpec], dict[str, ModelSpec], tuple[str, ...]]:
    providers, models = dict(providers), dict(models)
    if model is not None and model in models and base_url is None:
        return providers, models, (model, *[m for m in chain if m != model])
    base = models.get(model or chain[0]) or models[chain[0]]
    provider = providers[base.provider]
    if base_url is not None:
        provider = ProviderSpec(
            name="cli",
            base_url=base_url,
            api_key_env=provider.api_key_env,
            api_key=provider.api_key or os.environ.get("OPENAI_API_KEY"),
        )
        providers["cli"] = provider
    name = model or base.name
    models[name] = ModelSpec(
        name=name,
        provider=provider.name,
        model_id=models[name].model_id if name in models else name,
        capabilities=base.capabilities,
        context_window=base.context_window,
        max_output_tokens=base.max_output_tokens,
    )
    return providers, models, (name, *[m for m in chain if m != name])


# ---- validation helpers ---------------------------------------------------------
def _table(source: str, key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(source, key, "a table", value)
    return value


def _str(source: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(source, key, "a non-empty string", value)
    return value


def _opt_str(source: str, key: str, value: Any) -> str | None:
    return None if value is None else _str(source, key, value)


def _positive_int(source: str, key: str, value: Any) -> int:
    if type(value) is not int or value <= 0:
        raise ConfigError(source, key, "a positive integer", value)
    return value


def _positive_float(source: str, key: str, value: Any) -> float:
    if type(value) not in (int, float) or value < 0:
        raise ConfigError(source, key, "a non-negative number", value)
    return float(value)


def _providers(source: str, raw: Any) -> dict[str, ProviderSpec]:
    out = {}
    for name, table in _table(source, "providers", raw).items():
        table = _table(source, f"providers.{name}", table)
        out[name] = ProviderSpec(
            name=name,
            base_url=_str(source, f"providers.{name}.base_url", table.get("base_url")),
            api_key_env=_opt_str(source, f"providers.{name}.api_key_env", table.get("api_key_env")),
        )
    return out


def _models(source: str, raw: Any, providers: dict[str, ProviderSpec]) -> dict[str, ModelSpec]:
    out = {}
    for name, table in _table(source, "models", raw).items():
        key = f"models.{name}"
        table = _table(source, key, table)
        provider = _str(source, f"{key}.provider", table.get("provider"))
        if provider not in providers:
            raise ConfigError(source, f"{key}.provider", f"one of {sorted(providers)}", provider)
        caps = table.get("capabilities", ["tools"])
        if not isinstance(caps, list) or not set(caps) <= CAPABILITIES:
            raise ConfigError(
                source, f"{key}.capabilities", f"a list from {sorted(CAPABILITIES)}", caps
            )
        out[name] = ModelSpec(
            name=name,
            provider=provider,
            model_id=_str(source, f"{key}.id", table.get("id", name)),
            capabilities=frozenset(caps),
            context_window=_positive_int(
                source, f"{key}.context_window", table.get("context_window", DEFAULT_CONTEXT_WINDOW)
            ),
            max_output_tokens=_positive_int(
                source,
                f"{key}.max_output_tokens",
                table.get("max_output_tokens", DEFAULT_MAX_OUTPUT),
            ),
        )
    return out


def _chain(source: str, section: dict[str, Any], models: dict[str, ModelSpec]) -> tuple[str, ...]:
    if not models:
        return ()
    default = section.get("default", next(iter(models)))
    fallback = section.get("fallback", [])
    if not isinstance(fallback, list):
        raise ConfigError(source, "model.fallback", "a list of model names", fallback)
    for key, name in [("model.default", default)] + [("model.fallback", n) for n in fallback]:
        if name not in models:
            raise ConfigError(
                source, key, f"a model defined under [models] ({sorted(models)})", name
            )
    return tuple(dict.fromkeys([default, *fallback]))


def _retry(source: str, raw: Any) -> RetryPolicy:
    table = _table(source, "retry", raw)
    default = RetryPolicy()
    return RetryPolicy(
        attempts=_positive_int(source, "retry.attempts", table.get("attempts", default.attempts)),
        backoff_s=_positive_float(
            source, "retry.backoff_s", table.get("backoff_s", default.backoff_s)
        ),
        timeout_s=_positive_float(
            source, "retry.timeout_s", table.get("timeout_s", default.timeout_s)
        ),
    )


DEFAULT_CONFIG = """\
# Crow configuration.  Every key is optional: without this file Crow uses one
# model named by CROW_MODEL on OPENAI_BASE_URL (default: ollama on localhost).

[model]
# The model that answers, then the ones that take over when it fails.
default = "local"
# fallback = ["backup"]
# system_prompt = "You are Crow, a careful coding agent."
# max_steps = 25            # model calls per prompt before Crow stops the turn

[providers.ollama]
base_url = "http://localhost:11434/v1"
# api_key_env = "OLLAMA_API_KEY"   # the environment variable holding the key

# [providers.vllm]
# base_url = "http://localhost:8000/v1"

[models.local]
provider = "ollama"
id = "qwen3:8b"                     # the provider's name for the model
capabilities = ["tools", "reasoning"]   # from: tools, image, audio, reasoning
context_window = 32768
max_output_tokens = 4096

# [models.backup]
# provider = "vllm"
# id = "Qwen/Qwen2.5-7B-Instruct"
# capabilities = ["tools"]

[retry]
attempts = 3          # tries per model for transient errors (timeouts, 429, 5xx)
backoff_s = 0.5       # first pause; doubled after each failure
timeout_s = 300       # one model request
"""


def write_default_config(paths: Paths, *, force: bool = False) -> Path:
    """Write a commented ``config.toml``; refuses to overwrite unless ``force``."""
    if paths.config_file.exists() and not force:
        raise FileExistsError(f"{paths.config_file} exists; pass --force to overwrite it")
    paths.home.mkdir(parents=True, exist_ok=True)
    paths.config_file.write_text(DEFAULT_CONFIG)
    return paths.config_file
