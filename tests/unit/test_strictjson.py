import os
from pathlib import Path

import pytest

from cdictk import strictjson
from cdictk.errors import CdictkError
from cdictk.ociconfig import MAX_CONFIG_BYTES, dump_config, parse_config, read_config


def test_loads() -> None:
    assert strictjson.loads('{"a": [1, 2.5, "x", null, true]}', "f") == {"a": [1, 2.5, "x", None, True]}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": 1, "a": 2}', 'f: duplicate key "a"'),
        ('{"a": NaN}', "f: invalid JSON: NaN is not valid JSON"),
        ('{"a": Infinity}', "f: invalid JSON: Infinity is not valid JSON"),
        ('{"a": }', "f: invalid JSON: Expecting value (line 1, column 7)"),
        ('{"a": [1, 2, ],\n}', "f: invalid JSON: trailing comma (line 1, column 12)"),
        ("[" * 100000, "f: invalid JSON: nested too deeply"),
        (b"\xff", "f: invalid JSON"),
    ],
)
def test_refused(text: str, message: str) -> None:
    with pytest.raises(CdictkError) as caught:
        strictjson.loads(text, "f")
    assert str(caught.value).startswith(message)


def test_read_capped(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    assert strictjson.read_capped(str(path), 10) == b"x" * 10
    with pytest.raises(CdictkError, match="file is 10 bytes, over the 9-byte limit"):
        strictjson.read_capped(str(path), 9)
    with pytest.raises(CdictkError, match="No such file or directory"):
        strictjson.read_capped(str(tmp_path / "missing"), 10)
    with pytest.raises(CdictkError, match="not a regular file"):
        strictjson.read_capped(str(tmp_path), 10)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(CdictkError, match="not a regular file"):
        strictjson.read_capped(str(tmp_path / "fifo"), 10)


def test_read_capped_stops_at_the_cap_for_files_without_a_size() -> None:
    # /proc files report size 0 but have content: the cap still applies while reading.
    with pytest.raises(CdictkError, match="over the 4-byte limit"):
        strictjson.read_capped("/proc/self/status", 4)


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
