"""The C of a standalone program: ``model.c``, emitted from the lowered Relax ``main``.

:func:`model_source` walks ``main`` binding by binding (:class:`_Emitter`) and
puts together the header, the fixed runtime (``runtime.c`` next to this
module: the tvm-ffi stubs and the tensor-file reader and writer), the
buffers and weights, ``byoc_run`` and ``main``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

import numpy as np

from byoc.deploy.standalone.tensor_file import CODES
from byoc.errors import StandaloneError
from byoc.vendor.abi import abi_header
from byoc.vendor.values import static_dims

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
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


def _runtime() -> str:
    return abi_header() + resources.files(__package__).joinpath("runtime.c").read_text()


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
    from byoc.codegens.c_source import float_literal

    if dtype in ("float32", "float64"):
        return float_literal(value, dtype)
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
    dims = static_dims(expr)
    if dims is None:
        raise StandaloneError(f"symbolic dimension in {expr}: a standalone program needs static shapes")
    return dims


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
            from byoc.vendor.values import const_array

            array = np.ascontiguousarray(const_array(expr))
            name = self.fresh("byoc_const")
            self.decls.append(c_array(name, array))
            self.constants[expr] = _View(name, 0, tuple(array.shape), _dtype(array.dtype))
        return self.constants[expr]

    # -- values --------------------------------------------------------------------------
    def value(self, expr, env):
        from tvm import relax

        from byoc.vendor.values import is_tensor_const

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
        from tvm import relax

        from byoc.vendor.values import is_prim_value

        if not _IDENT.match(symbol):
            raise StandaloneError(f"function name {symbol!r} is not a C identifier")
        function = f"__tvm_ffi_{symbol}"
        self.externs[function] = f"int {function}(void*, const byoc_any*, int32_t, byoc_any*);"
        n = len(args)
        lines = [f"  {{ /* {symbol} */", f"    byoc_any a[{n}];", f"    byoc_dltensor t[{n}];",
                 f"    byoc_shape_object s[{n}];"]
        for i, arg in enumerate(args):
            if isinstance(arg, relax.ShapeExpr):  # dims TVM passes a partition next to its tensors
                values = _shape_values(arg)
                lines.append(f"    byoc_set_shape(&a[{i}], &s[{i}], {self.shape(values)}, {len(values)});")
                continue
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


def _io_table(name: str, views: list[_View], emitter: _Emitter) -> str:
    rows = []
    for v in views:
        dt = np.dtype(v.dtype)
        rows.append(f"  {{{CODES[dt.kind]}, {dt.itemsize * 8}, {len(v.shape)}, {emitter.shape(v.shape)}, "
                    f"(unsigned char*){v.buffer} + {v.offset}}}")
    return f"static const byoc_io {name}[{max(len(rows), 1)}] = {{\n" + ",\n".join(rows or ["  {0, 0, 0, NULL, NULL}"]) + "\n};"


def model_source(artifact, mod, partition_symbols: set[str]) -> str:
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
        header, includes, align, _runtime(), *emitter.externs.values(), *emitter.decls, *tables,
        f"#define BYOC_NUM_INPUTS {len(emitter.inputs)}\n#define BYOC_NUM_OUTPUTS {len(outputs)}",
        "\n".join(run), _MAIN,
    ]
    return "\n\n".join(parts)
