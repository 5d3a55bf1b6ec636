"""Containers with runc: bundles on linked copies of the image, runs with a timeout, and the ways GPUs
reach a container (a spec injected beforehand, cdictk-runtime, the legacy prestart hook).

Every container has a fresh id and its own rootfs copy; :meth:`Containers.cleanup` deletes whatever is
left in the check's private runc state dir (``runc delete --force``), whatever happened.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from realnode.imagefs import PROGRAM_DIR, linked_copy
from realnode.nodefacts import Roots
from realnode.pyenv import Venv
from realnode.recorder import Recorder, Result, Row, StepFailed

CONTAINER_PATH = "/usr/local/nvidia/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What a GPU container runs: the probe, the CUDA program when the node built one, and nvidia-smi -L,
# each followed by its exit status, parsed by :func:`verdict`.
GPU_SCRIPT = (
    f"P={PROGRAM_DIR}; $P/cuda-probe; echo probe-exit=$?; "
    "if [ -x $P/cuda-check ]; then $P/cuda-check; echo cuda-exit=$?; fi; "
    "echo smi-path=$(command -v nvidia-smi); nvidia-smi -L; echo smi-exit=$?"
)


def oci_config(rootfs: str, args: list[str], env: list[str] | None = None) -> dict[str, Any]:
    """What ``runc spec`` writes, made non-interactive, writable, with an absolute rootfs."""
    return {
        "ociVersion": "1.0.2-dev",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": args,
            "env": [f"PATH={CONTAINER_PATH}", "TERM=xterm", *(env or [])],
            "cwd": "/",
            "capabilities": {
                key: ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
                for key in ("bounding", "effective", "permitted", "ambient")
            },
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": True,
        },
        "root": {"path": rootfs, "readonly": False},
        "hostname": "realnode",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {
                "destination": "/dev",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
            },
            {
                "destination": "/dev/pts",
                "type": "devpts",
                "source": "devpts",
                "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"],
            },
            {
                "destination": "/dev/shm",
                "type": "tmpfs",
                "source": "shm",
                "options": ["nosuid", "noexec", "nodev"],
            },
            {
                "destination": "/sys",
                "type": "sysfs",
                "source": "sysfs",
                "options": ["nosuid", "noexec", "nodev", "ro"],
            },
        ],
        "linux": {
            "resources": {"devices": [{"allow": False, "access": "rwm"}]},
            "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
            "maskedPaths": ["/proc/kcore", "/sys/firmware"],
            "readonlyPaths": ["/proc/sys", "/proc/sysrq-trigger"],
        },
    }


@dataclass(frozen=True)
class Verdict:
    ok: bool
    detail: str


def verdict(output: str, expect_smi: str) -> Verdict:
    """Whether the GPU script's output shows every program passing, and what each said."""
    statuses = dict(re.findall(r"^(probe|cuda|smi)-exit=(\d+)$", output, re.MULTILINE))
    lines = output.splitlines()
    said = {
        "probe": next((line for line in lines if line.startswith("probe:")), ""),
        "cuda": next((line for line in lines if line.startswith("cuda:")), ""),
    }
    smi_lines: list[str] = []
    if "smi" in statuses:
        start = next((i for i, line in enumerate(lines) if line.startswith("smi-path=")), len(lines))
        smi_lines = [line for line in lines[start + 1 :] if not line.startswith("smi-exit=")]
    smi_ok = statuses.get("smi") == "0" and any(re.search(expect_smi, line) for line in smi_lines)
    problems = [name for name in ("probe", "cuda") if name in statuses and statuses[name] != "0"]
    problems += [] if smi_ok else ["nvidia-smi"]
    if "probe" not in statuses:
        problems.insert(0, "the script did not run")
    first_gpu = next((line for line in smi_lines if line.strip()), "")
    parts = [said["probe"], said["cuda"], f"smi: {first_gpu[:80]}" if first_gpu else "smi: (nothing)"]
    detail = " | ".join(part for part in parts if part)
    return Verdict(not problems, ("failed: " + ", ".join(problems) + " | " if problems else "") + detail)


