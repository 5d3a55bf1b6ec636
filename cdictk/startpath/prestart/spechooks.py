"""The hooks a CDI spec asks for, run by the prestart hook at the moment runc would have run them.

A spec's ``prestart``/``createRuntime`` hooks run in the host's namespaces, ``createContainer`` hooks
in the container's mount namespace before the pivot: the prestart hook runs the first kind before it
joins that namespace and the second after, which is exactly where runc runs them. Each gets the OCI
state on stdin, the environment the spec gives it and nothing else (never the engine's or the
container's), ``/`` as working directory, and its timeout (60 s when the spec sets none).

A hook that runs this very cdictk's hook entry point isolated (``python -I ...
cdictk/startpath/hooks/__main__.py NAME ...``, what ``cdictk cdi generate`` writes) is run in this process
instead, on the rootfs it has open already: the same code with the same arguments, without a second
interpreter start (about a fifth of the hook's time). So is the batched hook of the node runtime this prestart
hook runs from (``PREFIX/current/bin/cdictk-hook batch ...``) when its path leads to this very version; one
that leads to another (versions swapped meanwhile) runs as the program it is. The spec's ``env`` is then
moot (the code is ours and runs isolated already); its ``timeout`` still holds.
"""

from __future__ import annotations

import os

from cdictk.startpath.helpers.bundlepaths import BIN, HOOK, running_bundle
from cdictk.startpath.helpers.errors import HookError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from cdictk.startpath.helpers.rootfs import Rootfs

DEFAULT_TIMEOUT = 60


def run_hooks(hooks: list[dict[str, Any]], state: bytes, rootfs: Rootfs | None = None) -> None:
    """Run ``hooks`` (config.json entries) in order; the first failure stops the container.

    With ``rootfs`` (the container's, in its mount namespace), cdictk's own hooks run in process.
    """
    for hook in hooks:
        if rootfs is not None and _run_in_process(hook, rootfs):
            continue
        _run_program(hook, state)


def _run_in_process(hook: dict[str, Any], rootfs: Rootfs) -> bool:
    """Run ``hook`` here if it is exactly what ``cdictk cdi generate`` writes for this cdictk's own
    entry point (``PYTHON -I -S ENTRY NAME ...``, argv[0] the interpreter's absolute path); False if not.

    Within the spec's timeout (60 s by default), as a program would be: SIGALRM ends a step that hangs.
    """
    import signal  # noqa: PLC0415

    from cdictk.startpath.hooks.steps import BY_NAME  # noqa: PLC0415

    path, args = hook.get("path"), hook.get("args") or []
    if not isinstance(path, str) or not path.startswith("/") or not isinstance(args, list):
        return False
    words = _own_step(path, args)
    step = None if words is None else BY_NAME.get(words[0])
    if words is None or step is None:
        return False
    name = words[0]
    options = step.parse(words[1:])
    if options is None:  # --help: nothing to do in a container
        return True
    timeout = hook.get("timeout") or DEFAULT_TIMEOUT

    def expired(signum: int, frame: object) -> None:
        raise HookError(f"{name}: no answer within {timeout} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(int(timeout))
    try:
        prepared = step.prepare(options)  # under the timeout too: it copies the host's ldconfig
        try:
            prepared.run(rootfs)
        finally:
            prepared.close()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return True


def _own_step(path: str, args: list[Any]) -> list[Any] | None:
    """The step's name and arguments when ``path`` and ``args`` run this cdictk's hooks as the generator
    writes them; else None."""
    if len(args) >= 5 and os.path.basename(path).startswith(("python", "pypy")):
        return args[4:] if args[:4] == [path, "-I", "-S", _entry_file()] else None
    if len(args) >= 2 and args[0] == HOOK and os.path.basename(path) == HOOK:
        bundle = running_bundle()
        ours = bundle is not None and os.path.realpath(path) == os.path.join(
            os.path.realpath(bundle), BIN, HOOK
        )
        return args[1:] if ours else None
    return None


def _entry_file() -> str:
    import cdictk.startpath.hooks  # noqa: PLC0415

    return os.path.join(os.path.dirname(os.path.abspath(cdictk.startpath.hooks.__file__)), "__main__.py")


def _run_program(hook: dict[str, Any], state: bytes) -> None:
    import subprocess  # noqa: PLC0415 - only containers whose spec has foreign hooks pay for it

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
