"""config.json: strict reading with a size cap, compact or indented writing, atomic replace."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.ociconfig import (
    MAX_CONFIG_BYTES,
    dump_config,
    parse_config,
    read_config,
    write_config,
)


def test_dump_is_indented_for_people_or_compact_for_runtimes() -> None:
    config = {"ociVersion": "1.0.2", "process": {"env": ["A=é"]}}
    assert dump_config(config) == (json.dumps(config, indent=2, ensure_ascii=False) + "\n").encode()
    assert dump_config(config, compact=True) == b'{"ociVersion":"1.0.2","process":{"env":["A=\\u00e9"]}}'


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"[]", "an OCI config must be a JSON object"),
        (b'{"a": 1, "a": 2}', 'duplicate key "a"'),
        (b"{", "invalid JSON"),
        (b" " * (MAX_CONFIG_BYTES + 1), "byte limit"),
    ],
)
def test_bad_configs_are_one_line(data: bytes, reason: str) -> None:
    with pytest.raises(CdictkError, match=reason) as info:
        parse_config(data, "config.json")
    assert str(info.value).startswith("config.json: ") and "\n" not in str(info.value)


def test_write_replaces_atomically_keeping_the_mode(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{}")
    path.chmod(0o640)
    write_config(str(path), {"a": [1]}, compact=True)
    assert read_config(str(path)) == {"a": [1]}
    assert os.stat(path).st_mode & 0o777 == 0o640
    assert os.listdir(tmp_path) == ["config.json"]


def test_a_symlinked_config_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real.json").write_text("{}")
    (tmp_path / "config.json").symlink_to(tmp_path / "real.json")
    with pytest.raises(CdictkError, match="symlink"):
        write_config(str(tmp_path / "config.json"), {})
    assert (tmp_path / "real.json").read_text() == "{}"


def test_oci_config(tmp_path: Path) -> None:
    assert parse_config(b'{"ociVersion": "1.0.2"}', "c") == {"ociVersion": "1.0.2"}
    with pytest.raises(CdictkError, match="c: an OCI config must be a JSON object"):
        parse_config(b"[]", "c")
    with pytest.raises(CdictkError, match="over the"):
        parse_config(b" " * (MAX_CONFIG_BYTES + 1), "c")
    path = tmp_path / "config.json"
    path.write_bytes(dump_config({"b": 1, "a": "é"}))
    assert path.read_text(encoding="utf-8") == '{\n  "b": 1,\n  "a": "é"\n}\n'
    assert read_config(str(path)) == {"b": 1, "a": "é"}
