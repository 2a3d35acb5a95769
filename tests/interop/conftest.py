"""Interop with the official TypeScript SDK (@agentclientprotocol/sdk 2.4.0, /experimental/v2).

The npm packages live in tests/interop/ts/node_modules (``npm ci`` there; .ci/run
does it).  Without them these tests skip locally and fail under CI, so a CI run
can never pass by skipping interop.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

TS_DIR = Path(__file__).resolve().parent / "ts"


@pytest.fixture(autouse=True)
def _npm_packages_installed() -> None:
    sdk = TS_DIR / "node_modules" / "@agentclientprotocol" / "sdk"
    if shutil.which("node") and sdk.is_dir():
        return
    reason = "node and tests/interop/ts/node_modules are needed (cd tests/interop/ts && npm ci)"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)
