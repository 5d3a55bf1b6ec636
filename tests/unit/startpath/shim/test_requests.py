"""Device requests from an OCI config: annotations, volume mounts, NVIDIA_VISIBLE_DEVICES, capabilities."""

from __future__ import annotations

from typing import Any

import pytest

from cdictk.startpath.shim.requests import (
    ALL_CAPABILITIES,
    DEFAULT_CAPABILITIES,
    Policy,
    RequestError,
    Requests,
    is_device_id,
    requests_from_config,
)
from cdictk.startpath.specs import names
from cdictk.startpath.specs.names import qualified_name_problem
from tests import REPO as CLONE

REPO = str(CLONE)
UUID = "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c"
MIG_UUID = "MIG-8f3ac1b2-5d4e-5f60-a7b8-c9d0e1f2a3b4"
LEGACY_MIG = f"MIG-{UUID}/7/0"
DEVICES_ROOT = "/var/run/nvidia-container-devices"
SYS_ADMIN = ["CAP_CHOWN", "CAP_SYS_ADMIN", "CAP_NET_RAW"]
UNPRIVILEGED = ["CAP_CHOWN", "CAP_NET_RAW"]


def config(
    *env: str,
    annotations: dict[str, Any] | None = None,
    mounts: list[Any] | None = None,
    bounding: list[str] | None = None,
) -> dict[str, Any]:
    process: dict[str, Any] = {"args": ["sh"], "cwd": "/", "env": ["PATH=/usr/bin:/bin", *env]}
    if bounding is not None:
        process["capabilities"] = {"bounding": bounding, "effective": bounding}
    result: dict[str, Any] = {"ociVersion": "1.2.0", "process": process, "root": {"path": "rootfs"}}
    if annotations is not None:
        result["annotations"] = annotations
    if mounts is not None:
        result["mounts"] = mounts
    return result


# Most tests here are about what a request says, so they read it as a node that accepts env requests.
ACCEPT = Policy(accept_env_unprivileged=True)


def request(cfg: dict[str, Any], policy: Policy | None = None) -> Requests:
    return requests_from_config(cfg, policy or ACCEPT)


def devices(*env: str, **kwargs: Any) -> list[str]:
    """The devices of a config with this env; a config that asks for some says they come from the env."""
    result = request(config(*env, **kwargs))
    if result.devices:
        assert result.source == "NVIDIA_VISIBLE_DEVICES"
    return result.devices


def error(cfg: dict[str, Any], policy: Policy | None = None) -> str:
    with pytest.raises(RequestError) as info:
        request(cfg, policy)
    message = str(info.value)
    assert "\n" not in message
    return message


def null_mount(destination: str, source: str = "/dev/null") -> dict[str, Any]:
    return {"destination": destination, "type": "bind", "source": source, "options": ["ro", "rbind"]}


VOLUMES = Policy(accept_volume_mounts=True, accept_env_unprivileged=True, env_kinds=["vendor.com/net"])


# --- NVIDIA_VISIBLE_DEVICES values ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", ["nvidia.com/gpu=0"]),
        ("0,1", ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]),
        ("12", ["nvidia.com/gpu=12"]),
        ("all", ["nvidia.com/gpu=all"]),
        (UUID, [f"nvidia.com/gpu={UUID}"]),
        (UUID.upper(), [f"nvidia.com/gpu={UUID.upper()}"]),
        (MIG_UUID, [f"nvidia.com/gpu={MIG_UUID}"]),
        (LEGACY_MIG, [f"nvidia.com/gpu={LEGACY_MIG}"]),
        ("0:1", ["nvidia.com/gpu=0:1"]),
        ("0:0,1:3", ["nvidia.com/gpu=0:0", "nvidia.com/gpu=1:3"]),
        ("nvidia.com/gpu=0", ["nvidia.com/gpu=0"]),
        ("nvidia.com/gpu=dev_1:2.3", ["nvidia.com/gpu=dev_1:2.3"]),
        (
            f"1,{UUID},nvidia.com/gpu=2,0:1",
            ["nvidia.com/gpu=1", f"nvidia.com/gpu={UUID}", "nvidia.com/gpu=2", "nvidia.com/gpu=0:1"],
        ),
    ],
)
def test_visible_devices_values(value: str, expected: list[str]) -> None:
    result = request(config(f"NVIDIA_VISIBLE_DEVICES={value}"))
    assert result.devices == expected
    assert result.source == "NVIDIA_VISIBLE_DEVICES"
    assert result.capabilities == DEFAULT_CAPABILITIES


