"""Crow's own names on the ACP wire, shared by the agent and the line client.

Both are extensions the protocol allows: other clients ignore them.
"""

__all__ = ["RECALLED", "TURN_ENDED", "WAIT_OVER"]

#: A custom session update, logged before ``idle`` when a turn ends other than
#: ``end_turn`` (``stopReason``, ``error``): a replay has no state changes, and
#: this keeps in the history how the turn ended.
TURN_ENDED = "_crow/turnEnded"

#: ``_meta`` key of a live ``notice`` saying that the wait an earlier notice
#: named (tool servers starting, a retry, a model loading) is over.
WAIT_OVER = "crow/waitOver"

#: ``_meta`` key (true) of the ``tool_call_update`` that shows the memories Crow
#: recalled into a turn by itself (not a tool call the model made).
RECALLED = "crow/recalled"
