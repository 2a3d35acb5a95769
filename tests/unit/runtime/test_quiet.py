"""Memory goes back once the agent is quiet, and not more often than allowed
(crow.runtime.quiet)."""

from __future__ import annotations

import asyncio
import gc
import platform
import weakref

import pytest

from crow.runtime.quiet import MemoryRelease, release_memory
from crow.runtime.quiet import malloc_trim as _malloc_trim


async def test_a_release_waits_for_quiet_checks_again_and_keeps_its_distance():
    live = {"a"}
    released: list[float] = []
    loop = asyncio.get_running_loop()
    memory = MemoryRelease(
        lambda: not live, release=lambda: released.append(loop.time()), quiet_s=0.05, every_s=0.3
    )
    memory.quiet()  # a session came back before the timer fired: nothing
    await asyncio.sleep(0.1)
    assert released == []

    live.clear()
    started = loop.time()
    memory.quiet()
    memory.quiet()  # one timer, not two
    await asyncio.sleep(0.1)
    assert len(released) == 1 and released[0] - started >= 0.05

    memory.quiet()  # quiet again at once: waits out every_s since the last release
    await asyncio.sleep(0.1)
    assert len(released) == 1
    await asyncio.sleep(0.3)
    assert len(released) == 2 and released[1] - released[0] >= 0.3
    memory.close()


async def test_a_closed_release_never_fires():
    released: list[int] = []
    memory = MemoryRelease(lambda: True, release=lambda: released.append(1), quiet_s=0.01)
    memory.quiet()
    memory.close()
    await asyncio.sleep(0.05)
    assert released == []


def test_release_memory_frees_cycles():
    class Node:
        pass

    node = Node()
    node.me = node  # type: ignore[attr-defined]
    alive = weakref.ref(node)
    del node
    gc.disable()  # only the release may collect it
    try:
        release_memory()
    finally:
        gc.enable()
    assert alive() is None


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_the_release_finds_malloc_trim_on_glibc():
    assert _malloc_trim() is not None
