"""tests/unit mirrors cdictk/ both ways: a module's tests are where the module is, under the same name,
and every module has such a file or is named in :data:`COVERED_BY` with the test that covers it."""

from __future__ import annotations

from pathlib import Path

from tests import REPO

UNIT = REPO / "tests" / "unit"
# Trees that are not cdictk's packages but have tests of their own.
OTHER_TREES = {
    "deploy": REPO / "deploy",
    "e2e": REPO / "tests" / "e2e",
    "fakenode": REPO / "tests" / "fakenode",
    "realnode": REPO / "realnode",
    "nodeimage": REPO / "nodeimage",
}
# Tests of a concern rather than of one module, each named for it.
CONCERNS = {
    "test_import_cost.py",  # what the start path imports
    "test_layers.py",  # the packages' import order
    "test_layout.py",
    "test_packaging.py",  # what a wheel holds
    "test_quickstart_script.py",  # ./quickstart
    "test_readme.py",  # README.md and docs/
    "test_docs.py",  # every page's size, links and wording
    "test_examples.py",  # the programs in examples/
    "test_protogen.py",  # the generated protocol code is what its .proto files give
    "deviceplugin/test_grpc_range.py",  # the kubernetes extra at both ends of its grpcio/protobuf range
    "cdi/test_reference_corpus.py",  # the CDI reference library's outcomes replayed (tests/cdiref)
    "cli/test_generate_faults.py",  # cdi generate on broken nodes
    "cli/test_generate_layouts.py",  # cdi generate on every driver layout
    "cli/test_generate_watch.py",  # cdi generate --watch
    "cli/test_generate_modes.py",  # cdi generate in the modes beside the GPU host's
    "startpath/hooks/test_hardening.py",  # every hook against hostile images
    "info/test_info.py",  # cdictk info as a whole
    "test_root_marker.py",  # the root marker and its check (tests/rootmarker.py)
}

# Modules without a test file of their own (cdictk/ path -> the tests/unit file that covers it): an
# entry point run by a test of what it starts, or a module tested through the one that uses it.
# A module that gets its own test file leaves this list (test_the_covered_list_is_current says so).
COVERED_BY = {
    "__main__.py": "cli/test_cdi.py",  # python -m cdictk
    "startpath/hooks/__main__.py": "startpath/hooks/test_entry.py",  # the path generated hooks run
    "bundlelayout.py": "startpath/helpers/test_bundlepaths.py",  # the layout's other half
    "elflinks.py": "startpath/helpers/test_elfdso.py",  # held against readelf with the ELF reader
    "cli/config.py": "startpath/shim/test_settings.py",  # cdictk config default
    "cdi/fusemounts.py": "startpath/specs/test_specdirs.py",  # spec_paths' FUSE check
    "entrypoints/shim.py": "startpath/shim/test_main.py",  # run as cdictk-runtime there
    "entrypoints/precreate.py": "startpath/shim/test_precreate.py",  # run as podman's hook there
    "entrypoints/prestart.py": "startpath/prestart/test_main.py",  # run as the legacy hook there
    "startpath/misses.py": "entrypoints/test_slowpath.py",  # the record the entry points fill
    "cli/info.py": "info/test_info.py",
    "cli/main.py": "cli/test_cdi.py",
    "cli/system.py": "node/test_nodecreate.py",
    "configure/change.py": "configure/test_engines.py",
    "configure/edit.py": "configure/test_engines.py",
    "info/checks.py": "info/test_info.py",
    "info/enginestate.py": "info/test_info.py",
    "info/report.py": "info/test_info.py",
    "info/specs.py": "info/test_info.py",
    "node/devnodes.py": "node/test_facts.py",
    "node/drm.py": "node/test_facts.py",
    "node/gpus.py": "nvcdi/test_naming.py",
    "node/libraries.py": "node/test_facts.py",
    "node/nvmllib.py": "runtime/test_driverfacts.py",
    "nvcdi/cdiversion.py": "nvcdi/test_build.py",
    "nvcdi/claims.py": "test_api.py",
    "nvcdi/devices.py": "nvcdi/test_build.py",
    "noderuntime/__main__.py": "noderuntime/test_assemble.py",  # python -m cdictk.noderuntime
    "deviceplugin/kubelet.py": "deviceplugin/test_registration.py",  # the kubelet's names and paths
    "deviceplugin/proto/deviceplugin_pb2.py": "test_protogen.py",  # generated
    "deviceplugin/proto/deviceplugin_pb2_grpc.py": "test_protogen.py",  # generated
    "dra/kubeletapi/dra_v1_pb2.py": "test_protogen.py",  # generated
    "dra/kubeletapi/dra_v1_pb2_grpc.py": "test_protogen.py",  # generated
    "dra/kubeletapi/dra_v1beta1_pb2.py": "test_protogen.py",  # generated
    "dra/kubeletapi/dra_v1beta1_pb2_grpc.py": "test_protogen.py",  # generated
    "dra/kubeletapi/pluginregistration_pb2.py": "test_protogen.py",  # generated
    "dra/kubeletapi/pluginregistration_pb2_grpc.py": "test_protogen.py",  # generated
}


