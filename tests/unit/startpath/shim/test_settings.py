"""/etc/cdictk/config.toml: defaults, the printed default file, and one clear error for a bad key."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from cdictk.cli.config import DEFAULT_CONFIG
from cdictk.cli.main import main
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.settingsfile import SettingsError, parse_toml
from cdictk.startpath.shim.settings import KEYS, Settings, load_settings
from tests import REPO


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
        '[runtime]\nruntimes = ["/usr/bin/crun"]\nspec-dirs = ["/srv/cdi"]\naccept-untrusted-specs = true\n'
        '[requests]\naccept-env-unprivileged = false\ndefault-kind = "example.com/gpu"\n'
    )
    monkeypatch.setenv("CDICTK_CONFIG", str(path))
    settings = load_settings()
    assert settings.runtimes == ["/usr/bin/crun"] and settings.spec_dirs == ["/srv/cdi"]
    assert settings.accept_untrusted_specs is True and Settings().accept_untrusted_specs is False
    assert settings.accept_env_unprivileged is False and settings.default_kind == "example.com/gpu"


def test_env_requests_are_closed_by_default_and_env_kinds_are_checked(tmp_path: Path) -> None:
    defaults = Settings()
    assert defaults.accept_env_unprivileged is False and defaults.env_kinds == []
    path = tmp_path / "config.toml"
    path.write_text('[requests]\nenv-kinds = ["example.com/gpu"]\n')
    assert load_settings(str(path)).env_kinds == ["example.com/gpu"]
    path.write_text('[requests]\nenv-kinds = ["example.com"]\n')
    with pytest.raises(SettingsError, match=r"requests\.env-kinds: example\.com: invalid kind"):
        load_settings(str(path))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[runtime]\nruntime = []\n", r"runtime\.runtime: unknown key"),
        ("[shim]\n", r"\[shim\]: unknown section"),
        ("[runtime]\nruntimes = []\n", "must name at least one runtime"),
        ('[runtime]\nruntimes = "runc"\n', "runtime.runtimes: must be a list of non-empty strings"),
        ('[requests]\naccept-volume-mounts = "yes"\n', "requests.accept-volume-mounts: must be bool"),
        ("[runtime\n", "Expected"),
        ('[requests]\ndefault-kind = "bad"\n', 'requests.default-kind: invalid kind "bad"'),
    ],
)
def test_bad_files_are_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(SettingsError, match=message) as info:
        load_settings(str(path))
    assert str(info.value).startswith(f"{path}: ") and "\n" not in str(info.value)


def test_a_file_parsed_before_is_not_parsed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import cdictk.startpath.shim.settings as module
    from cdictk.startpath.specs.parsecache import ParseCache

    cache = ParseCache(str(tmp_path / "cache"))
    path = tmp_path / "config.toml"
    path.write_text('[runtime]\nruntimes = ["crun"]\n')
    other = tmp_path / "other.toml"
    other.write_text('[runtime]\nruntimes = ["runc"]\n')
    assert load_settings(str(path), cache).runtimes == ["crun"]
    assert load_settings(str(other), cache).runtimes == ["runc"]
    parsed: list[str] = []

    def counting(text: str, where: str) -> dict[str, object]:
        parsed.append(where)
        return parse_toml(text, where)

    monkeypatch.setattr(module, "parse_toml", counting)
    assert load_settings(str(path), cache).runtimes == ["crun"]  # two files, two entries
    assert load_settings(str(other), cache).runtimes == ["runc"]
    assert parsed == []
    path.write_text('[runtime]\nruntimes = ["xrun"]\n')  # the same size: the text is the key
    assert load_settings(str(path), cache).runtimes == ["xrun"]
    assert parsed == [str(path)]


def test_a_refused_file_is_refused_every_time(tmp_path: Path) -> None:
    from cdictk.startpath.specs.parsecache import ParseCache

    cache = ParseCache(str(tmp_path / "cache"))
    path = tmp_path / "config.toml"
    path.write_text("[runtime]\nruntimes = []\n")
    for _ in range(2):
        with pytest.raises(SettingsError, match="at least one runtime"):
            load_settings(str(path), cache)
    assert not (tmp_path / "cache").exists()


def test_a_directory_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="Is a directory") as info:
        load_settings(str(tmp_path))
    assert str(info.value) == f"{tmp_path}: Is a directory"


@pytest.mark.parametrize(
    "text",
    [
        "[runtime]\nruntimes = " + "[" * 20000 + "]" * 20000 + "\n",
        "a = " + "{b = " * 20000 + "1" + "}" * 20000,
    ],
)
def test_a_file_nested_20000_deep_stops_the_runtime_with_one_line(tmp_path: Path, text: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(SettingsError) as info:
        load_settings(str(path))
    assert isinstance(info.value, CdictkError) and str(info.value) == f"{path}: nested too deeply"
    env = {"PATH": "/usr/bin:/bin", "CDICTK_CONFIG": str(path), "CDICTK_CACHE_DIR": ""}
    shim = [
        sys.executable,
        "-I",
        "-m",
        "cdictk.entrypoints.shim",
        "create",
        "--bundle",
        str(tmp_path),
        "id",
    ]
    result = subprocess.run(shim, capture_output=True, text=True, env=env, check=False, timeout=60)
    assert (result.returncode, result.stderr) == (1, f"cdictk-runtime: error: {path}: nested too deeply\n")


def test_the_default_file_lists_exactly_the_keys_in_their_order() -> None:
    document = tomllib.loads(DEFAULT_CONFIG)
    assert {section: list(table) for section, table in document.items()} == {
        section: list(keys) for section, keys in KEYS.items()
    }


def test_settings_has_one_attribute_per_key() -> None:
    assert sorted(Settings.__slots__) == sorted(
        key.replace("-", "_") for keys in KEYS.values() for key in keys
    )


# A key named in the docs or the code: `[section] key` or `key = value` in Markdown, "section.key" in Python.
NAMED_IN_DOCS = (re.compile(r"`\[(\w+)\] ([a-z][a-z-]*)"), re.compile(r"`()([a-z]+(?:-[a-z]+)+) = "))
NAMED_IN_CODE = re.compile(r"""["'](runtime|node|requests)\.([a-z][a-z-]*)["']""")
NVIDIAS_KEYS = {"accept-nvidia-visible-devices-envvar-when-unprivileged"}  # compatibility.md compares


def test_the_docs_and_the_code_name_only_real_keys() -> None:
    """A key renamed or misspelt in docs/, the README or a message (cdictk info's warnings) fails here."""
    every = {key for keys in KEYS.values() for key in keys}
    named: list[tuple[str, str, str]] = []
    for path in [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]:
        text = path.read_text(encoding="utf-8")
        named += [
            (path.name, found[1], found[2]) for pattern in NAMED_IN_DOCS for found in pattern.finditer(text)
        ]
    for path in sorted((REPO / "cdictk").rglob("*.py")):
        named += [
            (path.name, found[1], found[2])
            for found in NAMED_IN_CODE.finditer(path.read_text(encoding="utf-8"))
        ]
    assert named, "the patterns find the keys the docs name"
    wrong = [
        (where, section, key)
        for where, section, key in named
        if key not in NVIDIAS_KEYS and (key not in KEYS.get(section, {}) if section else key not in every)
    ]
    assert wrong == []
