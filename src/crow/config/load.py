"""Read ``config.toml``, then the environment, then the overrides, into a ``Config``.

Every value is checked where it is read (``crow.config.validate``): a config error
names the file, the key and what is expected.  Tables and keys Crow does not read
are warnings (``crow.config.keys``), never errors.
"""

from __future__ import annotations

import os
import tomllib
from typing import Any

from ..allow_hosts import parse_allow_host
from ..private import tighten_file
from .chain import override, read_chain, read_models, read_providers, zero_config
from .paths import Paths
from .permissions import remembered_permissions
from .settings import (
    BUILTIN_SERVERS,
    DEFAULT_PERMISSIONS,
    EMBEDDERS,
    LOG_FORMATS,
    PERMISSION_DECISIONS,
    TOOL_KINDS,
    WHILE_BUSY,
    AcpSettings,
    Config,
    JudgeSettings,
    Limits,
    McpServerSpec,
    MemorySettings,
    ModelSpec,
    RetryPolicy,
    ServerSettings,
    SessionSettings,
    ToolSettings,
)
from .validate import (
    ConfigError,
    as_bool,
    as_fraction,
    as_non_negative,
    as_opt_str,
    as_positive,
    as_positive_int,
    as_str,
    as_table,
)

__all__ = ["load_config"]


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
    from .keys import unknown_keys  # start-up: difflib waits for a config to read

    warnings = tuple(f"{source}: {problem}" for problem in unknown_keys(data))
    providers = read_providers(source, data.get("providers", {}))
    models = read_models(source, data.get("models", {}), providers)
    section = as_table(source, "model", data.get("model", {}))
    chain = read_chain(source, section, models)
    if not models:  # zero config: one model, from the overrides or the environment
        providers, models, chain = zero_config(model, base_url)
    else:  # the flags, else the environment, beat the file
        model = model if model is not None else os.environ.get("CROW_MODEL") or None
        base_url = base_url if base_url is not None else os.environ.get("OPENAI_BASE_URL") or None
        if model is not None or base_url is not None:
            providers, models, chain = override(providers, models, chain, model, base_url)
    memory = _memory_settings(source, data)
    return Config(
        paths=paths,
        providers=providers,
        models=models,
        chain=chain,
        retry=_retry(source, data.get("retry", {})),
        system_prompt=as_opt_str(source, "model.system_prompt", section.get("system_prompt")),
        max_steps=as_positive_int(source, "model.max_steps", section.get("max_steps", 25)),
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
    table = as_table(source, "store", data.get("store", {}))
    from_env = os.environ.get("CROW_STORE_URL")
    url = from_env or table.get("url")
    if url in (None, ""):
        return None
    if not isinstance(url, str) or not url.startswith(("postgresql://", "postgres://")):
        from ..redact import redact_url  # start-up: its patterns compile for a bad URL only

        shown = redact_url(url) if isinstance(url, str) else url
        if from_env:  # the environment's fault, not the file's
            raise ConfigError("the environment", "CROW_STORE_URL", "a postgresql:// URL", shown)
        raise ConfigError(source, "store.url", "a postgresql:// URL", shown)
    return url


def _acp_settings(source: str, data: dict[str, Any]) -> AcpSettings:
    table = as_table(source, "acp", data.get("acp", {}))
    v2 = table.get("v2", True)
    if type(v2) is not bool:
        raise ConfigError(source, "acp.v2", "true or false (false turns ACP v2 off)", v2)
    return AcpSettings(v2=v2)


def _limits(source: str, data: dict[str, Any]) -> Limits:
    table = as_table(source, "limits", data.get("limits", {}))
    mib = as_non_negative(
        source, "limits.max_prompt_mib", table.get("max_prompt_mib", Limits.max_prompt_mib)
    )
    if mib == 0:
        raise ConfigError(source, "limits.max_prompt_mib", "a positive number", mib)
    return Limits(max_prompt_mib=mib)


def _session_settings(source: str, data: dict[str, Any]) -> SessionSettings:
    table = as_table(source, "session", data.get("session", {}))
    while_busy = table.get("while_busy", SessionSettings().while_busy)
    if while_busy not in WHILE_BUSY:
        raise ConfigError(
            source, "session.while_busy", " or ".join(map(repr, WHILE_BUSY)), while_busy
        )
    return SessionSettings(while_busy=while_busy)


def _memory_settings(source: str, data: dict[str, Any]) -> MemorySettings:
    table = as_table(source, "memory", data.get("memory", {}))
    d = MemorySettings()
    embedder = table.get("embedder", d.embedder)
    if embedder not in EMBEDDERS:
        raise ConfigError(source, "memory.embedder", " or ".join(EMBEDDERS), embedder)
    url = as_opt_str(source, "memory.url", table.get("url"))
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
        model=as_opt_str(source, "memory.model", table.get("model")) or d.model,
        api_key_env=as_opt_str(source, "memory.api_key_env", table.get("api_key_env")),
        auto_recall=as_bool(source, "memory.auto_recall", table.get("auto_recall", True)),
        recall_limit=as_positive_int(
            source, "memory.recall_limit", table.get("recall_limit", d.recall_limit)
        ),
        recall_threshold=as_fraction(source, "memory.recall_threshold", share, zero=True),
        recall_budget_tokens=as_positive_int(
            source,
            "memory.recall_budget_tokens",
            table.get("recall_budget_tokens", d.recall_budget_tokens),
        ),
        merge_threshold=as_fraction(source, "memory.merge_threshold", merge, zero=False),
        remember=decisions["remember"],
        forget=decisions["forget"],
        model_reads=model_reads,
        max_text_kib=as_positive_int(
            source, "memory.max_text_kib", table.get("max_text_kib", d.max_text_kib)
        ),
    )


