"""Transient CDI specs: one spec file per claim, written, removed and collected by its producer.

A DRA driver writes a spec per resource claim into ``/var/run/cdi`` and removes it when the claim goes.
The file is named as the reference library's ``GenerateTransientSpecName`` names it,
``<vendor>-<class>_<claim id>`` (``/`` in the id turned to ``_``), with ``.json``: JSON is what we
write fastest and every runtime reads it. A producer owns the files of its own kind only: ``gc``
removes a file only when its name has the producer's prefix *and* its ``kind`` is the producer's, since
names alone can collide (``a-b``/``c`` and ``a``/``b-c`` share the prefix ``a-b-c_``, and class
``gpu_x``'s names start with class ``gpu``'s prefix).

The spec dir is checked before the first write: not a symlink (a link swapped in would send root's
writes elsewhere), and root's alone (:func:`cdictk.startpath.trust.path_problem`: owned by root or us, nobody
else may write to it or to a directory above it), since the hooks of a spec run as root. Writes are
atomic (temp file, fsync, rename, fsync of the directory); removals are not fsync'ed: ``/var/run`` is
a tmpfs that no crash keeps, and ``gc`` at the next start takes what a crash left.
"""

from __future__ import annotations

import builtins
import json
import os
import stat
import threading
from collections.abc import Iterable

from cdictk.cdi.dump import dump_json
from cdictk.cdi.model import Spec
from cdictk.cdi.parse import parse_document
from cdictk.cdi.rules import check_spec
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.fsutil import atomic_write, read_capped, sweep_temps_of, writable_directory
from cdictk.startpath.specs.names import split_kind, vendor_or_class_problem
from cdictk.startpath.specs.specdirs import MAX_SPEC_BYTES
from cdictk.startpath.trust import WRITABLE, path_problem

SUFFIXES = (".json", ".yaml")  # what the reference library may have written for the same name
SPEC_MODE = 0o644  # runtimes of any user read specs


class SpecDirError(CdictkError):
    """The spec dir cannot be used: missing and not creatable, a symlink, or not root's alone."""

    def __init__(self, directory: str, reason: str) -> None:
        super().__init__(directory, "", reason)


class SpecExistsError(CdictkError):
    """A create-only write found another spec for the claim."""

    def __init__(self, path: str) -> None:
        super().__init__(path, "", "a different spec for this claim exists already")


def transient_spec_name(vendor: str, device_class: str, transient_id: str) -> str:
    """``<vendor>-<class>_<id>``, as the reference library's ``GenerateTransientSpecName``; no suffix."""
    return _prefix(vendor, device_class) + _id(transient_id)


def _prefix(vendor: str, device_class: str) -> str:
    for what, value in (("vendor", vendor), ("class", device_class)):
        problem = vendor_or_class_problem(what, value)
        if problem is not None:
            raise CdictkError("", what, problem)
    return f"{vendor}-{device_class}_"


