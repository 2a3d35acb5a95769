"""The bytes of a ``session/update`` notification as a Crow agent sends it, and how a
transport reads its session back off them: the one place for that layout.

A Crow agent encodes each update once, as it logs it, and sends those bytes to every
client watching the session (the encode-once path): the notification around them is
written here by formatting bytes, not by encoding a dict again.  The layout is compact
JSON with ``sessionId`` first::

    {"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"<id>","update":<update>}}

and, for an update with a place in the session's log, ``,"_meta":{"crow/seq":<seq>}``
after the update: a client that reconnects resumes after the last ``crow/seq`` it saw
(``replayFrom: {"type": "_crow/after", "seq": ...}``).

``session_of_update`` reads the id off the front without parsing the frame (the HTTP
transport routes every frame to its session's stream this way).  A frame of any other
shape, or an id with escapes in its JSON, gives None: the caller parses it.
"""

from __future__ import annotations

import orjson

__all__ = ["UPDATE_PREFIX", "encode_update", "session_of_update"]

#: How every ``session/update`` frame in this layout begins, up to its id's opening quote.
UPDATE_PREFIX = b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"'
_HEAD = UPDATE_PREFIX[:-1]  # orjson writes the id's quotes
_ID_AT = len(UPDATE_PREFIX)


def encode_update(session_id: str, update: bytes, seq: int | None) -> bytes:
    """The ``session/update`` notification around ``update`` (encoded JSON already);
    ``seq`` None: no place in the session's log, so no ``_meta``."""
    if seq is None:
        return b'%b%b,"update":%b}}' % (_HEAD, orjson.dumps(session_id), update)
    return b'%b%b,"update":%b,"_meta":{"crow/seq":%d}}}' % (
        _HEAD,
        orjson.dumps(session_id),
        update,
        seq,
    )


def session_of_update(frame: bytes) -> str | None:
    """The ``sessionId`` of a frame in this layout; None for any other frame, or for an
    id with escapes (parse those)."""
    if not frame.startswith(UPDATE_PREFIX):
        return None
    end = frame.find(b'"', _ID_AT)
    session_id = frame[_ID_AT:end]
    if end < 0 or b"\\" in session_id:
        return None
    return session_id.decode()
