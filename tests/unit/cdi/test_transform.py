"""`cdictk cdi transform root`: paths moved between roots, whole components only, host or container side."""

from __future__ import annotations

import pytest

from cdictk.cdi.model import ContainerEdits, Device, DeviceNode, Hook, Mount, Spec
from cdictk.cdi.transform import moved, transform_root


@pytest.mark.parametrize(
    ("path", "old", "new", "expected"),
    [
        ("/driver/lib/x", "/driver", "/", "/lib/x"),
        ("/driver", "/driver", "/opt/d", "/opt/d"),
        ("/driver-backup/x", "/driver", "/", "/driver-backup/x"),  # a whole component only
        ("/usr/lib/x", "/", "/host", "/host/usr/lib/x"),
        ("/driver/", "/driver/", "/new/", "/new"),
        ("relative", "/driver", "/", "relative"),
    ],
)
def test_moved(path: str, old: str, new: str, expected: str) -> None:
    assert moved(path, old, new) == expected


def spec() -> Spec:
    edits = ContainerEdits(
        device_nodes=[DeviceNode(path="/driver/dev/nvidia0")],
        mounts=[Mount(host_path="/driver/lib/libcuda.so.1", container_path="/driver/lib/libcuda.so.1")],
        hooks=[
            Hook("createContainer", "/driver/bin/hook", ["hook", "--link", "/driver/a::/driver/b"]),
            Hook("startContainer", "/driver/bin/in-container", ["x", "/driver/c"]),
            Hook("prestart", "/driver/bin/host-hook", ["host-hook", "--root=/x", "/driver/d"]),
        ],
    )
    return Spec("0.5.0", "nvidia.com/gpu", devices=[Device("0", container_edits=edits)])


def test_relative_to_the_host_moves_what_the_runtime_opens() -> None:
    edits = transform_root(spec(), "/driver", "/").devices[0].container_edits
    assert (edits.device_nodes[0].path, edits.device_nodes[0].host_path) == (
        "/driver/dev/nvidia0",
        "/dev/nvidia0",
    )
    assert (edits.mounts[0].host_path, edits.mounts[0].container_path) == (
        "/lib/libcuda.so.1",
        "/driver/lib/libcuda.so.1",
    )
    create, start, prestart = edits.hooks
    assert (create.path, create.args) == ("/bin/hook", ["hook", "--link", "/driver/a::/driver/b"])
    assert (start.path, start.args) == (
        "/driver/bin/in-container",
        ["x", "/driver/c"],
    )  # runs in the container
    assert (prestart.path, prestart.args) == ("/bin/host-hook", ["host-hook", "--root=/x", "/d"])


def test_relative_to_the_container_moves_what_the_container_sees() -> None:
    edits = transform_root(spec(), "/driver", "/opt", relative_to="container").devices[0].container_edits
    node = edits.device_nodes[0]
    assert (node.path, node.host_path) == ("/opt/dev/nvidia0", "/driver/dev/nvidia0")  # the host's stays
    assert (edits.mounts[0].host_path, edits.mounts[0].container_path) == (
        "/driver/lib/libcuda.so.1",
        "/opt/lib/libcuda.so.1",
    )
    create, start, prestart = edits.hooks
    assert (create.path, create.args) == ("/driver/bin/hook", ["hook", "--link", "/opt/a::/opt/b"])
    assert start.args == ["x", "/opt/c"] and prestart.args == ["host-hook", "--root=/x", "/driver/d"]


def test_the_same_root_changes_nothing_and_a_bad_side_is_refused() -> None:
    assert transform_root(spec(), "/driver", "/driver") == spec()
    with pytest.raises(ValueError, match="relative_to"):
        transform_root(spec(), "/a", "/b", relative_to="both")
