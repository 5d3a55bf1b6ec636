"""One reader for every settings file: capped, UTF-8, strict TOML (the YAML is the device plugin's
settings' own), and every failure one SettingsError line (a CdictkError), nesting 20,000 deep included."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.settingsfile import MAX_BYTES, SettingsError, parse_toml, read_text

DEEP_TOML = ["a = " + "[" * 20000 + "]" * 20000 + "\n", "a = " + "{b = " * 20000 + "1" + "}" * 20000 + "\n"]


def one_line(error: pytest.ExceptionInfo[SettingsError], path: str) -> str:
    message = str(error.value)
    assert isinstance(error.value, CdictkError) and message.startswith(f"{path}: ") and "\n" not in message
    return message


def test_a_missing_file_is_an_error_unless_it_may_be_missing(tmp_path: Path) -> None:
    path = str(tmp_path / "none.yaml")
    assert read_text(path, missing_ok=True) == ""
    with pytest.raises(SettingsError) as error:
        read_text(path)
    assert one_line(error, path) == f"{path}: No such file or directory"


def test_what_cannot_be_read_as_text_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as error:
        read_text(str(tmp_path))
    assert one_line(error, str(tmp_path)) == f"{tmp_path}: Is a directory"
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (MAX_BYTES + 1))
    with pytest.raises(SettingsError) as error:
        read_text(str(big))
    assert one_line(error, str(big)).endswith(f"larger than {MAX_BYTES} bytes")
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b"a = '\xe9'\n")
    with pytest.raises(SettingsError) as error:
        read_text(str(latin))
    assert one_line(error, str(latin)).endswith("not valid UTF-8 (byte 5)")


def test_a_fifo_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    assert read_text(str(fifo)) == ""  # no writer: an empty file, at once


@pytest.mark.parametrize("text", DEEP_TOML)
def test_toml_nested_20000_deep_is_one_line(text: str) -> None:
    with pytest.raises(SettingsError) as error:
        parse_toml(text, "config.toml")
    assert one_line(error, "config.toml") == "config.toml: nested too deeply"


def test_bad_toml_is_one_line() -> None:
    with pytest.raises(SettingsError) as error:
        parse_toml("[runtime\n", "config.toml")
    assert one_line(error, "config.toml").startswith("config.toml: Expected")
