import json
from pathlib import Path

import pytest

from cdictk.cli.main import main
from cdictk.configure.change import RuntimeChange
from cdictk.configure.docker import MAX_DAEMON_JSON_BYTES, configure_docker
from cdictk.startpath.helpers.errors import CdictkError

FILE = "/etc/docker/daemon.json"
RUNTIME_ONLY = """\
{
    "runtimes": {
        "cdictk": {
            "path": "/usr/local/bin/cdictk-runtime"
        }
    }
}
"""
ALL = RuntimeChange(set_as_default=True, enable_cdi=True, cdi_spec_dirs=("/etc/cdi", "/var/run/cdi"))


def configure(text: str | None, change: RuntimeChange | None = None) -> str | None:
    return configure_docker(text, FILE, change or RuntimeChange())


@pytest.mark.parametrize("text", [None, "", " \n"])
def test_a_missing_or_blank_file_gets_the_runtime_with_four_spaces_and_a_newline(text: str | None) -> None:
    assert configure(text) == RUNTIME_ONLY


def test_two_space_file_keeps_its_keys_order_and_indent_and_new_keys_go_last() -> None:
    before = """\
{
  "storage-driver": "overlay2",
  "runtimes": {
    "nvidia": {
      "path": "nvidia-container-runtime",
      "runtimeArgs": []
    }
  },
  "log-opts": {"max-size": "10m"}
}
"""
    assert (
        configure(before, ALL)
        == """\
{
  "storage-driver": "overlay2",
  "runtimes": {
    "nvidia": {
      "path": "nvidia-container-runtime",
      "runtimeArgs": []
    },
    "cdictk": {
      "path": "/usr/local/bin/cdictk-runtime"
    }
  },
  "log-opts": {
    "max-size": "10m"
  },
  "default-runtime": "cdictk",
  "features": {
    "cdi": true
  },
  "cdi-spec-dirs": [
    "/etc/cdi",
    "/var/run/cdi"
  ]
}
"""
    )


def test_tab_indent_and_crlf_line_ends_are_kept() -> None:
    before = '{\r\n\t"debug": true\r\n}\r\n'
    after = configure(before)
    assert after == (
        '{\r\n\t"debug": true,\r\n\t"runtimes": {\r\n\t\t"cdictk": {\r\n'
        '\t\t\t"path": "/usr/local/bin/cdictk-runtime"\r\n\t\t}\r\n\t}\r\n}\r\n'
    )


def test_a_file_without_a_trailing_newline_stays_without_one() -> None:
    after = configure('{"debug": true}')
    assert after == RUNTIME_ONLY.replace("{\n", '{\n    "debug": true,\n', 1).removesuffix("\n")


def test_cdi_is_merged_into_existing_features() -> None:
    before = '{\n    "features": {\n        "buildkit": true,\n        "cdi": false\n    }\n}\n'
    after = configure(before, RuntimeChange(enable_cdi=True))
    assert after == (
        '{\n    "features": {\n        "buildkit": true,\n        "cdi": true\n    },\n'
        + RUNTIME_ONLY.removeprefix("{\n")
    )


def test_an_existing_runtime_keeps_its_runtime_args_and_gets_no_args_key() -> None:
    before = '{\n  "runtimes": {\n    "cdictk": {\n      "path": "/old/path",\n      "runtimeArgs": ["--debug"]\n    }\n  }\n}\n'
    assert configure(before) == (
        '{\n  "runtimes": {\n    "cdictk": {\n      "path": "/usr/local/bin/cdictk-runtime",\n'
        '      "runtimeArgs": [\n        "--debug"\n      ]\n    }\n  }\n}\n'
    )


def test_big_integers_stay_exact_and_non_ascii_stays_as_is() -> None:
    before = '{\n  "max-size": 9007199254740993,\n  "label": "nœud-Größe-東京"\n}\n'
    after = configure(before)
    assert after is not None
    assert '"max-size": 9007199254740993,' in after
    assert '"label": "nœud-Größe-東京",' in after
    assert json.loads(after)["max-size"] == 9007199254740993


