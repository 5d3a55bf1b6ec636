"""The kubelet's side of the device plugin API (v1beta1) that its messages do not carry: where its
sockets are, the API version a plugin registers with, and the health values of a device. The
messages and services themselves are generated from proto/deviceplugin.proto."""

from __future__ import annotations

VERSION = "v1beta1"
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"  # the kubelet's; plugins register from there
KUBELET_SOCKET = "kubelet.sock"
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"
