"""realnode/speccompare.py: NVIDIA's spec and cdictk's compared item by item."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from realnode.pyenv import Venv
from realnode.recorder import Recorder
from realnode.speccompare import compare, first_gpu, hook_steps, parse_options, step_table, summary

STEP_OF = {
    "link": "create-symlinks",
    "device-link": "create-symlinks",
    "disable-device-node-modification": "disable-device-node-modification",
    "host-driver-version": "enable-cuda-compat",
    "folder": "update-ldcache",
    "ldconfig-path": "update-ldcache",
    "update-application-profile": "update-application-profile",
}
OPTIONS = ["nodev", "nosuid", "rbind", "ro", "rprivate"]
LIB = "/usr/lib/x86_64-linux-gnu"
NV = "/usr/local/nvidia"
ICD = "/usr/share/vulkan/icd.d/nvidia_icd.json"
EGL = "/usr/share/glvnd/egl_vendor.d/10_nvidia.json"
LAYERS = "/usr/share/vulkan/implicit_layer.d/nvidia_layers.json"
FIRMWARE = "nvidia/580.1/gsp_ga10x.bin"


def mount(container: str, host: str | None = None, options: list[str] = OPTIONS) -> dict[str, Any]:
    return {"hostPath": host or container, "containerPath": container, "options": options}


def node(path: str, major: int, minor: int, **more: Any) -> dict[str, Any]:
    return {"path": path, "type": "c", "major": major, "minor": minor, **more}


def nvidia_hook(*args: str) -> dict[str, Any]:
    return {
        "hookName": "createContainer",
        "path": "/opt/bin/nvidia-cdi-hook",
        "args": ["nvidia-cdi-hook", *args],
    }


def cdictk_hook(*args: str) -> dict[str, Any]:
    python = "/opt/venv/bin/python"
    return {
        "hookName": "createContainer",
        "path": python,
        "args": [python, "-I", "-S", "/opt/venv/lib/cdictk/startpath/hooks/__main__.py", "batch", *args],
        "env": ["PATH=/usr/bin:/bin"],
    }


BY_PATH = "../card1::/dev/dri/by-path/pci-0000:01:00.0-card"
GPU0 = [
    node("/dev/nvidia0", 195, 0, fileMode=0o20666),
    node("/dev/dri/card1", 226, 1, fileMode=0o20660, gid=44),
]


def nvidia_spec(root: str) -> dict[str, Any]:
    """What nvidia-ctk wrote on the real node with the driver under /usr/local/nvidia (root: where
    the node's files are; "/" on a real node)."""
    at = root.rstrip("/")
    return {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [
            {
                "name": "0",
                "containerEdits": {
                    "deviceNodes": GPU0,
                    "hooks": [nvidia_hook("create-symlinks", "--link", BY_PATH)],
                    "additionalGids": [44],
                },
            },
            {"name": "GPU-4a1b", "containerEdits": {"deviceNodes": GPU0}},
            {"name": "all", "containerEdits": {"deviceNodes": GPU0}},
        ],
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void", f"NVIDIA_CTK_LIBCUDA_DIR={LIB}"],
            "deviceNodes": [node("/dev/nvidiactl", 195, 255, fileMode=0o20666)],
            "mounts": [
                mount(f"{LIB}/libcuda.so.580.1", f"{at}{LIB}/libcuda.so.580.1"),
                mount(f"{NV}/bin/nvidia-smi", f"{at}{NV}/bin/nvidia-smi"),
                mount(f"{NV}/firmware/{FIRMWARE}", f"{at}{NV}/firmware/{FIRMWARE}"),
                mount("/etc/vulkan/icd.d/nvidia_icd.json", f"{at}{ICD}"),
                mount(EGL, f"{at}{EGL}"),
                mount(
                    "/usr/share/X11/xorg.conf.d/10-nvidia.conf",
                    f"{at}/usr/share/X11/xorg.conf.d/10-nvidia.conf",
                ),
                mount("/run/nvidia-persistenced/socket", f"{at}/run/nvidia-persistenced/socket", ["rbind"]),
            ],
            "hooks": [
                nvidia_hook("create-symlinks", "--link", f"libcuda.so.1::{LIB}/libcuda.so"),
                nvidia_hook("enable-cuda-compat", "--host-driver-version=580.1"),
                nvidia_hook("update-ldcache", "--folder", LIB),
                nvidia_hook("disable-device-node-modification"),
            ],
        },
    }


