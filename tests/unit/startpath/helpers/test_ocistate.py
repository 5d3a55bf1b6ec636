"""The OCI state on stdin and the bundle's config.json: untrusted, size-capped, strictly parsed."""

from __future__ import annotations

import io
import json
import os
import threading
from pathlib import Path

import pytest

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.helpers.ocistate import MAX_STATE, container_state, drain_state, read_state


def state(data: bytes) -> str:
    return container_state(read_state(io.BytesIO(data))).rootfs


def bundle_with(tmp_path: Path, config: bytes) -> Path:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_bytes(config)
    return bundle


def test_crun_root_field_wins(tmp_path: Path) -> None:
    bundle = bundle_with(tmp_path, b'{"root": {"path": "rootfs"}}')
    data = json.dumps({"id": "c1", "bundle": str(bundle), "root": "/merged"}).encode()
    assert state(data) == "/merged"


def test_runc_root_from_config_relative_to_the_bundle(tmp_path: Path) -> None:
    bundle = bundle_with(tmp_path, b'{"ociVersion": "1.0.2", "root": {"path": "rootfs", "readonly": true}}')
    assert state(json.dumps({"bundle": str(bundle), "pid": 1}).encode()) == f"{bundle}/rootfs"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty"),
        (b"[]", "not a JSON object"),
        (b'{"bundle": "/b", "bundle": "/c"}', 'duplicate key "bundle"'),
        (b'{"bundle": NaN}', "NaN is not valid JSON"),
        (b'{"bundle": "/b"', "invalid JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b'{"bundle": "relative"}', "bundle must be an absolute path"),
        (b'{"bundle": 7}', "bundle must be an absolute path"),
        (b'{"bundle": "/b", "root": "/"}', "refused"),
        (b'{"bundle": "/b", "root": ""}', "refused"),
        (b'{"bundle": "/", "root": "."}', "refused"),
        (b'{"bundle": "/b", "root": ["x"]}', "root must be a string"),
        (b'{"bundle": "/b", "root": "/x\\u0000"}', "NUL"),
        (b"[" * 200000 + b"]" * 200000, "nested too deeply"),
    ],
)
def test_malformed_state_is_one_clear_error(data: bytes, message: str) -> None:
    with pytest.raises(HookError, match=message):
        state(data)


def test_oversized_state_is_refused_before_parsing() -> None:
    with pytest.raises(HookError, match="larger than"):
        read_state(io.BytesIO(b" " * (MAX_STATE + 1)))


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (b'{"root": {"path": "/"}}', "refused"),
        (b'{"root": {"path": ""}}', "refused"),
        (b'{"root": {}}', "root.path: missing"),
        (b'{"root": "rootfs"}', "root: missing or not an object"),
        (b"{}", "root: missing"),
        (b'{"root": {"path": "a"}, "root": {"path": "b"}}', 'duplicate key "root"'),
        (b'{"root": {"path": "rootfs"}', "invalid JSON"),
        (b"[1]", "not a JSON object"),
    ],
)
def test_malformed_config_is_one_clear_error(tmp_path: Path, config: bytes, message: str) -> None:
    bundle = bundle_with(tmp_path, config)
    with pytest.raises(HookError, match=message):
        state(json.dumps({"bundle": str(bundle)}).encode())


def test_missing_or_odd_config_files(tmp_path: Path) -> None:
    with pytest.raises(HookError, match="No such file"):
        state(json.dumps({"bundle": str(tmp_path / "none")}).encode())
    fifo_bundle = tmp_path / "fifo"
    fifo_bundle.mkdir()
    os.mkfifo(fifo_bundle / "config.json")
    outcome: list[str] = []

    def attempt() -> None:
        try:
            state(json.dumps({"bundle": str(fifo_bundle)}).encode())
        except HookError as exc:
            outcome.append(str(exc))

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(5)
    assert outcome and "not a regular file" in outcome[0]
    big = bundle_with(tmp_path, b" " * (17 << 20))
    with pytest.raises(HookError, match="larger than"):
        state(json.dumps({"bundle": str(big)}).encode())


def test_drain_state_reads_a_pipe_to_its_end_but_not_a_terminal() -> None:
    reader, writer = os.pipe()
    os.write(writer, b'{"ociVersion": "1.0.2"}')
    os.close(writer)
    with os.fdopen(reader, "rb") as stream:
        drain_state(stream)
        assert stream.read() == b""
    leader, follower = os.openpty()
    try:
        with os.fdopen(follower, "rb", closefd=False) as terminal:
            drain_state(terminal)  # would block here if it read a terminal
    finally:
        os.close(leader)
        os.close(follower)
    closed = io.BytesIO(b"x")
    closed.close()
    drain_state(closed)
