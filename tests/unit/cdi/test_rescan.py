"""A view of the spec dirs kept current: scans again on a change, re-parsing only what changed."""

import json
import os
import threading
from pathlib import Path

import pytest

from cdictk.cdi.specview import ClosedError, SpecDirs
from cdictk.startpath.specs.index import UnresolvedDevicesError

SPEC = "cdiVersion: 0.3.0\nkind: v.com/c\ndevices:\n- {name: %s, containerEdits: {env: [%s]}}\n"


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    etc, run = tmp_path / "etc", tmp_path / "run"
    etc.mkdir()
    run.mkdir()
    return etc, run


def test_priorities_and_conflicts_follow_the_registry(dirs: tuple[Path, Path]) -> None:
    etc, run = dirs
    (etc / "a.yaml").write_text(SPEC % ("dev", "FROM=etc"))
    (run / "a.yaml").write_text(SPEC % ("dev", "FROM=run"))
    (run / "b.yaml").write_text(SPEC % ("twice", "B=1"))
    (run / "c.yaml").write_text(SPEC % ("twice", "C=1"))
    (run / "d.yaml").write_text("cdiVersion: 0.3.0\nkind: v.com/c\ndevices: []\n")
    cache = SpecDirs([str(etc), str(run)])
    assert cache.devices() == ["v.com/c=dev"]
    device = cache.device("v.com/c=dev")
    assert device is not None and device.container_edits.env == ["FROM=run"]
    device.container_edits.env.clear()  # a copy
    assert cache.inject({}, ["v.com/c=dev"])["process"]["env"] == ["FROM=run"]
    assert cache.spec_file("v.com/c=dev") == str(run / "a.yaml")
    assert cache.device("v.com/c=twice") is None
    reasons = [str(problem) for problem in cache.errors()]
    assert any(reason.startswith(str(run / "d.yaml")) for reason in reasons)
    assert sum('conflicting device "v.com/c=twice"' in reason for reason in reasons) == 2


def test_only_changed_files_are_parsed_again(dirs: tuple[Path, Path]) -> None:
    _, run = dirs
    for name in ("a", "b", "c"):
        (run / f"{name}.yaml").write_text(SPEC % (name, "X=1"))
    cache = SpecDirs([str(run)])
    assert cache.reads == 3
    (run / "b.yaml").write_text(SPEC % ("b2", "X=2"))
    (run / "bad.yaml").write_text("not: [a spec")
    assert cache.devices() == ["v.com/c=a", "v.com/c=b2", "v.com/c=c"]
    assert cache.reads == 5
    (run / "c.yaml").unlink()
    assert cache.devices() == ["v.com/c=a", "v.com/c=b2"]
    assert len(cache.errors()) == 1 and cache.reads == 5  # the bad file's error is kept, not re-read
    cache.refresh()
    assert cache.reads == 5


def test_without_auto_refresh_only_refresh_scans(dirs: tuple[Path, Path]) -> None:
    _, run = dirs
    cache = SpecDirs([str(run)], auto_refresh=False)
    (run / "a.yaml").write_text(SPEC % ("a", "X=1"))
    assert cache.devices() == []
    cache.refresh()
    assert cache.devices() == ["v.com/c=a"]


def test_inject_leaves_the_input_alone_and_is_all_or_nothing(dirs: tuple[Path, Path]) -> None:
    _, run = dirs
    (run / "a.yaml").write_text(SPEC % ("a", "X=1"))
    cache = SpecDirs([str(run)])
    config = {"ociVersion": "1.2.0", "process": {"env": ["X=0"], "cwd": "/"}}
    before = json.dumps(config)
    assert cache.inject(config, ["v.com/c=a"])["process"]["env"] == ["X=0", "X=1"]
    with pytest.raises(UnresolvedDevicesError, match=r"v\.com/c=b: unresolvable CDI device"):
        cache.inject(config, ["v.com/c=a", "v.com/c=b"])
    assert json.dumps(config) == before


@pytest.mark.root
def test_an_untrusted_spec_is_an_error_unless_accepted(root_dir: Path) -> None:
    (root_dir / "a.yaml").write_text(SPEC % ("a", "X=1"))
    os.chown(root_dir / "a.yaml", 1000, 1000)
    cache = SpecDirs([str(root_dir)])
    assert cache.devices() == []
    assert "not trusted, skipped" in str(cache.errors()[0])
    assert SpecDirs([str(root_dir)], trusted_only=False).devices() == ["v.com/c=a"]


def test_a_closed_view_refuses_calls(dirs: tuple[Path, Path]) -> None:
    cache = SpecDirs([str(dirs[0])])
    cache.close()
    cache.close()
    with pytest.raises(ClosedError, match=r"^the spec dirs' view is closed$"):
        cache.refresh()


def test_threads_reading_while_a_producer_rewrites_never_see_half_a_spec(dirs: tuple[Path, Path]) -> None:
    from cdictk.cdi.model import ContainerEdits, Device, Spec
    from cdictk.cdi.transient import TransientSpecs

    _, run = dirs
    store = TransientSpecs(str(run), "v.com", "c")

    def spec(count: int) -> Spec:
        env = [f"VAR{n}={'x' * 200}" for n in range(200)]  # about 40 KiB: many writes' worth
        devices = [Device(name=f"d{n}", container_edits=ContainerEdits(env=env)) for n in range(count)]
        return Spec(cdi_version="0.3.0", kind="v.com/c", devices=devices)

    small, large = spec(1), spec(3)
    store.write("claim", small)
    cache = SpecDirs([str(run)])
    done = threading.Event()
    seen: set[int] = set()
    failures: list[str] = []

    def read() -> None:
        while not done.is_set():
            if cache.errors():
                failures.append(str(cache.errors()[0]))
                return
            seen.add(len(cache.devices()))

    readers = [threading.Thread(target=read) for _ in range(3)]
    for reader in readers:
        reader.start()
    for round_ in range(60):
        store.write("claim", large if round_ % 2 else small)
    done.set()
    for reader in readers:
        reader.join()
    cache.close()
    assert failures == []
    assert seen and seen <= {1, 3}  # whole specs only, whichever the readers caught
