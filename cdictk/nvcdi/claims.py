"""A node's CDI edits kept warm for producers that make many small specs: per-claim specs for DRA.

Discovery is the slow part (NVML, the driver's libraries, ELF notes): it is done once, through
:func:`cdictk.nvcdi.nodespec.node_spec` like every spec cdictk makes, and its result kept until
``max_age`` seconds have passed or :meth:`NodeSpecs.refresh` is called. From it come the common edits
(the driver's nodes, libraries and hooks) and each device's edits, as NVIDIA's DRA driver keeps them.
A claim's spec is those put together: the common edits at the spec's level, and a device per
requested device named ``<claim uid>-<id>``; a MIG device carries its parent's node and its GPU and
compute instances' capability nodes (:mod:`cdictk.nvcdi.devices`). Devices are named by the ids
:mod:`cdictk.nvcdi.devices` knows: an index (``0``), a MIG device's ``GPU:slot`` (``0:1``), a GPU or
MIG UUID. ``cdi_version`` fits every spec to older readers, as ``cdictk cdi generate --cdi-version``
does (podman 4.3 and containerd 1.7 read up to 0.5.0); ``host_root`` is ``--host-root``, for a
producer that sees the node's ``/`` elsewhere (a DaemonSet's ``/host``).
"""

from __future__ import annotations

import copy
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from cdictk.cdi.model import ContainerEdits, Device, Spec
from cdictk.cdi.version import minimum_version
from cdictk.node.facts import NodeFacts
from cdictk.node.modes import Mode
from cdictk.nvcdi.hooks import hook_program
from cdictk.nvcdi.naming import Strategy
from cdictk.nvcdi.nodespec import NodeSpec, node_spec
from cdictk.nvcdi.options import SpecOptions
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.roots import Roots
from cdictk.startpath.specs.names import device_name_problem, kind_problem


class UnknownDeviceError(CdictkError):
    """A device id that names no device of the node (or a GPU in MIG mode, which has none of its own)."""

    def __init__(self, device_id: str, reason: str) -> None:
        super().__init__("", "device id", f"{device_id!r}: {reason}")


@dataclass(frozen=True, slots=True)
class _Warm:
    made: NodeSpec  # every device of the node, by index and by UUID
    devices: dict[str, Device]
    at: float


