"""What Crow's tests and benchmarks share, in one importable place.

- ``fakemodel``: a scripted OpenAI-compatible model server on loopback (and the
  ``scripted_model`` pytest fixture).
- ``support``: agents driven over raw stdio bytes (``RawAgent``).
- ``serve_support``: a ``crow serve`` config and agent for a test or a bench.
- ``rawclient``: a raw-bytes ACP client for the benchmarks.
- ``numpy_minilm``: the reference embedder the memory bench compares with.
- ``recall``: recall quality (hit@1, hit@5) on the labelled memories.

Tests find it through pytest's ``pythonpath`` (pyproject.toml), the scripts in
``bench/`` by putting ``testing/`` on ``sys.path``: neither imports the other.
"""
