"""Standalone deployment: a built model as a C program that needs no TVM runtime.

:func:`export_standalone` writes a folder that builds, with the target's C
compiler alone, into a static program running the whole model;
:func:`run_emulated` builds that program for the artifact's target and runs it
(natively on x86_64, under qemu-user for ppc64le and s390x).

How it is made. The artifact's partitioned Relax module goes through TVM's
own build pipeline (``RunCodegen`` then the passes of
``relax.pipeline.default_build_pipeline`` up to ``LowerAllocTensor``), so
the buffers are TVM's static memory plan. ``main`` is then walked binding by
binding and becomes straight-line C:

- calls to TIR PrimFuncs (what ``call_tir`` lowers to) call the host kernels,
  built by LLVM for the target into ``kernels.o`` and called through their
  tvm-ffi packed ABI (``__tvm_ffi_<name>``, arguments as DLTensor pointers);
- ``call_dps_packed`` to a C-source partition calls its ``__tvm_ffi_<name>``
  entry point, whose C comes from the vendor's C-source codegen;
- ``alloc_storage``/``alloc_tensor`` become static 64-byte-aligned arrays and
  offsets into them; ``reshape`` is a view; tuples, several inputs and
  several outputs are supported;
- host-kernel weights become C literals (float32 through
  :func:`byoc.codegens.c_source.float_literal`, float64 as hexadecimal
  literals, integers as integer literals), so the value and not the byte
  pattern is compiled in: correct on little- and big-endian targets;
- the runtime symbols the kernels use are stubs: workspace allocation with
  malloc, a serial ``parallel launch``, and error reporting to stderr.

What it does not do: the host kernels are built again by LLVM from the same
lowered module for the same target (not extracted from the artifact's
executable), parallel loops run serially, and :func:`run_emulated` builds the
program afresh on every call (seconds, not milliseconds).

Refused, with a :class:`StandaloneError` that says why: artifacts loaded from
a file (the Relax program is no longer there), symbolic shapes, partitions of
codegens that are not C-source (a JSON-runtime partition is run by a C++
runtime module on top of tvm-ffi, which does not exist for the cross
targets), packed calls other than C-source partitions, tensors of dtypes
other than float16/32/64 and (u)int8..64, and any other Relax construct
(control flow, ``match_cast``, calls to other Relax functions).

Tensor file format (inputs and outputs; all integers little-endian)::

    magic   8 bytes   b"BYOCTNS1"
    count   uint32    number of tensors
    then per tensor:
      code  uint32    DLPack type code: 0 int, 1 uint, 2 float
      bits  uint32    8, 16, 32 or 64
      ndim  uint32
      dims  ndim x int64
      data  prod(dims) elements, each little-endian, C order

The program is ``model INPUTS OUTPUTS``: it checks every input's dtype and
shape against the model, and writes the outputs in ONNX output order. It exits
0 on success, 2 on bad input files and 1 when a kernel reports an error.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

import numpy as np

from . import host_build
from .codegens.c_source.emitter import FFI_TYPES
from .errors import StandaloneError
from .targets import TargetPreset

MAGIC = b"BYOCTNS1"
PROGRAM = "model"
KERNELS_OBJECT = "kernels.o"

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")



# -- the tensor file format -------------------------------------------------------------
_CODES = {"i": 0, "u": 1, "f": 2}


def write_tensors(path: Union[str, os.PathLike], arrays) -> None:
    """Write ``arrays`` in the standalone tensor file format (see the module docstring)."""
    chunks = [MAGIC, np.uint32(len(arrays)).astype("<u4").tobytes()]
    for array in arrays:
        array = np.ascontiguousarray(array)
        if array.dtype.kind not in _CODES:
            raise StandaloneError(f"cannot write a {array.dtype} tensor; use float or integer dtypes")
        header = np.array([_CODES[array.dtype.kind], array.dtype.itemsize * 8, array.ndim], dtype="<u4")
        chunks += [header.tobytes(), np.array(array.shape, dtype="<i8").tobytes(),
                   array.astype(array.dtype.newbyteorder("<")).tobytes()]
    Path(path).write_bytes(b"".join(chunks))


def read_tensors(path: Union[str, os.PathLike]) -> list[np.ndarray]:
    """Read a file in the standalone tensor file format; arrays in native byte order."""
    data = Path(path).read_bytes()
    if data[:8] != MAGIC:
        raise StandaloneError(f"{str(path)!r} is not a byoc tensor file (bad magic)")
    pos, arrays = 12, []
    (count,) = np.frombuffer(data, "<u4", 1, 8)
    kinds = {v: k for k, v in _CODES.items()}
    try:
        for _ in range(int(count)):
            code, bits, ndim = (int(v) for v in np.frombuffer(data, "<u4", 3, pos))
            pos += 12
            shape = tuple(int(v) for v in np.frombuffer(data, "<i8", ndim, pos))
            pos += 8 * ndim
            dtype = np.dtype(f"<{kinds[code]}{bits // 8}")
            size = int(np.prod(shape, dtype=np.int64))
            arrays.append(np.frombuffer(data, dtype, size, pos).reshape(shape).astype(dtype.newbyteorder("=")))
            pos += size * dtype.itemsize
    except (KeyError, ValueError) as err:
        raise StandaloneError(f"{str(path)!r} is truncated or corrupt: {err}") from None
    return arrays


# -- lowering ----------------------------------------------------------------------------
def _lowered_module(artifact):
    """The artifact's module after TVM's build pipeline up to static memory planning."""
    import tvm
    from tvm.relax import backend
    from tvm.relax import transform as T

    if artifact.plan is None:
        raise StandaloneError(
            "this artifact was loaded from a file, which holds compiled code but not the Relax "
            "program; build it again with byoc.compile(...) to export a standalone program"
        )
    # The host kernels as the artifact has them (byoc.host_build: fused, parallel, vectorized),
    # in the order of relax.pipeline.default_build_pipeline, stopping before the VM-specific
    # lowering. RunCodegen only rewrites the partition calls here: no module is handed to
    # it, the partitions' C is emitted again by _partition_sources.
    from .builder import lower_partitions

    target = artifact.target.tvm_target()
    mod = lower_partitions(artifact.plan.mod, {vendor.name: [] for vendor in artifact.plan.vendors})
    passes = [
        backend.DispatchSampling(),
        backend.DispatchSortScan(),
        host_build.HostLowering(target),
        T.RewriteDataflowReshape(),
        T.ToNonDataflow(),
        T.RemovePurityChecking(),
        T.CallTIRRewrite(),
        T.StaticPlanBlockMemory(),
        T.LowerAllocTensor(),
        T.AttachGlobalSymbol(),
    ]
    with target:
        return tvm.transform.Sequential(passes)(mod)


def _partition_sources(plan) -> dict[str, str]:
    """C source per vendor (file stem -> text) for every partition in ``plan``."""
    from .codegens.c_source import CSourceCodegen
    from .graph import UnsupportedConstruct, partition_graph

    sources = {}
    for vendor in plan.vendors:
        parts = [p for p in plan.partitions if p.vendor == vendor.name]
        if not parts:
            continue
        if not isinstance(vendor.codegen, CSourceCodegen):
            raise StandaloneError(
                f"partitions {', '.join(p.name for p in parts)} of vendor {vendor.name!r} are compiled by "
                f"{type(vendor.codegen).__name__}, whose modules run on the TVM runtime; a standalone "
                "program links only C-source partitions. Build with a C-source vendor, or keep these "
                "ops on the host (keep_on_host=...)"
            )
        try:
            graphs = [partition_graph(plan.mod[p.global_var], p.name) for p in parts]
        except UnsupportedConstruct as err:
            raise StandaloneError(f"vendor {vendor.name!r}: a partition holds {err}") from None
        sources[f"partitions_{vendor.name}"] = vendor.codegen.source(graphs)
    return sources


# -- C emission --------------------------------------------------------------------------
@dataclass(frozen=True)
class _View:
    """A tensor: ``buffer`` (a C array) at byte ``offset``, with its shape and dtype."""

    buffer: str
    offset: int
    shape: tuple
    dtype: str


_C_TYPES = {
    "float16": "uint16_t", "float32": "float", "float64": "double",
    "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
    "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
}


def _dtype(dtype) -> str:
    name = str(dtype)
    if name not in _C_TYPES:
        raise StandaloneError(f"tensors of dtype {name} are not supported in a standalone program")
    return name


def _literal(value, dtype: str) -> str:
    """A C literal for one element; the value, never the bytes, so any byte order is right."""
    from .codegens.c_source import float_literal

    if dtype == "float32":
        return float_literal(value)
    if dtype == "float64":
        value = float(value)
        if np.isnan(value):
            return "NAN"
        if np.isinf(value):
            return "INFINITY" if value > 0 else "(-INFINITY)"
        return value.hex()  # C99 hexadecimal float literal, exact
    if dtype == "float16":  # kept as its bit pattern, an integer
        return f"{int(np.float16(value).view(np.uint16))}u"
    value = int(value)
    if dtype == "int64" and value == -(2**63):
        return "(-9223372036854775807LL - 1)"
    return f"{value}{'ULL' if dtype.startswith('u') else 'LL'}"


def c_array(name: str, array: np.ndarray) -> str:
    """The C definition of constant ``name`` holding ``array`` (64-byte aligned)."""
    dtype = _dtype(array.dtype)
    flat = array.reshape(-1)
    rows = [", ".join(_literal(v, dtype) for v in flat[i : i + 8]) for i in range(0, flat.size, 8)]
    body = ",\n  ".join(rows) if rows else "0"
    return f"static const {_C_TYPES[dtype]} {name}[{max(flat.size, 1)}] BYOC_ALIGNED = {{\n  {body}\n}};"


def _shape_values(expr) -> tuple:
    values = []
    for d in expr.values:
        if not hasattr(d, "value"):
            raise StandaloneError(f"symbolic dimension {d}: a standalone program needs static shapes")
        values.append(int(d.value))
    return tuple(values)


def _type_shape(ty) -> tuple:
    if getattr(ty, "shape", None) is None:
        raise StandaloneError("a tensor of unknown shape: a standalone program needs static shapes")
    return _shape_values(ty.shape)


class _Emitter:
    """Walks the lowered ``main`` and collects the declarations and statements of model.c."""

    def __init__(self, mod, partition_symbols: set[str]):
        self.mod = mod
        self.partition_symbols = partition_symbols
        self.decls: list[str] = []
        self.externs: dict[str, str] = {}  # C function -> declaration
        self.lines: list[str] = []
        self.counter = 0
        self.constants: dict[object, _View] = {}
        self.shapes: dict[tuple, str] = {}
        self.inputs: list[_View] = []

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def buffer(self, nbytes: int) -> str:
        name = self.fresh("byoc_buf")
        self.decls.append(f"static unsigned char {name}[{max(nbytes, 1)}] BYOC_ALIGNED;")
        return name

    def shape(self, shape: tuple) -> str:
        if shape not in self.shapes:
            name = self.fresh("byoc_shape")
            values = ", ".join(str(v) for v in shape) or "0"
            self.decls.append(f"static int64_t {name}[] = {{{values}}};")
            self.shapes[shape] = name
        return self.shapes[shape]

    def constant(self, expr) -> _View:
        if expr not in self.constants:
            from ._tvm import const_array

            array = np.ascontiguousarray(const_array(expr))
            name = self.fresh("byoc_const")
            self.decls.append(c_array(name, array))
            self.constants[expr] = _View(name, 0, tuple(array.shape), _dtype(array.dtype))
        return self.constants[expr]

    # -- values --------------------------------------------------------------------------
    def value(self, expr, env):
        from tvm import relax

        from ._tvm import is_tensor_const

        if is_tensor_const(expr):
            return self.constant(expr)
        if isinstance(expr, relax.Var):
            if expr not in env:
                raise StandaloneError(f"variable {expr.name} is used before it is bound")
            return env[expr]
        if isinstance(expr, relax.Tuple):
            return [self.value(f, env) for f in expr.fields]
        if isinstance(expr, relax.TupleGetItem):
            return self.value(expr.tuple_value, env)[expr.index]
        raise StandaloneError(f"a {type(expr).__name__} expression is not supported in a standalone program")

    def run(self, main) -> list[_View]:
        from tvm import relax

        env = {}
        for param in main.params:
            if not isinstance(param.ty, relax.TensorType):
                raise StandaloneError(f"parameter {param.name} is not a tensor")
            shape, dtype = _type_shape(param.ty), _dtype(param.ty.dtype)
            nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            view = _View(self.buffer(nbytes), 0, shape, dtype)
            self.inputs.append(view)
            env[param] = view
        body = main.body
        for block in body.blocks:
            for binding in block.bindings:
                if not isinstance(binding, relax.VarBinding):
                    raise StandaloneError(f"a {type(binding).__name__} binding is not supported")
                env[binding.var] = self.binding(binding.value, env)
        return _flatten(self.value(body.body, env))

    def binding(self, value, env):
        from tvm import ir, relax, tirx

        if not isinstance(value, relax.Call):
            return self.value(value, env)
        if isinstance(value.op, ir.Op):
            return self.op_call(value, env)
        if isinstance(value.op, relax.ExternFunc):
            symbol = str(value.op.global_symbol)
            if symbol not in self.partition_symbols:
                raise StandaloneError(f"the packed function {symbol!r} is not available in a standalone program")
            return self.packed_call(symbol, value.args, env)
        if isinstance(value.op, ir.GlobalVar) and isinstance(self.mod[value.op], tirx.PrimFunc):
            func = self.mod[value.op]
            symbol = str(func.attrs["global_symbol"]) if func.attrs and "global_symbol" in func.attrs \
                else value.op.name_hint
            return self.packed_call(symbol, value.args, env)
        raise StandaloneError(f"a call to {value.op} is not supported in a standalone program")

    def op_call(self, call, env):
        name = call.op.name
        args = call.args
        if name == "relax.memory.alloc_storage":
            return ("storage", self.buffer(_shape_values(args[0])[0]))
        if name == "relax.memory.alloc_tensor":
            _, buffer = self.value(args[0], env)
            return _View(buffer, int(args[1].value), _shape_values(args[2]), _dtype(args[3].value))
        if name == "relax.reshape":
            source = self.value(args[0], env)
            return _View(source.buffer, source.offset, _type_shape(call.ty), source.dtype)
        raise StandaloneError(f"op {name} is not supported in a standalone program")

    def packed_call(self, symbol: str, args, env) -> None:
        from ._tvm import is_prim_value

        if not _IDENT.match(symbol):
            raise StandaloneError(f"function name {symbol!r} is not a C identifier")
        function = f"__tvm_ffi_{symbol}"
        self.externs[function] = f"int {function}(void*, const byoc_any*, int32_t, byoc_any*);"
        n = len(args)
        lines = [f"  {{ /* {symbol} */", f"    byoc_any a[{n}];", f"    byoc_dltensor t[{n}];"]
        for i, arg in enumerate(args):
            if is_prim_value(arg):
                setter = "byoc_set_float" if "float" in str(arg.dtype) else "byoc_set_int"
                lines.append(f"    {setter}(&a[{i}], {arg.value!r});")
                continue
            view = self.value(arg, env)
            if not isinstance(view, _View):
                raise StandaloneError(f"argument {i} of {symbol} is not a tensor")
            code, bits = {"f": 2, "i": 0, "u": 1}[np.dtype(view.dtype).kind], np.dtype(view.dtype).itemsize * 8
            lines.append(
                f"    byoc_set_tensor(&a[{i}], &t[{i}], (unsigned char*){view.buffer} + {view.offset}, "
                f"{self.shape(view.shape)}, {len(view.shape)}, {code}, {bits});"
            )
        lines += [f"    if ({function}(NULL, a, {n}, &byoc_result) != 0) return byoc_kernel_failed(\"{symbol}\");",
                  "  }"]
        self.lines += lines
        return None


def _flatten(value) -> list:
    if isinstance(value, _View):
        return [value]
    if isinstance(value, list):
        return [v for item in value for v in _flatten(item)]
    raise StandaloneError("the model returns something other than tensors and tuples of tensors")


_RUNTIME = FFI_TYPES + r"""
enum { BYOC_FFI_INT = 1, BYOC_FFI_FLOAT = 3, BYOC_FFI_DLTENSOR_PTR = 7 };

