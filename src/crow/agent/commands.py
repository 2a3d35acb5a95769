"""Slash commands: plain text prompts that Crow answers itself (ACP-V2.md §6, §8.4).

``/help`` lists them, ``/model [name]`` shows or switches the session's model,
``/compact`` summarises older turns now, ``/title <text>`` renames the session,
``/remember <text>``, ``/forget <id>`` and ``/memories [query]`` use Crow's memory.
An unknown ``/word`` goes to the model as ordinary text.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from crow.acp import schema
from crow.config import Config
from crow.redact import redact_url

from . import compaction, memory
from .host import TurnContext
from .updates import title_update

__all__ = ["available_commands", "available_commands_update", "parse", "run"]


@dataclass(frozen=True)
class Command:
    name: str
    description: str
    hint: str | None
    handler: Callable[[TurnContext, str], Awaitable[str]]


async def _help(turn: TurnContext, args: str) -> str:
    lines = [f"/{c.name}{' ' + c.hint if c.hint else ''} — {c.description}" for c in COMMANDS]
    await turn.note("Commands:\n" + "\n".join(lines), "info")
    return "end_turn"


async def _model(turn: TurnContext, args: str) -> str:
    agent, session = turn.host, turn.session
    name = args.strip()
    if not name:
        names = ", ".join(
            f"{n} (current)" if n == session.model else n for n in agent.config.models
        )
        lines = [f"Model: {_described(agent.config, session.model)}."]
        fallback = [n for n in agent.config.chain if n != session.model]
        if fallback:
            then = ", then ".join(_described(agent.config, n) for n in fallback)
            lines.append(f"If it fails: {then}.")
        if session.answered_by is not None and session.answered_by != session.model:
            lines.append(
                f"The latest reply came from {_described(agent.config, session.answered_by)}: "
                f"{session.model} did not answer."
            )
        lines.append(f"Available: {names}.")
        await turn.note("\n".join(lines), "info")
        return "end_turn"
    if name not in agent.config.models:
        await turn.note(
            f"No model named {name!r}. Available: {', '.join(agent.config.models)}.", "error"
        )
        return "end_turn"
    await agent.switch_model(session, name)
    await turn.note(f"Model switched to {name}.", "info")
    return "end_turn"


def _described(config: Config, name: str) -> str:
    """A model's name with what actually answers: its id, and where."""
    spec = config.models.get(name)
    if spec is None:
        return name
    provider = config.providers.get(spec.provider)
    if provider is None or provider.kind == "local" or not provider.base_url:
        return f"{name} ({spec.model_id}, embedded)"
    return f"{name} ({spec.model_id} at {redact_url(provider.base_url)})"


async def _compact(turn: TurnContext, args: str) -> str:
    done = await compaction.compact(turn, reason="you asked for it", keep_last_user=False)
    if not done:
        await turn.note("Nothing to compact yet.", "info")
    return "end_turn"


#: The longest title ``/title`` sets (a prompt's first words give at most 80).
MAX_TITLE_CHARS = 200


async def _title(turn: TurnContext, args: str) -> str:
    title = " ".join(args.split())
    if not title:
        await turn.note("Usage: /title <new title>", "error")
        return "end_turn"
    if len(title) > MAX_TITLE_CHARS:  # every session/list carries every title
        await turn.note(f"A title has at most {MAX_TITLE_CHARS} characters.", "error")
        return "end_turn"
    turn.session.title = title
    await turn.store.update_session(turn.session.id, title=title)
    await turn.session.emit(title_update(title))
    await turn.note(f"Renamed this session: {title}", "info")
    return "end_turn"


COMMANDS = [
    Command("help", "List Crow's commands", None, _help),
    Command("model", "Show the model, or switch to another", "[model name]", _model),
    Command("compact", "Summarise older turns to free context", None, _compact),
    Command("title", "Rename this session", "<title>", _title),
    Command(
        "remember",
        "Keep a fact in Crow's memory for this project",
        "<text>",
        memory.remember_command,
    ),
    Command("forget", "Delete a memory", "<memory id>", memory.forget_command),
    Command("memories", "List memories, or search them", "[query]", memory.memories_command),
]
_BY_NAME = {c.name: c for c in COMMANDS}


def available_commands() -> list[schema.AvailableCommand]:
    """The commands as a response lists them (shared between responses: never change them)."""
    return list(_commands())


@functools.cache
def _commands() -> tuple[schema.AvailableCommand, ...]:
    out: list[schema.AvailableCommand] = []
    for c in COMMANDS:
        command = schema.CommandAvailableCommand(
            type="command", name=c.name, description=c.description
        )
        if c.hint:
            command.input = schema.TextCommandInput(hint=c.hint)
        out.append(command)
    return tuple(out)


def available_commands_update() -> dict[str, Any]:
    return {"sessionUpdate": "available_commands_update", "availableCommands": _wire_commands()}


@functools.cache
def _wire_commands() -> list[dict[str, Any]]:
    """The commands as sent: made once (every session/new announces them)."""
    return [c.to_wire() for c in available_commands()]


def parse(blocks: list[Any]) -> tuple[Command, str] | None:
    """The command a prompt invokes, with its argument text; None if it is no command."""
    if len(blocks) != 1 or getattr(blocks[0], "type", None) != "text":
        return None
    text = blocks[0].text.strip()
    if not text.startswith("/"):
        return None
    name, _, args = text[1:].partition(" ")
    command = _BY_NAME.get(name)
    return None if command is None else (command, args)


async def run(turn: TurnContext, invoked: tuple[Command, str] | None) -> str | None:
    """Answer the turn's slash command (``parse``); None when the prompt is not one."""
    if invoked is None:
        return None
    command, args = invoked
    return await command.handler(turn, args)
