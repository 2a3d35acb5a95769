"""Crow's home, its config file, and the settings every layer reads.

The home (``CROW_HOME``, default ``~/.agents/crow``) holds ``config.toml``, the
session store (``crow.db``) and ``logs/``.  Zero config works: without a config
file the one model comes from ``CROW_MODEL``, ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY``, falling back to ollama's OpenAI-compatible endpoint on
localhost, then to the embedded model (models.local) if it is installed.
The order is: ``--model``/``--base-url``, then ``CROW_MODEL``/``OPENAI_BASE_URL``,
then the file: a config written by ``crow init`` does not silence the environment.

A config error names the file, the key and what is expected:
``~/.agents/crow/config.toml: models.fast.context_window: expected a positive integer, got "big"``.
"""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..allow_hosts import parse_allow_host
from ..private import tighten_file

__all__ = [
    "CAPABILITIES",
    "AcpSettings",
    "Config",
    "ConfigError",
    "Limits",
    "McpServerSpec",
    "ModelSpec",
    "Paths",
    "ProviderSpec",
    "ToolSettings",
    "forget_permissions",
    "load_config",
    "remembered_permissions",
    "save_permission",
]

DEFAULT_BASE_URL = "http://localhost:11434/v1"  # ollama's OpenAI-compatible API
DEFAULT_MODEL = "qwen3:8b"
DEFAULT_CONTEXT_WINDOW = 32_768
DEFAULT_MAX_OUTPUT = 4_096
CAPABILITIES = frozenset({"tools", "image", "audio", "reasoning"})
PROVIDER_KINDS = ("openai", "local")
#: The model the ``local`` extra ships (models.local), and its context window.
EMBEDDED_MODEL = "smollm2-135m"
EMBEDDED_CONTEXT = 8192
EMBEDDED_OUTPUT = 1024


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

    @property
    def run(self) -> Path:
        return self.home / "run"  # runtime files of running servers (crow.runtime_file)

    @property
    def memory(self) -> Path:
        return self.home / "memory"  # the LanceDB memory store (crow.memory)

    def tool_output(self, session_id: str) -> Path:
        """Where a session's cut tool results are kept whole (crow.tools.caps)."""
        return self.home / "tool-output" / session_id

    @property
    def agents(self) -> Path:
        """``~/.agents``: the user's AGENTS.md (skills and notes live there too)."""
        raw = os.environ.get("CROW_AGENTS_DIR")
        return Path(raw).expanduser() if raw else Path.home() / ".agents"


@dataclass(frozen=True, kw_only=True)
class ProviderSpec:
    name: str
    base_url: str  # "" for a local provider
    api_key_env: str | None = None  # read at call time, never stored
    api_key: str | None = None  # only from OPENAI_API_KEY in zero-config mode
    kind: str = "openai"  # "openai": an OpenAI-compatible server; "local": GGUF files in process
    guessed: bool = False  # zero config's ollama: nobody said it is there


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    name: str  # what users and the config call it
    provider: str
    model_id: str  # what the provider calls it
    capabilities: frozenset[str] = frozenset({"tools"})
    context_window: int = DEFAULT_CONTEXT_WINDOW
    max_output_tokens: int = DEFAULT_MAX_OUTPUT
    #: The fields config.toml set: what a server says (models.discovery) never beats them.
    declared: frozenset[str] = frozenset()
    #: Where the server's own figures came from ("ollama /api/show"); "" if none.
    discovered: str = ""
    #: Which of the fields ("capabilities", "context_window") the server's figures set.
    from_server: frozenset[str] = frozenset()


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    attempts: int = 3  # per model, before falling to the next one
    backoff_s: float = 0.5  # the first wait's limit, doubled per failure (models.router)
    timeout_s: float = 300.0  # one model request, first byte to last