def test_env_and_mounts_name_only_the_kinds_the_policy_lists() -> None:
    """An image must not get example.com/x=a by asking through NVIDIA_VISIBLE_DEVICES."""
    assert error(config("NVIDIA_VISIBLE_DEVICES=0,example.com/x=a")) == (
        'NVIDIA_VISIBLE_DEVICES: "example.com/x=a": kind example.com/x cannot be asked for this way '
        "(requests.env-kinds names those besides nvidia.com/gpu; or use a CDI annotation)"
    )
    mount = config(mounts=[null_mount(f"{DEVICES_ROOT}/cdi/example.com/x/a")])
    assert "kind example.com/x cannot be asked for this way" in error(
        mount, Policy(accept_volume_mounts=True)
    )
    widened = Policy(accept_env_unprivileged=True, env_kinds=["example.com/x"])
    assert request(config("NVIDIA_VISIBLE_DEVICES=example.com/x=a"), widened).devices == ["example.com/x=a"]
    annotated = config(annotations={"cdi.k8s.io/x": "example.com/x=a"})
    assert request(annotated, Policy()).devices == ["example.com/x=a"]  # the engine's policy, not ours
    with pytest.raises(RequestError, match=r"^env kinds: "):
        Policy(env_kinds=["example.com"])


def test_a_cuda_image_alone_gets_no_gpu_by_default() -> None:
    """CUDA images set NVIDIA_VISIBLE_DEVICES=all: a pod that asked for no GPU must not get them all."""
    result = request(config("NVIDIA_VISIBLE_DEVICES=all", bounding=UNPRIVILEGED), Policy())
    assert (result.devices, result.source) == ([], "") and "ignored" in result.notes[0]


def test_unqualified_ids_take_the_policy_kind() -> None:
    policy = Policy(
        default_kind="example.com/accel", env_kinds=["nvidia.com/gpu"], accept_env_unprivileged=True
    )
    result = request(config("NVIDIA_VISIBLE_DEVICES=0,nvidia.com/gpu=1"), policy)
    assert result.devices == ["example.com/accel=0", "nvidia.com/gpu=1"]
    assert request(config("NVIDIA_VISIBLE_DEVICES=all"), policy).devices == ["example.com/accel=all"]


@pytest.mark.parametrize(
    "env",
    [
        (),
        ("NVIDIA_VISIBLE_DEVICES=",),
        ("NVIDIA_VISIBLE_DEVICES=void",),
        ("NVIDIA_VISIBLE_DEVICES=0,void",),
        ("NVIDIA_VISIBLE_DEVICES=void,all",),
        ("NVIDIA_VISIBLE_DEVICES=none,void,GPU-0a",),
    ],
)
def test_not_a_gpu_container(env: tuple[str, ...]) -> None:
    result = request(config(*env))
    assert (result.devices, result.source) == ([], "")
    assert result.capabilities == DEFAULT_CAPABILITIES


def test_none_asks_for_the_driver_only() -> None:
    result = request(config("NVIDIA_VISIBLE_DEVICES=none", "NVIDIA_DRIVER_CAPABILITIES=utility"))
    assert (result.devices, result.source, result.driver_only) == ([], "NVIDIA_VISIBLE_DEVICES", True)
    assert result.capabilities == {"utility"}
    assert not request(config("NVIDIA_VISIBLE_DEVICES=0")).driver_only


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("void,,bad id", "empty item in the device list"),
        ("void,bad id", '"bad id": not a valid device id'),
        ("0,void,GPU-", '"GPU-": not a valid device id'),
    ],
)
def test_void_does_not_hide_a_malformed_id(value: str, message: str) -> None:
    assert message in error(config(f"NVIDIA_VISIBLE_DEVICES={value}"))


def test_the_last_occurrence_wins() -> None:
    assert devices("NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_VISIBLE_DEVICES=1") == ["nvidia.com/gpu=1"]
    assert devices("NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_VISIBLE_DEVICES=void") == []
    assert devices("NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_VISIBLE_DEVICES=all") == ["nvidia.com/gpu=all"]
    caps = request(
        config(
            "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=video", "NVIDIA_DRIVER_CAPABILITIES=ngx"
        )
    )
    assert caps.capabilities == {"ngx"}


def test_devices_are_deduplicated_in_request_order() -> None:
    assert devices("NVIDIA_VISIBLE_DEVICES=1,0,nvidia.com/gpu=1,0,1") == [
        "nvidia.com/gpu=1",
        "nvidia.com/gpu=0",
    ]


def test_other_variables_and_entries_without_a_value_are_ignored() -> None:
    cfg = config(
        "NVIDIA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES_X=0", "X_NVIDIA_VISIBLE_DEVICES=0", "HOME=/root"
    )
    assert (request(cfg).devices, request(cfg).source) == ([], "")


