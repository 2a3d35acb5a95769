"""``crow completion SHELL``: the completion script of ``crow`` for bash, zsh or fish.

Made by shtab from ``crow.cli.app.build_parser()`` itself, so every command and option
is there the moment it is added, and none that is gone.  The script is static
(shtab's way, unlike argcomplete's): pressing Tab never starts Python.  Where an
argument names a file or a directory (``--cwd``, ``memory import FILE``), it
completes paths.
"""

from __future__ import annotations

import argparse

__all__ = ["DESCRIPTION", "SHELLS", "add_arguments", "script"]

SHELLS = ("bash", "zsh", "fish")
DESCRIPTION = (
    "Print the completion script of crow for SHELL, made from crow's own "
    'command line.  bash: eval "$(crow completion bash)" in ~/.bashrc; zsh: crow '
    "completion zsh > a file named _crow on $fpath; fish: crow completion fish > "
    "~/.config/fish/completions/crow.fish"
)
#: Arguments that take paths, by their parser's prog and the argument's dest.
_DIRECTORIES = {"--cwd"}
_FILES = {"files", "file", "--trace"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=list(SHELLS))


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for ``shell`` (one of ``SHELLS``)."""
    import shtab  # only when a script is asked for

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
