"""``python -m crow``: the same as the ``crow`` command."""

import sys

from .cli import main

sys.exit(main())
