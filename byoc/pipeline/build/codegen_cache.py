"""A cache of what codegens compile, so that building a model again does not run a slow vendor compiler again.

A codegen opts in by declaring :attr:`Codegen.cache_version <byoc.vendor.Codegen.cache_version>`. The modules its
``compile`` returns for a vendor's partitions are then stored under a key made of everything ``compile`` was
given and may depend on: each :class:`~byoc.vendor.graph.PartitionGraph` (ops, attributes, shapes, dtypes, the
bytes of every constant, dims, options, dim bounds), the options, the vendor's name, the codegen's class and
``cache_version``, and byoc's version. A build that finds the key loads the modules and does not call
``compile`` (onnxruntime's EP context and ExecuTorch's processed blobs serve the same end).

Where: ``$BYOC_CODEGEN_CACHE`` when set (``off`` turns the cache off), else ``~/.cache/byoc/codegen``. An
entry is one file, written whole (a temporary file, then renamed), so a build that stops midway or two builds
at once leave no half entry; an entry that does not read back is a miss and is written again.

How modules are kept, by what they are:

- a :class:`~byoc.vendor.csource.CSource` as itself: its code, symbols and blobs;
- a C source module (kind ``c``, what ``CSourceModuleCreate`` makes) as its source and the partition symbols
  it defines, made again with ``CSourceModuleCreate``;
- a module TVM serializes into an exported library (a runtime of the vendor's own, as byoc's graph runtimes)
  as those bytes, loaded back by its kind's ``ffi.Module.load_from_bytes.<kind>``, as loading a library does.

A module that is neither (or that imports other modules) is not cached: the build goes on and compiles again
the next time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import struct
import tempfile
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from byoc._version import __version__
from byoc.vendor.csource import CSource

_log = logging.getLogger(__name__)

#: The environment variable that moves the cache (a folder) or turns it off (``off``).
CACHE_ENV = "BYOC_CODEGEN_CACHE"
_MAGIC = b"BYOCCG01"


def cache_folder() -> Optional[Path]:
    """Where entries go, or None when the cache is off."""
    value = os.environ.get(CACHE_ENV, "")
    if value.strip().lower() == "off":
        return None
    return Path(value) if value else Path.home() / ".cache" / "byoc" / "codegen"


def compile_cached(codegen: Any, vendor: str, graphs: Sequence[Any], options: Mapping[str, Any]) -> list:
    """``codegen.compile(graphs, options)``, or the modules a build with the same inputs stored (module
    docstring); ``codegen`` is a :class:`~byoc.vendor.Codegen`."""
    folder = cache_folder()
    if not codegen.cache_version or folder is None:
        return list(codegen.compile(graphs, dict(options)))
    path = folder / f"{cache_key(codegen, vendor, graphs, options)}.bin"
    found = _read(path)
    if found is not None:
        _log.info("%s: %d partition(s) from the codegen cache (%s)", vendor, len(graphs), path.name)
        return found
    modules = list(codegen.compile(graphs, dict(options)))
    records = _records(modules, graphs)
    if records is None:
        _log.info("%s: not cached: a module is neither C source nor serializable", vendor)
    else:
        _write(path, records)
    return modules


def cache_key(codegen: Any, vendor: str, graphs: Sequence[Any], options: Mapping[str, Any]) -> str:
    """The hex digest that names the entry of ``codegen`` compiling ``graphs`` with ``options``."""
    wrapped = getattr(codegen, "wrapped", codegen)
    digest = hashlib.sha256()
    head = {"byoc": __version__, "vendor": vendor, "codegen": f"{type(wrapped).__module__}.{type(wrapped).__qualname__}",
            "version": codegen.cache_version, "options": _plain(options)}
    digest.update(json.dumps(head, sort_keys=True).encode())
    for graph in graphs:
        _digest_graph(digest, graph)
    return digest.hexdigest()


def _plain(value: Any) -> Any:
    """``value`` as JSON can hold it, deterministically and whole: numpy scalars as Python ones, tuples as lists,
    a dataclass (a quantized unit's parameters) field by field, an array by the digest of its bytes. Never a
    ``repr``, which numpy shortens past 1,000 elements: two per-channel scales that differ in the middle would
    name one entry."""
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        return {"array": data.dtype.str, "shape": list(data.shape), "sha256": hashlib.sha256(data.tobytes()).hexdigest()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"dataclass": type(value).__name__,
                **{f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda item: str(item[0]))}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def _tensor(tensor: Any) -> list:
    return [tensor.id, _plain(tensor.shape), tensor.dtype, tensor.kind]


def _digest_graph(digest, graph: Any) -> None:
    """Everything of ``graph`` a codegen may read, into ``digest``; each constant's bytes once."""
    record = {
        "symbol": graph.symbol, "inputs": [_tensor(t) for t in graph.inputs],
        "outputs": [_tensor(t) for t in graph.outputs], "dims": _plain(graph.dims),
        "shape_arguments": _plain(graph.shape_arguments), "options": _plain(graph.options),
        "dim_bounds": _plain(graph.dim_bounds),
        "ops": [[c.op, [_tensor(t) for t in c.inputs], _tensor(c.output), _plain(c.attrs), c.rule, c.group,
                 _plain(c.quant)] for c in graph.ops],
    }
    digest.update(json.dumps(record, sort_keys=True).encode())
    for constant in graph.constants:
        data = np.ascontiguousarray(constant.data)
        digest.update(f"{constant.id}:{data.dtype.str}:{data.shape}".encode())
        digest.update(data.tobytes())


def _records(modules: Sequence[Any], graphs: Sequence[Any]) -> Optional[list[tuple[dict, bytes]]]:
    """Each module as ``(how to make it again, its bytes)``, or None when one cannot be kept."""
    import tvm

    records = []
    for module in modules:
        if isinstance(module, CSource):
            blobs = list(module.blobs.items())
            records.append(({"form": "csource", "symbols": list(module.symbols),
                             "blobs": [[name, len(data)] for name, data in blobs]},
                            module.code.encode() + b"".join(data for _, data in blobs)))
            continue
        kind = str(module.kind)
        if list(module.imports):
            return None
        if kind == "c":
            symbols = [g.symbol for g in graphs if module.implements_function(g.symbol)]
            records.append(({"form": "c", "symbols": symbols}, module.inspect_source().encode()))
            continue
        if not module.is_binary_serializable():
            return None
        container = tvm.get_global_func("runtime.CSourceModuleCreate")("", "c", [], [])
        container.import_module(module)
        packed = bytes(tvm.get_global_func("runtime.ModulePackImportsToTensor")(container).numpy())
        saved = _saved_module(packed)
        if saved is None or saved[0] != kind:
            return None
        records.append(({"form": "bytes", "kind": kind}, saved[1]))
    return records


def _saved_module(packed: bytes) -> Optional[tuple[str, bytes]]:
    """``(kind, bytes)`` of the one module in TVM's packed imports of a container (the blob an exported library
    embeds: its length, the import tree's row pointers and child indices, then each module's kind and, but for
    the container's ``_lib``, its bytes), or None for any other layout."""
    def u64(offset: int) -> tuple[int, int]:
        return struct.unpack_from("<Q", packed, offset)[0], offset + 8

    try:
        size, at = u64(0)
        rows, at = u64(at)
        at += 8 * rows
        children, at = u64(at)
        at += 8 * children
        saved = []
        while at < 8 + size:
            length, at = u64(at)
            kind = packed[at:at + length].decode()
            at += length
            if kind != "_lib":
                length, at = u64(at)
                saved.append((kind, packed[at:at + length]))
                at += length
    except (struct.error, UnicodeDecodeError):
        return None
    return saved[0] if len(saved) == 1 and at == 8 + size else None


def _write(path: Path, records: list[tuple[dict, bytes]]) -> None:
    """The entry, written whole or not at all; a cache that cannot be written only costs the next build time."""
    header = json.dumps([{**how, "bytes": len(data)} for how, data in records]).encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".partial-", delete=False) as out:
            out.write(_MAGIC + struct.pack("<Q", len(header)) + header)
            for _, data in records:
                out.write(data)
        os.replace(out.name, path)
    except OSError as err:
        _log.info("codegen cache: could not write %s (%s)", path, err)