static byoc_any byoc_result;

static void byoc_set_tensor(byoc_any* a, byoc_dltensor* t, void* data, int64_t* shape, int ndim,
                            int code, int bits) {
  t->data = data; t->device.device_type = 1; t->device.device_id = 0; t->ndim = ndim;
  t->dtype.code = (uint8_t)code; t->dtype.bits = (uint8_t)bits; t->dtype.lanes = 1;
  t->shape = shape; t->strides = NULL; t->byte_offset = 0;
  a->type_index = BYOC_FFI_DLTENSOR_PTR; a->zero_padding = 0; a->v.v_ptr = t;
}
static void byoc_set_int(byoc_any* a, int64_t v) { a->type_index = BYOC_FFI_INT; a->zero_padding = 0; a->v.v_int64 = v; }
static void byoc_set_float(byoc_any* a, double v) { a->type_index = BYOC_FFI_FLOAT; a->zero_padding = 0; a->v.v_float64 = v; }

/* Runtime symbols the TVM-generated kernels and the C-source partitions use. */
void TVMFFIErrorSetRaisedFromCStrParts(const char* kind, const char** parts, int32_t n) {
  int32_t i;
  fprintf(stderr, "%s: ", kind);
  for (i = 0; i < n; ++i) fputs(parts[i], stderr);
  fputc('\n', stderr);
}
/* Workspaces: 64-byte aligned malloc; the original pointer is kept just before the block. */
static void* byoc_alloc_workspace(int device_type, int device_id, uint64_t nbytes, int code, int bits) {
  unsigned char* raw = (unsigned char*)malloc((size_t)nbytes + 64 + sizeof(void*));
  uintptr_t aligned;
  (void)device_type; (void)device_id; (void)code; (void)bits;
  if (raw == NULL) return NULL;
  aligned = ((uintptr_t)(raw + sizeof(void*)) + 63u) & ~(uintptr_t)63u;
  ((void**)aligned)[-1] = raw;
  return (void*)aligned;
}
static int byoc_free_workspace(int device_type, int device_id, void* ptr) {
  (void)device_type; (void)device_id;
  if (ptr != NULL) free(((void**)ptr)[-1]);
  return 0;
}
typedef struct { void* sync_handle; int32_t num_task; } byoc_parallel_env;
typedef int (*byoc_parallel_lambda)(int task_id, byoc_parallel_env* env, void* cdata);
/* Serial parallel-launch: one task does all the work. */
static int byoc_parallel_launch(byoc_parallel_lambda f, void* cdata, int num_task) {
  byoc_parallel_env env;
  (void)num_task;
  env.sync_handle = NULL; env.num_task = 1;
  return f(0, &env, cdata);
}
static int byoc_parallel_barrier(int task_id, byoc_parallel_env* env) { (void)task_id; (void)env; return 0; }
/* The kernels hold weak, empty pointers of these names; these definitions win at link time. */
void* (*__TVMBackendAllocWorkspace)(int, int, uint64_t, int, int) = byoc_alloc_workspace;
int (*__TVMBackendFreeWorkspace)(int, int, void*) = byoc_free_workspace;
int (*__TVMBackendParallelLaunch)(byoc_parallel_lambda, void*, int) = byoc_parallel_launch;
int (*__TVMBackendParallelBarrier)(int, byoc_parallel_env*) = byoc_parallel_barrier;