class NodeSpecs:
    """The node's edits, discovered once and reused until ``max_age`` or :meth:`refresh`. Thread-safe:
    one discovery at a time, and every answer is a copy the caller may change."""

    def __init__(
        self,
        driver_root: str = "/",
        *,
        dev_root: str | None = None,
        proc_root: str = "/proc",
        sys_root: str = "/sys",
        vendor: str = "nvidia.com",
        device_class: str = "gpu",
        max_age: float = 300.0,
        mode: str = "auto",
        hook_path: str | None = None,
        cdi_version: str | None = None,
        host_root: str = "/",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        problem = kind_problem(f"{vendor}/{device_class}", spec_limits=True)
        if problem is not None:
            # The kind is cut at its first "/": one in the vendor is the vendor's fault.
            part = "class" if problem.startswith("invalid class") and "/" not in vendor else "vendor"
            raise CdictkError("", part, problem)
        try:
            self._mode = Mode(mode)
        except ValueError as exc:
            raise CdictkError("", "mode", f"unknown mode {mode!r}") from exc
        self.roots = Roots.from_options(driver_root, dev_root, proc_root, sys_root)
        self.host_root = os.path.abspath(host_root)
        self.max_age = max_age
        self.vendor, self.device_class = vendor, device_class
        self._options = SpecOptions(
            vendor=vendor,
            cls=device_class,
            strategies=(Strategy.INDEX, Strategy.UUID),  # device names are then the ids themselves
            hook_program=hook_program(hook_path),
            all_device=False,
            target_version=cdi_version,
        )
        self._clock = clock
        self._lock = threading.Lock()
        self._warm: _Warm | None = None

    @property
    def kind(self) -> str:
        return f"{self.vendor}/{self.device_class}"

    def refresh(self) -> None:
        """Discover the node again now (after a MIG reconfiguration, a driver upgrade)."""
        with self._lock:
            self._warm = self._discover()

    def facts(self) -> NodeFacts:
        """What discovery found (GPUs, MIG devices, driver version); shared, not to be changed."""
        return self._current().made.facts

    def warnings(self) -> list[str]:
        return list(self._current().made.warnings)

    def common_edits(self) -> ContainerEdits:
        """The edits every container with a device of this node needs: driver nodes, libraries, hooks."""
        return copy.deepcopy(self._current().made.spec.container_edits)

    def device_edits(self, device_id: str) -> ContainerEdits:
        """One device's own edits: an index, ``GPU:slot``, a GPU or MIG UUID."""
        return copy.deepcopy(self._device(self._current(), device_id).container_edits)

    def spec(self, device_ids: Sequence[str] = ()) -> Spec:
        """A whole spec for ``device_ids`` (every device by default) with an ``all`` device, as
        ``cdictk cdi generate --device-id`` writes it, from the discovery kept."""
        warm = self._current()
        options = SpecOptions(
            vendor=self.vendor,
            cls=self.device_class,
            hook_program=self._options.hook_program,
            device_ids=tuple(device_ids),
            target_version=self._options.target_version,
        )
        made = node_spec(self.roots, self._mode, options, host_root=self.host_root, facts=warm.made.facts)
        return made.spec

    def claim_spec(
        self, claim_uid: str, device_ids: Sequence[str], *, names: Mapping[str, str] | None = None
    ) -> Spec:
        """The transient spec of a claim: the common edits, and a device ``<claim_uid>-<name>`` per id.

        A device's ``name`` is ``names[id]`` where ``names`` has the id, else the id itself: a DRA
        driver names the devices as its ResourceSlices do (``{"GPU-...": "gpu-0"}`` gives
        ``<claim_uid>-gpu-0``), whatever id finds them here.
        """
        if not device_ids:
            raise CdictkError("", "device ids", "a claim needs at least one device")
        names = names or {}
        warm = self._current()
        devices = []
        named: dict[str, str] = {}
        for device_id in dict.fromkeys(device_ids):
            name = f"{claim_uid}-{names.get(device_id, device_id)}"
            problem = device_name_problem(name)
            if problem is not None:
                raise CdictkError("", "names" if device_id in names else "claim uid", problem)
            if name in named:
                raise CdictkError(
                    "", "names", f"{named[name]!r} and {device_id!r} would both be device {name!r}"
                )
            named[name] = device_id
            edits = self._device(warm, device_id).container_edits
            devices.append(Device(name=name, container_edits=copy.deepcopy(edits)))
        spec = Spec(
            kind=self.kind,
            devices=devices,
            container_edits=copy.deepcopy(warm.made.spec.container_edits),
        )
        spec.cdi_version = minimum_version(spec)
        return spec

    def _current(self) -> _Warm:
        with self._lock:
            warm = self._warm
            if warm is None or self._clock() - warm.at >= self.max_age:
                warm = self._warm = self._discover()
            return warm

    def _discover(self) -> _Warm:
        made = node_spec(self.roots, self._mode, self._options, host_root=self.host_root)
        return _Warm(made, {device.name: device for device in made.spec.devices}, self._clock())

    def _device(self, warm: _Warm, device_id: str) -> Device:
        device = warm.devices.get(device_id)
        if device is not None:
            return device
        for gpu in warm.made.facts.gpus:
            if device_id in (str(gpu.index), gpu.uuid) and gpu.mig_enabled:
                slots = ", ".join(f"{gpu.index}:{mig.index}" for mig in gpu.migs) or "none"
                raise UnknownDeviceError(
                    device_id, f"GPU {gpu.index} is in MIG mode (its MIG devices: {slots})"
                )
        raise UnknownDeviceError(device_id, "no such GPU or MIG device on this node")
