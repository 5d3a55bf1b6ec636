"""The table of hook steps that the entry point, the generator and the prestart hook all read."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.helpers.rootfs import Rootfs
from cdictk.startpath.hooks import steps
from cdictk.startpath.hooks.steps import BATCHED, BY_NAME, STEPS, Options, Prepared
from tests import REPO


def test_every_row_names_a_module_with_a_prepare_function() -> None:
    for step in STEPS:
        __import__(step.module)
        assert callable(getattr(sys.modules[step.module], "prepare", None)), step.name
    assert list(BY_NAME) == [step.name for step in STEPS]


def test_the_batched_hook_takes_every_option_of_its_steps() -> None:
    batch = BY_NAME["batch"]
    for step in BATCHED:
        assert set(step.values) <= set(batch.values)
        assert set(step.lists) <= set(batch.lists)
        assert set(step.flags) <= set(batch.flags)


def test_parse() -> None:
    step = BY_NAME["update-ldcache"]
    options = step.parse(["--folder", "/a", "-folder=/b", "--ldconfig-path=/sbin/x"])
    assert options is not None
    assert options.all("folder") == ["/a", "/b"] and options.get("ldconfig-path") == "/sbin/x"
    assert step.parse(["--help"]) is None
    for args, message in (
        (["--nope", "1"], "unknown option --nope"),
        (["--folder"], "--folder needs a value"),
        (["stray"], "unexpected argument 'stray'"),
    ):
        with pytest.raises(HookError, match=message):
            step.parse(args)
    with pytest.raises(HookError, match="takes no value, or true or false"):
        BY_NAME["batch"].parse(["--disable-device-node-modification=yes"])


def test_a_flag_takes_true_or_false_as_with_nvidia_cdi_hook() -> None:
    """The prestart hook took -debug=false (Go's flag package) while the steps refused any value; both
    read one parser now, which takes Go's form everywhere."""
    batch = BY_NAME["batch"]
    for args, given in (
        (["--disable-device-node-modification=1"], True),
        (["--disable-device-node-modification=false"], False),
        (["--disable-device-node-modification", "--disable-device-node-modification=0"], False),
    ):
        options = batch.parse(args)
        assert options is not None
        assert ("disable-device-node-modification" in options.flags) is given, args


def test_a_step_runs_in_the_batch_only_when_given_its_options() -> None:
    options = BY_NAME["batch"].parse(["--link", "a::/b", "--disable-device-node-modification"])
    assert options is not None
    assert [step.name for step in BATCHED if step.given(options)] == [
        "create-symlinks",
        "disable-device-node-modification",
    ]


def test_the_batch_checks_every_step_before_it_runs_any(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad argument of the last step stops the batch before the first step touches the rootfs, and
    what the earlier steps took is let go."""
    ran: list[str] = []
    closed: list[str] = []

    def fake(name: str, fail: bool = False) -> object:
        def prepare(options: Options) -> Prepared:
            if fail:
                raise HookError(f"{name}: bad argument")
            return Prepared(lambda rootfs: ran.append(name), lambda: closed.append(name))

        return prepare

    from cdictk.startpath.hooks import cudacompat, ldcache, symlinks

    monkeypatch.setattr(symlinks, "prepare", fake("links"))
    monkeypatch.setattr(cudacompat, "prepare", fake("compat"))
    monkeypatch.setattr(ldcache, "prepare", fake("ldcache", fail=True))
    options = BY_NAME["batch"].parse(["--link", "a::/b", "--host-driver-version=1", "--folder", "/lib"])
    assert options is not None
    with pytest.raises(HookError, match="ldcache: bad argument"):
        steps.prepare(options)
    assert (ran, closed) == ([], ["links", "compat"])

    monkeypatch.setattr(ldcache, "prepare", fake("ldcache"))
    prepared = steps.prepare(options)
    with Rootfs(str(tmp_path)) as rootfs:
        prepared.run(rootfs)
    prepared.close()
    assert ran == ["links", "compat", "ldcache"]  # the table's order


def _documented() -> dict[str, set[str]]:
    """Hook name -> the options its row's first cell names."""
    text = (REPO / "docs" / "hooks.md").read_text()
    table = text.partition("| hook | what it does in the container |")[2].partition("\n\n")[0]
    rows = {}
    for cell in re.findall(r"^\| `([^`]+)` \|", table, flags=re.MULTILINE):
        name, _, rest = cell.partition(" ")
        rows[name] = set(re.findall(r"--([a-z-]+)", rest))
    return rows


def test_docs_hooks_md_has_every_hook_with_the_options_it_takes() -> None:
    taken = {
        step.name: {name for name in (*step.values, *step.lists, *step.flags) if name not in step.batch_only}
        for step in STEPS
    }
    # The batched hook takes its steps' batch-only options too.
    taken["batch"] = {name for step in STEPS if step.name != "batch" for name in step.batch_only} | taken[
        "batch"
    ]
    assert _documented() == taken
