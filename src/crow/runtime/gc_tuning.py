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
"""

from __future__ import annotations

import gc

__all__ = ["YOUNGEST_THRESHOLD", "collect_now", "tune_for_serving"]

#: Net allocations between collections of the youngest generation (CPython: 700).
#: 10,000 already removes most of the cost; 50,000 leaves a few collections a minute.
YOUNGEST_THRESHOLD = 50_000


def tune_for_serving() -> None:
    """Call once start-up is done, before the server takes clients.  No collection
    first: it would cost ~17 ms of start-up to free a handful of objects."""
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNGEST_THRESHOLD, middle, oldest)


def collect_now() -> None:
    """Free reference cycles now, not at some later full collection: an expired
    connection's transport, peer and tasks form cycles (the soak test watches RSS)."""
    gc.collect()