@dataclass(frozen=True, kw_only=True)
class McpServerSpec:
    """An MCP server from config.toml or from a client's session/new."""

    name: str
    command: str | None = None  # stdio: the program, its args and env
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    url: str | None = None  # streamable HTTP
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 120.0  # one tool call
    trusted: bool = False  # its tools' annotations (read-only, crow/kind) set their permission
    acp_server_id: str | None = None  # MCP over ACP: a server the client serves itself


PERMISSION_DECISIONS = ("allow", "ask", "deny")
TOOL_KINDS = ("read", "edit", "delete", "move", "search", "execute", "think", "fetch", "other")
DEFAULT_PERMISSIONS = {
    "read": "allow",
    "search": "allow",
    "think": "allow",
    "fetch": "allow",
    "edit": "ask",
    "delete": "ask",
    "move": "ask",
    "execute": "ask",
    "other": "ask",
}
BUILTIN_SERVERS = ("fs", "terminal", "web", "memory")


@dataclass(frozen=True, kw_only=True)
class ToolSettings:
    builtin: tuple[str, ...] = BUILTIN_SERVERS  # built-in MCP servers of every session
    servers: tuple[McpServerSpec, ...] = ()  # from [mcp.servers.*]
    timeout_s: float = 120.0  # one built-in tool call
    max_result_kib: int = 256  # a larger tool result reaches the model cut, the whole saved
    search_url: str | None = None  # a SearXNG-compatible JSON endpoint
    fetch_allow_hosts: tuple[str, ...] = ()  # non-public hosts fetch may reach (web.allow_hosts)
    permissions: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_PERMISSIONS))
    remembered: dict[str, str] = field(default_factory=dict)  # tool -> allow|deny, saved
    yolo: bool = False  # run everything without asking
    ask_client_servers: bool = False  # ask (kind execute) before a client-named stdio server starts
    acp_servers: bool = False  # accept {"type": "acp"} servers (MCP over ACP; unstable)
    #: Decisions for single tools, before their kind's: memory's own from [memory].
    tool_policies: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ServerSettings:
    token: str | None = None  # the bearer token of crow serve --http
    allowed_origins: tuple[str, ...] = ()  # web origins allowed to connect
    allowed_hosts: tuple[str, ...] = ()  # Host header names accepted besides the bind address
    idle_timeout_s: float = 60.0  # an HTTP connection with no request and no stream expires
    init_timeout_s: float = 10.0  # a WebSocket that has not initialized by then is closed
    max_buffered_mib: float = 16.0  # a client this far behind that reads nothing is dropped
    max_output_stall_s: float = 5.0  # ... after this long
    shutdown_grace_s: float = 30.0  # on SIGTERM, running turns get this long to finish


#: What a prompt that arrives while its session is busy does ([session] while_busy).
WHILE_BUSY = ("queue", "steer", "reject")


@dataclass(frozen=True, kw_only=True)
class SessionSettings:
    """``[session]``: how a session takes prompts."""

    #: A prompt on a busy session is held until the turn ends ("queue"), put into the
    #: running turn ("steer"), or refused ("reject"); a prompt's _meta["crow/insert"]
    #: chooses for itself.
    while_busy: str = "queue"


@dataclass(frozen=True, kw_only=True)
class Limits:
    """``[limits]``: what one client can make Crow store."""

    max_prompt_mib: float = 8.0  # one prompt's text and data

    @property
    def max_prompt_bytes(self) -> int:
        return int(self.max_prompt_mib * 1024 * 1024)


EMBEDDERS = ("offline", "openai", "none")


