"""The offline embedder's tokenizer, id for id against the ``tokenizers`` library
(the reference, in the dev extra) on the same tokenizer.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crow.memory.wordpiece import WordPiece
from crow.model_files import MINILM_TOKENIZER

ROOT = Path(__file__).resolve().parents[3]
path = MINILM_TOKENIZER.find()
pytestmark = pytest.mark.skipif(path is None, reason="the local extra is not installed")

TRICKY = [
    "",
    "Hello, World!",
    "Crème brûlée à la carte — naïve café",
    "snake_case --ff _routes.py camelCaseName x=1;y=2",
    "tabs\tand\nnewlines\r\nand\u00a0nbsp\u2028line separator",
    "中文字符和日本語のテキスト",
    "emoji 🐦‍⬛ and a zero-width\u200bjoiner",
    "control\x00chars\x07and\ufffdreplacement",
    "[CLS] written out [SEP] and [MASK]ed [UNK]",
    "supercalifragilisticexpialidocious" * 4,
    "İstanbul ǅemal ﬁnance",
    "a " * 400,  # longer than the model takes: cut at 256
]


@pytest.fixture(scope="module")
def reference():
    tokenizers = pytest.importorskip("tokenizers")
    tokenizer = tokenizers.Tokenizer.from_file(str(path))
    tokenizer.no_padding()
    tokenizer.enable_truncation(256)
    return tokenizer


def test_wordpiece_gives_the_reference_ids(reference):
    labelled = json.loads((ROOT / "tests/data/memory_recall.json").read_text())
    texts = TRICKY + [m["text"] for m in labelled["memories"]]
    texts += [q["query"] for q in labelled["queries"]]
    mine = WordPiece(path, max_tokens=256)
    for text in texts:
        assert mine.encode(text) == reference.encode(text).ids, text