def test_a_config_without_process_or_env_asks_for_nothing() -> None:
    assert request({"ociVersion": "1.2.0"}).source == ""
    assert request({"process": {"args": ["sh"]}}).source == ""


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("GPU-x y", 'NVIDIA_VISIBLE_DEVICES: "GPU-x y": not a valid device id'),
        ("0,GPU-x y", 'NVIDIA_VISIBLE_DEVICES: "GPU-x y": not a valid device id'),
        ("0, 1", 'NVIDIA_VISIBLE_DEVICES: " 1": not a valid device id'),
        (" 0", 'NVIDIA_VISIBLE_DEVICES: " 0": not a valid device id'),
        ("0,,1", 'NVIDIA_VISIBLE_DEVICES: "0,,1": empty item in the device list'),
        ("0,", 'NVIDIA_VISIBLE_DEVICES: "0,": empty item in the device list'),
        (",", 'NVIDIA_VISIBLE_DEVICES: ",": empty item in the device list'),
        ("../x", 'NVIDIA_VISIBLE_DEVICES: "../x": not a valid device id'),
        ("/dev/nvidia0", 'NVIDIA_VISIBLE_DEVICES: "/dev/nvidia0": not a valid device id'),
        ("GPU-", 'NVIDIA_VISIBLE_DEVICES: "GPU-": not a valid device id'),
        ("MIG-", 'NVIDIA_VISIBLE_DEVICES: "MIG-": not a valid device id'),
        ("GPU-xyz", 'NVIDIA_VISIBLE_DEVICES: "GPU-xyz": not a valid device id'),
        ("GPU--1234", 'NVIDIA_VISIBLE_DEVICES: "GPU--1234": not a valid device id'),
        ("GPU-1234-", 'NVIDIA_VISIBLE_DEVICES: "GPU-1234-": not a valid device id'),
        (f"MIG-{UUID}", f'NVIDIA_VISIBLE_DEVICES: "MIG-{UUID}": not a valid device id'),
        (f"MIG-{UUID}/1", f'NVIDIA_VISIBLE_DEVICES: "MIG-{UUID}/1": not a valid device id'),
        (f"MIG-{UUID}/1/x", f'NVIDIA_VISIBLE_DEVICES: "MIG-{UUID}/1/x": not a valid device id'),
        ("0:", 'NVIDIA_VISIBLE_DEVICES: "0:": not a valid device id'),
        (":1", 'NVIDIA_VISIBLE_DEVICES: ":1": not a valid device id'),
        ("0:1:2", 'NVIDIA_VISIBLE_DEVICES: "0:1:2": not a valid device id'),
        ("-1", 'NVIDIA_VISIBLE_DEVICES: "-1": not a valid device id'),
        ("\u00b2", 'NVIDIA_VISIBLE_DEVICES: "\u00b2": not a valid device id'),
        ("gpu0", 'NVIDIA_VISIBLE_DEVICES: "gpu0": not a valid device id'),
        ("ALL", 'NVIDIA_VISIBLE_DEVICES: "ALL": not a valid device id'),
        ("nvidia.com/gpu", 'NVIDIA_VISIBLE_DEVICES: "nvidia.com/gpu": not a valid device id'),
        ("0\n1", 'NVIDIA_VISIBLE_DEVICES: "0\\x0a1": not a valid device id'),
        ('"0"', 'NVIDIA_VISIBLE_DEVICES: "\\"0\\"": not a valid device id'),
        ("all,0", 'NVIDIA_VISIBLE_DEVICES: "all" cannot be combined with other devices'),
        ("0,none", 'NVIDIA_VISIBLE_DEVICES: "none" cannot be combined with other devices'),
        ("=0", 'NVIDIA_VISIBLE_DEVICES: "=0": not a qualified CDI device name (want vendor.com/class=name)'),
        (
            "nvidia.com/gpu=",
            'NVIDIA_VISIBLE_DEVICES: "nvidia.com/gpu=": not a qualified CDI device name (want vendor.com/class=name)',
        ),
        (
            "nvidia.com/gpu=0 ",
            'NVIDIA_VISIBLE_DEVICES: "nvidia.com/gpu=0 ": invalid device name "0 ": must end with a letter or digit',
        ),
        (
            "nvidia.com/gpu=../0",
            'NVIDIA_VISIBLE_DEVICES: "nvidia.com/gpu=../0": invalid device name "../0": must start with a letter or digit',
        ),
        (
            "1nvidia.com/gpu=0",
            'NVIDIA_VISIBLE_DEVICES: "1nvidia.com/gpu=0": invalid vendor "1nvidia.com": must start with a letter',
        ),
    ],
)
def test_bad_visible_devices(value: str, message: str) -> None:
    assert error(config(f"NVIDIA_VISIBLE_DEVICES={value}")) == message


