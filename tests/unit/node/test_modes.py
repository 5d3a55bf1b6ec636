"""The generate modes are recipes: every name a recipe uses is in its registry."""

from __future__ import annotations

from cdictk.node.discoverers import COMMON
from cdictk.node.modes import GPU_SPEC, MODES, NODE_MODIFICATION, DriverSource, GpuSource, Mode
from cdictk.nvcdi.devices import DEVICES


def test_every_mode_has_a_recipe_whose_names_exist() -> None:
    assert set(MODES) == set(Mode)
    for mode, recipe in MODES.items():
        assert set(recipe.common) <= set(COMMON), mode
        assert recipe.devices and set(recipe.devices) <= set(DEVICES), mode


def test_the_gpu_modes_list_gpus_and_mask_device_node_modification() -> None:
    listing = [mode for mode, recipe in MODES.items() if recipe.gpus is not GpuSource.NONE]
    assert listing == [Mode.AUTO, Mode.NVML, Mode.PROCFS]
    for mode in listing:
        assert NODE_MODIFICATION not in MODES[mode].without_hooks, mode
    # A management container is there to make device nodes; WSL and Jetson have no driver params.
    for mode in (Mode.MANAGEMENT, Mode.WSL, Mode.CSV, Mode.IMEX, Mode.GDS):
        assert NODE_MODIFICATION in MODES[mode].without_hooks, mode


def test_the_other_drivers_modes_have_their_own_class_and_spec_file_and_need_no_driver() -> None:
    other = {Mode.IMEX, Mode.NVSWITCH, Mode.GDS, Mode.MOFED, Mode.GDRCOPY}
    for mode, recipe in MODES.items():
        if mode in other:
            assert recipe.driver is DriverSource.NONE and recipe.common in ((), ("gds-files",)), mode
            assert recipe.output == f"/etc/cdi/nvidia-{mode.value}.yaml"
            assert recipe.cls == ("imex-channel" if mode is Mode.IMEX else mode.value)
        else:
            assert (recipe.cls, recipe.output) == ("gpu", GPU_SPEC), mode
    assert [mode for mode, recipe in MODES.items() if recipe.device_ids] == [
        Mode.AUTO,
        Mode.NVML,
        Mode.PROCFS,
        Mode.CSV,
        Mode.IMEX,
    ]


def test_every_hook_a_mode_leaves_out_is_a_hook_step() -> None:
    """The node layer names hooks by string (it cannot import the hook table): they must not drift."""
    from cdictk.nvcdi.hooks import HOOK_NAMES

    named = {name for recipe in MODES.values() for name in recipe.without_hooks}
    assert named and named <= set(HOOK_NAMES)
