"""The models Crow may call and their order: ``[providers]``, ``[models]`` and
``[model]`` of config.toml, zero config, and the overrides.

Zero config (no ``[models]``): the one model comes from ``--model``/``--base-url``,
else ``CROW_MODEL``/``OPENAI_BASE_URL``/``OPENAI_API_KEY``, else ollama on this
machine (``OLLAMA_HOST``), with the embedded model after it if the ``local``
extra is installed.  With a config file, the flags and then the environment
still beat the file.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from .settings import (
    CAPABILITIES,
    DEFAULT_BASE_URL,
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_MAX_OUTPUT,
    DEFAULT_MODEL,
    EMBEDDED_CONTEXT,
    EMBEDDED_MODEL,
    EMBEDDED_OUTPUT,
    PROVIDER_KINDS,
    ModelSpec,
    ProviderSpec,
)
from .validate import ConfigError, as_opt_str, as_positive_int, as_str, as_table

__all__ = [
    "embedded_spec",
    "ollama_url",
    "override",
    "read_chain",
    "read_models",
    "read_providers",
    "zero_config",
]


def read_providers(source: str, raw: Any) -> dict[str, ProviderSpec]:
    """``[providers.NAME]``: an OpenAI-compatible server, or ``kind = "local"`` files."""
    out = {}
    for name, table in as_table(source, "providers", raw).items():
        table = as_table(source, f"providers.{name}", table)
        kind = table.get("kind", "openai")
        if kind not in PROVIDER_KINDS:
            raise ConfigError(source, f"providers.{name}.kind", " or ".join(PROVIDER_KINDS), kind)
        key = f"providers.{name}.base_url"
        out[name] = ProviderSpec(
            name=name,  # a local provider runs files, it has no server
            base_url="" if kind == "local" else as_str(source, key, table.get("base_url")),
            api_key_env=as_opt_str(
                source, f"providers.{name}.api_key_env", table.get("api_key_env")
            ),
            kind=kind,
        )
    return out


def read_models(source: str, raw: Any, providers: dict[str, ProviderSpec]) -> dict[str, ModelSpec]:
    """``[models.NAME]``, each on a provider of ``providers``."""
    out = {}
    for name, table in as_table(source, "models", raw).items():
        key = f"models.{name}"
        table = as_table(source, key, table)
        provider = as_str(source, f"{key}.provider", table.get("provider"))
        if provider not in providers:
            raise ConfigError(source, f"{key}.provider", f"one of {sorted(providers)}", provider)
        local = providers[provider].kind == "local"
        embedded = local and table.get("id", name) == EMBEDDED_MODEL
        window = EMBEDDED_CONTEXT if embedded else DEFAULT_CONTEXT_WINDOW
        output = EMBEDDED_OUTPUT if embedded else DEFAULT_MAX_OUTPUT
        # A local model is too often too small to call tools well: it gets them only
        # when config.toml says it can (an OpenAI-compatible server's model may, and
        # its server says so: models.discovery).
        caps = table.get("capabilities", [] if local else ["tools"])
        if not isinstance(caps, list) or not set(caps) <= CAPABILITIES:
            raise ConfigError(
                source, f"{key}.capabilities", f"a list from {sorted(CAPABILITIES)}", caps
            )
        out[name] = ModelSpec(
            name=name,
            provider=provider,
            model_id=as_str(source, f"{key}.id", table.get("id", name)),
            capabilities=frozenset(caps),
            context_window=as_positive_int(
                source,
                f"{key}.context_window",
                table.get("context_window", window),
            ),
            max_output_tokens=as_positive_int(
                source,
                f"{key}.max_output_tokens",
                table.get("max_output_tokens", output),
            ),
            declared=frozenset({"capabilities", "context_window"} & table.keys())
            | (frozenset({"capabilities"}) if local else frozenset()),
        )
    return out


def read_chain(
    source: str, section: dict[str, Any], models: dict[str, ModelSpec]
) -> tuple[str, ...]:
    """``[model]`` default and fallback: the chain's names, the default first."""
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


