"""tests/unit mirrors cdictk/: a module's tests are where the module is, under the same name."""

from __future__ import annotations

from tests import REPO

UNIT = REPO / "tests" / "unit"
# Trees that are not cdictk's packages but have tests of their own.
OTHER_TREES = {
    "deploy": REPO / "deploy",
    "fakenode": REPO / "tests" / "fakenode",
    "realnode": REPO / "realnode",
}
# Tests of a concern rather than of one module, each named for it.
CONCERNS = {
    "test_import_cost.py",  # what the start path imports
    "test_layers.py",  # the packages' import order
    "test_layout.py",
    "test_packaging.py",  # what a wheel holds
    "test_quickstart_script.py",  # ./quickstart
    "test_readme.py",  # README.md and docs/
    "test_examples.py",  # the programs in examples/
    "cdi/test_reference_corpus.py",  # the CDI reference library's outcomes replayed (tests/cdiref)
    "cli/test_generate_faults.py",  # cdi generate on broken nodes
    "cli/test_generate_layouts.py",  # cdi generate on every driver layout
    "cli/test_generate_watch.py",  # cdi generate --watch
    "cli/test_generate_modes.py",  # cdi generate in the modes beside the GPU host's
    "hooks/test_hardening.py",  # every hook against hostile images
    "info/test_info.py",  # cdictk info as a whole
}


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
    # Entry points aside, a module's name alone says which one it is, in a traceback or a grep.
    entry_points = {"__init__.py", "__main__.py", "main.py"}
    seen: dict[str, list[str]] = {}
    for path in sorted((REPO / "cdictk").rglob("*.py")):
        if path.name not in entry_points:
            seen.setdefault(path.name, []).append(str(path.relative_to(REPO)))
    for folder in sorted(p for p in (REPO / "cdictk").rglob("*") if p.is_dir() and p.name != "__pycache__"):
        seen.setdefault(folder.name + "/", []).append(str(folder.relative_to(REPO)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