# The code that ships: the package, and the real-node check that the bundle carries; and the tooling
# that builds the image, whose modules are held to the same rules.
SHIPPED = (REPO / "cdictk", REPO / "realnode")
TOOLING = (REPO / "nodeimage",)


def own_test_file(module: Path) -> Path:
    """Where the test file of ``module`` (a path under cdictk/) sits."""
    return UNIT / module.parent / f"test_{module.name}"


def test_every_module_has_a_test_file_or_a_covering_test() -> None:
    lacking = []
    for path in sorted((REPO / "cdictk").rglob("*.py")):
        module = path.relative_to(REPO / "cdictk")
        if (
            path.name != "__init__.py"
            and not own_test_file(module).exists()
            and str(module) not in COVERED_BY
        ):
            lacking.append(str(module))
    for tree in (REPO / "realnode", *TOOLING):
        for path in sorted(tree.glob("*.py")):
            if (
                path.name not in {"__init__.py", "__main__.py"}
                and not (UNIT / tree.name / f"test_{path.name}").exists()
            ):
                lacking.append(str(path.relative_to(REPO)))
    assert lacking == [], (
        f"write tests/unit/<path>/test_<module>.py, or name its covering test in COVERED_BY: {lacking}"
    )


def test_the_covered_list_is_current() -> None:
    stale = []
    for name, test in COVERED_BY.items():
        module = Path(name)
        if not (REPO / "cdictk" / module).exists():
            stale.append(f"{name}: no such module")
        elif own_test_file(module).exists():
            stale.append(f"{name}: has a test file of its own now")
        if not (UNIT / test).is_file():
            stale.append(f"{name}: no test file {test}")
    assert stale == [], f"update COVERED_BY: {stale}"


def test_every_test_file_names_a_module_where_it_sits() -> None:
    strays = []
    for path in sorted(UNIT.rglob("test_*.py")):
        relative = path.relative_to(UNIT)
        if str(relative) in CONCERNS:
            continue
        folder, module = relative.parent, path.name.removeprefix("test_")
        top = folder.parts[0] if folder.parts else ""
        base = OTHER_TREES[top] / folder.relative_to(top) if top in OTHER_TREES else REPO / "cdictk" / folder
        # deploy/'s tests are named for the folder of files they check (systemd, kubernetes).
        target = base / module.removesuffix(".py") if top == "deploy" else base / module
        if not target.exists():
            strays.append(str(relative))
    assert strays == []


def test_no_two_modules_share_a_name() -> None:
    # Entry points aside, a module's name alone says which one it is, in a traceback or a grep; the
    # modules of cdictk/entrypoints are named for the program they start (cdictk-precreate: precreate.py).
    entry_points = {"__init__.py", "__main__.py", "main.py"}
    seen: dict[str, list[str]] = {}
    for tree in (*SHIPPED, *TOOLING):
        for path in sorted(tree.rglob("*.py")):
            if path.name not in entry_points and path.parent != REPO / "cdictk" / "entrypoints":
                seen.setdefault(path.name, []).append(str(path.relative_to(REPO)))
        for folder in sorted(p for p in tree.rglob("*") if p.is_dir() and p.name != "__pycache__"):
            seen.setdefault(folder.name + "/", []).append(str(folder.relative_to(REPO)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
