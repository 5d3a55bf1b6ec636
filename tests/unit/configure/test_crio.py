from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from cdictk.cli.main import main
from cdictk.configure.change import RuntimeChange
from cdictk.configure.crio import HEADER, configure
from cdictk.startpath.helpers.errors import CdictkError
from tests import REPO

MAIN = """# CRI-O main config
[crio.runtime]
default_runtime = "crun"

[crio.runtime.runtimes.crun]
runtime_path = "/usr/bin/crun"
monitor_path = "/usr/libexec/crio/conmon"
monitor_env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"]
allowed_annotations = ["io.containers.trace-syscall"]
"""
PATH = "/usr/local/bin/cdictk-runtime"


def test_drop_in_holds_only_our_entry_with_the_monitor_settings_copied() -> None:
    edit = configure(
        "",
        "/etc/crio/crio.conf.d/99-cdictk.toml",
        MAIN,
        "/etc/crio/crio.conf",
        RuntimeChange(set_as_default=True),
    )
    assert edit.text is not None and edit.text.startswith(HEADER)
    assert tomllib.loads(edit.text) == {
        "crio": {
            "runtime": {
                "default_runtime": "cdictk",
                "runtimes": {
                    "cdictk": {
                        "runtime_path": PATH,
                        "runtime_type": "oci",
                        "monitor_path": "/usr/libexec/crio/conmon",
                        "monitor_env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"],
                    }
                },
            }
        }
    }
    again = configure(edit.text, "d.toml", MAIN, "crio.conf", RuntimeChange(set_as_default=True))
    assert again.text is edit.text
    gone = configure(edit.text, "d.toml", MAIN, "crio.conf", RuntimeChange(remove=True))
    assert gone.text is None


def test_in_place_keeps_the_rest_of_the_file() -> None:
    edit = configure(MAIN, "/etc/crio/crio.conf", None, "/etc/crio/crio.conf", RuntimeChange())
    assert edit.text is not None and edit.text.startswith(MAIN)
    assert tomllib.loads(edit.text)["crio"]["runtime"]["default_runtime"] == "crun"
    back = configure(
        edit.text, "/etc/crio/crio.conf", None, "/etc/crio/crio.conf", RuntimeChange(remove=True)
    )
    assert back.text is not None and tomllib.loads(back.text) == tomllib.loads(MAIN)


def test_second_in_place_run_with_set_as_default_changes_nothing() -> None:
    text = (
        MAIN
        + '\n[crio.runtime.runtimes.runc]\nruntime_path = "/usr/sbin/runc"\nmonitor_path = "/other/conmon"\n'
    )
    first = configure(text, "crio.conf", None, "crio.conf", RuntimeChange(set_as_default=True))
    assert first.text is not None
    assert (
        configure(first.text, "crio.conf", None, "crio.conf", RuntimeChange(set_as_default=True)).text
        is first.text
    )


def test_tables_of_the_wrong_type_are_one_error() -> None:
    import pytest

    from cdictk.startpath.helpers.errors import CdictkError

    for text in ("crio = 5\n", '[crio]\nruntime = "x"\n', "[crio.runtime]\nruntimes = 1\n"):
        with pytest.raises(CdictkError, match="is not a table"):
            configure(text, "crio.conf", None, "crio.conf", RuntimeChange())


def test_in_place_remove_restores_the_default_from_the_backup() -> None:
    first = configure(MAIN, "crio.conf", None, "crio.conf", RuntimeChange(set_as_default=True))
    assert first.text is not None
    back = configure(
        first.text, "crio.conf", None, "crio.conf", RuntimeChange(remove=True), before=tomllib.loads(MAIN)
    )
    assert back.text is not None and tomllib.loads(back.text) == tomllib.loads(MAIN)


def test_the_shipped_drop_in_is_what_configure_writes(tmp_path: Path) -> None:
    """hooks/crio/99-cdictk.toml, for nodes set up without running cdictk there, must not drift."""
    from cdictk.cli.main import main
    from cdictk.runtime.launchers import DEFAULT_DIR

    shipped = REPO / "hooks" / "crio" / "99-cdictk.toml"
    written = tmp_path / "99-cdictk.toml"
    args = ["runtime", "configure", "--runtime", "crio", "--config", str(tmp_path / "crio.conf")]
    args += ["--drop-in-config", str(written), "--runtime-path", f"{DEFAULT_DIR}/cdictk-runtime"]
    assert main(args) == 0
    assert tomllib.loads(shipped.read_text()) == tomllib.loads(written.read_text())


def test_a_second_run_changes_nothing_and_asks_for_no_restart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cdictk.cli.main import main

    args = ["runtime", "configure", "--runtime", "crio", "--config", str(tmp_path / "crio.conf")]
    args += ["--drop-in-config", str(tmp_path / "99-cdictk.toml"), "--runtime-path", "/usr/bin/true"]
    assert main(args) == 0
    assert "restart crio" in capsys.readouterr().err
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "restart crio" not in err and "nothing changed: crio needs no restart" in err


