"""Opening a store: a PostgreSQL URL without the postgres extra says what to install."""

from __future__ import annotations

import sys

import pytest

from crow.store.db import StoreError, open_store


def test_a_postgres_store_without_psycopg_says_which_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg now fails
    with pytest.raises(StoreError) as failed:
        open_store("postgresql://crow@127.0.0.1:9/crow")
    message = str(failed.value)
    assert "pip install 'crow-cli[postgres]'" in message and "\n" not in message


def test_crow_serve_says_it_in_one_line(tmp_path):
    """No traceback: the store is opened as the server starts, inside its event loop."""
    import os
    import subprocess
    import textwrap

    script = textwrap.dedent(
        """
        import sys
        sys.modules["psycopg"] = None  # as without the postgres extra
        from crow.cli import main
        main(["serve"])
        """
    )
    env = {
        **os.environ,
        "CROW_HOME": str(tmp_path),
        "CROW_STORE_URL": "postgresql://crow@127.0.0.1:9/x",
    }
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "crow: a PostgreSQL store needs psycopg, which does not import (import of psycopg "
        "halted; None in sys.modules): pip install 'crow-cli[postgres]'"
    )
