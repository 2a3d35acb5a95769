"""The settings every layer reads: one frozen dataclass per table of ``config.toml``.

Their defaults are the defaults of a config that does not say (``crow.config.load``
reads the file into them; ``crow.config.keys`` takes the known keys of a table from
its dataclass's fields).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .paths import Paths

__all__ = [
    "CAPABILITIES",
    "AcpSettings",
    "Config",
    "JudgeSettings",
    "Limits",
    "McpServerSpec",
    "MemorySettings",
    "ModelSpec",
    "ProviderSpec",
    "RetryPolicy",
    "ServerSettings",
    "SessionSettings",
    "ToolSettings",
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
    metrics_public: bool = False  # /metrics without the token (for a scraper on a private net)
    tracing: bool = False  # OpenTelemetry spans of turns to OTLP (the otel extra)
    log_format: str = "text"  # or "json": one object per line, for log shippers
    log_max_mib: float = 10.0  # crow.log is rotated past this size ...
    log_backups: int = 5  # ... keeping this many old files (crow.log.1 ...)
    max_sessions_per_connection: int = 64  # sessions one connection may have open at once
    unload_idle_s: float = 300.0  # a session idle this long is unloaded (0: never)
    #: On a shared store, how often a server looks for the turns of servers that died
    #: (a prompt held here behind such a turn does not wait for it: crow.agent.cluster).
    orphan_sweep_s: float = 5.0


#: The formats of crow serve's log lines ([server] log_format).
LOG_FORMATS = ("text", "json")


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
