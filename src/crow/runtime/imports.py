"""Importing heavy modules off the event loop, without holding up the exit.

The model and MCP SDKs take about a second to import.  Importing them on the
loop would stall every client; ``asyncio.to_thread`` would not, but it runs on
the loop's default executor, which ``asyncio.run`` joins before the process
may exit: an agent whose client closed its stdin mid-import would linger until
the import is done.  ``import_off_loop`` uses a daemon thread instead.

A daemon thread still inside a C extension's import when the interpreter
finalizes can abort the process ("FATAL: exception not rethrown", seen when
Ctrl-C left ``crow judge`` as it imported the model SDK): so the ``crow`` command
leaves with ``os._exit`` when one is still running (``importing``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import sys
import threading
from types import ModuleType

__all__ = ["import_off_loop", "importing"]

THREAD_PREFIX = "import-"


def importing() -> bool:
    """Whether an import started by ``import_off_loop`` is still running."""
    return any(t.name.startswith(THREAD_PREFIX) and t.is_alive() for t in threading.enumerate())


async def import_off_loop(name: str) -> ModuleType:
    """Import ``name`` in a daemon thread and return the module (or raise its error)."""
    module = sys.modules.get(name)
    if module is not None and not getattr(module.__spec__, "_initializing", False):
        return module  # imported already: no thread (each session's tools ask again)
    loop = asyncio.get_running_loop()
    future: asyncio.Future[ModuleType] = loop.create_future()

    def done(module: ModuleType | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            assert module is not None
            future.set_result(module)

    def run() -> None:
        try:
            module = importlib.import_module(name)
        except BaseException as exc:  # handed to the awaiting task
            outcome: tuple[ModuleType | None, BaseException | None] = (None, exc)
        else:
            outcome = (module, None)
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
            loop.call_soon_threadsafe(done, *outcome)

    threading.Thread(target=run, name=f"{THREAD_PREFIX}{name}", daemon=True).start()
    return await future
