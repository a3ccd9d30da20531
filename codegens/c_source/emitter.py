"""Emit one C99 translation unit for a vendor's partitions.

Layout of the emitted source:

1. the reference kernels (``byoc_kernels.h``, pasted so the source needs no
   include path, which matters for cross compilers);
2. the entry point's ABI (``byoc/vendor/byoc_abi.h``: the DLPack and TVMFFIAny
   layouts, which are ABI-stable, and the helpers that check arguments), pasted too;
3. constants as string literals of their little-endian bytes (octal
   escapes): gcc reads a string literal as one token, so 100 MB of weights
   compile in seconds where an initializer list of float literals took a
   quarter of an hour and many GB. Little-endian targets use the bytes in
   place; big-endian targets (s390x) decode each constant once, on first
   use, into a static array;
4. per partition, a body function over raw float pointers, and an entry
   point ``__tvm_ffi_<symbol>`` (tvm-ffi safe-call ABI, ``extern "C"``)
   that checks every argument before calling the body.

Identifiers are generated from counters; no model name reaches the source.
"""

from __future__ import annotations

from importlib import resources
from typing import Sequence

import numpy as np

from byoc.errors import UnsupportedOp
from byoc.vendor.abi import abi_header, entry_point
from byoc.vendor.graph import OpCall, PartitionGraph, Tensor

from .device import DeviceGlue, device_source
from .body import _DTYPES, OpEmitter, Body, _int_list, _Unit, c_dim, c_type, float_literal, graph_dim_names
from .quantized import INTEGER_AS_FLOAT, QDQ_OPS, emit_quantized

#: The entry point's ABI (byoc/vendor/byoc_abi.h), then the decoding of constants on big-endian targets.
_ABI = abi_header() + r"""
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define BYOC_BIG_ENDIAN 1
/* A constant's little-endian 4-byte words (float32, int32) in native order, decoded into `decoded`
   on first use. Two threads that race here write the same values, so the race is benign. */
static const void* byoc_le_words(const unsigned char* bytes, void* decoded, int64_t n, int* ready) {
  int64_t i;
  if (!*ready) {
    for (i = 0; i < n; ++i) {
      const unsigned char* b = bytes + 4 * i;
      uint32_t u = (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
      memcpy((char*)decoded + 4 * i, &u, 4);
    }
    *ready = 1;
  }
  return decoded;
}
#endif
"""

def kernels_source() -> str:
    """The text of the reference kernel header."""
    return resources.files(__package__).joinpath("byoc_kernels.h").read_text()


def _unary(kind: str, low="0.0f", high="0.0f"):
    def emit(body: Body, call: OpCall) -> None:
        lo = float_literal(call.attrs["min"]) if "min" in call.attrs else low
        hi = float_literal(call.attrs["max"]) if "max" in call.attrs else high
        body.emit(f"byoc_k_unary({kind}, {body.ref(call.inputs[0])}, {body.ref(call.output)}, "
                  f"{body.size(call.output.shape)}, {lo}, {hi});")
    return emit


def _shaped(kernel: str, *leading: str):
    """An emitter for kernels taking (a, a_shape, a_ndim, b, b_shape, b_ndim, out, out_shape, out_ndim)."""
    def emit(body: Body, call: OpCall) -> None:
        args = list(leading)
        for t in (call.inputs[0], call.inputs[1], call.output):
            args += [body.ref(t), body.shape(t.shape), str(len(t.shape))]
        body.emit(f"{kernel}({', '.join(args)});")
    return emit


def _fusable_tail(body: Body, index: int, conv: OpCall) -> tuple[str, int, Tensor]:
    """Bias and relu that directly follow a conv in the same composite."""
    ops, bias, relu, current = body.graph.ops, "NULL", 0, conv.output
    nxt = index + 1
    if nxt < len(ops) and ops[nxt].group == conv.group and ops[nxt].op == "relax.add":
        add = ops[nxt]
        other = [t for t in add.inputs if t.id != current.id]
        if len(other) == 1 and other[0].kind == "const" and other[0].size == conv.output.shape[1] \
                and add.output.shape == conv.output.shape and current.id in [t.id for t in add.inputs]:
            bias, current = body.ref(other[0]), add.output
            body.skip.add(nxt)
            nxt += 1
    if nxt < len(ops) and ops[nxt].group == conv.group and ops[nxt].op == "relax.nn.relu" \
            and ops[nxt].inputs[0].id == current.id:
        relu, current = 1, ops[nxt].output
        body.skip.add(nxt)
    return bias, relu, current