def test_a_long_bad_value_is_cut_in_the_message() -> None:
    message = error(config("NVIDIA_VISIBLE_DEVICES=" + "x" * 5000))
    assert message == 'NVIDIA_VISIBLE_DEVICES: "' + "x" * 200 + '...": not a valid device id'


# --- privilege ---------------------------------------------------------------------------------------

REFUSE = Policy()  # the default


def test_env_from_an_unprivileged_container_is_honoured_when_the_policy_accepts_it() -> None:
    assert devices("NVIDIA_VISIBLE_DEVICES=0", bounding=UNPRIVILEGED) == ["nvidia.com/gpu=0"]


@pytest.mark.parametrize("bounding", [UNPRIVILEGED, [], None])
def test_env_from_an_unprivileged_container_is_ignored_when_the_policy_refuses_it(
    bounding: list[str] | None,
) -> None:
    for value in ("0", "all", "none", "bad id"):
        result = request(config(f"NVIDIA_VISIBLE_DEVICES={value}", bounding=bounding), REFUSE)
        assert (result.devices, result.source) == ([], "")
        assert result.notes == [
            f'NVIDIA_VISIBLE_DEVICES="{value}" ignored: an unprivileged container\'s environment grants '
            "no GPU (requests.accept-env-unprivileged is false); ask with a CDI name "
            "(--device nvidia.com/gpu=0), a cdi.k8s.io/* annotation, docker run --gpus, or a device "
            "plugin's cdi or volume-mounts strategy"
        ]
    assert request(config("NVIDIA_VISIBLE_DEVICES=void", bounding=bounding), REFUSE).notes == []


def test_env_from_a_privileged_container_is_honoured_when_the_policy_refuses_unprivileged() -> None:
    result = request(config("NVIDIA_VISIBLE_DEVICES=0,1", bounding=SYS_ADMIN), REFUSE)
    assert (result.devices, result.source) == (
        ["nvidia.com/gpu=0", "nvidia.com/gpu=1"],
        "NVIDIA_VISIBLE_DEVICES",
    )
    assert (
        error(config("NVIDIA_VISIBLE_DEVICES=0,x", bounding=SYS_ADMIN), REFUSE)
        == 'NVIDIA_VISIBLE_DEVICES: "x": not a valid device id'
    )


def test_only_the_bounding_set_makes_a_container_privileged() -> None:
    cfg = config("NVIDIA_VISIBLE_DEVICES=0", bounding=UNPRIVILEGED)
    cfg["process"]["capabilities"].update(effective=SYS_ADMIN, permitted=SYS_ADMIN)
    assert request(cfg, REFUSE).source == ""


def test_annotations_are_honoured_for_unprivileged_containers_when_env_is_refused() -> None:
    cfg = config(bounding=UNPRIVILEGED, annotations={"cdi.k8s.io/gpu": "nvidia.com/gpu=0"})
    assert request(cfg, REFUSE).devices == ["nvidia.com/gpu=0"]


# --- annotations -------------------------------------------------------------------------------------


def test_annotations_are_read_in_key_order_and_deduplicated() -> None:
    cfg = config(
        annotations={
            "cdi.k8s.io/z-plugin": "nvidia.com/gpu=1,vendor.com/net=eth0",
            "io.kubernetes.cri.sandbox-id": "abc",
            "cdi.k8s.io/a-plugin": "nvidia.com/gpu=0,nvidia.com/gpu=1",
        }
    )
    result = request(cfg)
    assert result.devices == ["nvidia.com/gpu=0", "nvidia.com/gpu=1", "vendor.com/net=eth0"]
    assert result.source == "annotations"


def test_annotations_win_over_env() -> None:
    cfg = config("NVIDIA_VISIBLE_DEVICES=all", annotations={"cdi.k8s.io/gpu": "nvidia.com/gpu=1"})
    assert (request(cfg).devices, request(cfg).source) == (["nvidia.com/gpu=1"], "annotations")
    # The env request loses, so its value is not even read.
    cfg = config("NVIDIA_VISIBLE_DEVICES=bad id", annotations={"cdi.k8s.io/gpu": "nvidia.com/gpu=1"})
    assert request(cfg).source == "annotations"


def test_annotations_win_over_volume_mounts() -> None:
    cfg = config(annotations={"cdi.k8s.io/gpu": "nvidia.com/gpu=1"}, mounts=[null_mount(f"{DEVICES_ROOT}/0")])
    assert request(cfg, VOLUMES).devices == ["nvidia.com/gpu=1"]


