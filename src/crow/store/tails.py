"""What this process knows of the transcripts it writes, so that a model call need
not read back what the process itself just wrote.

A live session reads, at every model call, what its transcript gained since the
last one (``Store.transcript_after``): nearly always this process's own entries
(the prompt, the last reply, tool results).  On PostgreSQL that read was one of the
~2.4 round trips a prompt cost on the store's one thread.  ``TranscriptTails``
keeps, per session, the transcript's last seq as this process knows it and the
entries it wrote since the last such read, and answers from them only where
nobody else can have written:

- only while this process holds the session's turn lease: whoever appends to a
  transcript holds it (a turn; the recovery of a dead owner's turn takes it first);
- the lease, when taken, reads the transcript's last seq (``Store.take_turn``): if
  that is not the one known here, somebody wrote meanwhile, and the next call reads;
- an entry this process writes must come right after the last seq known: a gap
  means another writer's entries came between, and the next call reads.

One writer holds no lease: a judge's verdict, added to a judge session.  Should a
turn run on that session elsewhere meanwhile, that server reads the verdict at its
next write to the session (a gap) or at its next turn, not at its next model call.

A failed write forgets the session (whether it was kept is unknown).  An idle
logged, or the lease given back or refused, stops the answering but keeps what is
known: the next lease taken at the same last seq answers again, so a turn's first
model call need not read the previous turn's reply.

The store's thread and the loop's connection both write (SQLite's twin shares its
tails): every method holds one lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from .records import TranscriptEntry, loads

__all__ = ["KEPT_SESSIONS", "TranscriptTails"]

#: Sessions whose tails are kept (the latest leased): a few hundred bytes each, plus
#: the entries written since the session's last read.
KEPT_SESSIONS = 4096


@dataclass
class _Tail:
    last: int  # the transcript's last seq, as known here
    since: int  # every entry after this seq is in ``entries``
    held: bool  # this process holds the session's lease
    entries: list[tuple[int, str, str]] = field(default_factory=list)  # seq, kind, JSON


class TranscriptTails:
    """Per session: the transcript's last seq known here and this process's entries
    after the last read (see the module docstring for when they are the whole story)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tails: dict[str, _Tail] = {}

    def leased(self, session_id: str, last: int) -> None:
        """This process took the session's lease; ``last``: the transcript's last seq then."""
        with self._lock:
            tail = self._tails.pop(session_id, None)
            if tail is None or tail.last != last:
                tail = _Tail(last=last, since=last, held=True)
            tail.held = True
            self._tails[session_id] = tail  # the latest go last
            while len(self._tails) > KEPT_SESSIONS:
                del self._tails[next(iter(self._tails))]

    def unleased(self, session_id: str) -> None:
        """The lease is given back (an idle logged, released) or was not taken."""
        with self._lock:
            tail = self._tails.get(session_id)
            if tail is not None:
                tail.held = False

    def wrote(self, added: Iterable[tuple[str, int, str, str]]) -> None:
        """Entries this process added (session id, seq, kind, JSON body), committed,
        in the order of their seqs."""
        with self._lock:
            for session_id, seq, kind, body in added:
                tail = self._tails.get(session_id)
                if tail is None:
                    continue
                if seq != tail.last + 1:  # somebody else's came between
                    del self._tails[session_id]
                    continue
                tail.last = seq
                if tail.held:
                    tail.entries.append((seq, kind, body))
                else:  # no read comes before the next lease: keep none
                    tail.since, tail.entries = seq, []

    def forget(self, session_ids: Iterable[str]) -> None:
        """A write to these sessions failed: what it kept is not known."""
        with self._lock:
            for session_id in session_ids:
                self._tails.pop(session_id, None)

    def after(self, session_id: str, after: int) -> list[TranscriptEntry] | None:
        """The session's entries after seq ``after``, when this process knows them all
        (else None: read them); the caller then knows them to the last."""
        with self._lock:
            tail = self._tails.get(session_id)
            if tail is None or not tail.held or not tail.since <= after <= tail.last:
                return None
            found = [entry for entry in tail.entries if entry[0] > after]
            tail.since, tail.entries = tail.last, []
        return [
            TranscriptEntry(seq=seq, kind=kind, message=loads(body)) for seq, kind, body in found
        ]