def _conv2d(body: Body, call: OpCall, index: int) -> None:
    x, w = call.inputs[0], call.inputs[1]
    bias, relu, out = _fusable_tail(body, index, call)
    n, c, h, wd = map(body.dim, x.shape)
    o, _, kh, kw = w.shape
    _, _, oh, ow = map(body.dim, call.output.shape)
    a = call.attrs
    sh, sw = a["strides"]
    pt, pl = a["padding"][0], a["padding"][1]
    dh, dw = a["dilation"]
    body.emit(
        f"byoc_k_conv2d({body.ref(x)}, {body.ref(w)}, {bias}, {body.ref(out)}, {n}, {c}, {h}, {wd}, "
        f"{o}, {kh}, {kw}, {oh}, {ow}, {sh}, {sw}, {pt}, {pl}, {dh}, {dw}, {a['groups']}, {relu});"
    )


def _pool(kind: str):
    def emit(body: Body, call: OpCall) -> None:
        x, out, a = call.inputs[0], call.output, call.attrs
        n, c, h, wd = map(body.dim, x.shape)
        oh, ow = body.dim(out.shape[2]), body.dim(out.shape[3])
        kh, kw = a["pool_size"]
        sh, sw = a["strides"]
        pt, pl, pb, pr = a["padding"]
        if kind == "max":
            dh, dw = a["dilation"]
            body.emit(f"byoc_k_maxpool2d({body.ref(x)}, {body.ref(out)}, {n}, {c}, {h}, {wd}, {oh}, {ow}, "
                      f"{kh}, {kw}, {sh}, {sw}, {pt}, {pl}, {dh}, {dw});")
        else:
            body.emit(f"byoc_k_avgpool2d({body.ref(x)}, {body.ref(out)}, {n}, {c}, {h}, {wd}, {oh}, {ow}, "
                      f"{kh}, {kw}, {sh}, {sw}, {pt}, {pl}, {pb}, {pr}, {int(bool(a['count_include_pad']))});")
    return emit