@dataclass(frozen=True, kw_only=True)
class MemorySettings:
    """``[memory]``: Crow's long-term memory (crow.memory, the memory MCP server)."""

    embedder: str = "offline"  # offline (all-MiniLM-L6-v2 in process), openai, none (text only)
    url: str | None = None  # openai: an OpenAI-compatible /v1 base URL (ollama, vLLM, ...)
    model: str = "nomic-embed-text"  # openai: the embedding model
    api_key_env: str | None = None  # openai: the environment variable holding its key
    auto_recall: bool = True  # recall into every turn's first model call
    recall_limit: int = 5  # at most this many memories per turn
    recall_threshold: float = 0.3  # the least cosine similarity a recalled memory has
    recall_budget_tokens: int = 600  # ... and at most this many tokens of them (~4 chars each)
    merge_threshold: float = 0.9  # a new memory this similar to one in its scope replaces it
    remember: str = "allow"  # the permission of memory__remember: allow, ask or deny
    forget: str = "allow"  # ... and of memory__forget
    #: What the model's memory tools read: "own" (global, this project, this session)
    #: or "all" (every scope; writes beyond its own still ask the person).
    model_reads: str = "own"
    max_text_kib: int = 16  # the longest memory remember, /remember and import keep


@dataclass(frozen=True, kw_only=True)
class JudgeSettings:
    """``[judge]``: the verifier inside ``crow serve`` (crow.orchestra.resident) that
    judges each turn of a session a client asked to verify (``_meta["crow/verify"]``)."""

    model: str | None = None  # the judge's model (a configured name); default: the chain's first
    rubric: str | None = None  # what to judge by; default: crow.orchestra.judge.DEFAULT_RUBRIC
    check: str | None = None  # a command run in the session's cwd; its exit code is evidence
    check_timeout_s: float = 300.0
    max_rounds: int = 1  # verdicts per person's prompt: on fail the worker is asked to fix it
    every_session: bool = False  # judge every session, asked or not


@dataclass(frozen=True, kw_only=True)
class AcpSettings:
    """``[acp]``: which protocol versions ``crow serve`` answers (v1 is always on)."""

    v2: bool = True  # false: a v2 initialize gets -32022 while the v2 draft is unstable


