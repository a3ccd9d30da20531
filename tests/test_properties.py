"""Property tests: random DAGs, random vendor mixes and policies, partitioned == unpartitioned.

Each example is a random ONNX graph of ops the vendors take (Add, Mul,
MatMul, Relu, Softmax, ...) mixed with ops none of them takes (Abs, Sin,
Neg, ...), over random shapes with broadcasting. It is partitioned for a
random, ordered mix of vendors (c_source, json_runtime and two restricted
test vendors) with random ``min_ops`` and ``keep_on_host``, and then

* the plan's module is well formed and no partition's inputs depend on its
  own outputs (through the host or another partition): no cycles;
* the byoc build gives the same outputs as plain TVM building the
  unpartitioned module, within float32 tolerance.

Hypothesis runs derandomized (fixed seed): 60 graphs here (the suite's time);
``benchmarks/fuzz_partition.py`` runs the same property on 500+.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import onnx
from hypothesis import HealthCheck, event, given, reject, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import byoc
from byoc.annotations.c_source import RULES as C_RULES
from byoc.codegens.c_source import CSourceCodegen
from byoc.codegens.json_runtime import JsonRuntimeCodegen

UNARY_SUPPORTED = ("Relu", "Sigmoid", "Tanh")
UNARY_HOST = ("Abs", "Neg", "Sin", "Cos")
BINARY = ("Add", "Sub", "Mul")


def _restricted(name: str, codegen, ops: tuple[str, ...]) -> byoc.Vendor:
    """A test vendor taking only the c_source rules whose op is in ``ops``."""
    rules = tuple(
        replace(rule, name=f"{name}.{rule.name.split('.', 1)[1]}")
        for rule in C_RULES
        if getattr(rule, "op", None) in ops
    )
    return byoc.Vendor(name, rules, codegen)


# Two restricted vendors: one emits C, one JSON; they overlap with the built-ins
# and with each other, so priority order matters.
ELEMENTWISE_C = _restricted("fz_elementwise", CSourceCodegen(), ("relax.add", "relax.multiply", "relax.nn.relu"))
UNARY_JSON = _restricted("fz_unary", JsonRuntimeCodegen(), ("relax.sigmoid", "relax.tanh", "relax.nn.relu",
                                                            "relax.subtract"))
VENDORS = ("c_source", "json_runtime", ELEMENTWISE_C, UNARY_JSON)


def _broadcast(a: tuple, b: tuple):
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        return None


@st.composite
def graphs(draw):
    """(model, inputs, node names, op types) of a random float32 DAG."""
    dims = draw(st.lists(st.integers(1, 5), min_size=1, max_size=4))
    base = tuple(dims)
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    tensors: list[tuple[str, tuple]] = []  # (name, shape) of everything usable as an operand
    inputs, initializers, nodes = [], [], []
    feeds = {}
    for index in range(draw(st.integers(1, 2))):
        # the second input may be a broadcastable suffix of the base shape
        shape = base if index == 0 else base[draw(st.integers(0, len(base) - 1)):]
        name = f"in{index}"
        inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
        feeds[name] = rng.standard_normal(shape).astype(np.float32)
        tensors.append((name, shape))

    def constant(shape) -> str:
        name = f"w{len(initializers)}"
        initializers.append(helper.make_tensor(
            name, TensorProto.FLOAT, shape, rng.uniform(0.5, 1.5, size=shape).astype(np.float32).ravel()))
        return name

    for index in range(draw(st.integers(1, 9))):
        kind = draw(st.sampled_from(("unary", "unary", "host", "binary", "binary", "binary_const",
                                     "matmul", "softmax", "transpose", "concat", "mean", "div_const")))
        x, shape = tensors[draw(st.integers(0, len(tensors) - 1))]
        out = f"t{index}"
        attrs, operands, out_shape = {}, [x], shape
        if kind in ("unary", "host"):
            op = draw(st.sampled_from(UNARY_SUPPORTED if kind == "unary" else UNARY_HOST))
        elif kind == "binary":
            op = draw(st.sampled_from(BINARY))
            partners = [(n, s) for n, s in tensors if _broadcast(shape, s) is not None]
            y, y_shape = partners[draw(st.integers(0, len(partners) - 1))]
            operands, out_shape = [x, y], _broadcast(shape, y_shape)
        elif kind == "binary_const":
            op = draw(st.sampled_from(BINARY))
            start = draw(st.integers(0, len(shape)))
            c_shape = tuple(1 if draw(st.booleans()) else d for d in shape[start:]) or (1,)
            operands, out_shape = [x, constant(c_shape)], _broadcast(shape, c_shape)
        elif kind == "div_const":
            op = "Div"
            operands = [x, constant(shape[-1:])]
        elif kind == "matmul":
            op = "MatMul"
            width = draw(st.integers(1, 6))
            operands, out_shape = [x, constant((shape[-1], width))], shape[:-1] + (width,)
        elif kind == "softmax":
            op, attrs = "Softmax", {"axis": -1}
        elif kind == "transpose":
            op = "Transpose"
            perm = draw(st.permutations(range(len(shape))))
            attrs, out_shape = {"perm": list(perm)}, tuple(shape[p] for p in perm)
        elif kind == "concat":
            op = "Concat"
            axis = draw(st.integers(0, len(shape) - 1))
            same = [n for n, s in tensors if len(s) == len(shape)
                    and all(a == b for i, (a, b) in enumerate(zip(s, shape)) if i != axis)]
            y = same[draw(st.integers(0, len(same) - 1))]
            y_shape = dict(tensors)[y]
            attrs = {"axis": axis}
            operands = [x, y]
            out_shape = tuple(a + b if i == axis else a for i, (a, b) in enumerate(zip(shape, y_shape)))
        else:  # mean
            op = "ReduceMean"
            axis = draw(st.integers(0, len(shape) - 1))
            attrs, out_shape = {"axes": [axis], "keepdims": 1}, tuple(1 if i == axis else d for i, d in enumerate(shape))
        nodes.append(helper.make_node(op, operands, [out], name=f"n{index}_{op}", **attrs))
        tensors.append((out, out_shape))

    used = {name for node in nodes for name in node.input}
    produced = [(n, s) for n, s in tensors if n.startswith("t")]
    outputs = [(n, s) for n, s in produced if n not in used]
    extra = [(n, s) for n, s in produced if n in used]
    if extra and draw(st.booleans()):  # an intermediate that is also a model output
        outputs.append(extra[draw(st.integers(0, len(extra) - 1))])
    graph = helper.make_graph(
        nodes, "fuzz", inputs,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return model, feeds, [n.name for n in nodes], sorted({n.op_type for n in nodes})


@st.composite
def policies(draw, node_names, op_types):
    names = [v if isinstance(v, str) else v.name for v in VENDORS]
    order = draw(st.permutations(range(len(VENDORS))))
    count = draw(st.integers(1, len(VENDORS)))
    vendors = [VENDORS[i] for i in order[:count]]
    keep = draw(st.lists(st.sampled_from(list(node_names) + list(op_types)), max_size=2, unique=True))
    return vendors, draw(st.integers(1, 3)), keep, [names[i] for i in order[:count]]


def _depends_on_own_output(main) -> list[str]:
    """Partition calls in ``main`` whose arguments depend on the call's own result."""
    from tvm import relax

    deps: dict = {}
    bindings = [b for block in main.body.blocks for b in block.bindings]
    for b in bindings:
        deps[b.var] = set(relax.analysis.free_vars(b.value))

    def ancestors(var, seen):
        for parent in deps.get(var, ()):
            if parent not in seen:
                seen.add(parent)
                ancestors(parent, seen)
        return seen

    bad = []
    for b in bindings:
        if isinstance(b.value, relax.Call) and isinstance(b.value.op, relax.GlobalVar):
            upstream = set()
            for arg in b.value.args:
                for var in relax.analysis.free_vars(arg):
                    upstream |= ancestors(var, {var})
            if b.var in upstream:
                bad.append(b.value.op.name_hint)
    return bad


