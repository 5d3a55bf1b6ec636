"""Generate the Python code of our .proto files: ``python -m tests.protogen`` (``make proto``).

protoc (grpcio-tools) writes the message modules (``*_pb2.py``) and the gRPC service modules
(``*_pb2_grpc.py``: the servicer base class, the stub, the registration function); mypy-protobuf writes
their typed stubs (``*.pyi``), which mypy reads in place of the generated code. The output is checked
in, each file headed by the line :func:`header` gives: tests/unit/test_protogen.py generates again and
compares byte for byte, so a .proto edited without regenerating, or another generator version, fails.

The generators are pinned here (:data:`GENERATORS`) and run from a venv of their own under build/:
generated code refuses, at import, a protobuf older than its protoc or a grpcio older than its
grpcio-tools, so the generator sets the ``kubernetes`` extra's floors, while the dev venv keeps the
newest protobuf and grpcio for everything else. grpcio-tools 1.72.1 is the oldest whose protobuf code
(6.30.0) every runtime from there to the newest 7.x loads without a word: protobuf guarantees gencode of
major V on runtimes V and V+1, and 5.x code draws a warning from the 6.30 and 6.31 runtimes.
tests/unit/deviceplugin/test_grpc_range.py runs both ends of the range.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Relative to the repository root, which is protoc's import path: the generated modules import each
# other by their package (cdictk.deviceplugin.proto...), and that is also each file's name in protobuf's
# descriptor pool.
PROTOS = (
    "cdictk/deviceplugin/proto/deviceplugin.proto",
    "cdictk/dra/kubeletapi/dra_v1.proto",
    "cdictk/dra/kubeletapi/dra_v1beta1.proto",
    "cdictk/dra/kubeletapi/pluginregistration.proto",
    "tests/e2e/kubelet/cri.proto",
)
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")
# The generators, pinned: the one place their versions are written. A newer grpcio-tools raises the
# kubernetes extra's floors (pyproject.toml), which tests/unit/test_protogen.py holds to its output.
GENERATORS = {"grpcio-tools": "1.72.1", "mypy-protobuf": "5.1.0"}
# Their venv, built on first use and again when the pins change (its stamp file lists them).
GENERATOR_VENV = REPO / "build" / "protogen-venv"


def header(proto: str) -> str:
    tools, stubs = GENERATORS["grpcio-tools"], GENERATORS["mypy-protobuf"]
    return (
        f"# Generated from {proto} by grpcio-tools {tools} and mypy-protobuf {stubs}: do not edit;\n"
        "# regenerate with `make proto` (python -m tests.protogen).\n"
    )


def generator_venv() -> Path:
    """The generators' venv (its bin directory), with the pinned versions from PyPI; built with this
    Python's pip, as the dev venv has one and a venv without pip builds in a second."""
    pins = [f"{name}=={version}" for name, version in GENERATORS.items()]
    stamp = GENERATOR_VENV / "cdictk-generators"
    wanted = "\n".join(pins) + "\n"
    if stamp.exists() and stamp.read_text() == wanted:
        return GENERATOR_VENV / "bin"
    # Another pin or a build cut short: start over, and write the stamp only once all is installed.
    shutil.rmtree(GENERATOR_VENV, ignore_errors=True)
    venv.EnvBuilder(with_pip=False).create(GENERATOR_VENV)
    python = GENERATOR_VENV / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", *pins],
        check=True,
        timeout=600,
    )
    stamp.write_text(wanted)
    return GENERATOR_VENV / "bin"


def outputs(proto: str) -> list[str]:
    """The files generated from ``proto``, relative to the repository root."""
    stem = proto.removesuffix(".proto")
    return [stem + suffix for suffix in SUFFIXES]


def generate(proto: str) -> dict[str, bytes]:
    """Each generated file of ``proto`` (relative path -> content, header included)."""
    bin_dir = generator_venv()
    with tempfile.TemporaryDirectory() as scratch:
        arguments = [
            str(bin_dir / "python"),
            "-m",
            "grpc_tools.protoc",
            f"--proto_path={REPO}",
            f"--plugin=protoc-gen-mypy={bin_dir / 'protoc-gen-mypy'}",
            f"--plugin=protoc-gen-mypy_grpc={bin_dir / 'protoc-gen-mypy_grpc'}",
            f"--python_out={scratch}",
            f"--grpc_python_out={scratch}",
            f"--mypy_out={scratch}",
            f"--mypy_grpc_out={scratch}",
            str(REPO / proto),
        ]
        done = subprocess.run(arguments, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"protoc failed on {proto} (status {done.returncode}): {done.stderr.strip()}")
        top = header(proto).encode()
        return {name: top + (Path(scratch) / name).read_bytes() for name in outputs(proto)}


def write(path: Path, content: bytes) -> None:
    """Replace ``path`` whole: a temporary file beside it, flushed, renamed over it."""
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as out:
        try:
            out.write(content)
            out.flush()
            os.fsync(out.fileno())
            os.chmod(out.name, 0o644)
            os.replace(out.name, path)
        except BaseException:
            os.unlink(out.name)
            raise


def main() -> int:
    for proto in PROTOS:
        for name, content in generate(proto).items():
            write(REPO / name, content)
            print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
