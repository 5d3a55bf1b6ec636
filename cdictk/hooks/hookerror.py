"""The one way a hook fails: a message printed as one line on stderr, exit status 1."""

from __future__ import annotations


class HookError(Exception):
    """A hook cannot do its work; the container must not start half-prepared."""
