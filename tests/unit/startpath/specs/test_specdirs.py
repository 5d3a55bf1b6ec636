"""Which files of a spec dir are read: specs only, and only the ones root alone could have written.

The attack: a spec file in a spec dir, or a symlink there to a file of an unprivileged
user, was loaded, and its createRuntime hook (a program of that user's) ran as root.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cdictk.cdi.fusemounts import FuseMounts
from cdictk.cdi.registry import load_registry
from cdictk.cdi.validate import validate_dirs
from cdictk.entrypoints.slowpath import scan_specs
from cdictk.startpath.helpers.errors import Problem
from cdictk.startpath.specs.index import SpecIndex
from cdictk.startpath.specs.specdirs import spec_paths, untrusted
from tests.rootmarker import root_only

pytestmark = pytest.mark.root

OTHER = 12345  # another user: a uid nobody on the machine has

SPEC = """\
cdiVersion: 0.5.0
kind: example.com/gpu
devices:
- name: "{name}"
  containerEdits:
    hooks: [{{hookName: createRuntime, path: /home/user/evil}}]
"""


@pytest.fixture
@root_only
def spec_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "cdi"
    directory.mkdir(mode=0o755)
    (directory / "good.yaml").write_text(SPEC.format(name="good"))
    return directory


def plant(spec_dir: Path, name: str = "planted", *, mode: int = 0o644, owner: int = OTHER) -> Path:
    path = spec_dir / f"{name}.yaml"
    path.write_text(SPEC.format(name=name))
    path.chmod(mode)
    os.chown(path, owner, owner)
    return path


def test_only_spec_names_are_listed(spec_dir: Path) -> None:
    (spec_dir / "notes.txt").write_text("x")
    (spec_dir / "sub.yaml").mkdir()
    assert spec_paths(str(spec_dir), [], mounts=FuseMounts()) == [str(spec_dir / "good.yaml")]


def test_a_file_of_another_user_is_skipped_with_why(spec_dir: Path) -> None:
    planted = plant(spec_dir)
    problems: list[Problem] = []
    assert spec_paths(str(spec_dir), problems, mounts=FuseMounts()) == [str(spec_dir / "good.yaml")]
    assert [str(problem) for problem in problems] == [
        f"{planted}: not trusted, skipped: {planted}: owned by uid {OTHER}, not root"
    ]
    assert untrusted(problems[0])
    assert spec_paths(str(spec_dir), [], trusted_only=False, mounts=FuseMounts()) == [
        str(spec_dir / "good.yaml"),
        str(planted),
    ]


def test_a_root_file_others_can_write_is_skipped(spec_dir: Path) -> None:
    planted = plant(spec_dir, mode=0o666, owner=0)
    assert planted.stat().st_uid == 0
    problems: list[Problem] = []
    assert spec_paths(str(spec_dir), problems, mounts=FuseMounts()) == [str(spec_dir / "good.yaml")]
    assert "writable by group or others (mode 0666)" in problems[0].reason


def test_a_link_to_a_file_of_another_user_is_skipped(spec_dir: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, OTHER, OTHER)
    target = plant(home, mode=0o666)
    (spec_dir / "link.yaml").symlink_to(target)
    problems: list[Problem] = []
    assert spec_paths(str(spec_dir), problems, mounts=FuseMounts()) == [str(spec_dir / "good.yaml")]
    assert problems[0].file == str(spec_dir / "link.yaml") and f"{home}: owned by uid" in problems[0].reason


def test_a_directory_others_can_write_is_skipped_whole(spec_dir: Path) -> None:
    spec_dir.chmod(0o777)
    problems: list[Problem] = []
    assert spec_paths(str(spec_dir), problems, mounts=FuseMounts()) == []
    assert [str(problem) for problem in problems] == [
        f"{spec_dir}: not trusted, skipped: {spec_dir}: writable by group or others (mode 0777)"
    ]


def test_the_registry_and_the_index_skip_it(spec_dir: Path) -> None:
    plant(spec_dir)
    registry = load_registry([str(spec_dir)])
    assert sorted(registry.devices) == ["example.com/gpu=good"]
    assert sorted(SpecIndex.load([str(spec_dir)], scan_specs).devices) == ["example.com/gpu=good"]
    assert len(SpecIndex.load([str(spec_dir)], scan_specs).untrusted()) == 1
    everything = SpecIndex.load([str(spec_dir)], scan_specs, trusted_only=False)
    assert sorted(everything.devices) == ["example.com/gpu=good", "example.com/gpu=planted"]
    assert everything.untrusted() == []


def test_a_chmod_is_seen_through_the_stored_index(spec_dir: Path, tmp_path: Path) -> None:
    """The stored index is keyed on the files' text: a chmod alone must still change what is read."""
    from cdictk.startpath.specs.parsecache import ParseCache

    store = ParseCache(str(tmp_path / "store"))
    planted = plant(spec_dir, owner=0)
    assert "example.com/gpu=planted" in SpecIndex.load([str(spec_dir)], scan_specs, store).devices
    planted.chmod(0o666)
    assert list(SpecIndex.load([str(spec_dir)], scan_specs, store).devices) == ["example.com/gpu=good"]


