"""PREFIX/.setup.json: what `cdictk system install` did, saved whole after each step and read strictly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdictk.noderuntime.install import InstallError
from cdictk.noderuntime.setuprecord import RECORD, Record, Registered, load, save, sha256


def full() -> Record:
    return Record(
        made=["/etc/systemd", "/etc/systemd/system"],
        files={"/etc/systemd/system/a.service": sha256(b"a")},
        links={"/usr/local/bin/cdictk": "/opt/cdictk/bin/cdictk"},
        units=["a.service"],
        engines=[Registered("docker", "/etc/docker/daemon.json", "signal")],
    )


def test_saved_and_read_back(tmp_path: Path) -> None:
    save(str(tmp_path), full())
    assert load(str(tmp_path)) == full()
    assert (tmp_path / RECORD).stat().st_mode & 0o777 == 0o644
    assert json.loads((tmp_path / RECORD).read_text())["version"] == 1


def test_none_is_an_empty_record_and_an_empty_one_is_no_file(tmp_path: Path) -> None:
    assert load(str(tmp_path)).empty()
    save(str(tmp_path), full())
    save(str(tmp_path), Record())
    assert not (tmp_path / RECORD).exists()
    save(str(tmp_path), Record())  # nothing to remove


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"version": 1, "version": 1}', "duplicate"),
        ("[]", "want an object with version 1"),
        ('{"version": 2}', "want an object with version 1"),
        ('{"version": 1, "made": []}', "keys"),
        (
            '{"version": 1, "made": ["etc"], "files": {}, "links": {}, "units": [], "engines": []}',
            "'etc' is not an absolute",
        ),
        (
            '{"version": 1, "made": [1], "files": {}, "links": {}, "units": [], "engines": []}',
            "1 is not a string",
        ),
        (
            '{"version": 1, "made": [], "files": [], "links": {}, "units": [], "engines": []}',
            "is not an object",
        ),
        (
            '{"version": 1, "made": [], "files": {}, "links": {}, "units": [], "engines": [{}]}',
            "engines: want",
        ),
    ],
)
def test_anything_else_is_one_line(tmp_path: Path, text: str, why: str) -> None:
    (tmp_path / RECORD).write_text(text)
    with pytest.raises(
        InstallError, match=r"\.setup\.json: not a record `cdictk system install` wrote \("
    ) as caught:
        load(str(tmp_path))
    assert why in str(caught.value) and "\n" not in str(caught.value)
