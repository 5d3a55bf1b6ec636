"""PyYAML without libyaml: parse and dump stop with one line, the same way, instead of falling back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from cdictk.cdi import dump
from cdictk.cdi.dump import dump_yaml
from cdictk.cdi.model import Spec
from cdictk.cdi.parse import parse_document
from cdictk.cli.main import main
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.strictyaml import more_documents


@pytest.fixture
def no_libyaml(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delattr(yaml, "CSafeLoader")
    monkeypatch.delattr(yaml, "CSafeDumper")
    dump._dumper.cache_clear()
    yield
    dump._dumper.cache_clear()


@pytest.mark.usefixtures("no_libyaml")
def test_parsing_yaml_says_libyaml_is_missing() -> None:
    with pytest.raises(CdictkError, match=r"no libyaml C extension \(yaml\.CSafeLoader\)"):
        parse_document(b"cdiVersion: 0.3.0\n", "spec.yaml")
    with pytest.raises(CdictkError, match="CSafeLoader"):
        more_documents("a: 1\n---\nb: 2\n")


@pytest.mark.usefixtures("no_libyaml")
def test_json_needs_no_libyaml() -> None:
    assert parse_document(b'{"a": 1}', "spec.json") == {"a": 1}


@pytest.mark.usefixtures("no_libyaml")
def test_dumping_yaml_says_libyaml_is_missing() -> None:
    spec = Spec(cdi_version="0.3.0", kind="example.com/gpu", devices=[])
    with pytest.raises(CdictkError, match=r"no libyaml C extension \(yaml\.CSafeDumper\)"):
        dump_yaml(spec)


@pytest.mark.usefixtures("no_libyaml")
def test_the_cli_prints_one_line_and_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("cdiVersion: 0.3.0\nkind: example.com/gpu\ndevices: []\n")
    assert main(["cdi", "validate", str(spec)]) != 0
    err = capsys.readouterr().err
    assert "no libyaml C extension" in err
    assert "Traceback" not in err