@dataclass(frozen=True, kw_only=True)
class Config:
    paths: Paths
    providers: dict[str, ProviderSpec]
    models: dict[str, ModelSpec]
    chain: tuple[str, ...]  # default model first, then the fallbacks
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    system_prompt: str | None = None
    max_steps: int = 25
    tools: ToolSettings = field(default_factory=ToolSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    acp: AcpSettings = field(default_factory=AcpSettings)
    limits: Limits = field(default_factory=Limits)
    session: SessionSettings = field(default_factory=SessionSettings)
    memory: MemorySettings = field(default_factory=MemorySettings)
    judge: JudgeSettings = field(default_factory=JudgeSettings)
    store_url: str | None = None  # [store] url / CROW_STORE_URL: PostgreSQL, not the file
    #: Tables and keys of config.toml that Crow does not read (crow.config.keys): the
    #: ``crow`` command says them once; nothing else looks at them.
    warnings: tuple[str, ...] = ()

    @property
    def store_location(self) -> Path | str:
        """Where sessions live: a PostgreSQL URL, else the home's SQLite file."""
        return self.store_url or self.paths.store


def load_config(
    paths: Paths | None = None, *, model: str | None = None, base_url: str | None = None
) -> Config:
    """Read ``config.toml`` (if any), then the environment, then the overrides."""
    paths = paths or Paths.from_env()
    source = str(paths.config_file)
    data: dict[str, Any] = {}
    if paths.config_file.exists():
        tighten_file(paths.config_file)  # it may hold keys and the server token
        try:
            data = tomllib.loads(paths.config_file.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(source, "(file)", "valid TOML", str(exc)) from None
    from .keys import unknown_keys

    warnings = tuple(f"{source}: {problem}" for problem in unknown_keys(data))
    providers = _providers(source, data.get("providers", {}))
    models = _models(source, data.get("models", {}), providers)
    section = _table(source, "model", data.get("model", {}))
    chain = _chain(source, section, models)
    if not models:  # zero config: one model, from the overrides or the environment
        providers, models, chain = _zero_config(model, base_url)
    else:  # the flags, else the environment, beat the file
        model = model if model is not None else os.environ.get("CROW_MODEL") or None
        base_url = base_url if base_url is not None else os.environ.get("OPENAI_BASE_URL") or None
        if model is not None or base_url is not None:
            providers, models, chain = _override(providers, models, chain, model, base_url)
    memory = _memory_settings(source, data)
    return Config(
        paths=paths,
        providers=providers,
        models=models,
        chain=chain,
        retry=_retry(source, data.get("retry", {})),
        system_prompt=_opt_str(source, "model.system_prompt", section.get("system_prompt")),
        max_steps=_positive_int(source, "model.max_steps", section.get("max_steps", 25)),
        tools=_tool_settings(source, data, paths, memory),
        server=_server_settings(source, data),
        acp=_acp_settings(source, data),
        limits=_limits(source, data),
        session=_session_settings(source, data),
        memory=memory,
        judge=_judge_settings(source, data, models),
        store_url=_store_url(source, data),
        warnings=warnings,
    )


def _store_url(source: str, data: dict[str, Any]) -> str | None:
    """``CROW_STORE_URL``, else ``[store] url``: a ``postgresql://`` URL, or None."""
    table = _table(source, "store", data.get("store", {}))
    from_env = os.environ.get("CROW_STORE_URL")
    url = from_env or table.get("url")
    if url in (None, ""):
        return None
    if not isinstance(url, str) or not url.startswith(("postgresql://", "postgres://")):
        from ..redact import redact_url

        shown = redact_url(url) if isinstance(url, str) else url
        if from_env:  # the environment's fault, not the file's
            raise ConfigError("the environment", "CROW_STORE_URL", "a postgresql:// URL", shown)
        raise ConfigError(source, "store.url", "a postgresql:// URL", shown)
    return url


def _acp_settings(source: str, data: dict[str, Any]) -> AcpSettings:
    table = _table(source, "acp", data.get("acp", {}))
    v2 = table.get("v2", True)
    if type(v2) is not bool:
        raise ConfigError(source, "acp.v2", "true or false (false turns ACP v2 off)", v2)
    return AcpSettings(v2=v2)


def _limits(source: str, data: dict[str, Any]) -> Limits:
    table = _table(source, "limits", data.get("limits", {}))
    mib = _positive_float(
        source, "limits.max_prompt_mib", table.get("max_prompt_mib", Limits.max_prompt_mib)
    )
    if mib == 0:
        raise ConfigError(source, "limits.max_prompt_mib", "a positive number", mib)
    return Limits(max_prompt_mib=mib)


def _session_settings(source: str, data: dict[str, Any]) -> SessionSettings:
    table = _table(source, "session", data.get("session", {}))
    while_busy = table.get("while_busy", SessionSettings().while_busy)
    if while_busy not in WHILE_BUSY:
        raise ConfigError(
            source, "session.while_busy", " or ".join(map(repr, WHILE_BUSY)), while_busy
        )
    return SessionSettings(while_busy=while_busy)


def _memory_settings(source: str, data: dict[str, Any]) -> MemorySettings:
    table = _table(source, "memory", data.get("memory", {}))
    d = MemorySettings()
    embedder = table.get("embedder", d.embedder)
    if embedder not in EMBEDDERS:
        raise ConfigError(source, "memory.embedder", " or ".join(EMBEDDERS), embedder)
    url = _opt_str(source, "memory.url", table.get("url"))
    if embedder == "openai" and not url:
        raise ConfigError(source, "memory.url", "the /v1 base URL of the embedding server", url)
    decisions = {}
    for key in ("remember", "forget"):
        decisions[key] = table.get(key, getattr(d, key))
        if decisions[key] not in PERMISSION_DECISIONS:
            raise ConfigError(
                source, f"memory.{key}", " or ".join(PERMISSION_DECISIONS), decisions[key]
            )
    share = table.get("recall_threshold", d.recall_threshold)
    merge = table.get("merge_threshold", d.merge_threshold)
    model_reads = table.get("model_reads", d.model_reads)
    if model_reads not in ("own", "all"):
        raise ConfigError(source, "memory.model_reads", '"own" or "all"', model_reads)
    return MemorySettings(
        embedder=embedder,
        url=url,
        model=_opt_str(source, "memory.model", table.get("model")) or d.model,
        api_key_env=_opt_str(source, "memory.api_key_env", table.get("api_key_env")),
        auto_recall=_bool(source, "memory.auto_recall", table.get("auto_recall", True)),
        recall_limit=_positive_int(
            source, "memory.recall_limit", table.get("recall_limit", d.recall_limit)
        ),
        recall_threshold=_fraction(source, "memory.recall_threshold", share, zero=True),
        recall_budget_tokens=_positive_int(
            source,
            "memory.recall_budget_tokens",
            table.get("recall_budget_tokens", d.recall_budget_tokens),
        ),
        merge_threshold=_fraction(source, "memory.merge_threshold", merge, zero=False),
        remember=decisions["remember"],
        forget=decisions["forget"],
        model_reads=model_reads,
        max_text_kib=_positive_int(
            source, "memory.max_text_kib", table.get("max_text_kib", d.max_text_kib)
        ),
    )


def _judge_settings(
    source: str, data: dict[str, Any], models: dict[str, ModelSpec]
) -> JudgeSettings:
    table = _table(source, "judge", data.get("judge", {}))
    d = JudgeSettings()
    model = _opt_str(source, "judge.model", table.get("model"))
    if model is not None and model not in models:
        raise ConfigError(source, "judge.model", "a model of [models]", model)
    timeout = _positive_float(
        source, "judge.check_timeout_s", table.get("check_timeout_s", d.check_timeout_s)
    )
    if timeout == 0:
        raise ConfigError(source, "judge.check_timeout_s", "a positive number", timeout)
    return JudgeSettings(
        model=model,
        rubric=_opt_str(source, "judge.rubric", table.get("rubric")),
        check=_opt_str(source, "judge.check", table.get("check")),
        check_timeout_s=timeout,
        max_rounds=_positive_int(source, "judge.max_rounds", table.get("max_rounds", 1)),
        every_session=_bool(source, "judge.every_session", table.get("every_session", False)),
    )


def _server_settings(source: str, data: dict[str, Any]) -> ServerSettings:
    table = _table(source, "server", data.get("server", {}))
    origins = table.get("allowed_origins", [])
    if not isinstance(origins, list) or not all(isinstance(o, str) for o in origins):
        raise ConfigError(source, "server.allowed_origins", "a list of origins", origins)
    hosts = table.get("allowed_hosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) and h for h in hosts):
        raise ConfigError(source, "server.allowed_hosts", "a list of host names", hosts)
    defaults = ServerSettings()
    return ServerSettings(
        token=_opt_str(source, "server.token", table.get("token")),
        allowed_origins=tuple(origins),
        allowed_hosts=tuple(h.lower() for h in hosts),
        idle_timeout_s=_positive_float(
            source, "server.idle_timeout_s", table.get("idle_timeout_s", defaults.idle_timeout_s)
        ),
        init_timeout_s=_positive_float(
            source, "server.init_timeout_s", table.get("init_timeout_s", defaults.init_timeout_s)
        ),
        max_buffered_mib=_positive_float(
            source,
            "server.max_buffered_mib",
            table.get("max_buffered_mib", defaults.max_buffered_mib),
        ),
        max_output_stall_s=_positive_float(
            source,
            "server.max_output_stall_s",
            table.get("max_output_stall_s", defaults.max_output_stall_s),
        ),
        shutdown_grace_s=_positive_float(
            source,
            "server.shutdown_grace_s",
            table.get("shutdown_grace_s", defaults.shutdown_grace_s),
        ),
    )


def _zero_config(
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


def _bool(source: str, key: str, value: Any) -> bool:
    if type(value) is not bool:
        raise ConfigError(source, key, "true or false", value)
    return value


def _positive_int(source: str, key: str, value: Any) -> int:
    if type(value) is not int or value <= 0:
        raise ConfigError(source, key, "a positive integer", value)
    return value


def _fraction(source: str, key: str, value: Any, *, zero: bool) -> float:
    """A similarity threshold: a number up to 1, from 0 (``zero``) or above it."""
    low_ok = type(value) in (int, float) and (value >= 0 if zero else value > 0)
    if not low_ok or value > 1:
        expected = "a number from 0 to 1" if zero else "a number above 0, at most 1"
        raise ConfigError(source, key, expected, value)
    return float(value)


def _positive_float(source: str, key: str, value: Any) -> float:
    if type(value) not in (int, float) or value < 0:
        raise ConfigError(source, key, "a non-negative number", value)
    return float(value)


def _providers(source: str, raw: Any) -> dict[str, ProviderSpec]:
    out = {}
    for name, table in _table(source, "providers", raw).items():
        table = _table(source, f"providers.{name}", table)
        kind = table.get("kind", "openai")
        if kind not in PROVIDER_KINDS:
            raise ConfigError(source, f"providers.{name}.kind", " or ".join(PROVIDER_KINDS), kind)
        key = f"providers.{name}.base_url"
        out[name] = ProviderSpec(
            name=name,  # a local provider runs files, it has no server
            base_url="" if kind == "local" else _str(source, key, table.get("base_url")),
            api_key_env=_opt_str(source, f"providers.{name}.api_key_env", table.get("api_key_env")),
            kind=kind,
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
            model_id=_str(source, f"{key}.id", table.get("id", name)),
            capabilities=frozenset(caps),
            context_window=_positive_int(
                source,
                f"{key}.context_window",
                table.get("context_window", window),
            ),
            max_output_tokens=_positive_int(
                source,
                f"{key}.max_output_tokens",
                table.get("max_output_tokens", output),
            ),
            declared=frozenset({"capabilities", "context_window"} & table.keys())
            | (frozenset({"capabilities"}) if local else frozenset()),
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


def _tool_settings(
    source: str, data: dict[str, Any], paths: Paths, memory: MemorySettings
) -> ToolSettings:
    tools = _table(source, "tools", data.get("tools", {}))
    builtin = tools.get("builtin", list(BUILTIN_SERVERS))
    if not isinstance(builtin, list) or not set(builtin) <= set(BUILTIN_SERVERS):
        raise ConfigError(source, "tools.builtin", f"a list from {list(BUILTIN_SERVERS)}", builtin)
    web = _table(source, "web", data.get("web", {}))
    search_url = web.get("search_url", os.environ.get("CROW_SEARCH_URL") or None)
    perms = _table(source, "permissions", data.get("permissions", {}))
    permissions = dict(DEFAULT_PERMISSIONS)
    for kind, decision in perms.items():
        if kind == "yolo":
            continue
        if kind not in TOOL_KINDS:
            raise ConfigError(source, f"permissions.{kind}", f"a tool kind from {list(TOOL_KINDS)}")
        if decision not in PERMISSION_DECISIONS:
            raise ConfigError(
                source, f"permissions.{kind}", " or ".join(PERMISSION_DECISIONS), decision
            )
        permissions[kind] = decision
    yolo = perms.get("yolo", False)
    if type(yolo) is not bool:
        raise ConfigError(source, "permissions.yolo", "true or false", yolo)
    mcp = _table(source, "mcp", data.get("mcp", {}))
    servers = tuple(
        _mcp_server(source, name, table)
        for name, table in _table(source, "mcp.servers", mcp.get("servers", {})).items()
    )
    return ToolSettings(
        builtin=tuple(builtin),
        servers=servers,
        timeout_s=_positive_float(source, "tools.timeout_s", tools.get("timeout_s", 120.0)),
        max_result_kib=_positive_int(
            source, "tools.max_result_kib", tools.get("max_result_kib", 256)
        ),
        search_url=_opt_str(source, "web.search_url", search_url),
        fetch_allow_hosts=_allow_hosts(source, web.get("allow_hosts", [])),
        permissions=permissions,
        remembered=_remembered(paths),
        yolo=yolo,
        ask_client_servers=_bool(
            source, "mcp.ask_client_servers", mcp.get("ask_client_servers", False)
        ),
        acp_servers=_bool(source, "mcp.acp_servers", mcp.get("acp_servers", False)),
        # Memory is Crow's own store: its writes need not ask like file edits.
        tool_policies={"memory__remember": memory.remember, "memory__forget": memory.forget},
    )


def _allow_hosts(source: str, value: Any) -> tuple[str, ...]:
    expected = "a list of host names or IPs, each optionally with :port, or CIDR ranges"
    if not isinstance(value, list):
        raise ConfigError(source, "web.allow_hosts", expected, value)
    if value:
        # the web server's own parser, so an entry it would refuse fails here, at load time
        for entry in value:
            try:
                parse_allow_host(entry if isinstance(entry, str) else "")
            except ValueError:
                raise ConfigError(source, "web.allow_hosts", expected, entry) from None
    return tuple(value)


def _mcp_server(source: str, name: str, raw: Any) -> McpServerSpec:
    key = f"mcp.servers.{name}"
    table = _table(source, key, raw)
    command, url = table.get("command"), table.get("url")
    if (command is None) == (url is None):
        raise ConfigError(source, key, "exactly one of command (stdio) or url (http)")
    args = table.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError(source, f"{key}.args", "a list of strings", args)
    for field_name in ("env", "headers"):
        value = table.get(field_name, {})
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise ConfigError(source, f"{key}.{field_name}", "a table of strings", value)
    return McpServerSpec(
        name=name,
        command=_opt_str(source, f"{key}.command", command),
        args=tuple(args),
        env=dict(table.get("env", {})),
        url=_opt_str(source, f"{key}.url", url),
        headers=dict(table.get("headers", {})),
        timeout_s=_positive_float(source, f"{key}.timeout_s", table.get("timeout_s", 120.0)),
        trusted=_bool(source, f"{key}.trusted", table.get("trusted", False)),
    )


def _remembered(paths: Paths) -> dict[str, str]:
    """Permission answers saved with "always": Crow's own file, beside config.toml."""
    file = paths.home / "permissions.toml"
    if not file.exists():
        return {}
    tighten_file(file)
    source = str(file)
    try:
        data = tomllib.loads(file.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, "(file)", "valid TOML", str(exc)) from None
    tools = _table(source, "tools", data.get("tools", {}))
    for tool, decision in tools.items():
        if decision not in ("allow", "deny"):
            raise ConfigError(source, f"tools.{tool}", "allow or deny", decision)
    return dict(tools)


def save_permission(paths: Paths, tool: str, decision: str) -> Path:
    """Remember an "always" answer in permissions.toml (rewritten whole, atomically, 0600)."""
    return _write_remembered(paths, {**_remembered(paths), tool: decision})


def remembered_permissions(paths: Paths) -> dict[str, str]:
    """The saved "always" answers: tool -> allow|deny.  Raises ConfigError for a
    permissions.toml that does not load."""
    return _remembered(paths)


def forget_permissions(paths: Paths, tools: list[str] | None) -> list[str]:
    """Forget the saved answers for ``tools`` (None: all of them); returns those
    forgotten (the file is rewritten only when one was)."""
    remembered = _remembered(paths)
    gone = [tool for tool in remembered if tools is None or tool in tools]
    if gone:
        _write_remembered(paths, {t: d for t, d in remembered.items() if t not in gone})
    return gone


def _write_remembered(paths: Paths, remembered: dict[str, str]) -> Path:
    from ..private import private_dir, write_private  # only when an answer is saved

    lines = ['# Permission answers saved by Crow ("always"). Edit or delete freely.', "[tools]"]
    lines += [
        f"{json.dumps(name)} = {json.dumps(value)}" for name, value in sorted(remembered.items())
    ]
    return write_private(private_dir(paths.home) / "permissions.toml", "\n".join(lines) + "\n")
