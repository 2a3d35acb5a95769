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

The package: ``paths`` (the home), ``settings`` (the dataclasses), ``load`` (the
file and the environment into them; ``validate`` checks single values, ``chain``
reads the models and their order, ``keys`` warns of unknown keys),
``permissions`` (the saved "always" answers), ``secrets`` (which settings
``crow.redact`` masks) and ``template`` (what ``crow init`` writes).  The names
other packages use are re-exported here.
"""

from __future__ import annotations

from .chain import embedded_spec
from .load import load_config
from .paths import Paths
from .permissions import forget_permissions, remembered_permissions, save_permission
from .settings import (
    CAPABILITIES,
    EMBEDDED_MODEL,
    WHILE_BUSY,
    AcpSettings,
    Config,
    Limits,
    McpServerSpec,
    MemorySettings,
    ModelSpec,
    ProviderSpec,
    RetryPolicy,
    ServerSettings,
    ToolSettings,
)
from .validate import ConfigError

__all__ = [
    "CAPABILITIES",
    "EMBEDDED_MODEL",
    "WHILE_BUSY",
    "AcpSettings",
    "Config",
    "ConfigError",
    "Limits",
    "McpServerSpec",
    "MemorySettings",
    "ModelSpec",
    "Paths",
    "ProviderSpec",
    "RetryPolicy",
    "ServerSettings",
    "ToolSettings",
    "embedded_spec",
    "forget_permissions",
    "load_config",
    "remembered_permissions",
    "save_permission",
]
