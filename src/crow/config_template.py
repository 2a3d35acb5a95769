"""The commented ``config.toml`` that ``crow init`` writes."""

from __future__ import annotations

import json
from pathlib import Path

from .config import DEFAULT_BASE_URL, DEFAULT_MODEL, Paths
from .private import private_dir, write_private

__all__ = ["DEFAULT_CONFIG", "write_default_config"]

DEFAULT_CONFIG = """\
# Crow configuration.  Every key is optional: without this file Crow uses one
# model named by CROW_MODEL on OPENAI_BASE_URL (default: ollama on localhost,
# then the embedded model if the local extra is installed).  The model is chosen
# in this order: crow's --model/--base-url, then CROW_MODEL/OPENAI_BASE_URL,
# then this file.

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
# env = { GITHUB_TOKEN = "..." }
# timeout_s = 60
# trusted = false   # true: its tools' own hints (read-only, crow/kind) set their permission;
#                    otherwise every tool of it asks like "other"

[mcp]
ask_client_servers = false   # true: ask before starting an MCP server a client names
acp_servers = false          # true: accept {"type": "acp"} servers the client serves itself
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

[retry]
attempts = 3          # tries per model for transient errors (timeouts, 429, 5xx)
backoff_s = 0.5       # the first pause is a random time up to this, the limit doubling
                      # after each failure, at most 8 s; a server's Retry-After (<= 60 s) wins
timeout_s = 300       # one model request
"""


def write_default_config(
    paths: Paths, *, force: bool = False, model: str | None = None, base_url: str | None = None
) -> Path:
    """Write a commented ``config.toml`` (0600: it may come to hold ``server.token``),
    its model and endpoint ``model``/``base_url`` if given; refuses to overwrite
    unless ``force``."""
    if paths.config_file.exists() and not force:
        raise FileExistsError(f"{paths.config_file} exists; pass --force to overwrite it")
    text = DEFAULT_CONFIG
    if base_url:
        text = text.replace(f'base_url = "{DEFAULT_BASE_URL}"', f"base_url = {_toml(base_url)}")
    if model:
        text = text.replace(f'id = "{DEFAULT_MODEL}"', f"id = {_toml(model)}")
    private_dir(paths.home)
    return write_private(paths.config_file, text)


def _toml(value: str) -> str:
    """A TOML basic string (JSON's escapes are valid TOML ones)."""
    return json.dumps(value)