# A FUSE mount reports whatever owners and contents its daemon chooses.


def fuse_over(monkeypatch: pytest.MonkeyPatch, path: Path, owner: str) -> None:
    """The mount table as if ``path``'s file system were a FUSE mount whose daemon runs as ``owner``."""
    from cdictk.cdi import fusemounts

    device = os.stat(path).st_dev
    monkeypatch.setattr(fusemounts, "fuse_mounts", lambda: {device: ("fuse.sshfs", owner)})


def test_a_spec_dir_on_another_users_fuse_mount_is_skipped(
    spec_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fuse_over(monkeypatch, spec_dir, "1000")
    problems: list[Problem] = []
    assert spec_paths(str(spec_dir), problems, mounts=FuseMounts()) == []
    assert [(p.file, p.reason) for p in problems] == [
        (
            str(spec_dir),
            f"not trusted, skipped: {spec_dir}: on a fuse.sshfs file system mounted by uid 1000: its daemon "
            "reports the owners and the contents",
        )
    ]
    assert sorted(load_registry([str(spec_dir)]).devices) == []
    assert validate_dirs([str(spec_dir)], require_dirs=True) == ([], problems)  # each caller that parses
    # The stored index's snapshot alone looks at no mount table: it keys on the devices instead (below).
    assert spec_paths(str(spec_dir), [], mounts=None) == [str(spec_dir / "good.yaml")]
    fuse_over(monkeypatch, spec_dir, "0")  # root's own daemon
    assert spec_paths(str(spec_dir), [], mounts=FuseMounts()) == [str(spec_dir / "good.yaml")]


def test_a_mount_table_that_cannot_be_read_skips_the_specs(
    spec_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fails closed: whether a FUSE daemon serves the spec cannot be told, so it is not read. Before:
    an unreadable or unparsable mount table was taken for one without FUSE mounts, and every spec
    passed (a user's FUSE mount plus a line the parser refuses was enough)."""
    from cdictk.startpath.helpers import mountinfo

    def unparsable(fd: int) -> list[mountinfo.Mount]:
        raise ValueError("mountinfo: unexpected line 'x'")

    monkeypatch.setattr(mountinfo, "read", unparsable)
    problems: list[Problem] = []
    assert spec_paths(str(spec_dir), problems, mounts=FuseMounts()) == []
    assert [(p.file, p.reason) for p in problems] == [
        (
            str(spec_dir),
            f"not trusted, skipped: {spec_dir}: cannot tell whether a FUSE daemon serves it: "
            "mountinfo: unexpected line 'x'",
        )
    ]
    monkeypatch.undo()
    assert FuseMounts().problem(str(spec_dir / "gone.yaml")) == (
        f"{spec_dir}/gone.yaml: No such file or directory: cannot tell which file system it is on"
    )


def test_the_stored_index_is_keyed_on_the_devices(
    spec_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shim's warm start reads no mount table: a mount made over a spec dir since the index was
    built changes the directory's device, so the start misses and the check runs."""
    from cdictk.startpath.specs import index
    from cdictk.startpath.specs.parsecache import ParseCache

    store = ParseCache(str(tmp_path / "store"))
    assert list(SpecIndex.load([str(spec_dir)], scan_specs, store).devices) == ["example.com/gpu=good"]
    fuse_over(monkeypatch, spec_dir, "1000")
    assert list(SpecIndex.load([str(spec_dir)], scan_specs, store).devices) == [
        "example.com/gpu=good"
    ]  # same device: kept
    monkeypatch.setattr(index, "_device", lambda directory: -1)  # what a mount over it would do
    assert list(SpecIndex.load([str(spec_dir)], scan_specs, store).devices) == []
