"""What the line client's commands check of their command line (the options
themselves are ``crow.cli.client``'s)."""

from __future__ import annotations

import argparse
import os

from crow.config import ConfigError, Paths, load_config

__all__ = ["serve_options", "usage_problem"]


def serve_options(args: argparse.Namespace) -> list[str]:
    """``crow serve`` options for the agent this command starts (--model, --base-url)."""
    options = []
    if args.model:
        options += ["--model", args.model]
    if args.base_url:
        options += ["--base-url", args.base_url]
    return options


def usage_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the command line (exit 2), found before any agent starts:
    --model/--base-url where they cannot apply, a --cwd that is not a directory,
    or a config.toml the crow serve it would start cannot load."""
    if serve_options(args) and (args.url or args.command):
        other = "--url" if args.url else "--command"
        return f"--model and --base-url apply to the crow serve crow starts, not to {other}"
    if getattr(args, "check", None) and not args.verify:
        return "--check goes with --verify"
    if args.cwd and not os.path.isdir(args.cwd):
        return f"--cwd {args.cwd} is not an existing directory"
    if not (args.url or args.command):
        try:
            load_config(Paths.from_env(), model=args.model, base_url=args.base_url)
        except ConfigError as exc:
            return str(exc)
    return None
