"""The prepared claims on disk: written atomically and read back, emptied by a reboot, and a file that
is not a checkpoint of this version an error in one line, never an empty start."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from cdictk.dra.checkpoint import (
    COMPLETED,
    STARTED,
    Checkpoint,
    CheckpointError,
    PreparedClaim,
    PreparedDevice,
    boot_id,
)

UID = "dab5ab50-7c1e-4b6a-9d5e-2f6c0e4a1b23"
OTHER = "0b1c2d3e-0000-4000-8000-000000000000"
BOOT = "5d0c4a8e-2b1f-4c3d-9e8f-7a6b5c4d3e2f"
CLAIMS = {
    UID: PreparedClaim(
        "team",
        "pair",
        COMPLETED,
        (
            PreparedDevice(("gpu",), "node1", "gpu-0", (f"k8s.gpu.nvidia.com/claim={UID}-gpu-0",)),
            PreparedDevice(
                ("small",),
                "node1",
                "gpu-1-mig-1g10gb-19-4",
                (f"k8s.gpu.nvidia.com/claim={UID}-gpu-1-mig-1g10gb-19-4",),
                admin_access=True,
                share_id="7f0c3b1e-1d2a-4e5f-8a9b-0c1d2e3f4a5b",
            ),
        ),
    ),
    OTHER: PreparedClaim("team", "half", STARTED, ()),
}


def set_boot(proc: Path, boot: str) -> None:
    path = proc / "sys/kernel/random/boot_id"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(boot + "\n")


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    set_boot(tmp_path / "proc", BOOT)
    return tmp_path / "proc"


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Path:
    made = tmp_path / "plugins" / "gpu.nvidia.com"
    made.mkdir(parents=True, mode=0o750)
    return made


def test_what_is_saved_is_loaded_by_the_next_process(plugin_dir: Path, proc: Path) -> None:
    first = Checkpoint(str(plugin_dir), proc_root=str(proc))
    assert first.boot_id == BOOT
    assert first.load() == {}  # no file yet
    first.save(CLAIMS)
    path = plugin_dir / "checkpoint.json"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert sorted(os.listdir(plugin_dir)) == ["checkpoint.json"]  # no temp file left
    document = json.loads(path.read_text())
    assert (document["version"], document["bootID"]) == (1, BOOT)
    assert document["checksum"].startswith("sha256:")
    assert Checkpoint(str(plugin_dir), proc_root=str(proc)).load() == CLAIMS


def test_a_reboot_starts_empty(plugin_dir: Path, proc: Path) -> None:
    Checkpoint(str(plugin_dir), proc_root=str(proc)).save(CLAIMS)
    set_boot(proc, "9a8b7c6d-0000-4000-8000-000000000001")
    assert Checkpoint(str(plugin_dir), proc_root=str(proc)).load() == {}


def test_a_field_a_later_version_adds_still_checks(plugin_dir: Path, proc: Path) -> None:
    """The checksum is over the file as read, not over what this version writes (a new field with a
    default must not make an old checkpoint unreadable)."""
    checkpoint = Checkpoint(str(plugin_dir), proc_root=str(proc))
    checkpoint.save(CLAIMS)
    path = plugin_dir / "checkpoint.json"
    document = json.loads(path.read_text())
    document["claims"][UID]["devices"][0]["configState"] = {"sharing": None}
    del document["checksum"]
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
    document["checksum"] = "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    path.write_text(json.dumps(document))
    assert checkpoint.load() == CLAIMS


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda text: text.replace('"gpu-0"', '"gpu-3"'),
            "checksum mismatch: the file was changed or cut short",
        ),
        (lambda text: text[: len(text) // 2], "not JSON: "),
        (
            lambda text: text.replace('"version": 1', '"version": 2'),
            "version 2 is not one this cdictk reads (1)",
        ),
        (lambda text: "[]", "not a checkpoint: not an object"),
        (lambda text: "{}", "version None is not one this cdictk reads (1)"),
    ],
)
def test_a_corrupt_checkpoint_is_one_line(plugin_dir: Path, proc: Path, change: object, message: str) -> None:
    checkpoint = Checkpoint(str(plugin_dir), proc_root=str(proc))
    checkpoint.save(CLAIMS)
    path = plugin_dir / "checkpoint.json"
    path.write_text(change(path.read_text()))  # type: ignore[operator]
    with pytest.raises(CheckpointError) as error:
        checkpoint.load()
    text = str(error.value)
    assert text.startswith(f"{path}: {message}")
    assert "\n" not in text


def test_a_link_in_place_of_the_checkpoint_is_not_followed(
    plugin_dir: Path, proc: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("{}")
    (plugin_dir / "checkpoint.json").symlink_to(elsewhere)
    with pytest.raises(CheckpointError, match="cannot open: Too many levels of symbolic links"):
        Checkpoint(str(plugin_dir), proc_root=str(proc)).load()


def test_a_directory_others_may_write_gets_no_checkpoint(plugin_dir: Path, proc: Path) -> None:
    plugin_dir.chmod(0o777)
    with pytest.raises(CheckpointError, match=r"not written: .*someone other than root could change it"):
        Checkpoint(str(plugin_dir), proc_root=str(proc)).save(CLAIMS)


def test_no_boot_id_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(
        CheckpointError, match=r"boot_id: cannot read the boot id: No such file or directory$"
    ):
        boot_id(str(tmp_path))
    set_boot(tmp_path, "")
    with pytest.raises(CheckpointError, match="the boot id is empty"):
        boot_id(str(tmp_path))
