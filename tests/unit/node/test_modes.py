"""The generate modes are recipes: every name a recipe uses is in its registry."""

from __future__ import annotations

from pathlib import Path

from cdictk.node.discoverers import COMMON, Context, Found, discover_common
from cdictk.node.modes import MODES, GpuSource, Mode
from cdictk.node.roots import Roots
from cdictk.nvcdi.devices import DEVICES


def test_every_mode_has_a_recipe_whose_names_exist() -> None:
    assert set(MODES) == set(Mode)
    for mode, recipe in MODES.items():
        assert set(recipe.common) <= set(COMMON), mode
        assert recipe.devices and set(recipe.devices) <= set(DEVICES), mode


def test_only_management_needs_no_gpu_list_and_leaves_device_nodes_to_the_container() -> None:
    assert [mode for mode, recipe in MODES.items() if recipe.gpus is GpuSource.NONE] == [Mode.MANAGEMENT]
    assert [mode for mode, recipe in MODES.items() if not recipe.mask_device_node_modification] == [
        Mode.MANAGEMENT
    ]


def test_discoverers_merge_in_order_and_sum_up_what_is_missing(tmp_path: Path) -> None:
    roots = Roots(str(tmp_path), str(tmp_path), str(tmp_path / "proc"), str(tmp_path / "sys"))
    context = Context(roots, "1.2.3", {"nvidia"}, [])
    found = discover_common(("control-nodes", "binaries", "firmware"), context)
    assert found.nodes == [] and found.files == []
    assert found.warnings[0] == (
        "/dev/nvidiactl is missing: CUDA in containers will fail without it"
    )  # the nvidia module is loaded: no module to blame
    assert "/dev/nvidia-uvm is missing; the nvidia_uvm module is not loaded" in found.warnings[1]
    assert found.warnings[-1] == (
        "not found, left out (optional): nvidia-smi, nvidia-debugdump, nvidia-persistenced, "
        "nvidia-cuda-mps-control, nvidia-cuda-mps-server, nvidia-imex, nvidia-imex-ctl, GSP firmware for 1.2.3"
    )
    merged = Found()
    merged.add(Found(missing=["a"], links=[("t", "/l")]))
    merged.add(Found(missing=["b"]))
    assert (merged.missing, merged.links) == (["a", "b"], [("t", "/l")])