def cdictk_spec(root: str) -> dict[str, Any]:
    at = root.rstrip("/")
    return {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [
            {
                "name": "0",
                "containerEdits": {"deviceNodes": GPU0, "hooks": [cdictk_hook("--device-link", BY_PATH)]},
            },
            {"name": "all", "containerEdits": {"deviceNodes": GPU0}},
        ],
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void"],
            "deviceNodes": [node("/dev/nvidiactl", 195, 255, fileMode=0o20666)],
            "mounts": [
                mount(f"{LIB}/libcuda.so.580.1", f"{at}{LIB}/libcuda.so.580.1"),
                mount("/usr/bin/nvidia-smi", f"{at}{NV}/bin/nvidia-smi"),
                mount(f"/lib/firmware/{FIRMWARE}", f"{at}{NV}/firmware/{FIRMWARE}"),
                mount(ICD, f"{at}{NV}/share/vulkan/icd.d/nvidia_icd.json"),
                mount(EGL, f"{at}{NV}/share/glvnd/egl_vendor.d/10_nvidia.json"),
                mount(LAYERS, f"{at}{NV}/share/vulkan/implicit_layer.d/nvidia_layers.json"),
                mount(
                    "/usr/share/X11/xorg.conf.d/10-nvidia.conf",
                    f"{at}{NV}/share/X11/xorg.conf.d/10-nvidia.conf",
                ),
                mount(
                    "/run/nvidia-persistenced/socket",
                    f"{at}/run/nvidia-persistenced/socket",
                    ["nodev", "rbind"],
                ),
            ],
            "hooks": [
                cdictk_hook(
                    "--link",
                    f"libcuda.so.1::{LIB}/libcuda.so",
                    "--link",
                    f"libGLX_nvidia.so.580.1::{LIB}/libGLX_indirect.so.0",
                    "--host-driver-version=580.1",
                    "--folder",
                    LIB,
                    "--folder",
                    f"{NV}/lib64",
                    "--disable-device-node-modification",
                    "--update-application-profile",
                )
            ],
        },
    }


# The node's /usr/share links into the driver's tree: one file behind two host paths.
LINKS = {
    ICD: f"{NV}/share/vulkan/icd.d/nvidia_icd.json",
    EGL: f"{NV}/share/glvnd/egl_vendor.d/10_nvidia.json",
}


def resolve(path: str) -> str:
    return LINKS.get(path, path)


def test_the_real_nodes_differences_pair_up_as_one_file_mounted_elsewhere_or_from_elsewhere() -> None:
    compared = compare(nvidia_spec("/"), cdictk_spec("/"), "/", STEP_OF, resolve)
    mounts = compared["common"]["mounts"]
    assert mounts["both"] == 1  # libcuda
    assert mounts["same_file_elsewhere"] == [
        f"{ICD.replace('/usr/share', NV + '/share')}: NVIDIA at /etc/vulkan/icd.d/nvidia_icd.json (from {ICD}), cdictk at {ICD}",
        f"{NV}/bin/nvidia-smi: NVIDIA at {NV}/bin/nvidia-smi, cdictk at /usr/bin/nvidia-smi",
        f"{NV}/firmware/{FIRMWARE}: NVIDIA at {NV}/firmware/{FIRMWARE}, cdictk at /lib/firmware/{FIRMWARE}",
    ]
    assert mounts["same_path"] == [
        "/run/nvidia-persistenced/socket <- /run/nvidia-persistenced/socket; options NVIDIA (rbind), cdictk (nodev,rbind)",
        f"/usr/share/X11/xorg.conf.d/10-nvidia.conf: NVIDIA from /usr/share/X11/xorg.conf.d/10-nvidia.conf, cdictk from {NV}/share/X11/xorg.conf.d/10-nvidia.conf: two files",
        f"{EGL}: NVIDIA from {EGL} (a link to {NV}/share/glvnd/egl_vendor.d/10_nvidia.json), cdictk from {NV}/share/glvnd/egl_vendor.d/10_nvidia.json: one file",
    ]
    assert mounts["nvidia_only"] == []
    assert mounts["cdictk_only"] == [
        f"{LAYERS} <- {NV}/share/vulkan/implicit_layer.d/nvidia_layers.json ({','.join(OPTIONS)})"
    ]


def test_without_the_nodes_links_nothing_pairs_by_file() -> None:
    mounts = compare(nvidia_spec("/"), cdictk_spec("/"), "/", STEP_OF, lambda path: path)["common"]["mounts"]
    assert len(mounts["same_file_elsewhere"]) == 2  # nvidia-smi and the firmware: one host path
    assert next(line for line in mounts["same_path"] if line.startswith(EGL)).endswith(": two files")
    assert [line.split(" <- ")[0] for line in mounts["nvidia_only"]] == ["/etc/vulkan/icd.d/nvidia_icd.json"]
    assert len(mounts["cdictk_only"]) == 2


