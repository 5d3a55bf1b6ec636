"""cdictk's tests. ``REPO``: the clone they run from, wherever a test file sits below it."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