def zero_config(
    model: str | None, base_url: str | None
) -> tuple[dict[str, ProviderSpec], dict[str, ModelSpec], tuple[str, ...]]:
    """The flags, else the environment, else a guess: ollama on localhost, then the
    embedded model if the ``local`` extra is installed."""
    explicit_url = base_url or os.environ.get("OPENAI_BASE_URL")
    name = model or os.environ.get("CROW_MODEL") or DEFAULT_MODEL
    if name == EMBEDDED_MODEL and explicit_url is None:  # its name, not an ollama id
        return _with_embedded({}, {}, ())
    provider = ProviderSpec(
        name="default",
        base_url=explicit_url or ollama_url(os.environ.get("OLLAMA_HOST", "")),
        api_key=os.environ.get("OPENAI_API_KEY"),
        guessed=explicit_url is None,
    )
    providers = {"default": provider}
    models = {name: ModelSpec(name=name, provider="default", model_id=name)}
    if explicit_url is None and name == DEFAULT_MODEL and _embedded_available():
        return _with_embedded(providers, models, tuple(models), first=False)
    return providers, models, tuple(models)


def _with_embedded(
    providers: dict[str, ProviderSpec],
    models: dict[str, ModelSpec],
    chain: tuple[str, ...],
    *,
    first: bool = True,
) -> tuple[dict[str, ProviderSpec], dict[str, ModelSpec], tuple[str, ...]]:
    """The chain with the embedded model added, first (asked for by name) or last."""
    providers = {**providers, "embedded": ProviderSpec(name="embedded", base_url="", kind="local")}
    models = {**models, EMBEDDED_MODEL: embedded_spec()}
    rest = tuple(name for name in chain if name != EMBEDDED_MODEL)
    return providers, models, (EMBEDDED_MODEL, *rest) if first else (*rest, EMBEDDED_MODEL)


def ollama_url(host: str) -> str:
    """Where ollama serves, as its own ``OLLAMA_HOST`` says (``host``, ``host:port``
    or a URL; a wildcard bind means this machine); DEFAULT_BASE_URL without it."""
    host = host.strip()
    if not host:
        return DEFAULT_BASE_URL
    parts = urlsplit(host if "://" in host else f"http://{host}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 11434)
    except ValueError:
        return DEFAULT_BASE_URL  # not a host ollama could use either
    name = parts.hostname or "localhost"
    name = "localhost" if name in ("0.0.0.0", "::") else name
    name = f"[{name}]" if ":" in name else name
    return f"{parts.scheme}://{name}:{port}/v1"


def embedded_spec(name: str = "") -> ModelSpec:
    """The model the ``local`` extra ships: text only, no tools (too small to call
    them reliably), its full 8k context."""
    return ModelSpec(
        name=name or EMBEDDED_MODEL,
        provider="embedded",
        model_id=EMBEDDED_MODEL,
        capabilities=frozenset(),
        context_window=EMBEDDED_CONTEXT,
        max_output_tokens=EMBEDDED_OUTPUT,
        declared=frozenset({"capabilities", "context_window"}),
    )


def _embedded_available() -> bool:
    from ..extras import embedded_available  # start-up: crow --version never needs hashlib

    return embedded_available()


def override(
    providers: dict[str, ProviderSpec],
    models: dict[str, ModelSpec],
    chain: tuple[str, ...],
    model: str | None,
    base_url: str | None,
) -> tuple[dict[str, ProviderSpec], dict[str, ModelSpec], tuple[str, ...]]:
    """The file's chain with ``model`` and ``base_url`` (the flags, else the
    environment) put first: a configured name, the embedded model, or a new entry."""
    providers, models = dict(providers), dict(models)
    if model is not None and model in models and base_url is None:
        return providers, models, (model, *[m for m in chain if m != model])
    if model == EMBEDDED_MODEL and base_url is None:  # its name, not a model id
        return _with_embedded(providers, models, chain)
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
        declared=base.declared,
    )
    return providers, models, (name, *[m for m in chain if m != name])
