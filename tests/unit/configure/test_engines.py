"""The engine records: every row complete, its refusals the ones it declares, and what configure writes
at an engine's default paths what its inspection reads back."""

from __future__ import annotations

import fnmatch
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
import pytest

from cdictk.cli.runtime import configure_command
from cdictk.configure.change import Request
from cdictk.configure.edit import configure
from cdictk.configure.engines import ENGINES, Engine
from cdictk.startpath.helpers.errors import CdictkError, Problem
from cdictk.startpath.helpers.roots import join

RUNTIME = "/usr/local/bin/cdictk-runtime"
EACH = pytest.mark.parametrize("engine", ENGINES.values(), ids=list(ENGINES))


def request(engine: Engine, **changes: Any) -> Request:
    return replace(Request(engine.name, None, None, "cdictk", RUNTIME), **changes)


def test_the_table_lists_the_engines_in_order() -> None:
    assert list(ENGINES) == ["containerd", "crio", "docker"]
    assert all(name == engine.name for name, engine in ENGINES.items())


@EACH
def test_every_record_is_complete_and_consistent(engine: Engine) -> None:
    assert engine.title and engine.label and engine.unit and engine.daemons and engine.unconfigured
    assert os.path.isabs(engine.config) and os.path.isabs(engine.socket)
    # info reads the drop-ins of an engine configure writes one for, configure's own among them.
    assert (engine.drop_in is None) == (engine.drop_in_glob is None)
    if engine.drop_in is not None and engine.drop_in_glob is not None:
        assert os.path.isabs(engine.drop_in) and fnmatch.fnmatchcase(engine.drop_in, engine.drop_in_glob)
        assert os.path.dirname(engine.drop_in) == os.path.dirname(engine.drop_in_glob)
    module = engine.load()
    assert callable(module.plan) and callable(module.inspect)


@EACH
def test_check_refuses_what_the_record_says_the_engine_cannot_do(engine: Engine) -> None:
    engine.check(request(engine))
    engine.check(request(engine, drop_in=""))  # in place: every engine has a main config
    asked = {
        "--drop-in-config": (
            request(engine, drop_in="/etc/x.toml"),
            None if engine.drop_in else f"{engine.name} has no drop-in configs",
        ),
        "--enable-cdi": (request(engine, enable_cdi=True), engine.enable_cdi_refused),
        "--cdi-spec-dir": (request(engine, cdi_spec_dirs=("/etc/cdi",)), engine.cdi_spec_dir_refused),
    }
    for flag, (asking, refusal) in asked.items():
        if refusal is None:
            engine.check(asking)
        else:
            with pytest.raises(CdictkError) as raised:
                engine.check(asking)
            assert raised.value.problem == Problem("", flag, refusal)
    for how in ("none", "systemd"):
        engine.check_restart(how)
    if engine.reloads_on_sighup:
        engine.check_restart("signal")
    else:
        with pytest.raises(CdictkError, match=f"^--restart: {engine.name} does not reload its config"):
            engine.check_restart("signal")


@EACH
def test_inspect_finds_nothing_on_an_empty_host_root(engine: Engine, tmp_path: Path) -> None:
    assert engine.inspect(str(tmp_path)) is None


@EACH
def test_inspect_reads_what_configure_writes_at_the_default_paths(engine: Engine, tmp_path: Path) -> None:
    host = str(tmp_path)
    at = {"config": join(host, engine.config)}  # the drop-in: beside it, where the default one is
    written: list[str] = []
    assert configure(request(engine, **at, enable_cdi=engine.enable_cdi_refused is None), written.append)
    seen = engine.inspect(host)
    assert seen is not None and seen.cdi and seen.registered == (RUNTIME,) and not seen.problem, written
    configure(request(engine, **at, remove=True), written.append)
    seen = engine.inspect(host)  # None when the remove left no file (a drop-in on its own)
    assert seen is None or (seen.registered == () and not seen.problem), written


