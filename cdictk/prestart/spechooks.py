"""The hooks a CDI spec asks for, run by the prestart hook at the moment runc would have run them.

A spec's ``prestart``/``createRuntime`` hooks run in the host's namespaces, ``createContainer`` hooks
in the container's mount namespace before the pivot: the prestart hook runs the first kind before it
joins that namespace and the second after, which is exactly where runc runs them. Each gets the OCI
state on stdin, the environment the spec gives it and nothing else (never the engine's or the
container's), ``/`` as working directory, and its timeout (60 s when the spec sets none).
"""

from __future__ import annotations

import os

from cdictk.hooks.hookerror import HookError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DEFAULT_TIMEOUT = 60


def run_hooks(hooks: list[dict[str, Any]], state: bytes) -> None:
    """Run ``hooks`` (config.json entries) in order; the first failure stops the container."""
    import subprocess  # noqa: PLC0415 - only containers whose spec has hooks pay for it

    for hook in hooks:
        path = hook.get("path")
        if not isinstance(path, str) or not path.startswith("/"):
            raise HookError(f"spec hook {path!r}: the path must be absolute")
        args = hook.get("args") or [path]
        env = dict(entry.partition("=")[::2] for entry in hook.get("env") or [])
        timeout = hook.get("timeout") or DEFAULT_TIMEOUT
        try:
            result = subprocess.run(  # a host program named by the node's own spec
                args,
                executable=path,
                input=state,
                env=env,
                cwd="/",
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise HookError(f"spec hook {path}: no answer within {timeout} s") from None
        except OSError as exc:
            raise HookError(f"spec hook {path}: {exc.strerror}") from None
        if result.returncode != 0:
            lines = result.stderr.decode(errors="replace").strip().splitlines()
            why = lines[-1] if lines else f"exit status {result.returncode}"
            raise HookError(f"spec hook {os.path.basename(path)} failed: {why}")
