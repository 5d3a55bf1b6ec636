"""The node agents' gRPC server on a Unix socket: its path checked, a stale socket replaced (never
followed), servicers added on its loop, calls onto the loop only while it serves, the socket gone at
stop."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterator

import grpc
import pytest

from cdictk.dra.kubeletapi.pluginregistration_pb2 import (
    InfoRequest,
    PluginInfo,
    RegistrationStatus,
    RegistrationStatusResponse,
)
from cdictk.dra.kubeletapi.pluginregistration_pb2_grpc import (
    RegistrationServicer,
    RegistrationStub,
    add_RegistrationServicer_to_server,
)
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.unixgrpc import Context, UnixServer, check_socket_path, remove_socket


class Named(RegistrationServicer):
    async def GetInfo(self, request: InfoRequest, context: Context) -> PluginInfo:
        return PluginInfo(name=threading.current_thread().name)

    async def NotifyRegistrationStatus(
        self, request: RegistrationStatus, context: Context
    ) -> RegistrationStatusResponse:
        return RegistrationStatusResponse()


@pytest.fixture
def short_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="cdictk-ug-", dir="/tmp")  # socket paths are short
    yield path
    shutil.rmtree(path, ignore_errors=True)


def serve(path: str, added: list[str] | None = None) -> UnixServer:
    def add(server: grpc.aio.Server) -> None:
        if added is not None:
            added.append(threading.current_thread().name)
        add_RegistrationServicer_to_server(Named(), server)

    return UnixServer(path, add, name="test-grpc")


def ask(path: str) -> str:
    with grpc.insecure_channel(f"unix://{path}") as channel:
        return RegistrationStub(channel).GetInfo(InfoRequest(), timeout=5).name


def test_a_server_serves_on_its_loop_and_removes_its_socket(short_dir: str) -> None:
    path = os.path.join(short_dir, "a.sock")
    added: list[str] = []
    server = serve(path, added)
    assert not server.serving and server.socket_gone()
    server.start()
    try:
        assert server.serving and not server.socket_gone()
        assert added == ["test-grpc"]  # on the loop's thread: asyncio objects made there belong to it
        assert ask(path) == "test-grpc"  # a coroutine servicer runs on the loop too
        ran = threading.Event()
        assert server.call_soon(ran.set)
        assert ran.wait(5)
    finally:
        server.stop()
    assert not server.serving and server.socket_gone()
    assert not server.call_soon(lambda: None)  # nothing runs once stopped
    server.stop()  # twice is no error


def test_a_stale_socket_or_file_is_replaced(short_dir: str) -> None:
    path = os.path.join(short_dir, "a.sock")
    with open(path, "w") as stale:
        stale.write("left by a killed predecessor")
    server = serve(path)
    server.start()
    try:
        assert ask(path) == "test-grpc"
    finally:
        server.stop()


def test_a_symlink_where_the_socket_goes_is_removed_not_followed(short_dir: str) -> None:
    target = os.path.join(short_dir, "precious")
    with open(target, "w") as kept:
        kept.write("x")
    path = os.path.join(short_dir, "a.sock")
    os.symlink(target, path)
    remove_socket(path)
    assert not os.path.lexists(path) and os.path.isfile(target)
    remove_socket(path)  # nothing there: no error


def test_a_directory_where_the_socket_goes_is_refused_and_left(short_dir: str) -> None:
    path = os.path.join(short_dir, "a.sock")
    os.mkdir(path)
    with pytest.raises(CdictkError) as refused:
        serve(path).start()
    assert str(refused.value) == f"{path}: a directory where the socket goes; refusing to remove it"
    assert os.path.isdir(path)


def test_a_path_too_long_for_a_socket_says_what_to_shorten() -> None:
    path = "/tmp/" + "d" * 102  # 107 bytes: the longest that binds
    assert check_socket_path(path, "x") == path
    with pytest.raises(CdictkError) as refused:
        check_socket_path(path + "d", "a shorter name")
    assert str(refused.value) == (
        f"{path}d: longer than a Unix socket path may be (107 bytes): a shorter name"
    )
    server = UnixServer(path + "d", lambda server: None, name="test-grpc", remedy="a shorter name")
    with pytest.raises(CdictkError, match=r"a shorter name$"):
        server.start()
    assert not server.serving
