"""The soak tests run only on demand: ``CROW_SOAK=1 python3 -m pytest -q tests/soak``.

They take minutes and most of the machine, so the default ``pytest`` run does
not even collect them (``CROW_SOAK=1 bash .ci/run`` runs them with the rest).
"""

from __future__ import annotations

import os

collect_ignore_glob = [] if os.environ.get("CROW_SOAK") == "1" else ["test_*.py"]
