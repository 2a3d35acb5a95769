"""crow.cli: the ``crow`` command (``crow.cli.app``), one module per subcommand."""

from .app import main, run

__all__ = ["main", "run"]
