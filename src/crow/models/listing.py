"""``crow models``: the models Crow can use, where each comes from, and whether it
answers now; ``--check [NAME]`` makes a real one-token call and reports its time
or its exact error.

One line per model in the chain, in order, under a header, with its capabilities
and context window as its server describes them (models.discovery; ``*`` marks
each figure the server gave, not what config.toml set) or as configured::

    NAME          FROM          WHERE                      CAN               CONTEXT  STATE
    qwen3:8b      ollama guess  http://localhost:11434/v1  tools, reasoning*  40960*  ready
    smollm2-135m  embedded      (in process)               text only           8192  ready

Every line fits ``WIDTH`` columns: a state that does not (an error) goes on the
lines below its model, indented.  ``--json`` writes one object per model instead.
Zero config's guess (ollama on localhost, which nobody configured) failing to
answer fails no ``--check``: the embedded model after it is the one that answers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from ..config import EMBEDDED_MODEL, Config, ConfigError, ModelSpec, Paths, load_config
from ..extras import embedded_available
from ..tls import client_context
from .client import ModelClient
from .errors import ModelError
from .events import Finished
from .router import ModelRouter

__all__ = ["WIDTH", "check", "describe", "described", "main", "origin", "reachable"]

PROBE_TIMEOUT_S = 2.0
#: The widest line ``crow models`` prints.
WIDTH = 100
#: The widest WHERE cell: a longer URL is cut in its middle.
WHERE_WIDTH = 34
HEADER = ("NAME", "FROM", "WHERE", "CAN", "CONTEXT", "STATE")


async def main(args: argparse.Namespace) -> int:
    """``crow models [--check [NAME]] [--json]``: exit 0, 1 when a check failed, 2 usage."""
    try:
        config = load_config(Paths.from_env(), model=args.model, base_url=args.base_url)
    except ConfigError as exc:
        print(f"crow: {exc}", file=sys.stderr)
        return 2
    names = list(config.chain)
    if args.check and args.check not in config.models:
        print(f"crow: no model {args.check} (these are: {', '.join(names)})", file=sys.stderr)
        return 2
    failed = False
    rows: list[dict[str, object]] = []
    async with described(config) as describe_model:
        for name in names:
            spec = await describe_model(name)
            state, ok = await _state(config, spec, checking=args.check in ("", name))
            failed = failed or ok is False
            rows.append(_row(config, spec, state, ok))
    if args.json:
        for row in rows:
            print(json.dumps(row))
    else:
        _table(rows)
        sources = sorted({str(r["serverSource"]) for r in rows if r["serverSaid"]})
        if sources:
            print(f"* as the server describes the model ({'; '.join(sources)})")
    return 1 if failed else 0


async def _state(config: Config, spec: ModelSpec, *, checking: bool) -> tuple[str, bool | None]:
    """What ``crow models`` says of the model now, and whether a check passed
    (None: not checked, or zero config's guess that nothing answers)."""
    if not checking:
        return await reachable(config, spec), None
    if config.providers[spec.provider].guessed:
        state = await reachable(config, spec)
        if state != "ready":
            return f"{state}: a guess (nothing configured), not checked", None
    ok, state = await check(config, spec.name)
    return state, ok


def _row(config: Config, spec: ModelSpec, state: str, ok: bool | None) -> dict[str, object]:
    row: dict[str, object] = {
        "name": spec.name,
        "from": origin(config, spec),
        "where": config.providers[spec.provider].base_url or "(in process)",
        "capabilities": sorted(spec.capabilities),
        "contextWindow": spec.context_window,
        "serverSaid": sorted(spec.from_server),
        "serverSource": spec.discovered,
        "state": state,
    }
    if ok is not None:
        row["checked"] = ok
    return row


def _table(rows: list[dict[str, object]]) -> None:
    cells = [HEADER]
    for row in rows:
        said = row["serverSaid"]
        assert isinstance(said, list)
        caps = ", ".join(row["capabilities"]) or "text only"  # type: ignore[arg-type]
        cells.append(
            (
                str(row["name"]),
                str(row["from"]),
                _cut(str(row["where"]), WHERE_WIDTH),
                caps + ("*" if "capabilities" in said else ""),
                f"{row['contextWindow']}" + ("*" if "context_window" in said else ""),
                str(row["state"]),
            )
        )
    widths = [max(len(c[i]) for c in cells) for i in range(5)]
    for cell in cells:
        start = "  ".join(
            f"{text:>{width}}" if i == 4 else f"{text:<{width}}"
            for i, (text, width) in enumerate(zip(cell[:5], widths, strict=True))
        )
        room = WIDTH - len(start) - 2
        if len(cell[5]) <= room:
            print(f"{start}  {cell[5]}".rstrip())
        else:  # an error: whole, on the lines below
            print(start.rstrip())
            print(textwrap.fill(cell[5], WIDTH, initial_indent="    ", subsequent_indent="    "))


def _cut(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    half = (width - 1) // 2
    return f"{text[:half]}…{text[len(text) - (width - 1 - half) :]}"


def origin(config: Config, spec: ModelSpec) -> str:
    """Where the model comes from, in a word or two."""
    provider = config.providers[spec.provider]
    if provider.kind == "local":
        return "embedded" if spec.model_id == EMBEDDED_MODEL else "local file"
    if provider.guessed:
        return "ollama guess"
    return "config" if config.paths.config_file.exists() else "environment"


async def reachable(config: Config, spec: ModelSpec) -> str:
    """``ready``, or why not, without generating anything."""
    provider = config.providers[spec.provider]
    if provider.kind == "local":
        if spec.model_id == EMBEDDED_MODEL:
            return "ready" if embedded_available() else "the local extra is not installed"
        path = Path(spec.model_id)
        return "ready" if path.is_file() else f"no file at {path}"
    import httpx2  # ~35 ms: only for a provider reached over HTTP

    try:
        async with httpx2.AsyncClient(timeout=PROBE_TIMEOUT_S, verify=client_context()) as client:
            answer = await client.get(provider.base_url.rstrip("/") + "/models")
    except httpx2.HTTPError as exc:
        return f"unreachable ({type(exc).__name__})"
    if answer.status_code == 404:
        return "answers, but has no /models (is /v1 missing from the base URL?)"
    return "ready" if answer.is_success else f"answers {answer.status_code}"


@contextlib.asynccontextmanager
async def described(config: Config) -> AsyncIterator[Callable[[str], Awaitable[ModelSpec]]]:
    """A function from a model's name to its spec as its server describes it."""
    router = ModelRouter(config)
    try:
        yield router.describe
    finally:
        await router.aclose()


def describe(spec: ModelSpec) -> str:
    """Capabilities and context window; ``*`` after each the server said."""
    kinds = ", ".join(sorted(spec.capabilities)) or "text only"
    kinds += "*" if "capabilities" in spec.from_server else ""
    window = f"{spec.context_window}" + ("*" if "context_window" in spec.from_server else "")
    return f"{kinds}; {window}"


async def check(config: Config, name: str) -> tuple[bool, str]:
    """One real call, one token, this model alone (no retries, no fallback)."""
    spec = dataclasses.replace(config.models[name], max_output_tokens=1)
    client = ModelClient(config)
    started = time.perf_counter()
    try:
        async with asyncio.timeout(config.retry.timeout_s):
            async for event in client.stream(spec, [{"role": "user", "content": "Say OK."}]):
                if isinstance(event, Finished):
                    took = (time.perf_counter() - started) * 1000
                    return True, f"answered in {took:.0f} ms"
    except ModelError as exc:
        return False, exc.message
    except TimeoutError:
        return False, f"no answer within {config.retry.timeout_s:g} s"
    finally:
        await client.aclose()
    return False, "the reply ended without finishing"