def test_set_as_default_replaces_the_default_in_place() -> None:
    before = '{\n    "default-runtime": "runc",\n    "debug": true\n}\n'
    assert configure(before, RuntimeChange(set_as_default=True)) == (
        '{\n    "default-runtime": "cdictk",\n    "debug": true,\n' + RUNTIME_ONLY.removeprefix("{\n")
    )


def test_cdi_spec_dirs_are_set_to_exactly_the_list_given() -> None:
    before = '{\n    "cdi-spec-dirs": ["/old"]\n}\n'
    assert configure(before, RuntimeChange(cdi_spec_dirs=("/etc/cdi",))) == (
        '{\n    "cdi-spec-dirs": [\n        "/etc/cdi"\n    ],\n' + RUNTIME_ONLY.removeprefix("{\n")
    )


@pytest.mark.parametrize("change", [RuntimeChange(), ALL], ids=["runtime", "all"])
def test_a_second_run_returns_the_same_text_object(change: RuntimeChange) -> None:
    first = configure('{"debug": true}\n', change)
    assert first is not None
    assert configure(first, change) is first


def test_an_already_configured_hand_laid_out_file_is_not_rewritten() -> None:
    # Layout and integer-versus-boolean care: "cdi": 1 is not JSON's true, so that one must change.
    done = '{"runtimes":{"cdictk":{"path":"/usr/local/bin/cdictk-runtime"}},"features":{"cdi":true}}'
    assert configure(done, RuntimeChange(enable_cdi=True)) is done
    not_done = done.replace("true", "1")
    assert configure(not_done, RuntimeChange(enable_cdi=True)) != not_done


def test_remove_after_configure_gives_back_the_original_content() -> None:
    original = (
        '{\n  "runtimes": {\n    "nvidia": {\n      "path": "/usr/bin/nvidia-container-runtime"\n    }\n  },\n'
        '  "features": {\n    "buildkit": true\n  },\n  "cdi-spec-dirs": [\n    "/opt/cdi"\n  ]\n}\n'
    )
    change = RuntimeChange(set_as_default=True, enable_cdi=True, cdi_spec_dirs=("/opt/cdi", "/etc/cdi"))
    configured = configure(original, change)
    assert configured is not None
    undo = RuntimeChange(enable_cdi=True, cdi_spec_dirs=("/etc/cdi",), remove=True)
    restored = configure(configured, undo)
    assert restored is not None
    assert json.loads(restored) == json.loads(original)
    assert configure(restored, undo) is restored


def test_remove_gives_back_the_exact_text_when_the_original_had_no_runtimes() -> None:
    original = '{\n  "debug": true,\n  "default-runtime": "runc"\n}\n'
    configured = configure(original)
    assert configured is not None
    assert configure(configured, RuntimeChange(remove=True)) == original


def test_remove_leaves_cdi_settings_alone_unless_asked() -> None:
    configured = configure("", ALL)
    assert configured is not None
    kept = configure(configured, RuntimeChange(remove=True))
    assert (
        kept
        == '{\n    "features": {\n        "cdi": true\n    },\n    "cdi-spec-dirs": [\n        "/etc/cdi",\n        "/var/run/cdi"\n    ]\n}\n'
    )
    assert (
        configure(configured, RuntimeChange(enable_cdi=True, cdi_spec_dirs=ALL.cdi_spec_dirs, remove=True))
        == "{}\n"
    )
    # A "cdi": false was someone's choice: removing it would turn CDI on in recent Docker.
    chosen = '{"features": {"cdi": false}}'
    assert configure(chosen, RuntimeChange(enable_cdi=True, remove=True)) is chosen


