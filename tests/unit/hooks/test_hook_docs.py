"""docs/hooks.md's table of hooks names every hook of the step table, each with the options it takes."""

from __future__ import annotations

import re

from cdictk.hooks.steps import STEPS
from tests import REPO


def documented() -> dict[str, set[str]]:
    """Hook name -> the options its row's first cell names."""
    text = (REPO / "docs" / "hooks.md").read_text()
    table = text.partition("| hook | what it does in the container |")[2].partition("\n\n")[0]
    rows = {}
    for cell in re.findall(r"^\| `([^`]+)` \|", table, flags=re.MULTILINE):
        name, _, rest = cell.partition(" ")
        rows[name] = set(re.findall(r"--([a-z-]+)", rest))
    return rows


def test_every_hook_is_a_row_with_the_options_it_takes() -> None:
    taken = {
        step.name: {name for name in (*step.values, *step.lists, *step.flags) if name not in step.batch_only}
        for step in STEPS
    }
    # The batched hook takes its steps' batch-only options too.
    taken["batch"] = {name for step in STEPS if step.name != "batch" for name in step.batch_only} | taken[
        "batch"
    ]
    assert documented() == taken
