"""A container image from the node's own C library and the carried static busybox.

A bare node has no images. The programs the check runs in containers (the CUDA program, the probe, the
node's nvidia-smi, whose driver libraries the spec brings) need the node's loader and C library, which
are found with the loader itself (what ``ldd`` runs) and copied to the paths they have
on the node; the node's merged-/usr links (``/lib -> usr/lib``) are copied too, so that a path in a
spec means the same in the image. busybox gives ``sh`` and the tools. Each container gets its own copy
made of hard links (milliseconds): what runc and the hooks add (mount points, links, the ld cache)
stays with that container, and nothing writes into an existing file.
"""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Iterable

from realnode.recorder import Recorder

MERGED = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
DIRS = ("bin", "sbin", "usr/bin", "usr/sbin", "etc/ld.so.conf.d", "dev", "proc", "sys", "tmp", "root", "run")
PROGRAM_DIR = "/opt/realnode"
PT_INTERP = 3


def interpreter(path: str) -> str | None:
    """The ELF program's PT_INTERP (its loader), or None (static, not ELF, not 64-bit little-endian)."""
    with open(path, "rb") as handle:
        header = handle.read(64)
        if len(header) < 64 or header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
            return None
        (phoff,) = struct.unpack_from("<Q", header, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", header, 0x36)
        handle.seek(phoff)
        table = handle.read(phentsize * phnum)
    for index in range(phnum):
        kind, _, offset, _, _, size = struct.unpack_from("<IIQQQQ", table, index * phentsize)
        if kind == PT_INTERP:
            with open(path, "rb") as handle:
                handle.seek(offset)
                return handle.read(size).rstrip(b"\0").decode()
    return None


def parse_list(text: str) -> tuple[list[str], list[str]]:
    """The loader's list (``ldd``'s output): the paths it loads (the loader included) and the names not
    found."""
    found, missing = [], []
    for raw in text.splitlines():
        line = raw.strip()
        if "=>" in line:
            name, _, where = line.partition("=>")
            where = where.strip()
            if where.startswith("not found"):
                missing.append(name.strip())
            elif where.startswith("/"):
                found.append(where.split(" (", 1)[0])
        elif line.startswith("/"):
            found.append(line.split(" (", 1)[0])
    return found, missing


def dependencies(recorder: Recorder, program: str) -> tuple[list[str], list[str]]:
    """What ``program`` loads on this node (its loader first), and what the loader cannot find."""
    loader = interpreter(program)
    if loader is None:
        return [], []
    # What ldd does: ``ld.so --list`` stops at the first library it cannot find and lists nothing.
    trace = {"LD_TRACE_LOADED_OBJECTS": "1", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    listed = recorder.run([loader, program], 20, env=trace, quiet=True)
    found, missing = parse_list(listed.stdout)
    return [loader, *[path for path in found if path != loader]], missing


def copy_in(root: str, path: str) -> None:
    """The node's file at ``path`` (links followed) into the image at the same path."""
    target = os.path.join(root, path.lstrip("/"))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if not os.path.lexists(target):
        shutil.copyfile(path, target)
        os.chmod(target, 0o755)


def build(
    recorder: Recorder, root: str, busybox: str, programs: dict[str, str], loaded_by: Iterable[str]
) -> list[str]:
    """The image at ``root``: busybox, ``programs`` (name -> file, put in /opt/realnode), and what they
    and the node programs ``loaded_by`` load. Returns the libraries nobody could find."""
    os.makedirs(root)
    for name in MERGED:
        if os.path.islink(f"/{name}"):
            # Relative (/lib -> usr/lib), so that the files copied in below go into the image even
            # where the node's link is absolute.
            target = os.readlink(f"/{name}").lstrip("/")
            os.symlink(target, os.path.join(root, name))
            os.makedirs(os.path.join(root, target), exist_ok=True)
    for directory in DIRS:
        os.makedirs(os.path.join(root, directory), exist_ok=True)
    shutil.copyfile(busybox, os.path.join(root, "bin", "busybox"))
    os.chmod(os.path.join(root, "bin", "busybox"), 0o755)
    applets = recorder.run([busybox, "--list-full"], 20, quiet=True).stdout.split()
    for applet in applets:
        link = os.path.join(root, applet)
        if applet != "bin/busybox" and not os.path.lexists(link):
            os.makedirs(os.path.dirname(link), exist_ok=True)
            os.symlink("/bin/busybox", link)
    missing: list[str] = []
    for name, program in programs.items():
        target = os.path.join(root, PROGRAM_DIR.lstrip("/"), name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(program, target)
        os.chmod(target, 0o755)
    for program in [*programs.values(), *loaded_by]:
        libraries, lacking = dependencies(recorder, program)
        missing += [name for name in lacking if name not in missing]
        for library in libraries:
            if not os.path.basename(library).startswith(("libcuda", "libnvidia")):  # the spec's to bring
                copy_in(root, library)
    etc = os.path.join(root, "etc")
    for name, text in (
        ("passwd", "root:x:0:0:root:/root:/bin/sh\n"),
        ("group", "root:x:0:\n"),
        ("ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n"),
    ):
        with open(os.path.join(etc, name), "w", encoding="utf-8") as handle:
            handle.write(text)
    return missing


def linked_copy(source: str, target: str) -> None:
    """``source`` at ``target``: directories and links made anew, files hard-linked."""
    os.makedirs(target)
    for directory, subdirs, files in os.walk(source):
        relative = os.path.relpath(directory, source)
        into = os.path.join(target, relative) if relative != "." else target
        for name in subdirs:
            path = os.path.join(directory, name)
            if os.path.islink(path):
                os.symlink(os.readlink(path), os.path.join(into, name))
            else:
                os.mkdir(os.path.join(into, name))
                os.chmod(os.path.join(into, name), os.stat(path).st_mode & 0o7777)  # not the umask's
        for name in files:
            path = os.path.join(directory, name)
            if os.path.islink(path):
                os.symlink(os.readlink(path), os.path.join(into, name))
            else:
                try:
                    os.link(path, os.path.join(into, name))
                except OSError:
                    shutil.copy2(path, os.path.join(into, name))
