"""``python -m crow``: the same as the ``crow`` command."""

from .cli import run

run()
