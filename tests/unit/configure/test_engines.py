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
from cdictk.errors import CdictkError, Problem
from cdictk.node.roots import join

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