def run(capsys: pytest.CaptureFixture[str], tmp_path: Path, *args: str) -> tuple[int, str]:
    """The real command on tmp_path/crio.conf and its drop-in; a later --drop-in-config wins."""
    command = ["runtime", "configure", "--runtime", "crio", "--config", str(tmp_path / "crio.conf")]
    command += ["--drop-in-config", str(tmp_path / "crio.conf.d" / "99-cdictk.toml")]
    code = main([*command, "--runtime-path", "/usr/bin/true", *args])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "text", "args", "message"),
    [
        pytest.param(
            "crio.conf",
            '[crio.runtime]\ndefault_runtime = "runc"\ndefault_runtime = "crun"\n',
            [],
            ':3:25: invalid TOML: duplicate key "default_runtime"',
            id="key-twice",
        ),
        pytest.param(
            "crio.conf",
            '[crio.runtime]\ndefault_runtime = "runc"\ndefault_runtime = "crun"\n',
            ["--drop-in-config", ""],
            ':3:25: invalid TOML: duplicate key "default_runtime"',
            id="key-twice-in-place",
        ),
        pytest.param(
            "crio.conf",
            '[crio.runtime]\nlog_level = "info"\n\n[crio.api]\n\n[crio.runtime]\nconmon = "/c"\n',
            [],
            ':6:14: invalid TOML: duplicate key "runtime"',
            id="table-twice",
        ),
        pytest.param(
            "crio.conf.d/99-cdictk.toml",
            HEADER + '[crio.runtime.runtimes.cdictk]\nruntime_path = "/a"\nruntime_path = "/b"\n',
            [],
            ':4:20: invalid TOML: duplicate key "runtime_path"',
            id="drop-in-key-twice",
        ),
        pytest.param(
            "crio.conf",
            "a = " + "[" * 2000 + "]" * 2000 + "\n",
            [],
            ":1:105: invalid TOML: TOML value nested more than 100 levels deep",
            id="too-deep-for-tomllib",
        ),
        pytest.param(
            "crio.conf",
            "a = " + "9" * 5000 + "\n",
            [],
            ":1:5005: invalid TOML: Invalid number",
            id="too-many-digits-for-tomllib",
        ),
    ],
)
def test_a_bad_file_is_one_line_with_its_place_and_nothing_is_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, *, name: str, text: str, args: list[str], message: str
) -> None:
    path = tmp_path / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    before = sorted(tmp_path.rglob("*"))
    assert run(capsys, tmp_path, *args) == (1, f"cdictk: error: {path}{message}\n")
    assert path.read_text() == text and sorted(tmp_path.rglob("*")) == before


# Valid TOML (a dotted key, a table under it, another table, one more under it) that tomlkit refuses.
SPREAD = """[crio]
runtime.default_runtime = "runc"

[crio.runtime.runtimes.runc]
monitor_path = "/usr/libexec/crio/conmon"

[metrics]

[crio.runtime.runtimes.crun]
"""


def test_valid_toml_that_tomlkit_cannot_read_is_refused_only_where_it_is_edited(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "crio.conf"
    config.write_text(SPREAD)
    assert run(capsys, tmp_path, "--drop-in-config", "") == (
        1,
        f"cdictk: error: {config}:9:1: cannot edit this file safely "
        '(tomlkit cannot read it: Key "runtime" already exists); nothing written\n',
    )
    assert config.read_text() == SPREAD and sorted(tmp_path.iterdir()) == [config]
    # The drop-in only reads the main config, with tomllib.
    assert run(capsys, tmp_path)[0] == 0
    drop_in = tomllib.loads((tmp_path / "crio.conf.d" / "99-cdictk.toml").read_text())
    assert drop_in["crio"]["runtime"]["runtimes"]["cdictk"]["monitor_path"] == "/usr/libexec/crio/conmon"
    assert config.read_text() == SPREAD


def test_an_edit_that_tomlkit_would_write_as_invalid_toml_is_refused() -> None:
    # default_runtime is a table here: tomlkit writes the string over it, and [...default_runtime.b] stays.
    text = "crio.runtime.default_runtime.a = 1\n[crio.runtime.default_runtime.b]\n"
    with pytest.raises(CdictkError) as caught:
        configure(text, "crio.conf", None, "crio.conf", RuntimeChange(set_as_default=True))
    assert str(caught.value) == (
        "crio.conf: cannot edit this file safely (the edit would change other settings); nothing written"
    )


@pytest.mark.parametrize(
    "backup",
    ["a = " + "[" * 2000 + "]" * 2000 + "\n", "a = " + "9" * 5000 + "\n"],
    ids=["too-deep-for-tomllib", "too-many-digits-for-tomllib"],
)
def test_remove_in_place_goes_on_without_a_backup_tomllib_cannot_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, backup: str
) -> None:
    config = tmp_path / "crio.conf"
    config.write_text(MAIN)
    assert run(capsys, tmp_path, "--drop-in-config", "", "--set-as-default")[0] == 0
    (tmp_path / "crio.conf.cdictk.orig").write_text(backup)
    assert run(capsys, tmp_path, "--drop-in-config", "", "--remove")[0] == 0
    runtime = tomllib.loads(config.read_text())["crio"]["runtime"]
    # Nothing to restore the default from: it goes with the runtime it named.
    assert "cdictk" not in runtime["runtimes"] and "default_runtime" not in runtime
