"""The SONAME of a shared library, read from its dynamic segment with pyelftools' ELF structures.

``ELFFile`` costs ~1 ms a file (it rebuilds every struct definition and every section to find the
dynamic string table) and 27 ms to import, too much for the forty-odd libraries of a driver on every
generation. ``SonameReader`` parses only the ELF header, the program headers and the dynamic entries with
pyelftools' structs, built once per ELF flavour, and reads the name from the table ``DT_STRTAB`` points
at. pyelftools is imported on first use: only the generator needs it.
"""

from __future__ import annotations

import os
from typing import Any, BinaryIO

# A driver library is at most a few hundred MiB (libcuda ~100 MiB); anything bigger is not one of them.
MAX_ELF_BYTES = 1 << 30
_MAX_PHDRS = 256
_MAX_DYN_ENTRIES = 4096
_MAX_NAME = 4096
_ELF_MAGIC = b"\x7fELF"


class SonameReader:
    """Reads DT_SONAME from many files, sharing the struct definitions between them."""

    def __init__(self) -> None:
        self._basic: dict[tuple[bool, int], Any] = {}
        self._structs: dict[tuple[bool, int, str, str, str], Any] = {}

    def read(self, path: str) -> str | None:
        """DT_SONAME of the ELF file at ``path``; None when it has none or is not a readable ELF file."""
        from elftools.common.exceptions import ELFError  # noqa: PLC0415 (lazy: see module docstring)

        try:
            with open(path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size > MAX_ELF_BYTES:
                    return None
                return self._soname(handle, size)
        except (OSError, ELFError, ValueError, KeyError, IndexError, UnicodeDecodeError):
            return None

    def _structs_for(self, handle: BinaryIO) -> tuple[Any, Any] | None:
        from elftools.common.utils import struct_parse  # noqa: PLC0415
        from elftools.elf.structs import ELFStructs  # noqa: PLC0415

        ident = handle.read(16)
        if (
            len(ident) < 16
            or not ident.startswith(_ELF_MAGIC)
            or ident[4] not in (1, 2)
            or ident[5] not in (1, 2)
        ):
            return None
        little, elfclass = ident[5] == 1, 32 if ident[4] == 1 else 64
        basic = self._basic.get((little, elfclass))
        if basic is None:
            basic = self._basic[(little, elfclass)] = ELFStructs(little_endian=little, elfclass=elfclass)
            basic.create_basic_structs()
        header = struct_parse(basic.Elf_Ehdr, handle, 0)
        key = (little, elfclass, header.e_type, header.e_machine, header.e_ident.EI_OSABI)
        structs = self._structs.get(key)
        if structs is None:
            structs = ELFStructs(little_endian=little, elfclass=elfclass)
            structs.create_basic_structs()
            structs.create_advanced_structs(header.e_type, header.e_machine, header.e_ident.EI_OSABI)
            self._structs[key] = structs
        return structs, header

    def _soname(self, handle: BinaryIO, size: int) -> str | None:
        from elftools.common.utils import struct_parse  # noqa: PLC0415

        found = self._structs_for(handle)
        if found is None:
            return None
        structs, header = found
        if header.e_phnum > _MAX_PHDRS:
            return None
        loads = []
        dynamic = None
        for index in range(header.e_phnum):
            phdr = struct_parse(structs.Elf_Phdr, handle, header.e_phoff + index * header.e_phentsize)
            if phdr.p_type == "PT_LOAD":
                loads.append(phdr)
            elif phdr.p_type == "PT_DYNAMIC":
                dynamic = phdr
        if dynamic is None:
            return None
        strtab = soname = None
        entry_size = structs.Elf_Dyn.sizeof()
        for index in range(min(dynamic.p_filesz // entry_size, _MAX_DYN_ENTRIES)):
            entry = struct_parse(structs.Elf_Dyn, handle, dynamic.p_offset + index * entry_size)
            if entry.d_tag == "DT_NULL":
                break
            if entry.d_tag == "DT_STRTAB":
                strtab = entry.d_val
            elif entry.d_tag == "DT_SONAME":
                soname = entry.d_val
        if strtab is None or soname is None:
            return None
        # DT_STRTAB is an address; the loadable segment that maps it gives its place in the file.
        for load in loads:
            if load.p_vaddr <= strtab < load.p_vaddr + load.p_filesz:
                offset = strtab - load.p_vaddr + load.p_offset + soname
                break
        else:
            return None
        if not 0 <= offset < size:
            return None
        handle.seek(offset)
        raw = handle.read(_MAX_NAME)
        end = raw.find(b"\0")
        return raw[:end].decode("utf-8") if end > 0 else None
