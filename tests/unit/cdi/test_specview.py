"""The one view of the spec dirs: the same answers however it is held (kept current, scanned once,
stored and read back), a device as a copy of the model, and injection all or nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cdictk.cdi.model import Device
from cdictk.cdi.registry import load_registry
from cdictk.cdi.specview import SpecDirs
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.specs.parsecache import ParseCache
from tests.unit.cdi.test_registry import write_spec
from tests.unit.startpath.specs.test_index import SPEC, dirs, plain


@pytest.fixture
def spec_dirs(tmp_path: Path) -> list[str]:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "a.yaml").write_text(SPEC)
    write_spec(tmp_path / "run", "b.yaml", "x", "y", kind="other.com/net", env="NET=1")
    return dirs(tmp_path)


def test_a_spec_made_in_memory_is_held_above_the_dirs(tmp_path: Path) -> None:
    from cdictk.cdi.model import ContainerEdits, Device, DeviceNode, Spec

    write_spec(tmp_path, "a.yaml", "0", kind="nvidia.com/other")
    specs = SpecDirs.load([str(tmp_path)])
    assert not specs.has_kind("nvidia.com/gpu")
    spec = Spec(
        kind="nvidia.com/gpu",
        devices=[
            Device(name="0", container_edits=ContainerEdits(device_nodes=[DeviceNode(path="/dev/nvidia0")]))
        ],
    )
    both = specs.with_spec(spec, "<memory>")
    assert both.has_kind("nvidia.com/gpu") and not both.has_kind("nvidia.com")
    assert not specs.has_kind("nvidia.com/gpu")  # a new view; the one from the dirs is as it was
    assert [source.file for source in both.resolve(["nvidia.com/gpu=0"])] == ["<memory>", "<memory>"]
    assert both.spec_file("nvidia.com/gpu=0") == "<memory>"


@pytest.mark.root
def test_inject_refuses_every_device_when_a_host_path_is_a_users(tmp_path: Path) -> None:
    """``cdictk cdi inject`` and the library's inject: all or nothing, one line, when a host path is a user's."""
    os.chmod(tmp_path, 0o755)
    shared = tmp_path / "shared"
    shared.mkdir()
    (tmp_path / "cdi").mkdir()
    (tmp_path / "cdi" / "x.json").write_text(
        json.dumps(
            {
                "cdiVersion": "0.5.0",
                "kind": "example.com/x",
                "devices": [
                    {"name": "a", "containerEdits": {"env": ["A=1"]}},
                    {
                        "name": "b",
                        "containerEdits": {"mounts": [{"hostPath": str(shared), "containerPath": "/s"}]},
                    },
                ],
            }
        )
    )
    specs = SpecDirs.load([str(tmp_path / "cdi")])
    config: dict[str, object] = {}
    specs.apply_to(config, ["example.com/x=a", "example.com/x=b"], "config.json")
    assert config["mounts"]
    os.chown(shared, 12345, 12345)
    config = {}
    with pytest.raises(CdictkError, match=r"devices\[1\]\.containerEdits\.mounts\[0\]: .*owned by uid 12345"):
        specs.apply_to(config, ["example.com/x=a", "example.com/x=b"], "config.json")
    assert config == {}


# --- one view, however it is held -------------------------------------------------------------------


def views(dirs: list[str], store: str) -> dict[str, SpecDirs]:
    """Every way cdictk holds the spec dirs: kept current (the library), scanned once (the commands),
    stored and read back (the runtime shim)."""
    built = SpecDirs.load(dirs, ParseCache(store))
    return {
        "watched": SpecDirs(dirs),
        "refreshed by hand": SpecDirs(dirs, auto_refresh=False),
        "scanned once": SpecDirs.load(dirs),
        "stored": built,
        "read back": SpecDirs.load(dirs, ParseCache(store)),
    }


Answers = tuple[list[str], list[str | None], list[Device | None], list[str], list[tuple[object, str, str]]]


def answers(view: SpecDirs) -> Answers:
    names = view.devices()
    return (
        names,
        [view.spec_file(name) for name in names],
        [view.device(name) for name in names],
        [str(problem) for problem in view.errors()],
        plain(view.resolve(names)),
    )


def test_every_spelling_of_a_spec_dir_names_the_same_files(tmp_path: Path) -> None:
    """``/etc/cdi/`` and ``/etc/cdi`` are one dir: its files and problems are named one way by every
    view and by the registry. (The library's view named ``etc/x.yaml`` where ``cdictk cdi list``, the
    shim and ``cdictk cdi validate`` named ``etc//x.yaml``.)"""
    from cdictk.cdi.validate import validate_dirs

    write_spec(tmp_path / "etc", "a.yaml", "0", "1")
    write_spec(tmp_path / "etc", "b.yaml", "1")  # a conflict: both files get a problem
    write_spec(tmp_path / "run", "c.yaml", "0")  # the later dir wins
    plain_dirs = [str(tmp_path / "etc"), str(tmp_path / "run")]
    spelled = [f"{tmp_path}/etc//", f"{tmp_path}/./run/."]
    expected = answers(SpecDirs.load(plain_dirs))
    assert expected[0] == ["vendor.com/gpu=0"] and expected[1] == [str(tmp_path / "run" / "c.yaml")]
    assert {problem.split(":")[0] for problem in expected[3]} == {
        str(tmp_path / "etc" / "a.yaml"),
        str(tmp_path / "etc" / "b.yaml"),
    }
    for label, view in views(spelled, str(tmp_path / "cache")).items():
        assert view.dirs == tuple(plain_dirs), label
        assert answers(view) == expected, label
    registry = load_registry(spelled)
    assert [str(problem) for problem in registry.problems] == expected[3]
    assert registry.devices["vendor.com/gpu=0"].spec_file.path == str(tmp_path / "run" / "c.yaml")
    reports, between = validate_dirs(spelled, require_dirs=True)
    files = ("etc/a.yaml", "etc/b.yaml", "run/c.yaml")
    assert [report.file for report in reports] == [str(tmp_path / file) for file in files]
    assert [str(problem) for problem in between] == expected[3]


def test_every_view_gives_the_same_answers(tmp_path: Path) -> None:
    """Priorities, conflicts, a file that does not load and a device's annotations, the same whether
    the view was scanned, kept current or read back from the stored index (which kept no annotations
    where the library's view gave them)."""
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "a.yaml").write_text(SPEC)
    (tmp_path / "etc" / "n.yaml").write_text(
        "cdiVersion: 0.6.0\nkind: vendor.com/gpu\ndevices:\n"
        "- {name: noted, annotations: {why: kept}, containerEdits: {env: [N=1]}}\n"
    )
    write_spec(tmp_path / "run", "b.yaml", "1", env="LATER=1")  # over etc's "1"
    write_spec(tmp_path / "run", "c.yaml", "x", kind="other.com/net")
    write_spec(tmp_path / "run", "d.yaml", "x", kind="other.com/net")  # x: a conflict, dropped
    (tmp_path / "run" / "e.yaml").write_text("cdiVersion: 0.6.0\nkind: bad\n")
    every = views(dirs(tmp_path), str(tmp_path / "cache"))
    expected = answers(every["scanned once"])
    assert expected[0] == ["vendor.com/gpu=0", "vendor.com/gpu=1", "vendor.com/gpu=noted"]
    assert sorted({problem.split(":")[0].rsplit("/", 1)[1] for problem in expected[3]}) == [
        "c.yaml",
        "d.yaml",
        "e.yaml",
    ]
    registry = load_registry(dirs(tmp_path))
    assert expected[2] == [registry.devices[name].device for name in expected[0]]  # the model's own
    for label, view in every.items():
        assert answers(view) == expected, label
        noted = view.device("vendor.com/gpu=noted")
        assert noted is not None and noted.annotations == {"why": "kept"}, label


def test_a_required_dir_that_is_missing_is_a_problem_in_every_view(tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere")
    for view in (SpecDirs([missing], require_dirs=True), SpecDirs.load([missing], require_dirs=True)):
        assert [str(problem) for problem in view.errors()] == [f"{missing}: no such spec directory"]
    assert SpecDirs([missing]).errors() == SpecDirs.load([missing]).errors() == []


def test_a_device_is_a_copy(spec_dirs: list[str], tmp_path: Path) -> None:
    specs = SpecDirs.load(spec_dirs, ParseCache(str(tmp_path / "cache")))
    device = specs.device("vendor.com/gpu=1")
    assert device is not None and device.name == "1" and device.container_edits.env == ["ONE=1"]
    device.container_edits.env.append("CHANGED=1")
    assert specs.inject({}, ["vendor.com/gpu=1"])["process"]["env"] == ["COMMON=1", "ONE=1"]
    assert specs.device("vendor.com/gpu=9") is None and specs.spec_file("vendor.com/gpu=9") is None
