"""A component of a proxy chain (``crow conductor``): the program to run, as given on
the command line (a shell-style command or a JSON object), parsed and checked."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

__all__ = ["Component", "ComponentError"]

_ENV_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_JSON_KEYS = {"command", "args", "env"}


class ComponentError(ValueError):
    """A component description that cannot be run (a one-line reason)."""


@dataclass(frozen=True)
class Component:
    """A program of the chain: argv and the environment it adds."""

    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, spec: str) -> Component:
        """A shell-style command (leading ``VAR=value`` words set the environment),
        or a JSON object ``{"command": str, "args": [str], "env": {str: str}}``."""
        if spec.lstrip().startswith("{"):
            return cls._from_json(spec)
        try:
            words = shlex.split(spec)
        except ValueError as exc:
            raise ComponentError(f"cannot split {spec!r}: {exc}") from None
        env: dict[str, str] = {}
        while words and _ENV_WORD.match(words[0]):
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        if not words:
            raise ComponentError(f"no command in {spec!r}")
        return cls(tuple(words), env)

    @classmethod
    def _from_json(cls, spec: str) -> Component:
        try:
            data = json.loads(spec)
        except ValueError as exc:
            raise ComponentError(f"not valid JSON: {spec!r} ({exc})") from None
        unknown = set(data) - _JSON_KEYS if isinstance(data, dict) else set()
        if not isinstance(data, dict) or unknown:
            raise ComponentError(f"unknown keys {sorted(unknown)} in {spec!r}")
        command, args, env = data.get("command"), data.get("args", []), data.get("env", {})
        if not isinstance(command, str) or not command:
            raise ComponentError(f'"command" must be a non-empty string in {spec!r}')
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ComponentError(f'"args" must be a list of strings in {spec!r}')
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise ComponentError(f'"env" must map names to strings in {spec!r}')
        return cls((command, *args), dict(env))

    def __str__(self) -> str:
        return shlex.join(self.argv)
