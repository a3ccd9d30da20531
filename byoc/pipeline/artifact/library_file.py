"""An exported library's file: whether the loader's segments are all in it, and the table of modules TVM embeds
in it (the symbol ``__tvm_ffi__library_bin``): where it is in the file, and giving its pages back once a load has
read it.

A library cut short still loads: the loader maps its segments past the file's end, and the first read there is a
SIGBUS (the weights sections are the library's bulk, so most cuts land in them). :func:`missing_bytes` says so
before the loader sees the file.

TVM reads that table whole when it loads the library: it copies each module's bytes out and deserializes them
(the Relax VM's program and host constants, each graph runtime's blob). The pages it read stay resident
afterwards, though nothing reads them again. :func:`release_module_table` gives them back; the weights of the graph
runtimes are not in the table but in sections of their own (:mod:`~byoc.pipeline.artifact.weights_section`).
:func:`module_table_span` lets ``byoc.load`` look for the module kinds a library holds without reading its weights.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct
from pathlib import Path
from typing import Optional

SYMBOL = "__tvm_ffi__library_bin"
_SHT_DYNSYM = 11


def missing_bytes(path: Path) -> int:
    """How many bytes the loadable segments (PT_LOAD) of the ELF64 library at ``path`` need past the file's end:
    0 for a whole file (and for a file whose program headers cannot be read, which the loader refuses itself)."""
    with open(path, "rb") as file:
        head = file.read(64)
        size = os.fstat(file.fileno()).st_size
        if len(head) < 64 or head[4] != 2 or head[5] not in (1, 2):
            return 0
        order = "<" if head[5] == 1 else ">"
        phoff, = struct.unpack_from(order + "Q", head, 0x20)
        phentsize, phnum = struct.unpack_from(order + "HH", head, 0x36)
        if phentsize != 56 or phoff + 56 * phnum > size:
            return 0
        file.seek(phoff)
        table = file.read(56 * phnum)
    end = 0
    for at in range(0, len(table), 56):
        kind, _, offset, _, _, filesz, _, _ = struct.unpack_from(order + "IIQQQQQQ", table, at)
        if kind == 1:  # PT_LOAD
            end = max(end, offset + filesz)
    return max(0, end - size)


def module_table_span(path: Path) -> Optional[tuple[int, int]]:
    """(file offset, bytes) of the module table of the little-endian ELF64 library at ``path``, found through its
    dynamic symbol table; None when the file has none or is not laid out so (the caller reads the whole file)."""
    with open(path, "rb") as file:
        data = file.read(64)
        if len(data) < 64 or data[:6] != b"\x7fELF\x02\x01":  # 64-bit, little-endian
            return None
        size = os.fstat(file.fileno()).st_size

        def read(offset: int, count: int) -> bytes:
            if offset < 0 or count < 0 or offset + count > size:
                raise ValueError("outside the file")
            file.seek(offset)
            return file.read(count)

        try:
            shoff, = struct.unpack_from("<Q", data, 0x28)
            shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
            if shentsize != 64:
                return None
            sections = [struct.unpack("<IIQQQQIIQQ", read(shoff + 64 * i, 64)) for i in range(shnum)]
            dynsym = next((s for s in sections if s[1] == _SHT_DYNSYM), None)
            if dynsym is None or dynsym[6] >= shnum:
                return None
            strtab = sections[dynsym[6]]
            names = read(strtab[4], strtab[5])
            symbols = read(dynsym[4], dynsym[5])
            wanted = SYMBOL.encode() + b"\0"
            for at in range(0, len(symbols) - 23, 24):
                name, _, _, shndx, value, _ = struct.unpack_from("<IBBHQQ", symbols, at)
                if names[name:name + len(wanted)] != wanted or not 0 < shndx < shnum:
                    continue
                section = sections[shndx]
                offset = section[4] + value - section[3]
                nbytes, = struct.unpack("<Q", read(offset, 8))
                read(offset, 8 + nbytes)  # within the file, or not the table
                return offset, 8 + nbytes
        except (ValueError, struct.error):
            return None
    return None


def release_module_table(path: Path) -> None:
    """Gives back the pages of the module table of ``path``, a library this process has loaded (and read the
    table of): a later read would fault them in from the file again. Does nothing when the library is not
    loaded, has no table, or the system has no ``madvise``."""
    if not hasattr(mmap, "MADV_DONTNEED"):
        return
    try:
        library = ctypes.CDLL(str(path), mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return
    handle = library._handle  # noqa: SLF001 - ctypes never closes what CDLL opened: the loader counts it
    try:
        try:
            table = ctypes.c_uint64.in_dll(library, SYMBOL)
        except ValueError:
            return
        start, end = ctypes.addressof(table), ctypes.addressof(table) + 8 + table.value
        page = mmap.PAGESIZE
        first, last = (start + page - 1) // page * page, end // page * page
        if last > first:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first), mmap.MADV_DONTNEED)
    finally:
        import _ctypes

        _ctypes.dlclose(handle)