class Containers:
    """The check's runc, its private state dir, and the containers made in it."""

    def __init__(self, recorder: Recorder, runc: str, work: str, image: str) -> None:
        self.recorder = recorder
        self.runc = runc
        self.work = work
        self.state = os.path.join(work, "runc-state")
        self.image = image
        self.count = 0

    def bundle(self, label: str, config_for: Callable[[str], dict[str, Any]]) -> tuple[str, str]:
        """A new bundle with its own linked copy of the image; returns (bundle dir, container id)."""
        self.count += 1
        container = f"realnode-{label}-{self.count}-{uuid.uuid4().hex[:6]}"
        directory = os.path.join(self.work, "bundles", container)
        rootfs = os.path.join(directory, "rootfs")
        linked_copy(self.image, rootfs)
        with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as handle:
            json.dump(config_for(rootfs), handle)
        return directory, container

    def run(
        self,
        bundle: str,
        container: str,
        program: list[str] | None = None,
        env: dict[str, str] | None = None,
        *,
        timeout: float = 120,
        delete: bool = True,
    ) -> Result:
        """``runc run`` (or ``program run``, the shim) of ``bundle`` in the foreground; the container is
        deleted after, whatever happened (unless ``delete`` is false: the caller deletes it)."""
        command = [*(program or [self.runc]), "--root", self.state, "run", "--bundle", bundle, container]
        try:
            return self.recorder.run(command, timeout, env=env or {"PATH": HOST_PATH})
        finally:
            if delete:
                self.delete(container)

    def delete(self, container: str) -> None:
        self.recorder.run([self.runc, "--root", self.state, "delete", "--force", container], 30, quiet=True)

    def cleanup(self) -> list[str]:
        """Deletes every container left in the state dir; returns those that would not go."""
        if not os.path.isdir(self.state):
            return []
        listed = self.recorder.run([self.runc, "--root", self.state, "list", "-q"], 30, quiet=True)
        for container in listed.stdout.split():
            self.delete(container)
        return self.recorder.run(
            [self.runc, "--root", self.state, "list", "-q"], 30, quiet=True
        ).stdout.split()


def inject(recorder: Recorder, cdictk: str, spec_dir: str, device: str, config: str) -> None:
    """``cdictk cdi inject`` of ``device`` from ``spec_dir`` into ``config``, by the program ``cdictk``."""
    result = recorder.run([cdictk, "cdi", "inject", "--spec-dir", spec_dir, "-d", device, config], 60)
    if not result.ok:
        raise StepFailed(f"cdictk cdi inject: {result.why()}")


@dataclass(frozen=True)
class Shim:
    """How cdictk-runtime and the prestart hook are run: the launchers, the console scripts when the
    launchers cannot be installed, or the node runtime's (``how`` says which, and why)."""

    runtime: list[str]
    prestart: tuple[str, list[str]]  # the hook's path and args
    env: dict[str, str]
    how: str


def settings_text(runc: str, spec_dir: str, roots: Roots) -> str:
    text = (
        f"[runtime]\nruntimes = [{json.dumps(runc)}]\nspec-dirs = [{json.dumps(spec_dir)}]\n"
        "[requests]\naccept-env-unprivileged = true\n"
    )
    if roots.fake:
        text += (
            f"[node]\ndriver-root = {json.dumps(roots.driver)}\ndev-root = {json.dumps(roots.dev)}\n"
            f"proc-root = {json.dumps(roots.proc)}\nsys-root = {json.dumps(roots.sys)}\n"
        )
    return text


def shim_env(name: str, *, runc: str, spec_dir: str, roots: Roots, work: str) -> dict[str, str]:
    """The environment the shim and the prestart hook run with: private settings (``work``/``name``.toml,
    written here) and parse cache, never the node's."""
    settings = os.path.join(work, f"{name}.toml")
    with open(settings, "w", encoding="utf-8") as handle:
        handle.write(settings_text(runc, spec_dir, roots))
    return {
        "PATH": HOST_PATH,
        "CDICTK_CONFIG": settings,
        "CDICTK_CACHE_DIR": os.path.join(work, f"{name}-cache"),
    }


def shim(
    recorder: Recorder, row: Row, venv: Venv, *, runc: str, spec_dir: str, roots: Roots, work: str
) -> Shim:
    """Installs the launchers into ``work`` and writes the shim's private settings there."""
    env = shim_env("cdictk-config", runc=runc, spec_dir=spec_dir, roots=roots, work=work)
    launchers = os.path.join(work, "launchers")
    installed = recorder.run([venv.script("cdictk"), "runtime", "install-launchers", "--dir", launchers], 60)
    if installed.ok:
        prestart = os.path.join(launchers, "cdictk-prestart")
        how = f"launchers in {launchers}"
        found = Shim(
            [os.path.join(launchers, "cdictk-runtime")], (prestart, [prestart, "prestart"]), env, how
        )
    else:
        row.tail = installed.tail()
        how = f"console scripts (install-launchers: {installed.why()})"
        cdictk = venv.script("cdictk")
        found = Shim([venv.script("cdictk-runtime")], (cdictk, [cdictk, "hook", "prestart"]), env, how)
    row.detail = how
    row.data["settings"] = settings_text(runc, spec_dir, roots)
    return found


def runtime_shim(prefix: str, *, runc: str, spec_dir: str, roots: Roots, work: str) -> Shim:
    """The node runtime's stable paths under ``prefix``: cdictk-runtime (its shell front, which sends
    every command to the runtime's shim while ``CDICTK_CONFIG`` names private settings) and the legacy
    prestart hook, as an engine is configured with them."""
    env = shim_env("cdictk-config-runtime", runc=runc, spec_dir=spec_dir, roots=roots, work=work)
    front = os.path.join(prefix, "bin", "cdictk-runtime")
    hook = os.path.join(prefix, "bin", "nvidia-container-runtime-hook")
    return Shim([front], (hook, ["nvidia-container-runtime-hook", "prestart"]), env, f"{front}, {hook}")
