"""A prepared claim's CDI names, formed as NVIDIA's DRA driver forms them: a pod's devices and the spec
file read the same whichever of the two prepared the claim.

- Kind ``k8s.gpu.nvidia.com/claim``: a kind of the claims' own, apart from the node spec's
  ``nvidia.com/gpu``, so a claim's devices never collide with the node's.
- Device ``<claim UID>-<DRA device name>``, e.g. ``k8s.gpu.nvidia.com/claim=<uid>-gpu-0``: the UID
  inside makes every claim's names new, and runtimes, which cache specs and read them again only for a
  name they miss, never answer one claim's name with another's devices. It is the form of
  :meth:`cdictk.api.NodeSpecs.claim_spec` too (``<claim UID>-<id>``).
- Spec file: the reference library's transient spec name (:func:`cdictk.api.transient_spec_name`),
  ``k8s.gpu.nvidia.com-claim_<claim UID>``, in the transient spec dir ``/var/run/cdi``. It is written by
  :class:`cdictk.api.TransientSpecs`, as ``.json`` where NVIDIA's driver writes ``.yaml``: runtimes
  read both, and the store removes and collects a claim's spec under either suffix.

Every name is checked by the CDI name rules runtimes apply (:mod:`cdictk.startpath.specs.names`); a
claim UID or device name that breaks them fails with one line, before it reaches a file name.
"""

from __future__ import annotations

from cdictk.api import InvalidNameError, TransientSpecs, check_kind, qualified_name, transient_spec_name
from cdictk.startpath.specs.names import device_name_problem

VENDOR = "k8s.gpu.nvidia.com"
DEVICE_CLASS = "claim"
KIND = check_kind(f"{VENDOR}/{DEVICE_CLASS}", spec_limits=True)
SPEC_DIR = "/var/run/cdi"  # a tmpfs: a reboot takes the specs with the containers that used them


def _checked(what: str, value: str) -> str:
    problem = device_name_problem(value)
    if problem is not None:
        raise InvalidNameError(f"{what}: {problem}")
    return value


def device_name(claim_uid: str, device: str) -> str:
    """``<claim_uid>-<device>``, the CDI device name of an allocated device (``device`` is its name in
    the ResourceSlice: ``gpu-0``, ``gpu-0-mig-1g10gb-19-0``)."""
    _checked("claim uid", claim_uid)
    return _checked("device name", f"{claim_uid}-{_checked('device', device)}")


def cdi_device_id(claim_uid: str, device: str) -> str:
    """The fully qualified name the kubelet hands the runtime: ``k8s.gpu.nvidia.com/claim=<uid>-<device>``."""
    return qualified_name(VENDOR, DEVICE_CLASS, device_name(claim_uid, device))


def spec_name(claim_uid: str) -> str:
    """The claim's spec file name, without its suffix: ``k8s.gpu.nvidia.com-claim_<claim_uid>``."""
    return transient_spec_name(VENDOR, DEVICE_CLASS, _checked("claim uid", claim_uid))


def claim_specs(spec_dir: str = SPEC_DIR) -> TransientSpecs:
    """The store of the claims' spec files in ``spec_dir``: write, remove, collect, list."""
    return TransientSpecs(spec_dir, VENDOR, DEVICE_CLASS)
