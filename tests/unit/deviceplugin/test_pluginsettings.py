"""The device plugin's settings file: NVIDIA's shape, every key checked, envvar refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cdictk.deviceplugin.pluginsettings import Replicas, from_data, list_strategies, load, parse_yaml
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.settingsfile import SettingsError


def test_nvidia_shaped_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "version: v1\nflags:\n  migStrategy: mixed\n  plugin:\n    deviceListStrategy: [cdi-cri]\n"
        "sharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
        "      - name: nvidia.com/gpu\n        replicas: 4\n"
        "health:\n  xidRecoverySeconds: never\n"
    )
    settings = load(str(path))
    assert settings.mig_strategy == "mixed" and settings.list_strategies == ("cdi-cri",)
    assert settings.replicas == (Replicas("nvidia.com/gpu", 4),)
    assert settings.shared_name(settings.replicas[0]) == "nvidia.com/gpu.shared"
    assert settings.health.xid_recovery is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"flags": {"migStrategy": "some"}}, "flags.migStrategy: must be one of none, single, mixed"),
        ({"flags": {"plugin": {"deviceListStrategy": "envvar"}}}, "envvar is refused"),
        ({"flags": {"plugin": {"deviceIDStrategy": "index"}}}, "only uuid"),
        ({"flags": {"plugin": {"passDeviceSpecs": True}}}, "passDeviceSpecs: not supported"),
        (
            {"flags": {"plugin": {"cdiAnnotationPrefix": "cdi"}}},
            "cdiAnnotationPrefix: must be a prefix ending in /",
        ),
        ({"flags": {"gfd": {}}}, "flags.gfd: unknown key"),
        (
            {"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 1}]}}},
            "from 2 to 1024",
        ),
        ({"sharing": {"mps": {}}}, "time-slicing only"),
        ({"cdi": {"kind": "bogus"}}, 'cdi.kind: invalid kind "bogus": want vendor/class'),
        ({"cdi": {"kind": "nvidia.com/g pu"}}, "cdi.kind: invalid class"),
        ({"cdi": {"kind": 3}}, "cdi.kind: 3 is not a string"),
        ({"cdi": {"specDirs": ["etc/cdi"]}}, "cdi.specDirs: must be an absolute path, not 'etc/cdi'"),
        (
            {
                "sharing": {
                    "timeSlicing": {
                        "resources": [
                            {"name": "nvidia.com/gpu", "replicas": 2, "rename": "example.com/gpu"},
                            {"name": "nvidia.com/mig-1g.10gb", "replicas": 2, "rename": "example.com/gpu"},
                        ]
                    }
                }
            },
            "resources[1]: nvidia.com/mig-1g.10gb's replicas named example.com/gpu, as nvidia.com/gpu's are",
        ),
        (
            {
                "sharing": {
                    "timeSlicing": {
                        "resources": [
                            {"name": "nvidia.com/gpu", "replicas": 2, "rename": "nvidia.com/mig-1g.10gb"},
                            {"name": "nvidia.com/mig-1g.10gb", "replicas": 2},
                        ]
                    }
                }
            },
            "resources[0]: nvidia.com/gpu's replicas named nvidia.com/mig-1g.10gb, a resource of its own",
        ),
        ({"version": "v2"}, "must be v1"),
    ],
)
def test_bad_settings_are_one_line_errors(data: object, message: str) -> None:
    with pytest.raises(SettingsError) as raised:
        from_data(data, "config.yaml")
    assert message in str(raised.value) and "\n" not in str(raised.value)
    assert str(raised.value).startswith("config.yaml: ")


def test_list_strategies_from_a_flag() -> None:
    assert list_strategies("cdi-cri, volume-mounts,cdi-cri") == ("cdi-cri", "volume-mounts")
    with pytest.raises(SettingsError, match="unknown strategy 'x'"):
        list_strategies("x")
    with pytest.raises(SettingsError) as raised:
        list_strategies("x", "--device-list-strategy")
    assert str(raised.value).startswith("--device-list-strategy: unknown strategy 'x'")


def test_a_file_that_cannot_be_read_or_parsed_is_one_line_with_its_cause_chained(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="No such file or directory") as missing:
        load(str(tmp_path / "none.yaml"))
    assert isinstance(missing.value.__cause__, FileNotFoundError)
    bad = tmp_path / "bad.yaml"
    bad.write_text("flags: [\n")
    with pytest.raises(
        SettingsError, match=r"bad\.yaml: invalid YAML: .* \(line \d+, column \d+\)$"
    ) as unparsed:
        load(str(bad))
    assert isinstance(unparsed.value.__cause__, yaml.YAMLError)


@pytest.mark.parametrize(
    ("text", "key", "line"),
    [
        ("version: v1\nversion: v1\n", "version", "line 2, column 1"),
        (
            "flags:\n  migStrategy: none\n  plugin: {}\n  migStrategy: mixed\n",
            "flags.migStrategy",
            "line 4, column 3",
        ),
    ],
)
def test_a_key_given_twice_is_refused_not_the_last_one_taken(
    tmp_path: Path, text: str, key: str, line: str
) -> None:
    twice = tmp_path / "twice.yaml"
    twice.write_text(text)
    with pytest.raises(SettingsError) as raised:
        load(str(twice))
    assert str(raised.value) == f"{twice}: {key}: duplicate key ({line})"


@pytest.mark.parametrize(
    "text",
    [
        "flags: " + "[" * 20000 + "]" * 20000 + "\n",
        "".join(f"{' ' * depth}flags:\n" for depth in range(200)),
    ],
)
def test_a_file_nested_20000_deep_is_one_line(tmp_path: Path, text: str) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text(text)
    with pytest.raises(SettingsError) as raised:
        load(str(deep))
    assert str(raised.value).startswith(f"{deep}: ") and "nest" in str(raised.value)
    assert "\n" not in str(raised.value)


DEEP_YAML = [
    "a: " + "[" * 20000 + "]" * 20000 + "\n",
    "a: " + "{b: " * 20000 + "c" + "}" * 20000 + "\n",
    "".join(f"{' ' * depth}b:\n" for depth in range(3000)),
]


def one_line(error: pytest.ExceptionInfo[SettingsError], path: str) -> str:
    message = str(error.value)
    assert isinstance(error.value, CdictkError) and message.startswith(f"{path}: ") and "\n" not in message
    return message


@pytest.mark.parametrize("text", DEEP_YAML)
def test_yaml_nested_20000_deep_is_one_line(text: str) -> None:
    with pytest.raises(SettingsError) as error:
        parse_yaml(text, "settings.yaml")
    assert "nest" in one_line(error, "settings.yaml")


def test_the_yaml_is_strict() -> None:
    assert parse_yaml("a: [1, yes]\n", "s.yaml") == {"a": [1, True]}
    assert parse_yaml("", "s.yaml") is None
    with pytest.raises(SettingsError) as error:
        parse_yaml("a: 1\nb: {c: 1, c: 2}\n", "s.yaml")
    assert one_line(error, "s.yaml") == "s.yaml: b.c: duplicate key (line 2, column 11)"
    with pytest.raises(SettingsError, match="YAML anchor &x is not allowed"):
        parse_yaml("a: &x 1\n", "s.yaml")