static int byoc_kernel_failed(const char* name) {
  fprintf(stderr, "byoc: kernel %s failed\n", name);
  return 1;
}

/* ---- tensor files: see the format at the top of this file ---- */
typedef struct { int code, bits, ndim; const int64_t* shape; void* data; } byoc_io;

static int byoc_read_le(FILE* f, int nbytes, uint64_t* out) {
  unsigned char b[8];
  int i;
  if (fread(b, 1, (size_t)nbytes, f) != (size_t)nbytes) return 0;
  *out = 0;
  for (i = nbytes - 1; i >= 0; --i) *out = (*out << 8) | b[i];
  return 1;
}
static int byoc_write_le(FILE* f, int nbytes, uint64_t v) {
  unsigned char b[8];
  int i;
  for (i = 0; i < nbytes; ++i) { b[i] = (unsigned char)(v & 0xffu); v >>= 8; }
  return fwrite(b, 1, (size_t)nbytes, f) == (size_t)nbytes;
}
/* One element between its little-endian file form and native memory, by value. */
static void byoc_store(void* dst, int nbytes, uint64_t v) {
  if (nbytes == 1) { uint8_t x = (uint8_t)v; memcpy(dst, &x, 1); }
  else if (nbytes == 2) { uint16_t x = (uint16_t)v; memcpy(dst, &x, 2); }
  else if (nbytes == 4) { uint32_t x = (uint32_t)v; memcpy(dst, &x, 4); }
  else { memcpy(dst, &v, 8); }
}
static uint64_t byoc_load(const void* src, int nbytes) {
  if (nbytes == 1) { uint8_t x; memcpy(&x, src, 1); return x; }
  if (nbytes == 2) { uint16_t x; memcpy(&x, src, 2); return x; }
  if (nbytes == 4) { uint32_t x; memcpy(&x, src, 4); return x; }
  { uint64_t x; memcpy(&x, src, 8); return x; }
}
static int64_t byoc_numel(const byoc_io* t) {
  int64_t n = 1;
  int d;
  for (d = 0; d < t->ndim; ++d) n *= t->shape[d];
  return n;
}
static int byoc_read_inputs(const char* path, const byoc_io* ts, int count) {
  FILE* f = fopen(path, "rb");
  char magic[8];
  uint64_t v;
  int i, d;
  int64_t k;
  if (f == NULL) { fprintf(stderr, "byoc: cannot open %s\n", path); return 0; }
  if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "BYOCTNS1", 8) != 0) {
    fprintf(stderr, "byoc: %s is not a byoc tensor file\n", path); fclose(f); return 0;
  }
  if (!byoc_read_le(f, 4, &v) || (int)v != count) {
    fprintf(stderr, "byoc: %s must hold %d tensors\n", path, count); fclose(f); return 0;
  }
  for (i = 0; i < count; ++i) {
    const byoc_io* t = &ts[i];
    int size = t->bits / 8;
    uint64_t code, bits, ndim, dim;
    if (!byoc_read_le(f, 4, &code) || !byoc_read_le(f, 4, &bits) || !byoc_read_le(f, 4, &ndim) ||
        (int)code != t->code || (int)bits != t->bits || (int)ndim != t->ndim) {
      fprintf(stderr, "byoc: input %d has the wrong dtype or rank\n", i); fclose(f); return 0;
    }
    for (d = 0; d < t->ndim; ++d) {
      if (!byoc_read_le(f, 8, &dim) || (int64_t)dim != t->shape[d]) {
        fprintf(stderr, "byoc: input %d has the wrong shape\n", i); fclose(f); return 0;
      }
    }
    for (k = 0; k < byoc_numel(t); ++k) {
      if (!byoc_read_le(f, size, &v)) { fprintf(stderr, "byoc: input %d is truncated\n", i); fclose(f); return 0; }
      byoc_store((unsigned char*)t->data + k * size, size, v);
    }
  }
  fclose(f);
  return 1;
}
static int byoc_write_outputs(const char* path, const byoc_io* ts, int count) {
  FILE* f = fopen(path, "wb");
  int i, d, ok;
  int64_t k;
  if (f == NULL) { fprintf(stderr, "byoc: cannot create %s\n", path); return 0; }
  ok = fwrite("BYOCTNS1", 1, 8, f) == 8 && byoc_write_le(f, 4, (uint64_t)count);
  for (i = 0; ok && i < count; ++i) {
    const byoc_io* t = &ts[i];
    int size = t->bits / 8;
    ok = byoc_write_le(f, 4, (uint64_t)t->code) && byoc_write_le(f, 4, (uint64_t)t->bits) &&
         byoc_write_le(f, 4, (uint64_t)t->ndim);
    for (d = 0; ok && d < t->ndim; ++d) ok = byoc_write_le(f, 8, (uint64_t)t->shape[d]);
    for (k = 0; ok && k < byoc_numel(t); ++k)
      ok = byoc_write_le(f, size, byoc_load((const unsigned char*)t->data + k * size, size));
  }
  if (fclose(f) != 0) ok = 0;
  if (!ok) fprintf(stderr, "byoc: cannot write %s\n", path);
  return ok;
}
"""

_MAIN = r"""
int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s INPUTS OUTPUTS (byoc tensor files)\n", argv[0]);
    return 2;
  }
  if (!byoc_read_inputs(argv[1], byoc_inputs, BYOC_NUM_INPUTS)) return 2;
  if (byoc_run() != 0) return 1;
  if (!byoc_write_outputs(argv[2], byoc_outputs, BYOC_NUM_OUTPUTS)) return 2;
  return 0;
}
"""


def _io_table(name: str, views: list[_View], emitter: _Emitter) -> str:
    rows = []
    for v in views:
        dt = np.dtype(v.dtype)
        rows.append(f"  {{{_CODES[dt.kind]}, {dt.itemsize * 8}, {len(v.shape)}, {emitter.shape(v.shape)}, "
                    f"(unsigned char*){v.buffer} + {v.offset}}}")
    return f"static const byoc_io {name}[{max(len(rows), 1)}] = {{\n" + ",\n".join(rows or ["  {0, 0, 0, NULL, NULL}"]) + "\n};"


def _model_source(artifact, mod, partition_symbols: set[str]) -> str:
    emitter = _Emitter(mod, partition_symbols)
    outputs = emitter.run(mod["main"])
    if len(outputs) != len(artifact.outputs) or len(emitter.inputs) != len(artifact.inputs):
        raise StandaloneError(
            f"the lowered program has {len(emitter.inputs)} inputs and {len(outputs)} outputs, the model "
            f"{len(artifact.inputs)} and {len(artifact.outputs)}"
        )
    tables = [_io_table("byoc_inputs", emitter.inputs, emitter), _io_table("byoc_outputs", outputs, emitter)]
    header = (
        f"/* Generated by byoc: standalone program for target {artifact.target.name}"
        f"{':' + artifact.target.mcpu if artifact.target.mcpu else ''}. Do not edit.\n"
        f" * Usage: model INPUTS OUTPUTS. Tensor files (all integers little-endian):\n"
        f' *   "BYOCTNS1", uint32 count, then per tensor uint32 code (0 int, 1 uint, 2 float),\n'
        f" *   uint32 bits, uint32 ndim, int64 dims[ndim], elements little-endian in C order.\n"
        # Model tensor names stay out of the source (they could close this comment).
        f" * Inputs: {', '.join(f'{s.dtype}{list(s.shape)}' for s in artifact.inputs)}\n"
        f" * Outputs, in ONNX order: {', '.join(f'{s.dtype}{list(s.shape)}' for s in artifact.outputs)}\n */"
    )
    includes = "\n".join(f"#include <{h}>" for h in ("stdint.h", "stdio.h", "stdlib.h", "string.h", "math.h"))
    align = ("#if defined(__GNUC__)\n#define BYOC_ALIGNED __attribute__((aligned(64)))\n#else\n"
             "#define BYOC_ALIGNED\n#endif")
    run = ["static int byoc_run(void) {", *emitter.lines, "  return 0;", "}"]
    parts = [
        header, includes, align, _RUNTIME, *emitter.externs.values(), *emitter.decls, *tables,
        f"#define BYOC_NUM_INPUTS {len(emitter.inputs)}\n#define BYOC_NUM_OUTPUTS {len(outputs)}",
        "\n".join(run), _MAIN,
    ]
    return "\n\n".join(parts)


def _kernels_object(mod, target: TargetPreset, path: Path) -> bool:
    """Build the module's PrimFuncs with LLVM for ``target`` into ``path``; False if there are none."""
    import tvm
    from tvm import tirx

    funcs = {gv: f for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)}
    if not funcs:
        return False
    try:
        lib = tvm.tirx.build(tvm.IRModule(funcs), target=target.tvm_target())
        lib.write_to_file(str(path))
    except Exception as err:  # TVM raises many error types from deep inside
        first = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise StandaloneError(f"LLVM could not build the host kernels for {target.name}: {first}") from err
    return True