def test_every_category_and_cdictks_batched_hook_as_nvidias_steps() -> None:
    compared = compare(nvidia_spec("/"), cdictk_spec("/"), "/", STEP_OF, resolve)
    common = compared["common"]
    assert compared["devices"] == {"both": 2, "nvidia_only": ["GPU-4a1b"], "cdictk_only": []}
    assert common["nodes"] == {"both": 1, "nvidia_only": [], "cdictk_only": []}
    assert common["links"] == {
        "both": 1,
        "nvidia_only": [],
        "cdictk_only": [f"{LIB}/libGLX_indirect.so.0 -> libGLX_nvidia.so.580.1"],
    }
    assert common["ldcache"] == {"both": 1, "nvidia_only": [], "cdictk_only": [f"{NV}/lib64"]}
    assert common["env"] == {"both": 1, "nvidia_only": [f"NVIDIA_CTK_LIBCUDA_DIR={LIB}"], "cdictk_only": []}
    # One process of cdictk's, four of NVIDIA's: the same steps, the links and folders taken out.
    assert common["hooks"] == {
        "both": 4,
        "nvidia_only": [],
        "cdictk_only": ["createContainer update-application-profile"],
    }
    assert common["gids"] == {"both": 0, "nvidia_only": [], "cdictk_only": []}
    # Per device: only what differs; the by-path link is the same link from either hook.
    assert compared["per_device"] == {"0": {"gids": {"both": 0, "nvidia_only": ["44"], "cdictk_only": []}}}
    assert summary(compared) == (
        "devices 2=, 1/0 nv/ours-only; nodes 1=; "
        "mounts 1=, 3 same file elsewhere, 3 same path other source, 0/1 nv/ours-only; "
        "links 1=, 0/1 nv/ours-only; ldcache 1=, 0/1 nv/ours-only; env 1=, 1/0 nv/ours-only; "
        "hooks 4=, 0/1 nv/ours-only; gids 0=, 1 devices differ"
    )


def test_a_fake_nodes_root_shows_as_root_and_its_links_are_followed(tmp_path: Path) -> None:
    root = str(tmp_path)
    for path in (
        f"{NV}/bin/nvidia-smi",
        f"{NV}/share/vulkan/icd.d/nvidia_icd.json",
        f"{NV}/firmware/{FIRMWARE}",
    ):
        os.makedirs(os.path.dirname(root + path), exist_ok=True)
        Path(root + path).write_text("x")
    os.makedirs(os.path.dirname(root + ICD))
    os.symlink("../../../local/nvidia/share/vulkan/icd.d/nvidia_icd.json", root + ICD)
    compared = compare(nvidia_spec(root), cdictk_spec(root), root, STEP_OF)
    elsewhere = compared["common"]["mounts"]["same_file_elsewhere"]
    assert elsewhere[0] == (
        f"<root>{NV}/share/vulkan/icd.d/nvidia_icd.json: NVIDIA at /etc/vulkan/icd.d/nvidia_icd.json "
        f"(from <root>{ICD}), cdictk at {ICD}"
    )
    assert (
        f"<root>{NV}/bin/nvidia-smi: NVIDIA at {NV}/bin/nvidia-smi, cdictk at /usr/bin/nvidia-smi"
        in elsewhere
    )
    assert all(
        root not in line
        for category in compared["common"].values()
        for key in ("nvidia_only", "cdictk_only")
        for line in category[key]
    )


def test_identical_specs_have_no_differences() -> None:
    spec = cdictk_spec("/")
    compared = compare(spec, json.loads(json.dumps(spec)), "/", STEP_OF)
    assert compared["per_device"] == {}
    assert all(
        not found["nvidia_only"]
        and not found["cdictk_only"]
        and not found.get("same_path")
        and not found.get("same_file_elsewhere")
        for found in compared["common"].values()
    )
    assert summary(compared).startswith("devices 2=, 0/0 nv/ours-only; nodes 1=; mounts 8=; links 2=")


def test_hook_arguments_are_read_as_nvidia_cdi_hook_reads_them() -> None:
    assert parse_options(["--link", "a::b", "--folder=/x", "--flag", "--last"]) == [
        ("link", "a::b"),
        ("folder", "/x"),
        ("flag", None),
        ("last", None),
    ]
    ctk = {"path": "/usr/bin/nvidia-ctk", "args": ["nvidia-ctk", "hook", "update-ldcache", "--folder", LIB]}
    assert hook_steps(ctk, STEP_OF) == {"update-ldcache": [("folder", LIB)]}
    bare = {"path": "/usr/local/bin/some-hook", "args": ["some-hook"]}
    assert hook_steps(bare, STEP_OF) == {"some-hook": []}
    unknown = cdictk_hook("--folder", LIB, "--new-thing=1")
    assert hook_steps(unknown, STEP_OF) == {
        "update-ldcache": [("folder", LIB)],
        "batch --new-thing": [("new-thing", "1")],
    }


def test_the_step_table_comes_from_the_installed_cdictk(tmp_path: Path) -> None:
    recorder = Recorder(str(tmp_path), "report.json", "check.log", 600)
    bin_dir = os.path.dirname(sys.executable)
    table = step_table(recorder, Venv(sys.executable, sys.executable, "cp3", bin_dir))
    assert {option: table[option] for option in STEP_OF} == STEP_OF


def test_the_gpu_both_specs_name_first() -> None:
    assert first_gpu(nvidia_spec("/"), cdictk_spec("/")) == "0"
    assert (
        first_gpu(
            {"devices": [{"name": "3"}, {"name": "1"}, {"name": "1:0"}]},
            {"devices": [{"name": "3"}, {"name": "1"}]},
        )
        == "1"
    )
    assert first_gpu({"devices": [{"name": "all"}]}) == "all"
