"""The DRA service the kubelet calls on the plugin's ``dra.sock``: ``NodePrepareResources`` and
``NodeUnprepareResources``, in ``k8s.io.kubelet.pkg.apis.dra.v1`` (Kubernetes 1.34+) and ``v1beta1``
(1.32, 1.33), both on one socket.

A prepare reads each claim from the API server by namespace and name (the claim's allocation is what
says which devices are ours), then hands them to the :class:`~cdictk.dra.preparer.Preparer`. Every
claim asked for is answered under its UID, a failure as that claim's error in one line (a claim the
API server would not give, one allocated elsewhere, a device in use): the kubelet fails only that
claim's pods and asks again. An empty request (NVIDIA's liveness probe sends one) is an empty answer.
An unprepare needs no read: the claim may be gone, and the checkpoint knows what was prepared.

The whole call fails (gRPC ``INVALID_ARGUMENT``) only for a malformed request, a claim without its
namespace, name or UID: nothing could be answered for it. v1 answers carry a device's share ID when
its allocation had one; v1beta1 has no field for it.

The methods are plain functions: grpcio runs them in its thread pool, since a prepare waits on the API
server and on disk, and the preparer serializes them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import grpc

from cdictk.dra.checkpoint import PreparedDevice
from cdictk.dra.kubeclient import KubeError
from cdictk.dra.kubeletapi import dra_v1_pb2 as v1
from cdictk.dra.kubeletapi import dra_v1_pb2_grpc as v1_grpc
from cdictk.dra.kubeletapi import dra_v1beta1_pb2 as v1beta1
from cdictk.dra.kubeletapi import dra_v1beta1_pb2_grpc as v1beta1_grpc
from cdictk.dra.preparer import ClaimToPrepare, Prepared, Preparer
from cdictk.unixgrpc import Context

WORKERS = 4  # calls served at once: reads of claims overlap, the preparer takes them one by one


class ClaimReader(Protocol):
    """What the service asks of the API server client (:class:`~cdictk.dra.kubeclient.KubeClient`)."""

    def read_claim(self, namespace: str, name: str) -> dict[str, Any]: ...


class RequestedClaim(Protocol):
    """A ``Claim`` message of either version."""

    namespace: str
    name: str
    uid: str


class MalformedRequest(Exception):
    """A claim in the request without its namespace, name or UID."""


class DraService:
    """Prepare and unprepare, whichever version was called: claims in, answers by UID out."""

    def __init__(self, preparer: Preparer, client: ClaimReader) -> None:
        self.preparer = preparer
        self.client = client

    def prepare(self, claims: Sequence[RequestedClaim]) -> dict[str, Prepared]:
        """Each claim's devices or error, by UID; MalformedRequest before anything is read."""
        asked = _checked(claims)
        answers: dict[str, Prepared] = {}
        readable: list[ClaimToPrepare] = []
        for namespace, name, uid in asked:
            try:
                found = self.client.read_claim(namespace, name)
            except KubeError as error:
                answers[uid] = Prepared(error=str(error))  # it names the claim and the server's answer
                continue
            readable.append((namespace, name, uid, found))
        answers.update(self.preparer.prepare(readable))
        return answers

    def unprepare(self, claims: Sequence[RequestedClaim]) -> dict[str, str | None]:
        """None for each claim unprepared, else its error, by UID; MalformedRequest as for prepare."""
        return self.preparer.unprepare(_checked(claims))


def _checked(claims: Sequence[RequestedClaim]) -> list[tuple[str, str, str]]:
    found = []
    for i, claim in enumerate(claims):
        missing = [field for field in ("namespace", "name", "uid") if not getattr(claim, field)]
        if missing:
            raise MalformedRequest(f"claims[{i}] has no {' or '.join(missing)}")
        found.append((claim.namespace, claim.name, claim.uid))
    return found


def _abort_malformed(context: Context, error: MalformedRequest) -> None:
    """The call fails as a whole: the kubelet logs it and tries the pod again."""
    context.set_code(grpc.StatusCode.INVALID_ARGUMENT)
    context.set_details(str(error))


class V1Servicer(v1_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``: devices carry their share ID."""

    def __init__(self, service: DraService) -> None:
        self.service = service

    def NodePrepareResources(
        self, request: v1.NodePrepareResourcesRequest, context: Context
    ) -> v1.NodePrepareResourcesResponse:
        response = v1.NodePrepareResourcesResponse()
        try:
            answers = self.service.prepare(request.claims)
        except MalformedRequest as error:
            _abort_malformed(context, error)
            return response
        for uid, prepared in answers.items():
            entry = response.claims[uid]
            if prepared.error is not None:
                entry.error = prepared.error
                continue
            entry.devices.extend(_devices(prepared.devices, v1.Device, share_ids=True))
        return response

    def NodeUnprepareResources(
        self, request: v1.NodeUnprepareResourcesRequest, context: Context
    ) -> v1.NodeUnprepareResourcesResponse:
        response = v1.NodeUnprepareResourcesResponse()
        try:
            answers = self.service.unprepare(request.claims)
        except MalformedRequest as error:
            _abort_malformed(context, error)
            return response
        for uid, failed in answers.items():
            response.claims[uid].error = failed or ""
        return response


class V1beta1Servicer(v1beta1_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin``, for 1.32 and 1.33 kubelets: no share IDs."""

    def __init__(self, service: DraService) -> None:
        self.service = service

    def NodePrepareResources(
        self, request: v1beta1.NodePrepareResourcesRequest, context: Context
    ) -> v1beta1.NodePrepareResourcesResponse:
        response = v1beta1.NodePrepareResourcesResponse()
        try:
            answers = self.service.prepare(request.claims)
        except MalformedRequest as error:
            _abort_malformed(context, error)
            return response
        for uid, prepared in answers.items():
            entry = response.claims[uid]
            if prepared.error is not None:
                entry.error = prepared.error
                continue
            entry.devices.extend(_devices(prepared.devices, v1beta1.Device, share_ids=False))
        return response

    def NodeUnprepareResources(
        self, request: v1beta1.NodeUnprepareResourcesRequest, context: Context
    ) -> v1beta1.NodeUnprepareResourcesResponse:
        response = v1beta1.NodeUnprepareResourcesResponse()
        try:
            answers = self.service.unprepare(request.claims)
        except MalformedRequest as error:
            _abort_malformed(context, error)
            return response
        for uid, failed in answers.items():
            response.claims[uid].error = failed or ""
        return response


def _devices(devices: Sequence[PreparedDevice], make: Callable[..., Any], *, share_ids: bool) -> list[Any]:
    made = []
    for device in devices:
        fields: dict[str, Any] = {
            "request_names": list(device.request_names),
            "pool_name": device.pool,
            "device_name": device.device,
            "cdi_device_ids": list(device.cdi_device_ids),
        }
        if share_ids and device.share_id is not None:
            fields["share_id"] = device.share_id
        made.append(make(**fields))
    return made


def add_to_server(service: DraService, server: grpc.aio.Server) -> None:
    """Both versions of the service on ``server``: the kubelet calls the one it registered."""
    v1_grpc.add_DRAPluginServicer_to_server(V1Servicer(service), server)
    v1beta1_grpc.add_DRAPluginServicer_to_server(V1beta1Servicer(service), server)
