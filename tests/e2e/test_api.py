"""Claims prepared through cdictk.api, run by real runtimes on the fake eight-GPU node.

runc and crun run a bundle after ``SpecDirs.inject`` of a claim of GPU 1 and MIG device 0:1; podman
(4.3) and containerd 2.1's ``ctr run`` (the CDI library v1.0.1, as the kubelet's CRI path uses it) run
``--device <name>`` of claims written to /var/run/cdi by two producers side by side, and no longer
find a claim once ``gc`` collected it. The container gets the claimed GPU,
the MIG device's parent and its two capability nodes (open reaches the absent driver: ENXIO, so the
device cgroup allowed them), and not the other GPUs.

podman reads only /etc/cdi and /var/run/cdi: the claims go there under a test-only vendor
(cdictk.test) and a class of this run's own, so that ``gc`` cannot reach any other file, and are
removed after.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdictk.api import NodeSpecs, SpecDirs, TransientSpecs
from tests.conftest import NodeFactory
from tests.e2e.conftest import ENXIO, IMAGE, Podman, Runtime
from tests.e2e.daemons import (
    containerd_daemon,
    image_tar_fixture,  # noqa: F401  (pytest finds the image_tar fixture through this import)
    sid_containerd_dir,
)
from tests.e2e.test_runtimes import make_bundle
from tests.fakenode.node import FakeNode, mig_cap_minor

pytestmark = pytest.mark.root

PODMAN_SPEC_DIR = "/var/run/cdi"


def claim_nodes(node: FakeNode) -> list[str]:
    mig = node.preset.migs[1]  # 0:1
    caps = [mig_cap_minor(0, mig.gi), mig_cap_minor(0, mig.gi, mig.ci)]
    return ["/dev/nvidia1", "/dev/nvidia0", *(f"/dev/nvidia-caps/nvidia-cap{minor}" for minor in caps)]


def inside(node: FakeNode) -> str:
    reads = "; ".join(f"cat {path}" for path in [*claim_nodes(node), "/dev/nvidiactl"])
    return f"{reads}; ls /dev/nvidia2; echo VISIBLE=$NVIDIA_VISIBLE_DEVICES"


def check_inside(node: FakeNode, out: str) -> None:
    for path in [*claim_nodes(node), "/dev/nvidiactl"]:
        assert f"can't open '{path}': {ENXIO}" in out, out
    assert "ls: /dev/nvidia2: No such file or directory" in out
    assert "VISIBLE=void" in out.splitlines()


def test_a_claim_runs_after_spec_cache_inject(
    runtime: Runtime, rootfs: Path, make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("eight")
    specs = NodeSpecs(node.root, proc_root=node.proc, sys_root=node.sys)
    store = TransientSpecs(str(tmp_path / "cdi"))
    claim = str(uuid.uuid4())
    names = store.write(claim, specs.claim_spec(claim, ["1", "0:1"]))
    own_rootfs = tmp_path / "rootfs"  # the spec's hook writes links and an ld cache into it
    shutil.copytree(rootfs, own_rootfs, symlinks=True)
    bundle = make_bundle(tmp_path / "bundle", own_rootfs, inside(node))
    config = json.loads((bundle / "config.json").read_text())
    config["root"]["readonly"] = False  # crun makes the rootfs read-only before createContainer hooks
    cache = SpecDirs([store.spec_dir])
    (bundle / "config.json").write_text(json.dumps(cache.inject(config, names)))
    cache.close()
    _, result = runtime.run(bundle)
    assert result.returncode == 0, f"{runtime.name} failed: {result.stderr}{result.stdout}"
    check_inside(node, result.stdout)


@pytest.fixture
def producers(
    make_node: NodeFactory,
) -> Iterator[tuple[FakeNode, TransientSpecs, TransientSpecs, NodeSpecs, NodeSpecs]]:
    node = make_node("eight")
    run = uuid.uuid4().hex[:10]
    made = []
    for cls in (f"claims{run}", f"other{run}"):
        specs = NodeSpecs(
            node.root,
            proc_root=node.proc,
            sys_root=node.sys,
            vendor="cdictk.test",
            device_class=cls,
            cdi_version="0.5.0",  # the newest podman 4.3 reads
        )
        made.append((specs, TransientSpecs(PODMAN_SPEC_DIR, "cdictk.test", cls)))
    (first_specs, first), (second_specs, second) = made
    try:
        yield node, first, second, first_specs, second_specs
    finally:
        first.gc([])
        second.gc([])


def podman_run(podman: Podman, name: str, script: str) -> tuple[int, str]:
    result = podman(
        "run", "--rm", "--network", "none", "--device", name, IMAGE, "sh", "-c", f"exec 2>&1; {script}"
    )
    return result.returncode, result.stdout.decode() + result.stderr.decode()


def test_podman_runs_claims_of_two_producers_and_not_a_collected_one(
    podman: Podman,
    producers: tuple[FakeNode, TransientSpecs, TransientSpecs, NodeSpecs, NodeSpecs],
) -> None:
    node, first, second, first_specs, second_specs = producers
    claim = str(uuid.uuid4())
    names = first.write(claim, first_specs.claim_spec(claim, ["1", "0:1"]))
    other = second.write(claim, second_specs.claim_spec(claim, ["2"]))

    code, out = podman_run(podman, names[0], "true")  # one device per --device: podman takes each
    assert code == 0, out
    result = podman(
        "run", "--rm", "--network", "none", *(arg for name in names for arg in ("--device", name)),
        IMAGE, "sh", "-c", f"exec 2>&1; {inside(node)}",
    )  # fmt: skip
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode() + out
    check_inside(node, out)

    assert first.gc([]) == [claim]  # the claim is gone: its spec too, the other producer's stays
    code, out = podman_run(podman, names[0], "true")
    assert code != 0
    assert names[0] in out, out
    code, out = podman_run(podman, other[0], "cat /dev/nvidia2; ls /dev/nvidia1; true")
    assert code == 0, out
    assert f"can't open '/dev/nvidia2': {ENXIO}" in out
    assert "ls: /dev/nvidia1: No such file or directory" in out


def test_containerd_2_runs_claims_and_not_a_collected_one(
    image_tar: Path,
    producers: tuple[FakeNode, TransientSpecs, TransientSpecs, NodeSpecs, NodeSpecs],
) -> None:
    node, first, second, first_specs, second_specs = producers
    claim = str(uuid.uuid4())
    names = first.write(claim, first_specs.claim_spec(claim, ["1", "0:1"]))
    other = second.write(claim, second_specs.claim_spec(claim, ["2"]))
    with containerd_daemon(sid_containerd_dir(), "version = 3\n") as containerd:
        containerd.import_image(image_tar)
        devices = [arg for name in names for arg in ("--device", name)]
        result = containerd.run(IMAGE, ["sh", "-c", f"exec 2>&1; {inside(node)}"], options=devices)
        assert result.returncode == 0, result.stderr + result.stdout
        check_inside(node, result.stdout)

        assert first.gc([]) == [claim]
        gone = containerd.run(IMAGE, ["true"], options=["--device", names[0]])
        assert gone.returncode != 0
        assert names[0] in gone.stderr, gone.stderr
        kept = containerd.run(
            IMAGE, ["sh", "-c", "exec 2>&1; cat /dev/nvidia2; true"], options=["--device", other[0]]
        )
        assert kept.returncode == 0, kept.stderr
        assert f"can't open '/dev/nvidia2': {ENXIO}" in kept.stdout
