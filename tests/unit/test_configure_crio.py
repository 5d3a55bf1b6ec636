from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from cdictk.runtime.configure.change import RuntimeChange
from cdictk.runtime.configure.crio import HEADER, configure

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

    from cdictk.errors import CdictkError

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

    shipped = Path(__file__).resolve().parents[2] / "hooks" / "crio" / "99-cdictk.toml"
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
