"""The driver facts' shape: what the cache and the NVML child must hand over to be believed."""

from __future__ import annotations

import os
from pathlib import Path

from cdictk.startpath.prestart.factshape import identity, ints, shaped, strs

GOOD = {
    "cuda": ["12.4", ""],
    "driver": ["550.54", ""],
    "gpus_error": "",
    "gpus": [[0, "9.0", "", "nvidia", ""]],
}


def test_a_library_rewritten_or_chmodded_has_another_identity(tmp_path: Path) -> None:
    library = tmp_path / "libnvidia-ml.so.1"
    library.write_bytes(b"one")
    first = identity(str(library))
    assert first is not None and ints(first, 5)
    os.chmod(library, 0o600)
    second = identity(str(library))
    assert second != first
    library.write_bytes(b"other")
    assert identity(str(library)) not in (first, second)
    assert identity(str(tmp_path / "missing")) is None


def test_only_facts_of_their_shape_are_believed() -> None:
    assert shaped(GOOD) == GOOD
    assert shaped({**GOOD, "gpus": [[True, "9.0", "", "nvidia", ""]]}) is None  # a bool is no minor
    assert shaped({**GOOD, "gpus": [["0", "9.0", "", "nvidia", ""]]}) is None
    assert shaped({**GOOD, "cuda": ["12.4"]}) is None
    assert shaped([GOOD]) is None
    assert strs(["a", "b"], 2) and not strs(["a", 1], 2)
