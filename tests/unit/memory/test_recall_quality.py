"""Recall quality on a labelled set: 60 memories, 120 paraphrased queries.

The floors sit just below what was measured (bench/memory_bench.py prints the
figures; they do not depend on the machine's speed): a change that makes recall
worse fails here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from crow_testing.recall import LABELLED, evaluate

from crow.memory.embedders import MiniLMEmbedder
from crow.memory.minilm import installed as offline_installed

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def labelled():
    return json.loads(LABELLED.read_text())


def test_the_labelled_set_is_well_formed(labelled):
    keys = [m["key"] for m in labelled["memories"]]
    assert len(keys) == len(set(keys)) == 60
    assert sorted(q["expect"] for q in labelled["queries"]) == sorted(keys * 2)


@pytest.mark.skipif(
    not offline_installed() and os.environ.get("CROW_REQUIRE_LOCAL") != "1",
    reason="the local extra (the offline embedder's files) is not installed",
)
def test_hybrid_recall_with_the_offline_embedder(labelled, tmp_path):
    result = evaluate(MiniLMEmbedder(), tmp_path, labelled)
    assert result["memories"] == 60  # no two labelled memories were merged
    # measured .433 .875, keywords .833 .938 (as the float model in numpy: the same
    # vectors); the int8 export Crow had before found one paraphrase fewer (.867)
    assert result["hit@1"] >= 0.40 and result["hit@5"] >= 0.875, result
    assert result["keyword_hit@1"] >= 0.80 and result["keyword_hit@5"] >= 0.9375, result


def test_full_text_recall_alone(labelled, tmp_path):
    """What memory does with no embedder: paraphrases suffer, keywords do not."""
    result = evaluate(None, tmp_path, labelled)
    assert result["hit@1"] >= 0.18 and result["hit@5"] >= 0.45, result  # measured .208 .492
    assert result["keyword_hit@1"] >= 0.90 and result["keyword_hit@5"] >= 0.95, result
