"""The CRI (runtime.v1) as the kubelet speaks it to containerd: a client over the generated stubs.

The messages are cri_pb2's and the stubs cri_pb2_grpc's, generated from cri.proto (``make proto``).
"""

from __future__ import annotations

import grpc

from tests.e2e.kubelet.cri_pb2_grpc import ImageServiceStub, RuntimeServiceStub


class CriClient:
    """containerd's RuntimeService and ImageService on its socket, one blocking call at a time; each
    call passes ``timeout=client.timeout`` or its own (a call without one may wait for ever)."""

    def __init__(self, socket: str, timeout: float = 60.0) -> None:
        self.channel = grpc.insecure_channel(f"unix://{socket}")
        self.timeout = timeout
        self.runtime = RuntimeServiceStub(self.channel)
        self.images = ImageServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()