def test_the_command_line_offers_every_engine_and_its_default_paths() -> None:
    options = {param.name: param for param in configure_command.params if isinstance(param, click.Option)}
    choice = options["engine"].type
    assert isinstance(choice, click.Choice) and list(choice.choices) == list(ENGINES)
    for engine in ENGINES.values():
        assert engine.config in str(options["config"].help)
        if engine.drop_in is not None:
            assert os.path.relpath(engine.drop_in, os.path.dirname(engine.config)) in str(
                options["drop_in"].help
            )


@EACH
def test_a_drop_in_goes_beside_the_config_it_was_asked_to_edit(engine: Engine) -> None:
    assert engine.drop_in_for(engine.config) == engine.drop_in
    elsewhere = engine.drop_in_for("/x/y/main.conf")
    if engine.drop_in is None:
        assert elsewhere is None
    else:
        assert elsewhere == os.path.join(
            "/x/y", os.path.relpath(engine.drop_in, os.path.dirname(engine.config))
        )


def test_the_drop_ins_beside_a_config_elsewhere() -> None:
    assert ENGINES["containerd"].drop_in_for("/x/config.toml") == "/x/conf.d/99-cdictk.toml"
    assert ENGINES["crio"].drop_in_for("/x/crio.conf") == "/x/crio.conf.d/99-cdictk.toml"


# ---------------------------------------------------------------- --remove: the file as it was

ORIGINALS = {
    "containerd": 'version = 2\n\n# the node\'s own\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "pause:3.9"\n',
    "crio": '[crio.runtime]\n# the node\'s own\ndefault_runtime = "crun"\n',
    "docker": '{\n    "log-driver": "journald"\n}\n',
}


def changes(tmp_path: Path, engine: Engine, **more: Any) -> tuple[Path, Request, Request]:
    """The engine's main config under ``tmp_path``; configure's request on it (in place for an engine
    without drop-ins), and its --remove."""
    config = tmp_path / os.path.basename(engine.config)
    asked = request(engine, config=str(config), set_as_default=True, **more)
    if engine.enable_cdi_refused is None:
        asked = replace(asked, enable_cdi=True)
    return config, asked, replace(asked, remove=True)


@EACH
@pytest.mark.parametrize("existed", [True, False], ids=["a-file", "no-file"])
def test_remove_puts_back_the_file_nobody_changed_since(
    engine: Engine, tmp_path: Path, existed: bool
) -> None:
    config, asked, remove = changes(tmp_path, engine)
    if existed:
        config.write_text(ORIGINALS[engine.name])
    before = sorted(os.listdir(tmp_path))
    assert configure(asked, lambda line: None)
    said: list[str] = []
    assert configure(remove, said.append)
    if existed:
        assert config.read_bytes() == ORIGINALS[engine.name].encode()
    backup = f"{config}.cdictk.orig"
    if engine.name != "crio":  # CRI-O's drop-in copies from the main file, which stays as it is
        assert said[-1] == f"{config}: as it was before cdictk first changed it; {backup} removed"
    # nothing of cdictk's is left, but the directory a drop-in went to
    assert sorted(name for name in os.listdir(tmp_path) if not (tmp_path / name).is_dir()) == before
    assert not configure(remove, lambda line: None)  # and once more: nothing to do


@EACH
def test_remove_keeps_what_another_hand_changed_since(engine: Engine, tmp_path: Path) -> None:
    config, asked, remove = changes(tmp_path, engine)
    config.write_text(ORIGINALS[engine.name])
    configure(asked, lambda line: None)
    edited = config.read_text()
    if engine.name == "docker":
        edited = edited.replace('"log-driver"', '"debug": true,\n  "log-driver"')
    else:
        edited += "# an operator's line\n"
    config.write_text(edited)
    said: list[str] = []
    configure(remove, said.append)
    assert "an operator's line" in config.read_text() or '"debug": true' in config.read_text()
    assert not any("as it was before cdictk" in line for line in said)
    # still the copy of what was there first (CRI-O's main file was never changed: none)
    assert os.path.exists(f"{config}.cdictk.orig") is (engine.name != "crio")
