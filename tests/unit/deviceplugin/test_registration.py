"""Registering with the kubelet stand-in, the errors when none answers or it refuses, and telling one
kubelet.sock from the next."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator

import grpc
import pytest

from cdictk.deviceplugin.kubelet import VERSION
from cdictk.deviceplugin.pluginsettings import Settings
from cdictk.deviceplugin.registration import RegistrationError, kubelet_identity, register
from cdictk.deviceplugin.resources import PluginDevice, Resource
from cdictk.deviceplugin.server import ResourceServer
from tests.e2e.kubelet.kubelet import Kubelet

GPU = "nvidia.com/gpu"


@pytest.fixture
def plugin_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="cdictk-reg-", dir="/tmp")  # socket paths are short
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_register_names_the_resource_its_socket_and_the_version(plugin_dir: str) -> None:
    kubelet = Kubelet(plugin_dir)
    kubelet.start()
    resource = Resource(GPU, (PluginDevice("GPU-1", "GPU-1", 0, "GPU-1"),))
    server = ResourceServer(resource, Settings(plugin_dir=plugin_dir))
    server.start()
    try:
        register(plugin_dir, GPU, resource.socket)
        [request] = kubelet.registrations
        assert (request.version, request.endpoint, request.resource_name) == (
            VERSION,
            "cdictk-nvidia.com_gpu.sock",
            GPU,
        )
        assert request.options is not None and request.options.get_preferred_allocation_available
        kubelet.wait_for("the device list", lambda k: [d.ID for d in k.devices(GPU)] == ["GPU-1"])
    finally:
        server.stop()
        kubelet.stop()
    assert not os.path.lexists(server.path)


def test_a_refusal_is_one_line_with_the_kubelets_reason(plugin_dir: str) -> None:
    kubelet = Kubelet(plugin_dir)
    kubelet.start()
    try:
        with pytest.raises(RegistrationError) as refused:
            register(plugin_dir, "kubernetes.io/gpu", "nowhere.sock")
        assert "registering kubernetes.io/gpu" in str(refused.value)
        assert "invalid resource name 'kubernetes.io/gpu'" in str(refused.value)
    finally:
        kubelet.stop()


def test_a_kubelet_answering_unavailable_refused_it_and_is_not_taken_for_none(plugin_dir: str) -> None:
    """The kubelet answers so when it could not dial the plugin back: what it said is the reason."""
    kubelet = Kubelet(plugin_dir)
    kubelet.refusal = (grpc.StatusCode.UNAVAILABLE, "failed to dial device plugin: context deadline exceeded")
    kubelet.start()
    try:
        with pytest.raises(RegistrationError) as refused:
            register(plugin_dir, GPU, "cdictk-nvidia.com_gpu.sock")
    finally:
        kubelet.stop()
    assert str(refused.value) == (
        "registering nvidia.com/gpu: the kubelet refused it: failed to dial device plugin: context deadline exceeded"
    )


def test_no_kubelet_is_said_so(plugin_dir: str) -> None:
    with pytest.raises(RegistrationError) as refused:
        register(plugin_dir, GPU, "cdictk-nvidia.com_gpu.sock", timeout=2)
    assert str(refused.value) == (
        f"registering {GPU}: no kubelet answers on {plugin_dir}/kubelet.sock (No such file or directory)"
    )
    assert isinstance(refused.value.__cause__, grpc.RpcError)
    # a socket file left by a kubelet that is gone
    with socket.socket(socket.AF_UNIX) as gone:
        gone.bind(os.path.join(plugin_dir, "kubelet.sock"))
    with pytest.raises(RegistrationError) as refused:
        register(plugin_dir, GPU, "cdictk-nvidia.com_gpu.sock", timeout=2)
    assert str(refused.value).endswith("kubelet.sock (Connection refused)")


def test_kubelet_identity_changes_with_a_new_socket(plugin_dir: str) -> None:
    assert kubelet_identity(plugin_dir) is None
    path = os.path.join(plugin_dir, "kubelet.sock")
    with socket.socket(socket.AF_UNIX) as first:
        first.bind(path)
        before = kubelet_identity(plugin_dir)
        assert before is not None and kubelet_identity(plugin_dir) == before
    os.unlink(path)
    assert kubelet_identity(plugin_dir) is None
    with socket.socket(socket.AF_UNIX) as second:
        second.bind(path)
        assert kubelet_identity(plugin_dir) not in (None, before)