def test_remove_keeps_a_default_runtime_naming_another_runtime() -> None:
    before = '{"default-runtime": "nvidia", "runtimes": {"cdictk": {"path": "/x"}, "nvidia": {"path": "/y"}}}'
    # One line is no indentation to go by, so the rewrite uses four spaces.
    assert configure(before, RuntimeChange(remove=True)) == (
        '{\n    "default-runtime": "nvidia",\n    "runtimes": {\n        "nvidia": {\n            "path": "/y"\n        }\n    }\n}'
    )


def test_remove_with_nothing_to_remove_writes_nothing() -> None:
    assert configure(None, RuntimeChange(remove=True)) is None
    text = '{"debug": true}\n'
    assert configure(text, RuntimeChange(remove=True)) is text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{\n  // x\n  "debug": true\n}', ":2:3: invalid JSON: comments are not allowed"),
        ('{\n  "debug": true,\n}', ":2:16: invalid JSON: trailing comma"),
        ("[]", ":1:1: the top level must be a JSON object, not an array"),
        ('{"a": 1,\n "b": {"c": 1, "c": 2}}', ':2:16: invalid JSON: duplicate key "c"'),
        ('{"a": NaN}', ":1:7: invalid JSON: NaN is not valid JSON"),
        ('{"a": 1e400}', ":1:7: invalid JSON: number 1e400 is out of range"),
        ('{"a": 1} {}', ":1:10: invalid JSON: Extra data"),
        ('{"runtimes": ["cdictk"]}', "runtimes: is not an object"),
        ('{"runtimes": {"cdictk": "/usr/bin/x"}}', "runtimes.cdictk: is not an object"),
        ('{"features": "cdi"}', "features: is not an object"),
    ],
    ids=[
        "comment",
        "trailing-comma",
        "array-root",
        "duplicate",
        "nan",
        "huge-float",
        "extra",
        "runtimes",
        "runtime",
        "features",
    ],
)
def test_refused_files_name_the_problem_and_where(text: str, message: str) -> None:
    with pytest.raises(CdictkError) as caught:
        configure(text, RuntimeChange(enable_cdi=True))
    # A syntax error is placed as file:line:column; a wrong field is named after the file.
    expected = f"{FILE}{message}" if message.startswith(":") else f"{FILE}: {message}"
    assert str(caught.value) == expected


def test_files_over_16_mib_are_refused() -> None:
    with pytest.raises(CdictkError, match=f"over the {MAX_DAEMON_JSON_BYTES}-byte limit"):
        configure("{}" + " " * MAX_DAEMON_JSON_BYTES)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            RuntimeChange(runtime_path="cdictk-runtime"),
            'runtimes.cdictk.path: must be an absolute path, not "cdictk-runtime"',
        ),
        (RuntimeChange(runtime_name="runc"), 'runtimes.runc: the name "runc" is reserved by Docker'),
        (RuntimeChange(cdi_spec_dirs=("cdi",)), 'cdi-spec-dirs: must hold absolute paths, not "cdi"'),
    ],
)
def test_unusable_changes_are_refused(change: RuntimeChange, message: str) -> None:
    with pytest.raises(CdictkError) as caught:
        configure("{}", change)
    # A syntax error is placed as file:line:column; a wrong field is named after the file.
    expected = f"{FILE}{message}" if message.startswith(":") else f"{FILE}: {message}"
    assert str(caught.value) == expected


def test_remove_goes_on_without_a_backup_nested_too_deeply_to_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "daemon.json"
    config.write_text('{"default-runtime": "cdictk", "runtimes": {"cdictk": {"path": "/usr/bin/true"}}}\n')
    (tmp_path / "daemon.json.cdictk.orig").write_text("[" * 100_000 + "]" * 100_000)
    assert main(["runtime", "configure", "--runtime", "docker", "--config", str(config), "--remove"]) == 0
    assert "error" not in capsys.readouterr().err
    assert json.loads(config.read_text()) == {}
