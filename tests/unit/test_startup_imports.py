"""``crow serve`` start-up: what answering ``initialize`` must not import, and the
lazily imported wire models (crow.acp.schema) still being all there once used.

Each check runs in a fresh interpreter: this one has imported everything already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from crow.acp import schema

REST = "crow.acp.schema._generated"


def run(code: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )


def test_importing_the_server_leaves_the_sdks_and_most_wire_models_out():
    result = run(
        f"""
        import sys
        import crow.serve.stdio
        late = ["{REST}", "openai", "aiohttp", "mcp", "lancedb", "numpy"]
        print([name for name in late if name in sys.modules])
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_crow_serve_answers_initialize_without_the_other_wire_models():
    # Checked as the answer leaves _on_request, before the background warm-up
    # (which imports them on purpose) can start.
    script = f"""
        import sys
        from crow.acp.agent import AgentSide
        from crow.cli import main

        answer = AgentSide._on_request

        async def on_request(self, method, params):
            result = await answer(self, method, params)
            if method == "initialize":
                print("loaded:", "{REST}" in sys.modules, file=sys.stderr)
            return result

        AgentSide._on_request = on_request
        main(["serve"])
    """
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": 2, "info": {"name": "test", "version": "0"}},
    }
    result = run(script, stdin=json.dumps(initialize) + "\n")
    reply = json.loads(result.stdout.splitlines()[0])
    assert reply["result"]["protocolVersion"] == 2, reply
    assert "loaded: False" in result.stderr, result.stderr


def test_the_lazy_models_load_on_first_use():
    result = run(
        f"""
        import sys
        from crow.acp import schema
        assert "{REST}" not in sys.modules
        assert not hasattr(schema, "_nothing")
        from crow.acp.schema import NewSessionRequest  # a lazy one, by from-import
        assert "{REST}" in sys.modules
        assert schema.NewSessionRequest is NewSessionRequest
        assert NewSessionRequest.__module__ == "{REST}"
        assert schema.InitializeRequest.__module__ == "crow.acp.schema._generated_core"
        try:
            schema.NoSuchModel
        except AttributeError as exc:
            assert "NoSuchModel" in str(exc)
        else:
            raise AssertionError("no AttributeError")
        """
    )
    assert result.returncode == 0, result.stderr


def test_the_package_offers_every_generated_name():
    from crow.acp.schema import _generated, _generated_core

    schema.AGENT_METHODS  # noqa: B018 - loads the rest, as any lazy name does
    for module in (_generated_core, _generated):
        public = {k: v for k, v in vars(module).items() if not k.startswith("_")}
        assert public
        assert all(vars(schema)[k] is v for k, v in public.items())
    params, result = schema.AGENT_METHODS["initialize"]
    assert (params, result) == (schema.InitializeRequest, schema.InitializeResponse)