# -- the program ---------------------------------------------------------------------------
@dataclass
class StandaloneProgram:
    """A standalone program's folder: its C sources and object, for ``target``."""

    directory: Path
    target: TargetPreset
    sources: list[str] = field(default_factory=list)
    objects: list[str] = field(default_factory=list)

    def build_command(self, cc: str) -> list[str]:
        """The compiler command (run inside :attr:`directory`) that links the program."""
        return [cc, "-O2", "-o", PROGRAM, *self.sources, *self.objects, "-lm", "-static"]


MAKEFILE_MARK = "# Builds the standalone byoc program for"


def _written_by_byoc(directory: Path) -> bool:
    makefile = directory / "Makefile"
    return directory.is_dir() and makefile.is_file() and makefile.read_text(errors="replace").startswith(MAKEFILE_MARK)


def export_standalone(artifact, directory: Union[str, os.PathLike], overwrite: bool = False) -> StandaloneProgram:
    """Write ``artifact`` as a standalone C program into ``directory`` (new or empty).

    With ``overwrite=True`` a folder that byoc wrote before (it has byoc's
    ``Makefile``) is emptied and written again; any other non-empty folder is
    refused, so no file of the user's is lost.

    The folder holds ``model.c`` (the runner, the buffers, host-kernel
    weights), one ``partitions_<vendor>.c`` per C-source vendor, ``kernels.o``
    (host kernels for the artifact's target) and a ``Makefile``. ``make``
    with the target's C compiler builds ``model``, a static executable; see
    the module docstring for what is covered and the tensor file format.
    """
    directory = Path(directory)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        if not (overwrite and _written_by_byoc(directory)):
            hint = "" if overwrite else " (or pass overwrite=True to replace a folder byoc wrote)"
            raise StandaloneError(f"{str(directory)!r} exists and is not an empty folder, nor one byoc wrote; "
                                  f"choose a new or empty one{hint}")
        shutil.rmtree(directory)
    plan = artifact.plan
    mod = _lowered_module(artifact)
    partition_sources = _partition_sources(plan)
    symbols = {p.name for p in plan.partitions}
    model_c = _model_source(artifact, mod, symbols)
    directory.mkdir(parents=True, exist_ok=True)
    program = StandaloneProgram(directory, artifact.target)
    (directory / "model.c").write_text(model_c)
    program.sources.append("model.c")
    for stem, text in partition_sources.items():
        (directory / f"{stem}.c").write_text(text)
        program.sources.append(f"{stem}.c")
    if _kernels_object(mod, artifact.target, directory / KERNELS_OBJECT):
        program.objects.append(KERNELS_OBJECT)
    command = " ".join(program.build_command("$(CC)"))
    (directory / "Makefile").write_text(
        f"{MAKEFILE_MARK} {artifact.target.name}.\n"
        f"CC = {artifact.target.cc}\n\n{PROGRAM}: {' '.join(program.sources + program.objects)}\n"
        f"\t{command}\n"
    )
    return program