def _judge_settings(
    source: str, data: dict[str, Any], models: dict[str, ModelSpec]
) -> JudgeSettings:
    table = as_table(source, "judge", data.get("judge", {}))
    d = JudgeSettings()
    model = as_opt_str(source, "judge.model", table.get("model"))
    if model is not None and model not in models:
        raise ConfigError(source, "judge.model", "a model of [models]", model)
    timeout = as_non_negative(
        source, "judge.check_timeout_s", table.get("check_timeout_s", d.check_timeout_s)
    )
    if timeout == 0:
        raise ConfigError(source, "judge.check_timeout_s", "a positive number", timeout)
    return JudgeSettings(
        model=model,
        rubric=as_opt_str(source, "judge.rubric", table.get("rubric")),
        check=as_opt_str(source, "judge.check", table.get("check")),
        check_timeout_s=timeout,
        max_rounds=as_positive_int(source, "judge.max_rounds", table.get("max_rounds", 1)),
        every_session=as_bool(source, "judge.every_session", table.get("every_session", False)),
    )


def _server_settings(source: str, data: dict[str, Any]) -> ServerSettings:
    table = as_table(source, "server", data.get("server", {}))
    origins = table.get("allowed_origins", [])
    if not isinstance(origins, list) or not all(isinstance(o, str) for o in origins):
        raise ConfigError(source, "server.allowed_origins", "a list of origins", origins)
    hosts = table.get("allowed_hosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) and h for h in hosts):
        raise ConfigError(source, "server.allowed_hosts", "a list of host names", hosts)
    defaults = ServerSettings()
    return ServerSettings(
        token=as_opt_str(source, "server.token", table.get("token")),
        allowed_origins=tuple(origins),
        allowed_hosts=tuple(h.lower() for h in hosts),
        idle_timeout_s=as_non_negative(
            source, "server.idle_timeout_s", table.get("idle_timeout_s", defaults.idle_timeout_s)
        ),
        init_timeout_s=as_non_negative(
            source, "server.init_timeout_s", table.get("init_timeout_s", defaults.init_timeout_s)
        ),
        max_buffered_mib=as_non_negative(
            source,
            "server.max_buffered_mib",
            table.get("max_buffered_mib", defaults.max_buffered_mib),
        ),
        max_output_stall_s=as_non_negative(
            source,
            "server.max_output_stall_s",
            table.get("max_output_stall_s", defaults.max_output_stall_s),
        ),
        shutdown_grace_s=as_non_negative(
            source,
            "server.shutdown_grace_s",
            table.get("shutdown_grace_s", defaults.shutdown_grace_s),
        ),
        max_sessions_per_connection=as_positive_int(
            source,
            "server.max_sessions_per_connection",
            table.get("max_sessions_per_connection", defaults.max_sessions_per_connection),
        ),
        unload_idle_s=as_non_negative(
            source, "server.unload_idle_s", table.get("unload_idle_s", defaults.unload_idle_s)
        ),
        orphan_sweep_s=as_positive(
            source, "server.orphan_sweep_s", table.get("orphan_sweep_s", defaults.orphan_sweep_s)
        ),
        **_observing(source, table, defaults),
    )


def _observing(source: str, table: dict[str, Any], defaults: ServerSettings) -> dict[str, Any]:
    """``[server]``'s keys for watching the server: metrics, traces, log lines."""
    log_format = as_str(source, "server.log_format", table.get("log_format", defaults.log_format))
    if log_format not in LOG_FORMATS:
        raise ConfigError(
            source, "server.log_format", " or ".join(repr(f) for f in LOG_FORMATS), log_format
        )
    return {
        "metrics_public": as_bool(
            source, "server.metrics_public", table.get("metrics_public", defaults.metrics_public)
        ),
        "tracing": as_bool(source, "server.tracing", table.get("tracing", defaults.tracing)),
        "log_format": log_format,
        "log_max_mib": as_non_negative(
            source, "server.log_max_mib", table.get("log_max_mib", defaults.log_max_mib)
        ),
        "log_backups": as_positive_int(
            source, "server.log_backups", table.get("log_backups", defaults.log_backups)
        ),
    }


def _retry(source: str, raw: Any) -> RetryPolicy:
    table = as_table(source, "retry", raw)
    default = RetryPolicy()
    return RetryPolicy(
        attempts=as_positive_int(source, "retry.attempts", table.get("attempts", default.attempts)),
        backoff_s=as_non_negative(
            source, "retry.backoff_s", table.get("backoff_s", default.backoff_s)
        ),
        timeout_s=as_non_negative(
            source, "retry.timeout_s", table.get("timeout_s", default.timeout_s)
        ),
    )


def _tool_settings(
    source: str, data: dict[str, Any], paths: Paths, memory: MemorySettings
) -> ToolSettings:
    tools = as_table(source, "tools", data.get("tools", {}))
    builtin = tools.get("builtin", list(BUILTIN_SERVERS))
    if not isinstance(builtin, list) or not set(builtin) <= set(BUILTIN_SERVERS):
        raise ConfigError(source, "tools.builtin", f"a list from {list(BUILTIN_SERVERS)}", builtin)
    web = as_table(source, "web", data.get("web", {}))
    search_url = web.get("search_url", os.environ.get("CROW_SEARCH_URL") or None)
    perms = as_table(source, "permissions", data.get("permissions", {}))
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
    mcp = as_table(source, "mcp", data.get("mcp", {}))
    servers = tuple(
        _mcp_server(source, name, table)
        for name, table in as_table(source, "mcp.servers", mcp.get("servers", {})).items()
    )
    return ToolSettings(
        builtin=tuple(builtin),
        servers=servers,
        timeout_s=as_non_negative(source, "tools.timeout_s", tools.get("timeout_s", 120.0)),
        max_result_kib=as_positive_int(
            source, "tools.max_result_kib", tools.get("max_result_kib", 256)
        ),
        search_url=as_opt_str(source, "web.search_url", search_url),
        fetch_allow_hosts=_allow_hosts(source, web.get("allow_hosts", [])),
        permissions=permissions,
        remembered=remembered_permissions(paths),
        yolo=yolo,
        ask_client_servers=as_bool(
            source, "mcp.ask_client_servers", mcp.get("ask_client_servers", False)
        ),
        acp_servers=as_bool(source, "mcp.acp_servers", mcp.get("acp_servers", False)),
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
    table = as_table(source, key, raw)
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
        command=as_opt_str(source, f"{key}.command", command),
        args=tuple(args),
        env=dict(table.get("env", {})),
        url=as_opt_str(source, f"{key}.url", url),
        headers=dict(table.get("headers", {})),
        timeout_s=as_non_negative(source, f"{key}.timeout_s", table.get("timeout_s", 120.0)),
        trusted=as_bool(source, f"{key}.trusted", table.get("trusted", False)),
    )
