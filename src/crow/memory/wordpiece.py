"""BERT's WordPiece tokenizer, read from a Hugging Face ``tokenizer.json``.

The offline embedder's tokenizer: what the ``tokenizers`` library computes for
all-MiniLM-L6-v2 (BertNormalizer with lowercasing, BertPreTokenizer, WordPiece,
``[CLS] … [SEP]``), which tests/unit/memory checks id for id against that library.
Written by hand because ``tokenizers`` needs ``huggingface_hub``, whose commands
(``hf``, ``tiny-agents``) and 30 MB would come with Crow's local extra for
one BERT vocabulary.  Words seen before are looked up from a cache: memories and
queries repeat most of their words.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from pathlib import Path

__all__ = ["WordPiece"]


class WordPiece:
    """``encode(text)`` → the token ids the model takes, ``[CLS]`` and ``[SEP]`` included."""

    def __init__(self, path: Path, *, max_tokens: int = 256) -> None:
        spec = json.loads(path.read_text(encoding="utf-8"))
        model = spec["model"]
        if model.get("type") != "WordPiece" or spec["normalizer"].get("type") != "BertNormalizer":
            raise ValueError(f"{path} is not a BERT WordPiece tokenizer")
        self.vocab: dict[str, int] = model["vocab"]
        self.unknown = self.vocab[model.get("unk_token", "[UNK]")]
        self.prefix = model.get("continuing_subword_prefix", "##")
        self.max_word = int(model.get("max_input_chars_per_word", 100))
        normalizer = spec["normalizer"]
        self.lowercase = bool(normalizer.get("lowercase", True))
        strip = normalizer.get("strip_accents")
        self.strip_accents = self.lowercase if strip is None else bool(strip)
        self.cls, self.sep = self.vocab["[CLS]"], self.vocab["[SEP]"]
        self.max_tokens = max_tokens
        specials = [t["content"] for t in spec.get("added_tokens", []) if t.get("special")]
        self.specials = {t["content"]: t["id"] for t in spec.get("added_tokens", [])}
        self._special = (
            re.compile(
                "(" + "|".join(map(re.escape, sorted(specials, key=len, reverse=True))) + ")"
            )
            if specials
            else None
        )
        self.word_ids = functools.lru_cache(maxsize=65536)(self._word_ids)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        parts = self._special.split(text) if self._special else [text]
        for index, part in enumerate(parts):
            if index % 2:  # a special token, written out in the text
                ids.append(self.specials[part])
                continue
            for word in _words(self._normalized(part)):
                ids.extend(self.word_ids(word))
        return [self.cls, *ids[: self.max_tokens - 2], self.sep]

    def _normalized(self, text: str) -> str:
        out = []
        for char in text:
            code = ord(char)
            if code == 0 or code == 0xFFFD or _is_control(char):
                continue
            if _is_whitespace(char):
                out.append(" ")
            elif _is_cjk(code):
                out.append(f" {char} ")
            else:
                out.append(char)
        text = "".join(out)
        if self.strip_accents:
            text = "".join(
                c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn"
            )
        return text.lower() if self.lowercase else text

    def _word_ids(self, word: str) -> tuple[int, ...]:
        """Greedy longest-match-first pieces; a word with no split is one unknown."""
        if len(word) > self.max_word:
            return (self.unknown,)
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else self.prefix + word[start:end]
                found = self.vocab.get(piece)
                if found is not None:
                    pieces.append(found)
                    break
                end -= 1
            else:
                return (self.unknown,)
            start = end
        return tuple(pieces)


def _words(text: str) -> list[str]:
    """Split at whitespace, and every punctuation character is a word of its own."""
    words: list[str] = []
    for chunk in text.split():
        current = ""
        for char in chunk:
            if _is_punctuation(char):
                if current:
                    words.append(current)
                    current = ""
                words.append(char)
            else:
                current += char
        if current:
            words.append(current)
    return words


def _is_whitespace(char: str) -> bool:
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def _is_control(char: str) -> bool:
    if char in "\t\n\r":
        return False
    return unicodedata.category(char) in ("Cc", "Cf", "Cn", "Co", "Cs")


def _is_punctuation(char: str) -> bool:
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_cjk(code: int) -> bool:
    return (
        0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0x20000 <= code <= 0x2A6DF
        or 0x2A700 <= code <= 0x2B73F
        or 0x2B740 <= code <= 0x2B81F
        or 0x2B820 <= code <= 0x2CEAF
        or 0xF900 <= code <= 0xFAFF
        or 0x2F800 <= code <= 0x2FA1F
    )
