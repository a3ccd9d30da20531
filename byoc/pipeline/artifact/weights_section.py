"""The weights of an artifact's graph-runtime modules as sections of the library it is exported into.

A graph runtime (``codegens/graph_runtime/``: json_runtime, dnnl) saves a module as a blob that TVM embeds in
the library and copies whole when the library is loaded. Weights in that blob would be held twice at load
(TVM's copy and the module's), and the file's pages a third time while TVM reads them. So at export each
module writes its weights to a file and names, in its blob, a symbol that the library defines over exactly
those bytes (``byoc.<runtime>.export_weights``). This module assembles those files into an object
(``.incbin``: no C literals, any target's assembler) that the link adds. When the library is loaded the
module reads its weights where the loader mapped them (``codegens/graph_runtime/weights.h``): the file's
pages, resident only while a kernel reads them in place, and shared by every artifact of the process that
loaded the same library.
"""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path
from typing import Iterator, Mapping

#: The alignment of each weights section in the library: a page, so a section's pages hold its bytes alone
#: (a kernel that gives back the pages of a weight it keeps reordered gives back nothing else).
SECTION_ALIGN = 4096


def graph_runtime_modules(module) -> list:
    """The modules under ``module`` (itself included, imports first to last) whose runtime can export weights:
    those of a kind ``byoc_<runtime>`` with a global ``byoc.<runtime>.export_weights``. By kind, not by the functions
    a module answers (``profile.runtime_modules``): asking another target's host module for one fails."""
    import tvm_ffi

    found, seen, todo = [], set(), [module]
    while todo:
        mod = todo.pop(0)
        if id(mod) in seen:
            continue
        seen.add(id(mod))
        kind = str(mod.kind)
        if kind.startswith("byoc_") and tvm_ffi.get_global_func(f"byoc.{kind[5:]}.export_weights",
                                                                 allow_missing=True) is not None:
            found.append(mod)
        todo.extend(mod.imports)
    return found


def sections_assembly(sections: Mapping[str, Path], kind: str = "byoc_weights") -> str:
    """Assembly that defines each symbol of ``sections`` over the bytes of its file (``.incbin``), page aligned,
    each in a read-only section of its own named ``.rodata.<kind>.<symbol>``."""
    lines = []
    for symbol, path in sections.items():
        lines += [f'\t.section .rodata.{kind}.{symbol},"a"', f"\t.balign {SECTION_ALIGN}",
                  f"\t.globl {symbol}", f"\t.type {symbol}, %object", f"{symbol}:",
                  f'\t.incbin "{path}"', f"\t.size {symbol}, . - {symbol}"]
    lines.append('\t.section .note.GNU-stack,"",%progbits')  # the weights are data: the stack stays non-executable
    return "\n".join(lines) + "\n"


def assembled(sections: Mapping[str, Path], compiler: str, folder: Path, stem: str, kind: str) -> str:
    """The object file (in ``folder``) ``compiler`` assembles from :func:`sections_assembly`; its path."""
    source, obj = folder / f"{stem}.S", folder / f"{stem}.o"
    source.write_text(sections_assembly(sections, kind))
    done = subprocess.run([compiler, "-c", str(source), "-o", str(obj)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"assembling the {kind} sections failed: {done.stderr.strip()[:400]}")
    return str(obj)


def blob_files(blobs: Mapping[str, bytes], folder: Path) -> dict[str, Path]:
    """Each of a codegen's blobs (:class:`byoc.vendor.csource.CSource`) written to a file of ``folder``: symbol
    -> the file, for :func:`sections_assembly` (``kind="byoc_blob"``)."""
    files = {}
    for name, data in blobs.items():
        files[name] = folder / f"blob_{name}.bin"
        files[name].write_bytes(data)
    return files


def blob_objects(blobs: Mapping[str, bytes], compiler: str, folder: Path) -> list[str]:
    """The object that defines each of a codegen's blobs as a symbol over its bytes, for ``export_library``'s
    ``addons``; none without blobs."""
    if not blobs:
        return []
    return [assembled(blob_files(blobs, folder), compiler, folder, "blobs", "byoc_blob")]


@contextlib.contextmanager
def weights_as_sections(executable, compiler: str, folder: Path) -> Iterator[list[str]]:
    """While open, the graph-runtime modules of ``executable`` save blobs that name library sections for their
    weights; yields the object files (in ``folder``) that define those sections, for ``export_library``'s
    ``addons`` (none when no module has weights). ``compiler`` assembles them for the artifact's target. On
    leaving, the modules carry their weights in their blobs again."""
    import tvm_ffi

    modules = graph_runtime_modules(executable.mod)
    exporting = []
    try:
        sections: dict[str, Path] = {}
        for index, module in enumerate(modules):
            export = tvm_ffi.get_global_func(f"byoc.{str(module.kind)[5:]}.export_weights")
            path = folder / f"weights{index}.bin"
            exporting.append(export)
            symbol = str(export(module, str(path)))
            if symbol:
                sections.setdefault(symbol, path)  # two modules with the same weights share one section
        if not sections:
            yield []
            return
        yield [assembled(sections, compiler, folder, "weights", "byoc_weights")]
    finally:
        for module, export in zip(modules, exporting):
            export(module, "")
