"""--host-root: host paths under the prefix written as the node sees them; container paths left alone."""

from __future__ import annotations

from cdictk.cdi.decode import decode_spec
from cdictk.cdi.model import Spec
from cdictk.nvcdi.hostroot import strip_host_root


def spec() -> Spec:
    edits = {
        "deviceNodes": [
            {"path": "/dev/nvidiactl", "hostPath": "/host/dev/nvidiactl"},
            {"path": "/dev/nvidia-uvm", "hostPath": "/hostile/dev/nvidia-uvm"},
        ],
        "mounts": [
            {"hostPath": "/host/usr/lib/libcuda.so.1", "containerPath": "/host/usr/lib/libcuda.so.1"},
            {"hostPath": "/host", "containerPath": "/rootfs"},
        ],
        "hooks": [
            {
                "hookName": "createContainer",
                "path": "/host/usr/bin/cdictk-hook",
                "args": ["cdictk-hook", "--root", "/host/run", "/hostname"],
            }
        ],
    }
    data = {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [
            {
                "name": "0",
                "containerEdits": {
                    "deviceNodes": [{"path": "/dev/nvidia0", "hostPath": "/host/dev/nvidia0"}]
                },
            }
        ],
        "containerEdits": edits,
    }
    return decode_spec(data, "s.yaml")


def test_host_paths_under_the_prefix_are_the_nodes() -> None:
    made = spec()
    strip_host_root(made, "/host/")
    common = made.container_edits
    # hostPath equal to the path is left out, as the spec's own convention has it.
    assert [(n.path, n.host_path) for n in common.device_nodes] == [
        ("/dev/nvidiactl", ""),
        ("/dev/nvidia-uvm", "/hostile/dev/nvidia-uvm"),  # another directory that starts alike
    ]
    assert [(m.host_path, m.container_path) for m in common.mounts] == [
        ("/usr/lib/libcuda.so.1", "/host/usr/lib/libcuda.so.1"),  # the container path is never touched
        ("/", "/rootfs"),
    ]
    assert (common.hooks[0].path, common.hooks[0].args) == (
        "/usr/bin/cdictk-hook",
        ["cdictk-hook", "--root", "/run", "/hostname"],
    )
    assert made.devices[0].container_edits.device_nodes[0].host_path == ""


def test_no_prefix_changes_nothing() -> None:
    made, untouched = spec(), spec()
    strip_host_root(made, "/")
    strip_host_root(made, "")
    assert made == untouched
