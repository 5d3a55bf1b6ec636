from __future__ import annotations

import sys

import pytest

from cdictk.cdi.model import Hook
from cdictk.nvcdi.hooks import (
    HOOK_ENV,
    HOOK_NAMES,
    HookProgram,
    common_hooks,
    entry_file,
    hook_program,
    link_args,
)
from cdictk.startpath.helpers.errors import CdictkError


def test_default_program_is_this_python_isolated() -> None:
    program = hook_program()
    assert program.path == sys.executable
    assert program.prefix[1:] == ("-I", "-S", entry_file()) and program.batch
    hook = program.hook("create-symlinks", ["--link", "a::/b"])
    assert hook.hook_name == "createContainer"
    assert hook.args[-3:] == ["create-symlinks", "--link", "a::/b"]
    assert hook.env == list(HOOK_ENV) and hook.env


@pytest.mark.parametrize(
    ("path", "prefix"),
    [
        ("/usr/bin/python3.11", ("/usr/bin/python3.11", "-I", "-S", entry_file())),
        ("/usr/bin/nvidia-cdi-hook", ("nvidia-cdi-hook",)),
        ("/usr/bin/nvidia-ctk", ("nvidia-ctk", "hook")),
        ("/usr/local/bin/cdictk", ("cdictk", "hook")),
        ("/usr/bin/pypy3", ("/usr/bin/pypy3", "-I", "-S", entry_file())),
        ("/usr/bin/python3.13t", ("/usr/bin/python3.13t", "-I", "-S", entry_file())),
        ("/opt/cdictk/current/bin/cdictk-hook", ("cdictk-hook",)),  # the node runtime's
    ],
)
def test_hook_path_forms(path: str, prefix: tuple[str, ...]) -> None:
    program = hook_program(path)
    assert program.prefix == prefix
    assert program.batch == ("nvidia" not in path)
    assert not hook_program(path, separate=True).batch


def test_the_node_runtimes_hook_gets_the_batched_hook() -> None:
    program = hook_program("/opt/cdictk/current/bin/cdictk-hook")
    hooks = common_hooks(
        program,
        links=[("libcuda.so.1", "/usr/lib/libcuda.so")],
        device_links=[],
        library_dirs=["/usr/lib"],
        driver_version="580.95.05",
        ldconfig_path=None,
        disabled=frozenset(),
    )
    assert [(hook.path, hook.args[:2]) for hook in hooks] == [
        ("/opt/cdictk/current/bin/cdictk-hook", ["cdictk-hook", "batch"])
    ]


def test_run_from_an_installed_node_runtime_the_default_is_its_stable_hook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A spec made by the runtime names ``current``'s hook, which outlives the version running now."""
    monkeypatch.setattr("cdictk.nvcdi.hooks.stable_hook", lambda: "/opt/cdictk/current/bin/cdictk-hook")
    program = hook_program()
    assert (program.path, program.prefix, program.batch) == (
        "/opt/cdictk/current/bin/cdictk-hook",
        ("cdictk-hook",),
        True,
    )
    assert hook_program("/usr/bin/nvidia-cdi-hook").path == "/usr/bin/nvidia-cdi-hook"  # a given path wins


def test_relative_hook_path_is_refused() -> None:
    with pytest.raises(CdictkError, match="--hook-path: must be an absolute path"):
        hook_program("nvidia-cdi-hook")


def test_links_are_deduplicated_and_sorted_by_link() -> None:
    links = [("b", "/z/2"), ("a", "/z/1"), ("b", "/z/2")]
    assert link_args(links) == ["--link", "a::/z/1", "--link", "b::/z/2"]


def test_common_hooks_order_and_disabling() -> None:
    program = hook_program("/usr/bin/nvidia-cdi-hook")
    hooks = common_hooks(
        program,
        links=[("libcuda.so.1", "/lib/libcuda.so")],
        device_links=[("../card1", "/dev/dri/by-path/x-card")],  # separate hooks: the devices make these
        library_dirs=["/lib", "/lib/vdpau"],
        driver_version="580.95.05",
        ldconfig_path="/sbin/ldconfig.real",
        disabled=frozenset(),
    )
    assert [hook.args for hook in hooks] == [
        ["nvidia-cdi-hook", "create-symlinks", "--link", "libcuda.so.1::/lib/libcuda.so"],
        ["nvidia-cdi-hook", "enable-cuda-compat", "--host-driver-version=580.95.05"],
        [
            "nvidia-cdi-hook",
            "update-ldcache",
            "--ldconfig-path",
            "/sbin/ldconfig.real",
            "--folder",
            "/lib",
            "--folder",
            "/lib/vdpau",
        ],
        ["nvidia-cdi-hook", "disable-device-node-modification"],
        ["nvidia-cdi-hook", "update-application-profile"],
    ]
    fewer = common_hooks(
        program,
        links=[],
        device_links=[],
        library_dirs=["/lib"],
        driver_version="1",
        ldconfig_path=None,
        disabled=frozenset({"enable-cuda-compat", "disable-device-node-modification"}),
    )
    assert [hook.args[1] for hook in fewer] == ["update-ldcache", "update-application-profile"]


def test_batched_hook_carries_every_step_in_order() -> None:
    program = hook_program()
    (hook,) = common_hooks(
        program,
        links=[("libcuda.so.1", "/lib/libcuda.so")],
        device_links=[("../card1", "/dev/dri/by-path/x-card")],
        library_dirs=["/lib"],
        driver_version="580.95.05",
        ldconfig_path=None,
        disabled=frozenset(),
    )
    assert hook.args[4:] == [
        "batch",
        "--link",
        "libcuda.so.1::/lib/libcuda.so",
        "--device-link",
        "../card1::/dev/dri/by-path/x-card",
        "--host-driver-version=580.95.05",
        "--folder",
        "/lib",
        "--disable-device-node-modification",
        "--update-application-profile",
    ]
    only_compat = common_hooks(
        program,
        links=[("a", "/b")],
        device_links=[],
        library_dirs=["/lib"],
        driver_version="1",
        ldconfig_path="/sbin/ldconfig",
        disabled=frozenset({"create-symlinks", "update-ldcache"}),
    )
    assert only_compat[0].args[4:] == [
        "batch",
        "--host-driver-version=1",
        "--disable-device-node-modification",
        "--update-application-profile",
    ]
    nothing = common_hooks(
        program,
        links=[],
        device_links=[],
        library_dirs=[],
        driver_version="1",
        ldconfig_path=None,
        disabled=frozenset(),
    )
    assert nothing == []


def test_every_hook_the_generator_writes_parses_with_the_hooks_own_table() -> None:
    """The generator and the hook entry point read one table of steps: whatever a spec says, the hook
    (and the prestart hook running it in process) understands, option by option."""
    from cdictk.startpath.hooks.steps import BY_NAME

    def written(program: HookProgram) -> list[Hook]:
        return common_hooks(
            program,
            links=[("libcuda.so.1", "/lib/libcuda.so")],
            device_links=[("../card1", "/dev/dri/by-path/x-card")],
            library_dirs=["/lib", "/lib/vdpau"],
            driver_version="580.95.05",
            ldconfig_path="/sbin/ldconfig.real",
            disabled=frozenset(),
        )

    written_hooks = written(hook_program()) + written(hook_program(separate=True))
    assert sorted(hook.args[4] for hook in written_hooks) == sorted({"batch", *HOOK_NAMES})
    for hook in written_hooks:
        options = BY_NAME[hook.args[4]].parse(hook.args[5:])
        assert options is not None, hook.args
