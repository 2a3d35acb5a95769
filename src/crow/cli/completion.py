"""``crow completion SHELL``: the completion script of ``crow`` for bash, zsh or fish.

Made by shtab from ``crow.cli.build_parser()`` itself, so every command and option
is there the moment it is added, and none that is gone.  The script is static
(shtab's way, unlike argcomplete's): pressing Tab never starts Python.  Where an
argument names a file or a directory (``--cwd``, ``memory import FILE``), it
completes paths.
"""

from __future__ import annotations

import argparse

__all__ = ["SHELLS", "script"]

SHELLS = ("bash", "zsh", "fish")
#: Arguments that take paths, by their parser's prog and the argument's dest.
_DIRECTORIES = {"--cwd"}
_FILES = {"files", "file", "--trace"}


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for ``shell`` (one of ``SHELLS``)."""
    import shtab

    _mark_paths(parser, shtab)
    return str(shtab.complete(parser, shell=shell))


def _mark_paths(parser: argparse.ArgumentParser, shtab: object) -> None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _mark_paths(sub, shtab)
            continue
        names = set(action.option_strings) | {action.dest}
        if names & _DIRECTORIES:
            action.complete = shtab.DIRECTORY  # type: ignore[attr-defined]
        elif names & _FILES:
            action.complete = shtab.FILE  # type: ignore[attr-defined]
