"""The registration socket as the kubelet's plugin watcher sees it: a fake kubelet on a real gRPC
channel asks GetInfo, then says whether it registered the plugin; the socket's life with the server."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator

import grpc
import pytest

from cdictk.dra.kubeletapi.pluginregistration_pb2 import InfoRequest, PluginInfo, RegistrationStatus
from cdictk.dra.kubeletapi.pluginregistration_pb2_grpc import RegistrationStub
from cdictk.dra.registrar import REGISTRY_DIR, Registrar, Status, check_driver_name
from cdictk.startpath.helpers.errors import CdictkError

DRIVER = "gpu.nvidia.com"


@pytest.fixture
def registry() -> Iterator[str]:
    # Under /tmp, not tmp_path: a Unix socket path has 107 bytes, and pytest's paths grow with test names.
    path = tempfile.mkdtemp(prefix="cdictk-dra-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


class FakeKubelet:
    """The plugin watcher's two calls, over the plugin's registration socket."""

    def __init__(self, path: str) -> None:
        self.channel = grpc.insecure_channel(f"unix://{path}")
        self.stub = RegistrationStub(self.channel)

    def get_info(self) -> PluginInfo:
        return self.stub.GetInfo(InfoRequest(), timeout=5)

    def notify(self, registered: bool, error: str = "") -> None:
        self.stub.NotifyRegistrationStatus(
            RegistrationStatus(plugin_registered=registered, error=error), timeout=5
        )

    def close(self) -> None:
        self.channel.close()


@pytest.fixture
def served(registry: str) -> Iterator[tuple[Registrar, FakeKubelet, list[str]]]:
    lines: list[str] = []
    registrar = Registrar(DRIVER, os.path.join(registry, "dra.sock"), registry, log=lines.append)
    registrar.start()
    kubelet = FakeKubelet(registrar.path)
    yield registrar, kubelet, lines
    kubelet.close()
    registrar.stop()


def test_the_socket_is_named_for_the_driver_in_the_registry(registry: str) -> None:
    registrar = Registrar(DRIVER, "/var/lib/kubelet/plugins/gpu.nvidia.com/dra.sock", registry)
    assert registrar.path == f"{registry}/gpu.nvidia.com-reg.sock"
    assert (
        Registrar(DRIVER, "/x/dra.sock").path == "/var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock"
    )
    assert REGISTRY_DIR == "/var/lib/kubelet/plugins_registry"


def test_get_info_names_a_dra_plugin_its_absolute_endpoint_and_v1_first(
    served: tuple[Registrar, FakeKubelet, list[str]], registry: str
) -> None:
    registrar, kubelet, _ = served
    assert stat.S_ISSOCK(os.lstat(registrar.path).st_mode)
    info = kubelet.get_info()
    assert info.type == "DRAPlugin"
    assert info.name == DRIVER
    assert info.endpoint == os.path.join(registry, "dra.sock")
    # the kubelet takes the first it knows: v1 on 1.34+, v1beta1 on 1.32 and 1.33
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    assert registrar.status is None  # asked, not yet told


def test_a_relative_endpoint_is_made_absolute(registry: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(registry)
    assert Registrar(DRIVER, "dra.sock", registry).endpoint == os.path.join(registry, "dra.sock")


def test_an_accepted_registration_is_recorded_without_a_line(
    served: tuple[Registrar, FakeKubelet, list[str]],
) -> None:
    registrar, kubelet, lines = served
    kubelet.get_info()
    kubelet.notify(True)
    assert registrar.status == Status(registered=True, error="")
    assert lines == []


def test_a_refusal_is_recorded_and_logged_in_one_line_with_the_kubelets_error(
    served: tuple[Registrar, FakeKubelet, list[str]],
) -> None:
    registrar, kubelet, lines = served
    kubelet.get_info()
    error = 'no handler registered for plugin type: DRAPlugin at socket "/x"\n(retrying)'
    kubelet.notify(False, error)  # answered, not failed: the kubelet has decided already
    assert registrar.status == Status(registered=False, error=error)
    assert lines == [
        "the kubelet refused to register DRA driver gpu.nvidia.com: "
        'no handler registered for plugin type: DRAPlugin at socket "/x" (retrying)'
    ]
    kubelet.notify(True)  # a later registration replaces it
    assert registrar.status == Status(registered=True)
    assert len(lines) == 1


def test_a_refusal_without_a_reason_says_so(served: tuple[Registrar, FakeKubelet, list[str]]) -> None:
    _, kubelet, lines = served
    kubelet.notify(False)
    assert lines == ["the kubelet refused to register DRA driver gpu.nvidia.com: no reason given"]


def test_a_stale_socket_is_replaced(registry: str) -> None:
    """A killed predecessor's socket file stays behind: nothing answers on it until we listen anew."""
    path = os.path.join(registry, "gpu.nvidia.com-reg.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stale:
        stale.bind(path)
    registrar = Registrar(DRIVER, os.path.join(registry, "dra.sock"), registry)
    registrar.start()
    kubelet = FakeKubelet(path)
    try:
        assert kubelet.get_info().name == DRIVER
    finally:
        kubelet.close()
        registrar.stop()


def test_stop_removes_the_socket_and_a_restart_serves_again(registry: str) -> None:
    registrar = Registrar(DRIVER, os.path.join(registry, "dra.sock"), registry)
    registrar.start()
    kubelet = FakeKubelet(registrar.path)
    kubelet.notify(False, "no")
    kubelet.close()
    registrar.stop()
    assert not os.path.lexists(registrar.path)  # the kubelet unregisters the plugin
    registrar.stop()  # twice is no error
    registrar.start()
    assert registrar.status is None  # a new registration: the last one's word is gone
    kubelet = FakeKubelet(registrar.path)
    try:
        assert kubelet.get_info().name == DRIVER
    finally:
        kubelet.close()
        registrar.stop()
    assert not os.path.lexists(registrar.path)


def test_a_directory_where_the_socket_goes_is_refused_in_one_line(registry: str) -> None:
    os.mkdir(os.path.join(registry, "gpu.nvidia.com-reg.sock"))
    registrar = Registrar(DRIVER, os.path.join(registry, "dra.sock"), registry)
    with pytest.raises(CdictkError, match=r"a directory where the socket goes; refusing to remove it$"):
        registrar.start()
    assert os.path.isdir(registrar.path)


@pytest.mark.parametrize(
    "driver",
    ["gpu.nvidia.com", "example.com", "a", "a-1.b-2", "x" * 63],
)
def test_driver_names_the_api_server_takes(driver: str) -> None:
    assert check_driver_name(driver) == driver


@pytest.mark.parametrize(
    "driver",
    ["", "GPU.nvidia.com", "../etc", "a/b", "-a", "a-", "a..b", "a_b", ".a", "x" * 64, "gpu.nvidia.com\n"],
)
def test_driver_names_that_are_no_dns_subdomain_are_refused(driver: str, registry: str) -> None:
    """The name becomes a file name in the registry: nothing that could leave it gets that far."""
    with pytest.raises(
        CdictkError, match=r"^driver name: .* is not a DNS subdomain of at most 63 characters"
    ):
        Registrar(driver, "/x/dra.sock", registry)
    assert os.listdir(registry) == []


def test_an_endpoint_too_long_for_a_socket_is_refused() -> None:
    with pytest.raises(CdictkError, match=r"longer than a Unix socket path may be \(107 bytes\)"):
        Registrar(DRIVER, "/" + "d" * 120 + "/dra.sock")
