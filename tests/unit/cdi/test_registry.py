import os
from pathlib import Path

from cdictk.cdi.model import Spec
from cdictk.cdi.registry import load_registry


def write_spec(
    directory: Path, filename: str, *names: str, kind: str = "vendor.com/gpu", env: str = "A=1"
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    devices = "".join(f'- name: "{name}"\n  containerEdits: {{env: [{env}]}}\n' for name in names)
    path = directory / filename
    path.write_text(f"cdiVersion: 0.5.0\nkind: {kind}\ndevices:\n{devices}")
    return path


def problems(registry_dirs: list[Path], **kwargs: bool) -> tuple[list[str], list[str]]:
    registry = load_registry([str(d) for d in registry_dirs], **kwargs)
    return sorted(registry.devices), [str(p) for p in registry.problems]


def test_devices_from_every_dir_sorted(tmp_path: Path) -> None:
    write_spec(tmp_path / "etc", "b.yaml", "1", "0")
    write_spec(tmp_path / "run", "a.json", "x", kind="other.com/net")
    names, found = problems([tmp_path / "etc", tmp_path / "run"])
    assert names == ["other.com/net=x", "vendor.com/gpu=0", "vendor.com/gpu=1"]
    assert found == []


def test_later_dir_wins(tmp_path: Path) -> None:
    write_spec(tmp_path / "etc", "nvidia.yaml", "0", "1", env="FROM=etc")
    late = write_spec(tmp_path / "run", "nvidia.yaml", "0", env="FROM=run")
    registry = load_registry([str(tmp_path / "etc"), str(tmp_path / "run")])
    zero = registry.devices["vendor.com/gpu=0"]
    assert zero.spec_file.path == str(late) and zero.device.container_edits.env == ["FROM=run"]
    assert registry.devices["vendor.com/gpu=1"].device.container_edits.env == ["FROM=etc"]


def test_only_json_and_yaml_files_no_recursion(tmp_path: Path) -> None:
    write_spec(tmp_path, "a.yml", "yml")
    write_spec(tmp_path, "b.txt", "txt")
    write_spec(tmp_path / "sub.yaml", "c.yaml", "nested")
    write_spec(tmp_path, "d.yaml", "ok")
    names, found = problems([tmp_path])
    assert names == ["vendor.com/gpu=ok"]
    assert found == []


def test_symlinked_spec_file_is_read(tmp_path: Path) -> None:
    target = write_spec(tmp_path / "elsewhere", "real.yaml", "0")
    (tmp_path / "cdi").mkdir()
    (tmp_path / "cdi" / "link.yaml").symlink_to(target)
    assert problems([tmp_path / "cdi"])[0] == ["vendor.com/gpu=0"]


def test_a_bad_file_only_loses_its_own_devices(tmp_path: Path) -> None:
    write_spec(tmp_path, "a.yaml", "0")
    (tmp_path / "b.yaml").write_text("cdiVersion: 0.5.0\nkind: x.com/y\nxyzzy: 1\n")
    (tmp_path / "c.yaml").write_text(
        "cdiVersion: 0.5.0\nkind: x.com/y\ndevices: [{name: a, containerEdits: {env: [BAD, =x]}}]\n"
    )
    (tmp_path / "d.json").write_text("{")
    write_spec(tmp_path, "e.yaml", "1")
    names, found = problems([tmp_path])
    assert names == ["vendor.com/gpu=0", "vendor.com/gpu=1"]
    assert [line.split(": ")[0:2] for line in found] == [
        [f"{tmp_path}/b.yaml", "xyzzy"],
        [f"{tmp_path}/c.yaml", "devices[0].containerEdits.env[0]"],
        [f"{tmp_path}/c.yaml", "devices[0].containerEdits.env[1]"],
        [f"{tmp_path}/d.json", "invalid JSON"],
    ]


def test_same_dir_conflict_drops_the_device_and_blames_both_files(tmp_path: Path) -> None:
    write_spec(tmp_path, "a.yaml", "0", "1")
    write_spec(tmp_path, "b.yaml", "0")
    names, found = problems([tmp_path])
    assert names == ["vendor.com/gpu=1"]
    assert found == [
        f'{tmp_path}/a.yaml: devices[0]: conflicting device "vendor.com/gpu=0" (also defined in {tmp_path}/b.yaml)',
        f'{tmp_path}/b.yaml: devices[0]: conflicting device "vendor.com/gpu=0" (also defined in {tmp_path}/a.yaml)',
    ]


def test_conflict_under_a_clean_override_keeps_the_override(tmp_path: Path) -> None:
    write_spec(tmp_path / "etc", "a.yaml", "0")
    write_spec(tmp_path / "etc", "b.yaml", "0")
    write_spec(tmp_path / "run", "c.yaml", "0", env="FROM=run")
    registry = load_registry([str(tmp_path / "etc"), str(tmp_path / "run")])
    # The Go library drops the device here; the operator's override in the later dir is unambiguous.
    assert registry.devices["vendor.com/gpu=0"].device.container_edits.env == ["FROM=run"]
    assert len(registry.problems) == 2


def test_conflict_in_the_winning_dir_drops_the_device(tmp_path: Path) -> None:
    write_spec(tmp_path / "etc", "a.yaml", "0")
    write_spec(tmp_path / "run", "b.yaml", "0")
    write_spec(tmp_path / "run", "c.yaml", "0")
    assert problems([tmp_path / "etc", tmp_path / "run"])[0] == []


def test_missing_dirs(tmp_path: Path) -> None:
    assert problems([tmp_path / "none"]) == ([], [])
    assert problems([tmp_path / "none"], require_dirs=True) == (
        [],
        [f"{tmp_path}/none: no such spec directory"],
    )


def test_unreadable_dir_does_not_stop_the_scan(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    write_spec(tmp_path / "run", "a.yaml", "0")
    names, found = problems([tmp_path / "file", tmp_path / "run"])
    assert names == ["vendor.com/gpu=0"]
    assert found == [f"{tmp_path}/file: cannot read spec directory: Not a directory"]


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.yaml")
    assert problems([tmp_path]) == ([], [f"{tmp_path}/pipe.yaml: not a regular file"])


def test_read_registry_reads_each_file_through_the_loader_given(tmp_path: Path) -> None:
    from cdictk.cdi.load import load_spec
    from cdictk.cdi.registry import read_registry

    write_spec(tmp_path / "etc", "a.yaml", "dev1")
    write_spec(tmp_path / "etc", "b.yaml", "dev2")
    seen: list[str] = []

    def counting(path: str) -> Spec:
        seen.append(os.path.basename(path))
        return load_spec(path)

    registry = read_registry([str(tmp_path / "etc")], counting)
    assert seen == ["a.yaml", "b.yaml"]
    assert sorted(registry.devices) == ["vendor.com/gpu=dev1", "vendor.com/gpu=dev2"]
