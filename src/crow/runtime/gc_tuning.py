"""The cyclic garbage collector, tuned for a long-lived server.

CPython runs its youngest generation every 700 net allocations.  A turn
allocates tens of thousands of short-lived objects (JSON dicts, futures, event
loop handles) that reference counting frees at once, so most of those
collections walk live objects for nothing: about 0.8 ms of every prompt under
load, a sixth of crow serve's CPU (bench/http_bench.py, 100 clients).

``tune_for_serving`` collects less often and moves what start-up built (the
imported modules, the config) out of the collector's view for good: those
objects live as long as the process, and every full collection would walk them
again.  Reference cycles are still collected, only later; ``collect_now`` where
they are known to be many (crow serve after idle HTTP connections expired).

``tune_for_serving`` runs before the transport and the agent's layers are imported
(crow serve reads its command line first): ~43,000 live objects once a server has
started.  Each full collection walked them all again (tens of ms: a pause that was
the p99 of session/new at 1,000 sessions), so ``settle`` freezes again once they are
imported (~200 left in view), and after the stdio agent's warm-up imports.  What a
first turn imports (the built-in tool servers: numpy, httpx) stays in view: importing
it ahead would cost every agent that never runs a tool ~1 s of CPU.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNGEST_THRESHOLD", "collect_now", "settle", "tune_for_serving"]

#: Net allocations between collections of the youngest generation (CPython: 700).
#: 10,000 already removes most of the cost; 50,000 leaves a few collections a minute.
YOUNGEST_THRESHOLD = 50_000


def tune_for_serving() -> None:
    """Call once start-up is done, before the server takes clients.  No collection
    first: it would cost ~17 ms of start-up to free a handful of objects."""
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNGEST_THRESHOLD, middle, oldest)


def settle() -> None:
    """Out of the collector's view, like start-up's: what was imported since (call once
    the server's imports are done: before its first client, after the warm-up).  What
    else lives now (a first client's objects) is frozen too: if it later becomes cyclic
    garbage, it is never collected; reference counting still frees the rest."""
    gc.freeze()


def collect_now() -> None:
    """Free reference cycles now, not at some later full collection: an expired
    connection's transport, peer and tasks form cycles (the soak test watches RSS)."""
    gc.collect()