def test_annotations_under_other_prefixes_are_not_requests() -> None:
    cfg = config("NVIDIA_VISIBLE_DEVICES=0", annotations={"example.com/gpu": "not a name", "cdi.k8s.io": "x"})
    assert (request(cfg).devices, request(cfg).source) == (["nvidia.com/gpu=0"], "NVIDIA_VISIBLE_DEVICES")


def test_the_annotation_prefixes_come_from_the_policy() -> None:
    cfg = config(
        annotations={"cdi.k8s.io/gpu": "nvidia.com/gpu=0", "example.com/cdi-gpu": "nvidia.com/gpu=1"}
    )
    assert request(cfg, Policy(annotation_prefixes=["example.com/cdi-"])).devices == ["nvidia.com/gpu=1"]
    assert request(cfg, Policy(annotation_prefixes="example.com/cdi-")).devices == ["nvidia.com/gpu=1"]
    both = Policy(annotation_prefixes=("cdi.k8s.io/", "example.com/cdi-"))
    assert request(cfg, both).devices == ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]
    assert request(cfg, Policy(annotation_prefixes=())).source == ""


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "0",
            'annotation "cdi.k8s.io/gpu": "0": not a qualified CDI device name (want vendor.com/class=name)',
        ),
        ("", 'annotation "cdi.k8s.io/gpu": "": not a qualified CDI device name (want vendor.com/class=name)'),
        (
            "nvidia.com/gpu=0,",
            'annotation "cdi.k8s.io/gpu": "": not a qualified CDI device name (want vendor.com/class=name)',
        ),
        (
            "nvidia.com/gpu=0, nvidia.com/gpu=1",
            'annotation "cdi.k8s.io/gpu": " nvidia.com/gpu=1": invalid vendor " nvidia.com": must start with a letter',
        ),
        (
            "nvidia.com/gpu",
            'annotation "cdi.k8s.io/gpu": "nvidia.com/gpu": not a qualified CDI device name (want vendor.com/class=name)',
        ),
        (
            "nvidia.com=0",
            'annotation "cdi.k8s.io/gpu": "nvidia.com=0": not a qualified CDI device name (want vendor.com/class=name)',
        ),
        (
            "nvidia.com/g/pu=0",
            'annotation "cdi.k8s.io/gpu": "nvidia.com/g/pu=0": invalid class "g/pu": only letters, digits, "_", "." and "-" are allowed',
        ),
        (
            "nvidia.com-/gpu=0",
            'annotation "cdi.k8s.io/gpu": "nvidia.com-/gpu=0": invalid vendor "nvidia.com-": must end with a letter or digit',
        ),
        (
            "nvidia.com/gpu=a b",
            'annotation "cdi.k8s.io/gpu": "nvidia.com/gpu=a b": invalid device name "a b": only letters, digits, "_", ".", ":" and "-" are allowed',
        ),
    ],
)
def test_bad_annotations(value: str, message: str) -> None:
    assert error(config("NVIDIA_VISIBLE_DEVICES=0", annotations={"cdi.k8s.io/gpu": value})) == message


# --- volume mounts -----------------------------------------------------------------------------------


def test_volume_mounts_are_ignored_unless_the_policy_accepts_them() -> None:
    cfg = config(
        "NVIDIA_VISIBLE_DEVICES=1",
        mounts=[null_mount(f"{DEVICES_ROOT}/0"), null_mount(f"{DEVICES_ROOT}/bad id")],
    )
    assert (request(cfg).devices, request(cfg).source) == (["nvidia.com/gpu=1"], "NVIDIA_VISIBLE_DEVICES")
    assert request(config(mounts=[null_mount(f"{DEVICES_ROOT}/0")])).source == ""


def test_volume_mounts_win_over_env() -> None:
    mounts = [
        null_mount(f"{DEVICES_ROOT}/0"),
        null_mount(f"{DEVICES_ROOT}/{UUID}"),
        null_mount(f"{DEVICES_ROOT}/cdi/vendor.com/net/eth0"),
        null_mount(f"{DEVICES_ROOT}/cdi/nvidia.com/gpu=1"),
        null_mount(f"{DEVICES_ROOT}/0:1"),
        null_mount(f"{DEVICES_ROOT}/{LEGACY_MIG}"),
        null_mount(f"{DEVICES_ROOT}//0/"),
    ]
    result = request(config("NVIDIA_VISIBLE_DEVICES=3", mounts=mounts), VOLUMES)
    assert result.source == "volume-mounts"
    assert result.devices == [
        "nvidia.com/gpu=0",
        f"nvidia.com/gpu={UUID}",
        "vendor.com/net=eth0",
        "nvidia.com/gpu=1",
        "nvidia.com/gpu=0:1",
        f"nvidia.com/gpu={LEGACY_MIG}",
    ]