def _plain_outputs(imported, feeds):
    import tvm
    from tvm import relax

    executable = tvm.compile(imported.mod, target=tvm.target.Target({"kind": "llvm"}))
    vm = relax.VirtualMachine(executable, tvm.cpu())
    result = vm["main"](*[tvm.runtime.tensor(feeds[s.name]) for s in imported.inputs])
    items = [result] if hasattr(result, "numpy") else list(result)
    return [r.numpy() for r in items]


class PlainTvmFailed(Exception):
    """Plain TVM cannot build the unpartitioned graph (seen: LLVM 'does not dominate all uses')."""


def check_graph(model: onnx.ModelProto, feeds: dict, vendors, min_ops: int, keep: list) -> byoc.PartitionPlan:
    """The property: the plan is cycle-free and the byoc build equals plain TVM."""
    from tvm import relax

    imported = byoc.import_model(model)
    plan = byoc.partition(imported, vendors, min_ops=min_ops, keep_on_host=keep)
    relax.analysis.well_formed(plan.mod)  # raises on a use before def
    assert _depends_on_own_output(plan.mod["main"]) == []
    for part in plan.partitions:
        assert len(part.bindings) >= min_ops
        assert not set(part.onnx_nodes) & set(keep)
    try:
        expected = _plain_outputs(imported, feeds)
    except Exception as err:  # noqa: BLE001 - TVM's own bug, not byoc's: nothing to compare with
        raise PlainTvmFailed(f"{type(err).__name__}: {str(err).strip().splitlines()[0]}") from err
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a codegen falling back to the host is a failure here
        artifact = byoc.build(plan)
    actual = artifact.run(feeds)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        scale = max(1.0, float(np.max(np.abs(e))) if e.size else 1.0)
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5 * scale)
    return plan


@st.composite
def cases(draw):
    model, feeds, node_names, op_types = draw(graphs())
    vendors, min_ops, keep, _ = draw(policies(node_names, op_types))
    return model, feeds, vendors, min_ops, keep


PROPERTY_SETTINGS = dict(deadline=None, derandomize=True, database=None,
                         suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(max_examples=60, **PROPERTY_SETTINGS)
@given(cases())
def test_partitioned_build_equals_plain_tvm(case):
    model, feeds, vendors, min_ops, keep = case
    try:
        plan = check_graph(model, feeds, vendors, min_ops, keep)
    except PlainTvmFailed:
        reject()
    event(f"partitions: {min(len(plan.partitions), 3)}{'+' if len(plan.partitions) >= 3 else ''}")
    event(f"vendors used: {len({p.vendor for p in plan.partitions})}")
