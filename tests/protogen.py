"""Generate the Python code of our .proto files: ``python -m tests.protogen`` (``make proto``).

protoc (grpcio-tools) writes the message modules (``*_pb2.py``) and the gRPC service modules
(``*_pb2_grpc.py``: the servicer base class, the stub, the registration function); mypy-protobuf writes
their typed stubs (``*.pyi``), which mypy reads in place of the generated code. The output is checked
in, each file headed by the line :func:`header` gives: tests/unit/test_protogen.py generates again and
compares byte for byte, so a .proto edited without regenerating, or another generator version, fails.

The generator's versions are the ones pinned in pyproject.toml's dev group. Generated code refuses a
protobuf or grpcio runtime older than its generator (a version check at import): a newer grpcio-tools
raises the floor of the ``kubernetes`` extra, whose two ends tests/unit/deviceplugin/test_grpc_range.py runs.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Relative to the repository root, which is protoc's import path: the generated modules import each
# other by their package (cdictk.deviceplugin.proto...), and that is also each file's name in protobuf's
# descriptor pool.
PROTOS = ("cdictk/deviceplugin/proto/deviceplugin.proto", "tests/e2e/kubelet/cri.proto")
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")


def header(proto: str) -> str:
    tools = importlib.metadata.version("grpcio-tools")
    stubs = importlib.metadata.version("mypy-protobuf")
    return (
        f"# Generated from {proto} by grpcio-tools {tools} and mypy-protobuf {stubs}: do not edit;\n"
        "# regenerate with `make proto` (python -m tests.protogen).\n"
    )


def outputs(proto: str) -> list[str]:
    """The files generated from ``proto``, relative to the repository root."""
    stem = proto.removesuffix(".proto")
    return [stem + suffix for suffix in SUFFIXES]


def generate(proto: str) -> dict[str, bytes]:
    """Each generated file of ``proto`` (relative path -> content, header included)."""
    from grpc_tools import protoc  # type: ignore[import-untyped]

    with tempfile.TemporaryDirectory() as scratch:
        arguments = [
            "protoc",
            f"--proto_path={REPO}",
            f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
            f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
            f"--python_out={scratch}",
            f"--grpc_python_out={scratch}",
            f"--mypy_out={scratch}",
            f"--mypy_grpc_out={scratch}",
            str(REPO / proto),
        ]
        status = protoc.main(arguments)
        if status != 0:
            raise RuntimeError(f"protoc failed on {proto} (status {status})")
        top = header(proto).encode()
        return {name: top + (Path(scratch) / name).read_bytes() for name in outputs(proto)}


def _plugin(name: str) -> str:
    """mypy-protobuf's protoc plugin, beside this Python (a venv not on PATH) or else on PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} not found: install mypy-protobuf (pyproject.toml's dev group)")
    return found


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
