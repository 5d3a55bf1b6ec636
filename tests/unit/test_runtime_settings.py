"""/etc/cdictk/config.toml: defaults, the printed default file, and one clear error for a bad key."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdictk.cli.main import main
from cdictk.runtime.settings import DEFAULT_CONFIG, Settings, SettingsError, load_settings


def fields(settings: Settings) -> dict[str, object]:
    return {name: getattr(settings, name) for name in Settings.__slots__}


def test_a_missing_file_means_the_defaults(tmp_path: Path) -> None:
    assert fields(load_settings(str(tmp_path / "none.toml"))) == fields(Settings())


def test_the_default_file_says_exactly_the_defaults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["config", "default"]) == 0
    printed = capsys.readouterr().out
    assert printed == DEFAULT_CONFIG
    path = tmp_path / "config.toml"
    path.write_text(printed)
    assert fields(load_settings(str(path))) == fields(Settings())


def test_values_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        '[runtime]\nruntimes = ["/usr/bin/crun"]\nspec-dirs = ["/srv/cdi"]\n'
        '[requests]\naccept-env-unprivileged = false\ndefault-kind = "example.com/gpu"\n'
    )
    monkeypatch.setenv("CDICTK_CONFIG", str(path))
    settings = load_settings()
    assert settings.runtimes == ["/usr/bin/crun"] and settings.spec_dirs == ["/srv/cdi"]
    assert settings.accept_env_unprivileged is False and settings.default_kind == "example.com/gpu"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[runtime]\nruntime = []\n", "unknown key runtime.runtime"),
        ("[shim]\n", r"unknown section \[shim\]"),
        ("[runtime]\nruntimes = []\n", "must name at least one runtime"),
        ('[runtime]\nruntimes = "runc"\n', "runtime.runtimes must be a list of non-empty strings"),
        ('[requests]\naccept-volume-mounts = "yes"\n', "requests.accept-volume-mounts must be bool"),
        ("[runtime\n", "Expected"),
    ],
)
def test_bad_files_are_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(SettingsError, match=message) as info:
        load_settings(str(path))
    assert str(info.value).startswith(f"{path}: ") and "\n" not in str(info.value)
