"""The watched feature file: written when the labels change, the expiry renewed once half of it has
passed, a file removed by someone else put back, a path that cannot become a file fatal."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdictk.labels import featurefile
from cdictk.labels.gfdrules import Sharing
from cdictk.labels.labeller import LabelOptions, Made, WatchedLabels, make_labels
from cdictk.nvcdi.watch import FatalWatchError
from cdictk.startpath.helpers.roots import Roots
from tests.conftest import NodeFactory, roots_of


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def watched(tmp_path: Path, labels: dict[str, str], clock: Clock, said: list[str]) -> WatchedLabels:
    return WatchedLabels(
        lambda: Made(dict(labels), ("a warning",)),
        roots=Roots(proc=str(tmp_path / "proc"), sys=str(tmp_path / "sys")),
        output=str(tmp_path / "out" / "cdictk-gpu"),
        expiry=600.0,
        say=said.append,
        warn=said.append,
        clock=clock,
    )


def test_expiry_kept_while_young_renewed_past_half(tmp_path: Path) -> None:
    labels, clock = {"nvidia.com/gpu.count": "1"}, Clock()
    said: list[str] = []
    watch = watched(tmp_path, labels, clock, said)
    output = tmp_path / "out" / "cdictk-gpu"
    watch.regenerate()
    first = featurefile.parse(output.read_text())[1]
    assert first is not None and first.timestamp() == clock.now + 600
    assert watch.full_every == 150
    clock.now += 299
    watch.regenerate()
    assert featurefile.parse(output.read_text())[1] == first
    clock.now += 2  # past half of it
    watch.regenerate()
    assert featurefile.parse(output.read_text())[1].timestamp() == clock.now + 600  # type: ignore[union-attr]
    labels["nvidia.com/gpu.count"] = "2"  # a change writes at once, with a fresh expiry
    clock.now += 1
    watch.regenerate()
    assert featurefile.parse(output.read_text())[0] == labels
    assert said.count("a warning") == 1 and sum(line.startswith("wrote ") for line in said) == 3


def test_a_removed_file_changes_the_fingerprint_and_is_put_back(tmp_path: Path) -> None:
    watch = watched(tmp_path, {"nvidia.com/gpu.count": "1"}, Clock(), [])
    watch.regenerate()
    before = watch.fingerprint()
    assert watch.wrote_last()
    (tmp_path / "out" / "cdictk-gpu").unlink()
    assert watch.fingerprint() != before and not watch.wrote_last()
    watch.regenerate()
    assert (tmp_path / "out" / "cdictk-gpu").exists()


def test_a_directory_at_the_output_ends_the_watch(tmp_path: Path) -> None:
    (tmp_path / "out" / "cdictk-gpu").mkdir(parents=True)
    with pytest.raises(FatalWatchError, match="not a regular file"):
        watched(tmp_path, {"nvidia.com/gpu.count": "1"}, Clock(), []).regenerate()


@pytest.mark.root
def test_make_labels_with_a_timestamp(make_node: NodeFactory) -> None:
    node = make_node("single")
    made = make_labels(roots_of(node), LabelOptions("none", Sharing(), timestamp=1724632719))
    assert made.labels["nvidia.com/gfd.timestamp"] == "1724632719"
    assert made.labels["nvidia.com/gpu.count"] == "1"
