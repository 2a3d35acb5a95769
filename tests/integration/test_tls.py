"""One trust source for every HTTPS client (crow.tls): model calls (aiohttp), discovery
(httpx2), the embedder (openai) and the rest take the same SSLContext.

The scripted model serves HTTPS with a certificate from a private CA (trustme), as a
corporate proxy or an internal gateway would: a client trusts it only through Crow's
trust source."""

from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
import trustme
from crow_testing.fakemodel import ScriptedModel, Text
from crow_testing.serve_support import write_config

from crow import tls
from crow.config import Config, ModelSpec, Paths, ProviderSpec, RetryPolicy
from crow.memory.embedders import OpenAIEmbedder
from crow.models.events import TextDelta
from crow.models.router import ModelRouter


@pytest.fixture
def authority() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def https_model(scripted_model: ScriptedModel, authority: trustme.CA) -> ScriptedModel:
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("localhost", "127.0.0.1").configure_cert(served)
    scripted_model.use_tls(served)
    return scripted_model


@pytest.fixture
def trusting(authority: trustme.CA, monkeypatch: pytest.MonkeyPatch) -> ssl.SSLContext:
    """Crow's trust source holds the private CA, and only it (as a corporate store
    would hold its CA): the system store the libraries fall back to does not."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    authority.configure_trust(context)
    monkeypatch.setattr(tls, "_context", context)
    return context


async def test_model_calls_discovery_and_embeddings_trust_crows_one_source(
    https_model: ScriptedModel, trusting: ssl.SSLContext
) -> None:
    https_model.show = {"capabilities": ["completion", "tools"], "model_info": {}}
    https_model.script(Text(text="over TLS"))
    config = Config(
        paths=Paths(home=Path("/nonexistent")),
        providers={"p": ProviderSpec(name="p", base_url=https_model.base_url)},
        models={"a": ModelSpec(name="a", provider="p", model_id="m")},
        chain=("a",),
        retry=RetryPolicy(attempts=1, backoff_s=0.01, timeout_s=10.0),
    )
    router = ModelRouter(config)
    try:
        async with asyncio.timeout(30):
            described = await router.describe("a")  # discovery: httpx2
            events = [e async for e in router.stream("a", [{"role": "user", "content": "hi"}])]
    finally:
        await router.aclose()
    assert "tools" in described.capabilities and "POST /api/show" in https_model.asked
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "over TLS"  # aiohttp
    embedder = OpenAIEmbedder(https_model.base_url, "e")
    try:
        vectors = await asyncio.to_thread(embedder.embed, ["remember me"])  # openai
    finally:
        embedder.close()
    assert vectors.shape[0] == 1 and https_model.embedded == ["remember me"]


def test_crow_run_trusts_a_ca_named_by_ssl_cert_file(
    https_model: ScriptedModel, authority: trustme.CA, crow_home: Path, tmp_path: Path
) -> None:
    """On Linux the trust source is OpenSSL's system store, and SSL_CERT_FILE the
    standard way to name a CA: discovery and the model call both take it."""
    https_model.show = {"capabilities": ["completion"], "model_info": {}}
    https_model.script(Text(text="trusted"))
    write_config(crow_home, https_model.base_url, extra="[tools]\nbuiltin = []\n")
    bundle = tmp_path / "ca.pem"
    authority.cert_pem.write_to_path(str(bundle))
    ran = subprocess.run(
        [sys.executable, "-m", "crow", "run", "hi"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "SSL_CERT_FILE": str(bundle)},
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "trusted\n"
    assert "POST /api/show" in https_model.asked  # discovery reached it too