class TransientSpecs:
    """The transient specs of one producer (vendor and class) in one spec dir."""

    def __init__(self, spec_dir: str = "/var/run/cdi", vendor: str = "nvidia.com", device_class: str = "gpu"):
        self.spec_dir = os.path.abspath(spec_dir)
        self.kind = f"{vendor}/{device_class}"
        self.prefix = _prefix(vendor, device_class)
        self._kind_line = f"  {json.dumps('kind')}: {json.dumps(self.kind)},".encode()
        self._checked = False
        self._lock = threading.Lock()  # only guards the first check of the directory

    def path(self, claim_uid: str) -> str:
        return os.path.join(self.spec_dir, self.prefix + _id(claim_uid) + ".json")

    def write(self, claim_uid: str, spec: Spec, *, replace: bool = True) -> builtins.list[str]:
        """Write ``spec`` as the claim's spec; the qualified names of its devices.

        ``replace=False``: create only. A spec of the claim with the same bytes is left as it is (a
        retried prepare); another one is a SpecExistsError.
        """
        if spec.kind != self.kind:
            raise CdictkError(
                "", "kind", f'spec of kind "{spec.kind}" given to the producer of "{self.kind}"'
            )
        problems = check_spec(spec, self.path(claim_uid))
        if problems:
            raise CdictkError(problems[0].file, problems[0].field, f"invalid spec: {problems[0].reason}")
        self._check_dir(create=True)
        path = self.path(claim_uid)
        if replace and os.path.lexists(path) and not self._ours(path):
            raise CdictkError(path, "", f'not a spec of "{self.kind}": another producer\'s, left alone')
        data = dump_json(spec).encode()

        try:
            atomic_write(path, data, mode=SPEC_MODE, keep_mode=False, lock=True, no_replace=not replace)
        except FileExistsError as exc:
            if _read(path) != data:
                raise SpecExistsError(path) from exc
        vendor, cls = split_kind(self.kind)
        return [f"{vendor}/{cls}={device.name}" for device in spec.devices]

    def remove(self, claim_uid: str) -> None:
        """Remove the claim's spec; nothing to remove is no error (an unprepare may come twice). A file
        of the name that is not a spec of this producer's kind is left alone."""
        self._check_dir(create=False)
        base = os.path.join(self.spec_dir, self.prefix + _id(claim_uid))
        for suffix in SUFFIXES:
            if not os.path.lexists(base + suffix) or not self._ours(base + suffix):
                continue
            try:
                os.unlink(base + suffix)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise CdictkError(base + suffix, "", f"cannot remove: {exc.strerror}") from exc

    def list(self) -> builtins.list[str]:
        """The claim ids (``/`` read back as ``_``) this producer has specs for, sorted."""
        return sorted({claim for claim, path in self._files() if self._ours(path)})

    def gc(self, live_claim_uids: Iterable[str]) -> builtins.list[str]:
        """Remove this producer's specs of claims not in ``live_claim_uids``, and temporary files its
        killed writers left; the claim ids removed. Files of other producers are never touched."""

        live = {_id(uid) for uid in live_claim_uids}
        removed: set[str] = set()
        for claim, path in self._files():
            if claim in live or not self._ours(path):
                continue
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise CdictkError(path, "", f"cannot remove: {exc.strerror}") from exc
            removed.add(claim)
        sweep_temps_of(self.spec_dir, self.prefix)
        return sorted(removed)

    def _files(self) -> builtins.list[tuple[str, str]]:
        """(claim id, path) of each file whose name has this producer's prefix."""
        if not self._check_dir(create=False):
            return []
        found = []
        try:
            with os.scandir(self.spec_dir) as entries:
                for entry in entries:
                    name = entry.name
                    if name.startswith(self.prefix) and name.endswith(SUFFIXES):  # both: 5 characters
                        found.append((name[len(self.prefix) : -5], entry.path))
        except OSError as exc:
            raise SpecDirError(self.spec_dir, f"cannot list: {exc.strerror}") from exc
        return found

    def _ours(self, path: str) -> bool:
        """Whether the file is a spec of this producer's kind (its ``kind`` read, YAML as well).

        What :meth:`write` wrote starts with the same three lines in every file (``{``, the version,
        the kind): those are compared without a parse, which keeps ``gc`` of thousands of claims
        within a second. Anything else is parsed.
        """
        lines = (_head(path) or b"").split(b"\n", 3)
        fast = len(lines) > 3 and lines[0] == b"{" and lines[1].startswith(b'  "cdiVersion": ')
        return (fast and lines[2] == self._kind_line) or self._parsed_kind(path)

    def _parsed_kind(self, path: str) -> bool:
        data = _read(path)
        if data is None:
            return False
        try:
            document = json.loads(data)
        except ValueError:
            try:
                document = parse_document(data, path)
            except CdictkError:
                return False
        return isinstance(document, dict) and document.get("kind") == self.kind

    def _check_dir(self, *, create: bool) -> bool:
        """Whether the spec dir exists (made when ``create``); SpecDirError when it must not be used.

        The walk up to ``/`` is done once; the directory itself is looked at every time (one lstat),
        so a symlink or a chmod put there later is still refused.
        """
        try:
            info = os.lstat(self.spec_dir)
        except FileNotFoundError:
            if not create:
                return False

            try:
                writable_directory(self.spec_dir)
            except CdictkError as exc:
                raise SpecDirError(self.spec_dir, exc.problem.reason) from exc
            info = os.lstat(self.spec_dir)
        if stat.S_ISLNK(info.st_mode):
            raise SpecDirError(self.spec_dir, "is a symlink; refusing to write specs through it")
        if not stat.S_ISDIR(info.st_mode):
            raise SpecDirError(self.spec_dir, "not a directory")
        if info.st_uid not in (0, os.geteuid()):
            raise SpecDirError(self.spec_dir, f"owned by uid {info.st_uid}, not by root or us")
        if info.st_mode & WRITABLE:
            raise SpecDirError(self.spec_dir, f"writable by others (mode {stat.S_IMODE(info.st_mode):04o})")
        with self._lock:
            if not self._checked:
                why = path_problem(self.spec_dir)
                if why is not None:
                    raise SpecDirError(self.spec_dir, f"not root's alone: {why}")
                self._checked = True
        return True


def _id(claim_uid: str) -> str:
    if not claim_uid:
        raise CdictkError("", "claim uid", "empty")
    if "\0" in claim_uid or claim_uid in (".", ".."):
        raise CdictkError("", "claim uid", f"{claim_uid!r} cannot be part of a file name")
    return claim_uid.replace("/", "_")


def _read(path: str) -> bytes | None:

    try:
        return read_capped(path, MAX_SPEC_BYTES)
    except CdictkError:
        return None


def _head(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 512)
    except OSError:
        return None
    finally:
        os.close(fd)
