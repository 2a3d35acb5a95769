"""Running ``crow serve`` as a real subprocess against the scripted model."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crow.acp import ClientSide, schema
from crow.acp.transports.http_client import connect_url, split_token

from .support import RawAgent

CROW_SERVE = [sys.executable, "-m", "crow", "serve"]


def write_config(
    home: Path,
    base_url: str,
    *,
    models: dict[str, dict[str, Any]] | None = None,
    fallback: list[str] | None = None,
    retry_attempts: int = 2,
    timeout_s: float = 5.0,
    extra: str = "",
    max_steps: int | None = None,
) -> None:
    """A config.toml with fast retries, pointing every model at the scripted server."""
    models = models or {"main": {}}
    lines = ["[model]", f'default = "{next(iter(models))}"']
    if fallback:
        lines.append("fallback = [" + ", ".join(f'"{m}"' for m in fallback) + "]")
    if max_steps is not None:
        lines.append(f"max_steps = {max_steps}")
    lines += ["", "[providers.scripted]", f'base_url = "{base_url}"', ""]
    for name, spec in models.items():
        lines.append(f"[models.{name}]")
        lines.append('provider = "scripted"')
        for key, value in spec.items():
            rendered = (
                "[" + ", ".join(f'"{v}"' for v in value) + "]"
                if isinstance(value, list)
                else f'"{value}"'
                if isinstance(value, str)
                else str(value)
            )
            lines.append(f"{key} = {rendered}")
        lines.append("")
    lines += [
        "[retry]",
        f"attempts = {retry_attempts}",
        "backoff_s = 0.01",
        f"timeout_s = {timeout_s}",
        "",
        extra,
    ]
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("\n".join(lines))


class CrowProcess(RawAgent):
    """``crow serve`` on stdio, with the helpers the turn tests need."""

    def __init__(self, *args: str) -> None:
        super().__init__([*CROW_SERVE, *args])
        self.initialized = self.initialize()

    def prompt(self, sid: str, *blocks: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        content = [{"type": "text", "text": b} if isinstance(b, str) else b for b in blocks]
        return self.request("session/prompt", {"sessionId": sid, "prompt": content})

    def run_turn(self, sid: str, *blocks: Any) -> list[dict[str, Any]]:
        """Prompt and collect every update up to the idle that ends the turn."""
        response, before = self.prompt(sid, *blocks)
        assert "result" in response, response
        return updates(before + self.until_update(is_idle))

    def resume(self, sid: str, cwd: str = "/tmp", **params: Any) -> tuple[dict, list[dict]]:
        response, before = self.request("session/resume", {"sessionId": sid, "cwd": cwd, **params})
        return response, updates(before)


def updates(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["params"]["update"] for m in messages if m.get("method") == "session/update"]


def is_idle(update: dict[str, Any]) -> bool:
    return update.get("sessionUpdate") == "state_update" and update.get("state") == "idle"


def memory_turn(agent: Any, sid: str, text: str) -> list[dict[str, Any]]:
    """A turn's updates, waiting longer than usual between them: a process's first
    memory call imports LanceDB (~2 s of CPU, more on a loaded machine)."""
    response, before = agent.prompt(sid, text)
    assert "result" in response, response
    seen = updates(before)
    while not seen or not is_idle(seen[-1]):
        seen += updates([agent.recv(timeout=90)])
    return seen


def kinds(seen: list[dict[str, Any]]) -> list[str]:
    return [u["sessionUpdate"] for u in seen]


#: Live-only updates: state changes and notices (a turn waiting for its tool
#: servers, a retry) are sent to whoever watches, never replayed.
LIVE_ONLY = ("state_update", "notice")


def replayable(seen: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a replay gives back of live updates."""
    return [u for u in seen if u["sessionUpdate"] not in LIVE_ONLY]


def without_notices(seen: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [u for u in seen if u["sessionUpdate"] != "notice"]


def text_of(seen: list[dict[str, Any]], kind: str = "agent_message_chunk") -> str:
    return "".join(u["content"]["text"] for u in seen if u["sessionUpdate"] == kind)


def notes(seen: list[dict[str, Any]]) -> list[str]:
    return [
        u["content"][0]["text"]
        for u in seen
        if u["sessionUpdate"] == "agent_message" and "crow/notice" in u.get("_meta", {})
    ]


class Terminals:
    """``crow`` commands in real terminals (pexpect ptys); ``close`` kills what is left."""

    def __init__(self, env: dict[str, str], cwd: Path, timeout: float) -> None:
        self.env, self.cwd, self.timeout = env, cwd, timeout
        self.children: list[Any] = []

    def start(
        self, *args: str, dimensions: tuple[int, int] = (24, 80), python: Sequence[str] = ()
    ) -> Any:
        """``crow ARGS`` (``python`` options given to the interpreter first)."""
        import pexpect

        child = pexpect.spawn(
            sys.executable,
            [*python, "-m", "crow", *args],
            env=self.env,
            cwd=str(self.cwd),
            dimensions=dimensions,
            encoding="utf-8",
            timeout=self.timeout,
        )
        self.children.append(child)
        return child

    def close(self) -> None:
        for child in self.children:
            if child.isalive():
                child.close(force=True)


CLIENT_INFO = schema.Implementation(name="http-test", version="0")


class HttpServer:
    """``crow serve --http`` on a free port (or ``command``, any server printing its URL).

    ``url`` is the URL it prints, with its ``?token=``; ``bare_url`` is without."""

    def __init__(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        command: list[str] | None = None,
        bind: str = "127.0.0.1:0",
        **popen: Any,
    ) -> None:
        self.process = subprocess.Popen(
            command or [sys.executable, "-m", "crow", "serve", "--http", bind, *args],
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env={**os.environ, **(env or {})},
            **popen,
        )
        assert self.process.stderr is not None
        self.first_lines = ""  # what it printed before the URL
        for line in self.process.stderr:
            found = re.search(r"serving ACP at (http://\S+)", line)
            if found:
                self.url = found.group(1)
                self.bare_url, self.token = split_token(self.url)
                break
            self.first_lines += line
        else:
            raise RuntimeError("crow serve --http did not start")

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        finally:
            if self.process.poll() is None:
                self.process.kill()
            assert self.process.stderr is not None
            self.process.stderr.close()


async def client_for(url: str, **kwargs: Any) -> ClientSide:
    client = ClientSide(await connect_url(url), info=CLIENT_INFO, **kwargs)
    await client.__aenter__()
    await client.initialize()
    return client
