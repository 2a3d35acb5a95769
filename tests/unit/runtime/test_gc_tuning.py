"""crow serve's collector settings (the effect is measured by bench/http_bench.py)."""

from __future__ import annotations

import gc

from crow.runtime.gc_tuning import YOUNGEST_THRESHOLD, tune_for_serving


def test_serving_collects_less_often_and_leaves_start_up_objects_alone():
    before = gc.get_threshold()
    try:
        tune_for_serving()
        assert gc.get_threshold() == (YOUNGEST_THRESHOLD, *before[1:])
        assert gc.get_freeze_count() > 0
        assert gc.isenabled()  # cycles are still collected
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
