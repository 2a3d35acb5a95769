"""The ``crow`` command: wires the layers together, nothing else."""

from __future__ import annotations

import argparse
from importlib.metadata import version


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="crow", description="Crow: a persistent AI coding agent speaking ACP v2."
    )
    parser.add_argument("--version", action="version", version=f"crow {version('crow-cli')}")
    parser.parse_args(argv)
    parser.print_help()
    return 0
