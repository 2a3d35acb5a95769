"""ACP v2 wire models: generated classes plus the hand-written base and sentinel.

The generated classes come in two modules (scripts/gen_v2_schema.py): those
``initialize`` needs, imported here, and the rest, imported by ``__getattr__`` on
the first use of one of their names.  Creating those ~150 classes takes ~50 ms,
which an editor spawning ``crow serve`` would otherwise wait for before its
``initialize`` is answered.
"""

import importlib
from typing import TYPE_CHECKING, Any

from ._base import UNSET as UNSET
from ._base import UNSET_T as UNSET_T
from ._base import AcpModel as AcpModel
from ._base import adapter as adapter
from ._base import is_set as is_set
from ._generated_core import *  # noqa: F403

if TYPE_CHECKING:
    from ._generated import *  # noqa: F403
else:

    def __getattr__(name: str) -> Any:
        """A name of the lazily imported models (PEP 562): import them all, keep them here."""
        if name.startswith("_"):  # also keeps the import machinery's probes from recursing
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        rest = importlib.import_module(f"{__name__}._generated")
        globals().update((k, v) for k, v in vars(rest).items() if not k.startswith("_"))
        try:
            return globals()[name]
        except KeyError:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