@pytest.mark.parametrize(
    "mount",
    [
        null_mount(f"{DEVICES_ROOT}/0", source="/dev/zero"),
        null_mount(f"{DEVICES_ROOT}/0", source="dev/null"),
        null_mount(f"{DEVICES_ROOT}"),
        null_mount(f"{DEVICES_ROOT}/"),
        null_mount(f"{DEVICES_ROOT}X/0"),
        null_mount("/run/nvidia-container-devices/0"),
        null_mount(f"{DEVICES_ROOT}/../0"),
        null_mount("var/run/nvidia-container-devices/0"),
        {"destination": f"{DEVICES_ROOT}/0", "type": "tmpfs"},
        {"source": "/dev/null"},
    ],
)
def test_mounts_that_are_not_requests_leave_env_in_charge(mount: dict[str, Any]) -> None:
    result = request(config("NVIDIA_VISIBLE_DEVICES=3", mounts=[mount]), VOLUMES)
    assert (result.devices, result.source) == (["nvidia.com/gpu=3"], "NVIDIA_VISIBLE_DEVICES")


def test_paths_are_cleaned_as_the_runtime_would() -> None:
    mounts = [null_mount("/var//run/./nvidia-container-devices/x/../1", source="/dev/./null")]
    assert request(config(mounts=mounts), VOLUMES).devices == ["nvidia.com/gpu=1"]


def test_volume_mount_all_none_and_void() -> None:
    result = request(config(mounts=[null_mount(f"{DEVICES_ROOT}/all")]), VOLUMES)
    assert (result.devices, result.source) == (["nvidia.com/gpu=all"], "volume-mounts")
    result = request(config("NVIDIA_VISIBLE_DEVICES=0", mounts=[null_mount(f"{DEVICES_ROOT}/none")]), VOLUMES)
    assert (result.devices, result.source) == ([], "volume-mounts")
    result = request(config("NVIDIA_VISIBLE_DEVICES=0", mounts=[null_mount(f"{DEVICES_ROOT}/void")]), VOLUMES)
    assert (result.devices, result.source) == ([], "")


@pytest.mark.parametrize(
    ("request_path", "message"),
    [
        ("bad id", 'mount "/var/run/nvidia-container-devices/bad id": "bad id": not a valid device id'),
        ("x/y", 'mount "/var/run/nvidia-container-devices/x/y": "x/y": not a valid device id'),
        ("GPU-", 'mount "/var/run/nvidia-container-devices/GPU-": "GPU-": not a valid device id'),
        (
            "imex/0",
            'mount "/var/run/nvidia-container-devices/imex/0": IMEX channel requests are not supported',
        ),
        (
            "cdi/nvidia.com/gpu",
            'mount "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu": "cdi/nvidia.com/gpu": want cdi/<vendor>/<class>/<device>',
        ),
        (
            "cdi/nvidia.com/gpu/0/1",
            'mount "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu/0/1": "cdi/nvidia.com/gpu/0/1": want cdi/<vendor>/<class>/<device>',
        ),
        (
            "cdi/nvidia.com/gpu=a b",
            'mount "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu=a b": "nvidia.com/gpu=a b": invalid device name "a b": only letters, digits, "_", ".", ":" and "-" are allowed',
        ),
        (
            "cdi/-x/gpu/0",
            'mount "/var/run/nvidia-container-devices/cdi/-x/gpu/0": "-x/gpu=0": invalid vendor "-x": must start with a letter',
        ),
    ],
)
def test_bad_volume_mounts(request_path: str, message: str) -> None:
    cfg = config("NVIDIA_VISIBLE_DEVICES=0", mounts=[null_mount(f"{DEVICES_ROOT}/{request_path}")])
    assert error(cfg, VOLUMES) == message


def test_all_cannot_be_combined_with_other_volume_mounts() -> None:
    mounts = [null_mount(f"{DEVICES_ROOT}/0"), null_mount(f"{DEVICES_ROOT}/all")]
    assert (
        error(config(mounts=mounts), VOLUMES)
        == 'mount "/var/run/nvidia-container-devices/all": "all" cannot be combined with other devices'
    )


# --- driver capabilities -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, DEFAULT_CAPABILITIES),
        ("", DEFAULT_CAPABILITIES),
        (" , ", DEFAULT_CAPABILITIES),
        ("all", ALL_CAPABILITIES),
        ("compute,all", ALL_CAPABILITIES),
        ("compute", {"compute"}),
        ("graphics,display", {"graphics", "display"}),
        ("compute, utility,,video", {"compute", "utility", "video"}),
        ("compute,utility,graphics,video,display,compat32,ngx", ALL_CAPABILITIES),
    ],
)
def test_capabilities(value: str | None, expected: frozenset[str]) -> None:
    env = ["NVIDIA_VISIBLE_DEVICES=0"] + ([] if value is None else [f"NVIDIA_DRIVER_CAPABILITIES={value}"])
    result = request(config(*env))
    assert result.capabilities == expected
    assert isinstance(result.capabilities, frozenset)


