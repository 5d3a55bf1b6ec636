"""The plugin's side of the kubelet's plugin watcher: the ``pluginregistration.Registration`` service on
``<registry dir>/<driver>-reg.sock``.

The kubelet watches its registry directory (``/var/lib/kubelet/plugins_registry``) for sockets; on a
new one it asks ``GetInfo`` (which kind of plugin, its name, where its service listens, which service
versions it speaks), registers the plugin if it can, and says so with ``NotifyRegistrationStatus``.
The plugin unregisters by removing the socket. The DRA service must already listen on the endpoint:
the kubelet dials it once registered, so the DRA server starts first.

``supported_versions`` are gRPC service names, the one wanted first: a 1.34+ kubelet takes
``v1.DRAPlugin``, a 1.32 or 1.33 one the ``v1beta1.DRAPlugin`` it knows.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

from cdictk.dra.kubeletapi.pluginregistration_pb2 import (
    InfoRequest,
    PluginInfo,
    RegistrationStatus,
    RegistrationStatusResponse,
)
from cdictk.dra.kubeletapi.pluginregistration_pb2_grpc import (
    RegistrationServicer,
    add_RegistrationServicer_to_server,
)
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.unixgrpc import Context, UnixServer, check_socket_path

REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
PLUGIN_TYPE = "DRAPlugin"
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
# A DRA driver's name: a DNS subdomain of at most 63 characters (the API server's rule). It is also a
# file name here, so nothing else may pass: no "/", no "..".
_DRIVER_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
MAX_DRIVER_NAME = 63
SHORTER_SOCKET = "a shorter driver name or directory"


def check_driver_name(driver: str) -> str:
    """``driver``, or a CdictkError saying why the API server would refuse it."""
    if len(driver) > MAX_DRIVER_NAME or not _DRIVER_NAME.fullmatch(driver):
        raise CdictkError(
            "",
            "driver name",
            f"{driver[: MAX_DRIVER_NAME + 1]!r} is not a DNS subdomain of at most {MAX_DRIVER_NAME} "
            "characters (lower-case letters, digits, '-' and '.')",
        )
    return driver


@dataclass(frozen=True, slots=True)
class Status:
    """What the kubelet said last: registered or not, and why not."""

    registered: bool
    error: str = ""


class Registrar(RegistrationServicer):
    """Serves the driver's registration socket. ``endpoint`` is the DRA socket (made absolute: the
    kubelet dials it as given); ``log`` takes one line per refusal."""

    def __init__(
        self,
        driver: str,
        endpoint: str,
        registry_dir: str = REGISTRY_DIR,
        *,
        log: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.driver = check_driver_name(driver)
        self.endpoint = check_socket_path(os.path.abspath(endpoint), SHORTER_SOCKET)
        self.path = os.path.join(registry_dir, f"{driver}-reg.sock")
        self.log = log
        self._lock = threading.Lock()
        self._status: Status | None = None
        self._server = UnixServer(
            self.path,
            lambda server: add_RegistrationServicer_to_server(self, server),
            name="dra-registration",
            remedy=SHORTER_SOCKET,
        )

    def start(self) -> None:
        """Listen on the registration socket (a stale one removed first): the kubelet finds it there."""
        with self._lock:
            self._status = None
        self._server.start()

    def stop(self) -> None:
        """Stop serving and remove the socket: the kubelet unregisters the plugin."""
        self._server.stop()

    @property
    def status(self) -> Status | None:
        """The kubelet's last word since start; None before it spoke."""
        with self._lock:
            return self._status

    # The service, on the server's loop: both answer from memory.

    async def GetInfo(self, request: InfoRequest, context: Context) -> PluginInfo:
        return PluginInfo(
            type=PLUGIN_TYPE,
            name=self.driver,
            endpoint=self.endpoint,
            supported_versions=SUPPORTED_VERSIONS,
        )

    async def NotifyRegistrationStatus(
        self, request: RegistrationStatus, context: Context
    ) -> RegistrationStatusResponse:
        """Recorded; a refusal is logged. The answer is the same either way: the kubelet has decided,
        and an error back would only be logged there again."""
        status = Status(request.plugin_registered, request.error)
        with self._lock:
            self._status = status
        if not status.registered:
            reason = " ".join(status.error.split()) or "no reason given"
            self.log(f"the kubelet refused to register DRA driver {self.driver}: {reason}")
        return RegistrationStatusResponse()
