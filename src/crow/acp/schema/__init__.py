"""ACP v2 wire models: generated classes plus the hand-written base and sentinel."""

from ._base import UNSET as UNSET
from ._base import UNSET_T as UNSET_T
from ._base import AcpModel as AcpModel
from ._base import adapter as adapter
from ._base import is_set as is_set
from ._generated import *  # noqa: F403