@pytest.mark.parametrize(
    ("value", "name"),
    [("compute,foo", "foo"), ("Compute", "Compute"), ("compute utility", "compute utility")],
)
def test_an_unknown_capability_is_an_error_for_a_gpu_container(value: str, name: str) -> None:
    message = error(config("NVIDIA_VISIBLE_DEVICES=none", f"NVIDIA_DRIVER_CAPABILITIES={value}"))
    assert (
        message
        == f'NVIDIA_DRIVER_CAPABILITIES: "{name}": unknown capability (known: compat32, compute, display, graphics, ngx, utility, video, all)'
    )


def test_a_bad_capability_does_not_stop_a_container_that_asks_for_no_gpu() -> None:
    for env in ((), ("NVIDIA_VISIBLE_DEVICES=void",)):
        result = request(config(*env, "NVIDIA_DRIVER_CAPABILITIES=compute,foo"))
        assert (result.devices, result.source, result.capabilities) == ([], "", DEFAULT_CAPABILITIES)


def test_capabilities_are_computed_for_any_source() -> None:
    cfg = config("NVIDIA_DRIVER_CAPABILITIES=video", annotations={"cdi.k8s.io/gpu": "nvidia.com/gpu=0"})
    assert request(cfg).capabilities == {"video"}
    assert request(config("NVIDIA_DRIVER_CAPABILITIES=video")).capabilities == {"video"}


# --- config shape ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda c: c.update(process="sh"), "process: not an object"),
        (lambda c: c["process"].update(env="A=1"), "process.env: not a list of strings"),
        (lambda c: c["process"].update(env={"A": "1"}), "process.env: not a list of strings"),
        (lambda c: c["process"]["env"].append(1), "process.env[1]: not a string"),
        (lambda c: c["process"]["env"].append(None), "process.env[1]: not a string"),
        (lambda c: c.update(annotations=["a"]), "annotations: not an object"),
        (lambda c: c.update(annotations={"x": 1}), 'annotations["x"]: not a string'),
        (
            lambda c: c.update(annotations={"cdi.k8s.io/gpu": ["nvidia.com/gpu=0"]}),
            'annotations["cdi.k8s.io/gpu"]: not a string',
        ),
        (lambda c: c.update(annotations={1: "x"}), 'annotations["1"]: not a string'),
    ],
)
def test_bad_config_shapes(mutate: Any, message: str) -> None:
    cfg = config()
    mutate(cfg)
    assert error(cfg) == message


@pytest.mark.parametrize(
    ("mounts", "message"),
    [
        ({"destination": "/x"}, "mounts: not a list"),
        (["/dev/null"], "mounts[0]: not an object"),
        ([null_mount("/x"), {"destination": 1}], "mounts[1].destination: not a string"),
        ([{"destination": "/x", "source": ["/dev/null"]}], "mounts[0].source: not a string"),
    ],
)
def test_bad_mounts_when_volume_mounts_are_accepted(mounts: Any, message: str) -> None:
    assert error(config(mounts=mounts), VOLUMES) == message


@pytest.mark.parametrize(
    ("capabilities", "message"),
    [
        (["CAP_SYS_ADMIN"], "process.capabilities: not an object"),
        ({"bounding": "CAP_SYS_ADMIN"}, "process.capabilities.bounding: not a list of strings"),
        ({"bounding": [0]}, "process.capabilities.bounding: not a list of strings"),
    ],
)
def test_bad_capability_sets_matter_only_when_privilege_is_asked(capabilities: Any, message: str) -> None:
    cfg = config("NVIDIA_VISIBLE_DEVICES=0")
    cfg["process"]["capabilities"] = capabilities
    assert request(cfg).devices == ["nvidia.com/gpu=0"]
    assert error(cfg, REFUSE) == message


def test_a_config_that_is_not_an_object() -> None:
    with pytest.raises(RequestError, match=r"^config: not a JSON object$"):
        requests_from_config([], Policy())  # type: ignore[arg-type]


# --- policy, syntax helpers, objects -----------------------------------------------------------------


