"""Which values of a loaded config are secrets, registered with ``crow.redact`` at start-up.

``crow.redact`` owns what a credential looks like in text and masks the values it is
given; this module owns which of Crow's settings hold one, so that redact, on the floor
below, need not know the config.
"""

from __future__ import annotations

import os

from ..redact import register_named, register_secret, url_password
from .settings import Config

__all__ = ["register_config_secrets"]


def register_config_secrets(config: Config) -> None:
    """Register what a loaded ``Config`` knows to be secret: the server token, every
    provider's API key (and its ``api_key_env`` variable), the password of a base URL
    or of the store's PostgreSQL URL, ``OPENAI_API_KEY``, and the credential-looking
    headers and environment of configured MCP servers."""
    register_secret(os.environ.get("OPENAI_API_KEY"))
    register_secret(config.server.token)
    for provider in config.providers.values():
        register_secret(provider.api_key)
        if provider.api_key_env:
            register_secret(os.environ.get(provider.api_key_env))
        register_secret(url_password(provider.base_url))
    for server in config.tools.servers:
        register_named(server.headers.items())
        register_named(server.env.items())
        if server.url:
            register_secret(url_password(server.url))
    if config.store_url:
        register_secret(url_password(config.store_url))
