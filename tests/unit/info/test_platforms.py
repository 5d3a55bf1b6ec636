"""``cdictk info`` on WSL2 and a Jetson: their own checks, not a missing /proc/driver/nvidia."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cdictk.cli.main import main
from tests.conftest import PlatformFactory
from tests.fakenode.platforms import CSV_DIR, WSL_STORE, WSL_VERSION, PlatformNode

pytestmark = pytest.mark.root


@pytest.fixture(autouse=True)
def no_settings_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDICTK_CONFIG", str(tmp_path / "no-cdictk-config.toml"))


def info(node: PlatformNode, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    spec_dir = tmp_path / "cdi"
    assert main(["cdi", "generate", *node.cli_args(), "--output", str(spec_dir / "nvidia.yaml")]) == 0
    capsys.readouterr()
    main(["info", "--json", *node.cli_args(), "--spec-dir", str(spec_dir)])
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def findings(report: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {f["check"]: (f["status"], f["detail"]) for f in report["findings"]}


def test_a_wsl_host(
    make_platform: PlatformFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = make_platform("wsl")
    report = info(node, tmp_path, capsys)
    found = findings(report)
    assert report["platform"] == "WSL2" and report["driver_version"] == WSL_VERSION
    assert found["platform"] == ("ok", "WSL2: no /proc/driver/nvidia here")
    assert found["/dev/dxg"] == ("ok", "present (10:125)")
    assert found["driver store"] == ("ok", WSL_STORE)
    assert found["driver"] == ("ok", f"{WSL_VERSION} (Windows driver)")
    assert found["gpus"][0] == "ok" and "/dev/dxg" in found["gpus"][1]
    assert "modules" not in found and "device nodes" not in found  # a GPU host's checks
    spec = next(check for check in found if check.startswith("spec "))
    assert found[spec][0] == "ok"
    Path(node.root, "dev/dxg").unlink()
    found = findings(info_only(node, capsys))
    assert found["/dev/dxg"] == ("fail", f"{node.root}/dev/dxg is missing: this distribution has no GPU")


def test_a_jetson(make_platform: PlatformFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = make_platform("jetson")
    report = info(node, tmp_path, capsys)
    found = findings(report)
    assert report["platform"] == "Jetson (Tegra)" and report["ok"] is True
    assert found["l4t"][1].startswith("R36 (release), REVISION: 4.3")
    assert found["csv files"] == ("ok", "3 files, 15 entries")
    assert found["tegra nodes"] == ("ok", "5 present; not present: /dev/nvhost-nvdla*")
    assert found["gpus"][0] == "ok" and "device 0" in found["gpus"][1]
    assert "driver" not in found  # no /proc/driver/nvidia to miss
    Path(node.root + CSV_DIR, "drivers.csv").write_text("oops\n")
    found = findings(info_only(node, capsys))
    assert found["csv files"][0] == "fail" and "drivers.csv:1: not 'type, path'" in found["csv files"][1]


def info_only(node: PlatformNode, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["info", "--json", *node.cli_args(), "--spec-dir", "/nonexistent"]) == 1
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]
