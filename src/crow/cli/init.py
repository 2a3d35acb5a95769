"""``crow init``: write a config.toml for the models this machine has
(what it finds and writes: ``crow.config.template``)."""

from __future__ import annotations

import argparse
import os
import sys

from ..config import Paths

__all__ = ["DESCRIPTION", "add_arguments", "main"]

DESCRIPTION = (
    "Looks for ollama (localhost:11434, or OLLAMA_HOST) and its models, "
    "an OpenAI-compatible --base-url, and the embedded model of the local extra, and "
    "writes a config.toml that uses them (the embedded model last, as the fallback), "
    "with every other setting commented."
)


def add_arguments(init: argparse.ArgumentParser) -> None:
    init.add_argument("--force", action="store_true", help="overwrite an existing config.toml")
    init.add_argument(
        "--model",
        help="the model to answer first: one ollama or --base-url has, or smollm2-135m (the "
        "embedded model); default: $CROW_MODEL, else the first one found",
    )
    init.add_argument(
        "--base-url",
        help="an OpenAI-compatible server to write (default: $OPENAI_BASE_URL, else ollama "
        "where OLLAMA_HOST says)",
    )


def main(args: argparse.Namespace) -> int:
    """Write a config.toml for the models this machine has (crow.config.template)."""
    # The template and the probes of ollama: only crow init needs them.
    from ..config.template import detect, write_default_config

    paths = Paths.from_env()
    if paths.config_file.exists() and not args.force:
        print(f"crow: {paths.config_file} exists; pass --force to overwrite it", file=sys.stderr)
        return 1
    base_url = args.base_url or os.environ.get("OPENAI_BASE_URL")
    found = detect(base_url)
    written, said = write_default_config(
        paths, force=True, model=args.model or os.environ.get("CROW_MODEL"), found=found
    )
    for line in said:
        print(f"crow: {line}", file=sys.stderr)
    print(f"wrote {written}")
    _say_the_chain(paths)
    return 0


def _say_the_chain(paths: Paths) -> None:
    """Which models will answer, read back from what was written (stderr)."""
    from ..config import ConfigError, load_config

    try:
        chain = load_config(paths).chain
    except ConfigError as exc:  # (an environment override that does not load)
        print(f"crow: {exc}", file=sys.stderr)
        return
    if chain:
        print(
            f"crow: the models, in the order they are tried: {', '.join(chain)} "
            "(crow models --check asks each)",
            file=sys.stderr,
        )