def _axis(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis


def _mean(body: Body, call: OpCall) -> None:
    x = call.inputs[0]
    ndim = len(x.shape)
    axes = call.attrs.get("axis")
    reduce = [1] * ndim if axes is None else [0] * ndim
    for axis in axes or ():
        reduce[_axis(axis, ndim)] = 1
    flags = body.unit.fresh("byoc_axes")
    body.unit.decls.append(f"static const int {flags}[] = {{{_int_list(reduce)}}};")
    body.emit(f"byoc_k_mean({body.ref(x)}, {body.shape(x.shape)}, {ndim}, {flags}, {body.ref(call.output)});")


def _outer_inner(body: Body, shape: Sequence, axis: int) -> tuple[str, str]:
    return body.size(shape[:axis]), body.size(shape[axis + 1 :])


def _softmax(body: Body, call: OpCall) -> None:
    x = call.inputs[0]
    axis = _axis(call.attrs["axis"], len(x.shape))
    outer, inner = _outer_inner(body, x.shape, axis)
    body.emit(f"byoc_k_softmax({body.ref(x)}, {body.ref(call.output)}, {outer}, {body.dim(x.shape[axis])}, "
              f"{inner});")


def _copy(body: Body, call: OpCall) -> None:
    body.emit(f"memcpy({body.ref(call.output)}, {body.ref(call.inputs[0])}, "
              f"sizeof({c_type(call.output.dtype)}) * (size_t)({body.size(call.output.shape)}));")


def _concat(body: Body, call: OpCall) -> None:
    out = call.output
    axis = _axis(call.attrs["axis"], len(out.shape))
    outer, inner = _outer_inner(body, out.shape, axis)
    srcs = body.unit.fresh("byoc_srcs")
    lens = body.shape([t.shape[axis] for t in call.inputs])
    body.emit(f"{{ const float* {srcs}[{len(call.inputs)}];")
    for i, t in enumerate(call.inputs):
        body.emit(f"  {srcs}[{i}] = {body.ref(t)};")
    body.emit(f"  byoc_k_concat({srcs}, {lens}, {len(call.inputs)}, {body.ref(out)}, {outer}, {inner}); }}")


def _transpose(body: Body, call: OpCall) -> None:
    x = call.inputs[0]
    axes = call.attrs.get("axes")
    perm = list(reversed(range(len(x.shape)))) if axes is None else [_axis(a, len(x.shape)) for a in axes]
    body.emit(f"byoc_k_transpose({body.ref(x)}, {body.shape(x.shape)}, {len(x.shape)}, "
              f"{body.unit.shape(perm)}, {body.ref(call.output)});")


#: Relax op name -> emitter. A vendor codegen built on this one may extend it.
OP_EMITTERS: dict[str, OpEmitter] = {
    "relax.add": _shaped("byoc_k_binary", "BYOC_ADD"),
    "relax.subtract": _shaped("byoc_k_binary", "BYOC_SUB"),
    "relax.multiply": _shaped("byoc_k_binary", "BYOC_MUL"),
    "relax.divide": _shaped("byoc_k_binary", "BYOC_DIV"),
    "relax.nn.relu": _unary("BYOC_RELU"),
    "relax.sigmoid": _unary("BYOC_SIGMOID"),
    "relax.tanh": _unary("BYOC_TANH"),
    "relax.clip": _unary("BYOC_CLIP"),
    "relax.matmul": _shaped("byoc_k_matmul"),
    "relax.nn.max_pool2d": _pool("max"),
    "relax.nn.avg_pool2d": _pool("avg"),
    "relax.mean": _mean,
    "relax.nn.softmax": _softmax,
    "relax.reshape": _copy,
    "relax.concat": _concat,
    "relax.permute_dims": _transpose,
}



def _elements(shape) -> int:
    """A static temporary's element count, one at least (malloc(0) may return NULL)."""
    return max(int(np.prod(shape, dtype=np.int64)), 1)


def _partition(unit: _Unit, graph: PartitionGraph, emitters: dict[str, OpEmitter], device=None) -> str:
    """The body function of ``graph``: its kernels over host pointers, or over device ones with ``device`` (a
    :class:`~byoc.vendor.device.DeviceMemory`, :mod:`.device`)."""
    fn = unit.fresh("byoc_body")
    names: dict[int, str] = {}
    sizer = Body(unit, graph, {}, [])  # sizes as C, for the device glue (its dims are the body's)
    glue = None if device is None else DeviceGlue(device, unit, graph, c_type, sizer.size)
    for i, t in enumerate(graph.inputs):
        names[t.id] = f"(({c_type(t.dtype)}*)in[{i}])" if glue is None else glue.input(i, t)
    for t in graph.constants:
        names[t.id] = unit.constant(t) if glue is None else glue.constant(t, unit.constant(t))
    outputs_by_id: dict[int, int] = {}
    for i, t in enumerate(graph.outputs):
        outputs_by_id.setdefault(t.id, i)
    written = {i: (f"(({c_type(graph.outputs[i].dtype)}*)out[{i}])" if glue is None
                   else glue.output(i, graph.outputs[i])) for i in outputs_by_id.values()}
    temps = []
    for call in graph.ops:
        if call.output.id in outputs_by_id:
            names[call.output.id] = written[outputs_by_id[call.output.id]]
        else:
            temp = unit.fresh("t")
            names[call.output.id] = temp
            temps.append((temp, call.output.dtype, call.output.shape))
    body = Body(unit, graph, names, temps)
    for index, call in enumerate(graph.ops):
        if index in body.skip:
            continue
        if call.op == "relax.nn.conv2d":
            _conv2d(body, call, index)
        elif call.quant is not None or call.op in QDQ_OPS or call.op in INTEGER_AS_FLOAT and call.output.dtype != "float32":
            emit_quantized(body, call, emitters)
        elif call.op in emitters:
            emitters[call.op](body, call)
        else:
            raise UnsupportedOp(f"no C emitter for {call.op} (rule {call.rule})")
    # Outputs that are not produced by an op here (an input passed through,
    # or one tensor returned twice) are copied.
    for i, t in enumerate(graph.outputs):
        if names.get(t.id) != written.get(i):
            if glue is not None:
                body.lines.append("  " + glue.passed_through(i, t, body.ref(t)))
            else:
                body.emit(f"memcpy(out[{i}], {body.ref(t)}, sizeof({c_type(t.dtype)}) * (size_t)({body.size(t.shape)}));")
    # Fused ops leave some temporaries unused: allocate only the ones written.
    used = [(t, dtype, shape) for t, dtype, shape in temps if t in body.referenced]
    if not graph.dims:  # a symbolic graph's temporaries depend on each call's dims: not reported
        unit.memory[graph.symbol] = (sum(_elements(shape) * np.dtype(dtype).itemsize for _, dtype, shape in used),
                                     sum(t.size * np.dtype(t.dtype).itemsize for t in graph.constants))
    lines = [f"static int {fn}(void* const* in, void* const* out, const int64_t* dims) {{", "  int status = 0;",
             "  (void)dims;"]
    if glue is not None:
        lines += glue.prologue()
    for t, dtype, shape in used:  # malloc(0) may return NULL: one element at least
        static = all(isinstance(d, (int, np.integer)) for d in shape)
        count = str(_elements(shape)) if static else f"{body.size(shape)} + 1"
        where = f"({c_type(dtype)}*)malloc(sizeof({c_type(dtype)}) * (size_t)({count}))" if glue is None \
            else glue.allocate(c_type(dtype), count)
        lines.append(f"  {c_type(dtype)}* {t} = {where};")
    if used:
        lines.append("  if (" + " || ".join(f"!{t}" for t, *_ in used) + ") { status = -2; goto done; }")
    if glue is not None:
        lines += glue.before
    lines += body.lines
    if glue is not None:
        lines += glue.after
    if used or glue is not None:
        lines.append("done:")
    lines += [f"  free({t});" if glue is None else glue.release(t) for t, *_ in used]
    if glue is not None:
        lines += glue.epilogue()
    lines += ["  return status;", "}"]
    unit.decls.append("\n".join(lines))
    return fn


def _arg_positions(graph: PartitionGraph) -> list[int]:
    """The argument position of each input, then each output: TVM passes shape arguments among the inputs."""
    shapes = {position for position, _ in graph.shape_arguments}
    count = len(graph.inputs) + len(graph.outputs) + len(shapes)
    return [i for i in range(count) if i not in shapes]


def _dim_sources(graph: PartitionGraph, positions: list[int]) -> list[str]:
    """Per symbolic dim of the graph (``dims[k]``): the C that reads its size from the call's arguments, a
    whole dim of an input where there is one, else a shape argument's value."""
    sources = []
    for name in graph_dim_names(graph):
        found = [f"byoc_dim(args, {positions[i]}, {axis})" for i, t in enumerate(graph.inputs)
                 for axis, d in enumerate(t.shape) if d == name]
        found += [f"byoc_shape_value(args, {position}, {k})" for position, names in graph.shape_arguments
                  for k, n in enumerate(names) if n == name]
        if not found:
            raise UnsupportedOp(f"dim {name!r}, which is no whole dim of any input of the partition "
                                "(the C reads each call's dims from its arguments)")
        sources.append(found[0])
    return sources


def _entry(unit: _Unit, graph: PartitionGraph, body_fn: str) -> str:
    symbol = graph.symbol
    tensors = list(graph.inputs) + list(graph.outputs)
    sym_lit = unit.fresh("byoc_symbol")
    unit.decls.append(f'static const char {sym_lit}[] = "{symbol}";')
    shapes = [unit.shape([d if isinstance(d, (int, np.integer)) else -1 for d in t.shape]) for t in tensors]
    positions = _arg_positions(graph)
    sources = _dim_sources(graph, positions)
    index = {name: k for k, name in enumerate(graph_dim_names(graph))}
    lines = [
        entry_point(symbol) + " {",
        f"  void* in[{max(len(graph.inputs), 1)}];",
        f"  void* out[{max(len(graph.outputs), 1)}];",
        "  int error = 0;",
        "  int status;",
        "  (void)self; (void)result;",
        f"  if (num_args != {len(positions) + len(graph.shape_arguments)}) return byoc_fail(\"TypeError\", {sym_lit}, "
        f"\"expected {len(graph.inputs)} input and {len(graph.outputs)} output tensors\");",
    ]
    for i, t in enumerate(tensors):
        slot = f"in[{i}]" if i < len(graph.inputs) else f"out[{i - len(graph.inputs)}]"
        c_type(t.dtype)  # names a dtype the C does not take
        _, code, bits = _DTYPES[t.dtype]
        lines.append(f"  {slot} = byoc_arg(args, {positions[i]}, {shapes[i]}, {len(t.shape)}, {code}, {bits}, "
                     f"{sym_lit}, &error);")
        lines.append("  if (error) return error;")
    lines.append(f"  int64_t dims[{max(len(sources), 1)}];")  # this call's symbolic dims, from its arguments
    lines += [f"  dims[{k}] = {source};" for k, source in enumerate(sources)]
    for i, t in enumerate(tensors):  # every other symbolic dim of every tensor agrees with them
        for axis, d in enumerate(t.shape):
            read = f"byoc_dim(args, {positions[i]}, {axis})"
            if not isinstance(d, (int, np.integer)) and read not in sources:
                lines.append(f"  if ({read} != {c_dim(graph.dims[d], index)}) "
                             f"return byoc_fail(\"ValueError\", {sym_lit}, \"a tensor has the wrong shape for "
                             f"the call's dims\");")
    lines += [
        f"  status = {body_fn}(in, out, dims);",
        f"  if (status == -2) return byoc_fail(\"MemoryError\", {sym_lit}, \"out of memory for intermediate tensors\");",
        "  return status;",
        "}",
    ]
    return "\n".join(lines)


def emit_source(graphs: Sequence[PartitionGraph], emitters: dict[str, OpEmitter] | None = None,
                device=None) -> str:
    """One C source holding every partition in ``graphs``; with ``device`` (a
    :class:`~byoc.vendor.device.DeviceMemory`) they run on its memory (:mod:`.device`)."""
    return _emitted(graphs, emitters, device=device)[0]


def source_memory(graphs: Sequence[PartitionGraph], emitters: dict[str, OpEmitter] | None = None,
                  device=None) -> dict[str, tuple[int, int]]:
    """Per partition symbol, what its C takes: bytes malloc'ed per call (its temporaries), and its constants' bytes.

    The bodies are emitted again, without the constants' literals (most of the source: 400 MB for ResNet-50)."""
    return _emitted(graphs, emitters, literals=False, device=device)[1]


def _emitted(graphs, emitters, literals: bool = True, device=None) -> tuple[str, dict[str, tuple[int, int]]]:
    emitters = OP_EMITTERS if emitters is None else emitters
    unit = _Unit(literals)
    entries = [_entry(unit, g, _partition(unit, g, emitters, device)) for g in graphs]
    parts = [
        "/* Generated by byoc's c_source codegen. Do not edit. */",
        kernels_source(),
        _ABI,
        *([] if device is None else [device_source(device)]),
        *unit.decls,
        '#ifdef __cplusplus\nextern "C" {\n#endif',
        *entries,
        "#ifdef __cplusplus\n}\n#endif",
        "",
    ]
    return "\n\n".join(parts), unit.memory