def build_program(program: StandaloneProgram) -> Path:
    """Compile and link ``program`` with its target's C compiler; returns the executable."""
    cc = program.target.compiler()
    program.target.static_libc()
    proc = subprocess.run(program.build_command(cc), cwd=program.directory, capture_output=True, text=True)
    if proc.returncode != 0:
        undefined = sorted(set(re.findall(r"undefined reference to `([^']+)'", proc.stderr)))
        if undefined:
            raise StandaloneError(
                f"the program for {program.target.name} needs runtime symbols a standalone program does "
                f"not provide: {', '.join(undefined)}"
            )
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise StandaloneError(f"compiling the standalone program for {program.target.name} failed:\n{tail}")
    return program.directory / PROGRAM


def run_program(program: StandaloneProgram, arrays: list[np.ndarray], executable: Path) -> list[np.ndarray]:
    """Run a built program on ``arrays`` (under qemu when the target is not the host)."""
    prefix = program.target.runner()
    inputs, outputs = program.directory / "inputs.bin", program.directory / "outputs.bin"
    write_tensors(inputs, arrays)
    proc = subprocess.run(prefix + [str(executable), str(inputs), str(outputs)], capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:]) or f"exit status {proc.returncode}"
        how = f" under {Path(prefix[0]).name}" if prefix else ""
        raise StandaloneError(f"the standalone program for {program.target.name} failed{how}: {tail}")
    return read_tensors(outputs)


def run_emulated(artifact, inputs) -> list[np.ndarray]:
    """Build the standalone program for the artifact's target and run it on ``inputs``.

    Runs natively on the build host's target and under qemu-user otherwise;
    returns numpy arrays in ONNX output order. Each call builds the program
    afresh in a temporary folder.
    """
    arrays = artifact.check_inputs(inputs)
    artifact.target.runner()  # a missing emulator is reported before any building
    with tempfile.TemporaryDirectory(prefix="byoc-standalone-") as tmp:
        program = export_standalone(artifact, Path(tmp) / "program")
        return run_program(program, arrays, build_program(program))
