"""``crow models``: the models Crow can use (the listing itself: ``crow.models.listing``)."""

from __future__ import annotations

import argparse
import asyncio

__all__ = ["add_arguments", "main"]


def add_arguments(models: argparse.ArgumentParser) -> None:
    models.add_argument(
        "--check",
        nargs="?",
        const="",
        metavar="NAME",
        help="make a one-token call to NAME (default: every model) and report its time or error",
    )
    models.add_argument("--model", help="as crow serve --model")
    models.add_argument("--base-url", help="as crow serve --base-url")
    models.add_argument("--json", action="store_true", help="one JSON object per model")


def main(args: argparse.Namespace) -> int:
    # The model clients and discovery: only crow models needs them.
    from ..models import listing

    return asyncio.run(listing.main(args))
