"""Registering with the kubelet, and noticing when it restarted.

The kubelet serves ``v1beta1.Registration`` on ``kubelet.sock`` in its device plugin directory; a
plugin already serving on its own socket there calls ``Register`` with that socket's file name (the
kubelet dials it during the call). A restarted kubelet deletes every socket in the directory and makes
``kubelet.sock`` anew, and forgets the plugins: they must serve and register again. So a plugin
watches two things: ``kubelet.sock`` being a new file (another inode or change time), and its own
socket being gone.
"""

from __future__ import annotations

import os
import socket as sockets

import grpc

from cdictk.deviceplugin.kubelet import KUBELET_SOCKET, VERSION
from cdictk.deviceplugin.proto.deviceplugin_pb2 import RegisterRequest
from cdictk.deviceplugin.proto.deviceplugin_pb2_grpc import RegistrationStub
from cdictk.deviceplugin.server import OPTIONS
from cdictk.startpath.helpers.errors import CdictkError

REGISTER_TIMEOUT = 10.0


class RegistrationError(CdictkError):
    def __init__(self, resource: str, reason: str) -> None:
        super().__init__("", f"registering {resource}", reason)


def register(plugin_dir: str, resource_name: str, endpoint: str, timeout: float = REGISTER_TIMEOUT) -> None:
    """Register ``resource_name`` served on ``endpoint`` (a file name in ``plugin_dir``) with the kubelet."""
    socket = os.path.join(plugin_dir, KUBELET_SOCKET)
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        request = RegisterRequest(
            version=VERSION, endpoint=endpoint, resource_name=resource_name, options=OPTIONS
        )
        try:
            RegistrationStub(channel).Register(request, timeout=timeout)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            details = (exc.details() if isinstance(exc, grpc.Call) else None) or str(code or exc)
            reason = f"the kubelet refused it: {details}"
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                reason = f"the kubelet did not answer within {timeout:g} s"
            elif code == grpc.StatusCode.UNAVAILABLE:
                # A kubelet that is not there reads so, and one that answers UNAVAILABLE (it could not
                # dial us back): whether its socket takes a connection tells them apart.
                unreachable = _unreachable(socket)
                if unreachable is not None:
                    reason = f"no kubelet answers on {socket} ({unreachable})"
            raise RegistrationError(resource_name, reason) from exc


def _unreachable(path: str) -> str | None:
    """Why nothing takes a connection on the Unix socket ``path``; None when something does."""
    with sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def kubelet_identity(plugin_dir: str) -> tuple[int, int, int] | None:
    """What tells one kubelet.sock from the next (device, inode, change time); None when there is none."""
    try:
        info = os.stat(os.path.join(plugin_dir, KUBELET_SOCKET))
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_ctime_ns)
