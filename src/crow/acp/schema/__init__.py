"""ACP v2 wire models: generated classes plus the hand-written base and sentinel."""

from ._base import UNSET, UNSET_T, AcpModel, is_set
from ._generated import *  # noqa: F403