def test_policy_defaults_are_nvidia_s_but_closed_to_image_env() -> None:
    policy = Policy()
    assert policy.annotation_prefixes == ("cdi.k8s.io/",)
    assert policy.default_kind == "nvidia.com/gpu"
    assert policy.env_kinds == {"nvidia.com/gpu"}
    assert policy.accept_env_unprivileged is False  # NVIDIA's is True
    assert policy.accept_volume_mounts is False
    assert "default_kind='nvidia.com/gpu'" in repr(policy)
    with pytest.raises(AttributeError):
        policy.other = 1  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"default_kind": "nvidia.com"},
            'default kind: invalid kind "nvidia.com": want vendor/class, for example nvidia.com/gpu',
        ),
        (
            {"default_kind": "nvidia.com/gpu=0"},
            'default kind: invalid class "gpu=0": only letters, digits, "_", "." and "-" are allowed',
        ),
        ({"annotation_prefixes": ("cdi.k8s.io/", "")}, "annotation prefixes: '' is not a non-empty string"),
    ],
)
def test_bad_policies(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(RequestError) as info:
        Policy(**kwargs)
    assert str(info.value) == message


def test_requests_object() -> None:
    result = request(config("NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=utility,compute"))
    assert repr(result) == (
        "Requests(devices=['nvidia.com/gpu=0'], capabilities='compute,utility', "
        "source='NVIDIA_VISIBLE_DEVICES', driver_only=False, notes=[])"
    )
    assert not hasattr(result, "__dict__")


@pytest.mark.parametrize(
    "text",
    [
        "vendor.com/class=dev",
        "a/b=c",
        "vendor1.com/class.subclass=dev1",
        "yet_another-vendor2.com/c-lass_2=dev_1:2.3",
        f"nvidia.com/gpu={UUID}",
        "nvidia.com/gpu=0:1",
        "a/b=c=d",
        "a/b/c=d",
        "1a/b=c",
        "a/b=-c",
        "a/b=c.",
        "a_/b=c",
        "é.com/b=c",
        "a/b=ç",
        "a/b=",
        "/b=c",
        "a/=c",
        "a=c",
        "",
        "a/b=c\n",
    ],
)
def test_qualified_names_follow_the_cdi_core(text: str) -> None:
    try:
        names.parse_qualified_name(text)
    except ValueError:
        core_ok = False
    else:
        core_ok = True
    assert (qualified_name_problem(text) is None) == core_ok


def test_device_ids() -> None:
    good = ["0", "17", "0:0", "3:12", UUID, UUID.upper(), MIG_UUID, LEGACY_MIG, "GPU-0", "MIG-a"]
    bad = [
        "",
        "all",
        "none",
        "void",
        "GPU-",
        "GPU-g",
        "GPU--0",
        "MIG-GPU-",
        f"MIG-{UUID}/1",
        "a:1",
        "0:b",
        "0.1",
        "+1",
    ]
    assert [text for text in good if not is_device_id(text)] == []
    assert [text for text in bad if is_device_id(text)] == []


# --- whose annotations: engines that copy the image's or the pod author's ------------------------------


def test_an_images_annotation_under_podman_asks_for_nothing() -> None:
    """podman copies the image's annotations (buildah config --annotation) into the config, and keeps
    an image's io.container.manager; the key is always there, whoever set its value."""
    for manager in ("libpod", "evil", "cri-o"):
        cfg = config(annotations={"io.container.manager": manager, "cdi.k8s.io/evil": "nvidia.com/gpu=all"})
        result = request(cfg)
        assert (result.devices, result.source) == ([], "")
        assert len(result.notes) == (0 if manager == "cri-o" else 1)  # CRI-O applies the kubelet's itself
    (note,) = request(
        config(annotations={"io.container.manager": "libpod", "cdi.k8s.io/a": "x", "cdi.k8s.io/b": "y"})
    ).notes
    assert note.startswith('annotation "cdi.k8s.io/a" (and 1 more) ignored: under podman and CRI-O')
    assert "podman run --device nvidia.com/gpu=0" in note


def test_an_ignored_annotation_is_not_even_parsed_and_the_env_still_asks() -> None:
    cfg = config(
        "NVIDIA_VISIBLE_DEVICES=1",
        annotations={"io.container.manager": "libpod", "cdi.k8s.io/bad": "not a name"},
    )
    result = request(cfg)
    assert (result.devices, result.source) == (["nvidia.com/gpu=1"], "NVIDIA_VISIBLE_DEVICES")


def test_copied_annotations_when_the_policy_accepts_them_and_elsewhere_always() -> None:
    podman = config(annotations={"io.container.manager": "libpod", "cdi.k8s.io/gpu": "nvidia.com/gpu=0"})
    accept = Policy(accept_copied_annotations=True)
    assert requests_from_config(podman, accept).devices == ["nvidia.com/gpu=0"]
    containerd = config(
        annotations={"io.kubernetes.cri.container-type": "container", "cdi.k8s.io/gpu": "nvidia.com/gpu=0"}
    )
    assert request(containerd).devices == ["nvidia.com/gpu=0"]