def _read(path: Path) -> Optional[list]:
    """The modules of the entry at ``path``, or None (no entry, or one that does not read back)."""
    import tvm
    import tvm_ffi

    try:
        blob = path.read_bytes()
    except OSError:
        return None
    try:
        if blob[:8] != _MAGIC:
            return None
        (length,) = struct.unpack_from("<Q", blob, 8)
        records = json.loads(blob[16:16 + length])
        at, modules = 16 + length, []
        for record in records:
            data = blob[at:at + record["bytes"]]
            at += record["bytes"]
            if record["form"] == "csource":
                sizes = [size for _, size in record["blobs"]]
                code, at_blob = data[:len(data) - sum(sizes)], len(data) - sum(sizes)
                blobs = {}
                for (name, size) in record["blobs"]:
                    blobs[name], at_blob = data[at_blob:at_blob + size], at_blob + size
                modules.append(CSource(code.decode(), tuple(record["symbols"]), blobs))
            elif record["form"] == "c":
                create = tvm.get_global_func("runtime.CSourceModuleCreate")
                modules.append(create(data.decode(), "c", record["symbols"], []))
            else:
                load = tvm_ffi.get_global_func(f"ffi.Module.load_from_bytes.{record['kind']}", allow_missing=True)
                if load is None:
                    return None
                modules.append(load(data))
        if at != len(blob):
            return None
    except Exception as err:  # noqa: BLE001 - a damaged entry is a miss, never a failed build
        _log.info("codegen cache: %s does not read back (%s: %s); compiling", path.name, type(err).__name__, err)
        return None
    return modules
