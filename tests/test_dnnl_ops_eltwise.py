"""The dnnl vendor on the element-wise ops real models add: sqrt / exp / leaky relu, reciprocal, broadcasting
multiplies, softmax over any axis, power, LRN, scalar and per-channel constant operands over blocked conv
outputs, and GELU's tanh form in any spelling; each against onnxruntime through
``byoc.compile(..., strict=True)`` with the op checked to have gone to dnnl, and every combination the
runtime does not take checked to stay on the host with its reason.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import byoc

from dnnl_op_helpers import _compile, _conv, _f, _gelu_tanh_nodes, _onednn_exec, _reason, _rules
from models import const, model, random_inputs, rng, single_op, tensor


# -- element-wise ops real models add -----------------------------------------------------------
@pytest.mark.parametrize("op,attrs,positive", [
    ("Sqrt", {}, True), ("Exp", {}, False), ("LeakyRelu", {"alpha": 0.1}, False),
    ("Sin", {}, False), ("Cos", {}, False),  # byoc kernels: a decoder's rotary tables
])
def test_unary_eltwise(op, attrs, positive):
    m = single_op(op, {"x": [2, 3, 5]}, [2, 3, 5], attrs)
    inputs = random_inputs(m)
    if positive:
        inputs = {k: np.abs(v) + np.float32(0.1) for k, v in inputs.items()}
    assert len(_rules(_compile(m, inputs=inputs))) == 1


@pytest.mark.parametrize("numerator", [None, 2.5, -0.5])
def test_reciprocal_and_a_scalar_over_a_tensor(numerator):
    """Reciprocal(x) and c / x: oneDNN's eltwise_pow (c * x^-1), including on negative x."""
    if numerator is None:
        m = single_op("Reciprocal", {"x": [2, 3, 5]}, [2, 3, 5])
    else:
        m = model([helper.make_node("Div", ["c", "x"], ["y"], name="div")], [tensor("x", [2, 3, 5])],
                  [tensor("y", [2, 3, 5])], [const("c", np.array(numerator, np.float32))])
    x = _f(2, 3, 5, seed=11)
    x = np.where(np.abs(x) < 0.05, np.float32(0.5), x)  # away from the pole at 0
    artifact = _compile(m, inputs={"x": x})
    np.testing.assert_allclose(artifact.run({"x": x})[0], np.float32(numerator or 1.0) / x, rtol=1e-6)


@pytest.mark.parametrize("a,b", [([1, 1, 256], [1, 64, 1]), ([5, 1], [1, 7]), ([3, 1, 4], [3, 6, 1]), ([6, 1], [5])])
def test_outer_product_multiply_is_a_matmul(a, b):
    """Both operands broadcast ([.., M, 1] * [.., 1, N], e.g. Magika's layer norm): one matmul with K = 1."""
    out = list(np.broadcast_shapes(tuple(a), tuple(b)))
    m = model([helper.make_node("Mul", ["a", "b"], ["y"], name="mul")], [tensor("a", a), tensor("b", b)],
              [tensor("y", out)])
    _compile(m)


def test_a_multiply_whose_operands_both_broadcast_otherwise_stays_on_host():
    m = model([helper.make_node("Mul", ["a", "b"], ["y"], name="mul")], [tensor("a", [2, 1, 3]), tensor("b", [1, 4, 1])],
              [tensor("y", [2, 4, 3])])
    assert _reason(m, "relax.multiply") == ("operands (2, 1, 3) and (1, 4, 1) both broadcast to (2, 4, 3) "
                                            "(oneDNN broadcasts the second operand only)")


@pytest.mark.parametrize("shape,axis", [([1, 16, 4, 35], 1), ([7, 5], 0), ([3, 9, 5], 1), ([2, 3, 5], -1)])
def test_softmax_over_any_axis(shape, axis):
    """Over another axis than the last (YOLOv8's box bins), oneDNN's jit softmax runs on a layout with that
    axis innermost."""
    m = single_op("Softmax", {"x": shape}, shape, {"axis": axis})
    assert _rules(_compile(m, scale=3.0)) == {"dnnl.softmax"}


def test_softmax_over_channels_feeding_a_conv():
    """YOLOv8's distribution focal loss head: softmax over 16 bins on axis 1, then a 1x1 conv over them."""
    conv, inits = _conv("p", "y", 16, 1, "dfl", k=1, pads=(0, 0, 0, 0))
    m = model([helper.make_node("Softmax", ["x"], ["p"], name="softmax", axis=1), conv],
              [tensor("x", [1, 16, 4, 35])], [tensor("y", [1, 1, 4, 35])], inits)
    _compile(m, scale=3.0)


@pytest.mark.parametrize("exponent", [2.0, 3.0, 0.5, -1.0])
def test_power_with_a_scalar_exponent(exponent):
    """The decomposed layer norm of PP-OCR rec: (x - mean) ** 2, then sqrt."""
    m = single_op("Pow", {"x": [2, 7]}, [2, 7], initializers=[const("e", np.array(exponent, np.float32))])
    inputs = random_inputs(m)
    if exponent != int(exponent):
        inputs = {k: np.abs(v) + np.float32(0.1) for k, v in inputs.items()}
    assert _rules(_compile(m, inputs=inputs)) == {"dnnl.power"}


def test_power_with_a_tensor_exponent_stays_on_host():
    m = single_op("Pow", {"x": [2, 7], "e": [2, 7]}, [2, 7])
    assert "exponent of shape (2, 7) is not a scalar constant" in _reason(m, "relax.power")


# -- LRN ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("size,alpha,beta,bias,shape", [
    (5, 1e-4, 0.75, 1.0, [1, 8, 5, 7]),    # AlexNet / GoogLeNet
    (3, 0.5, 0.6, 2.0, [2, 5, 3, 3]),      # a window wider than half the channels at the edges
    (1, 1.0, 1.0, 0.5, [1, 3, 4, 4]),
])
def test_lrn(size, alpha, beta, bias, shape):
    m = single_op("LRN", {"x": shape}, shape, {"size": size, "alpha": alpha, "beta": beta, "bias": bias})
    assert _rules(_compile(m, scale=2.0)) == {"dnnl.lrn"}


def test_lrn_after_a_conv_reads_the_blocked_layout():
    c1, i1 = _conv("x", "c", 3, 16, "c1")
    nodes = [c1, helper.make_node("LRN", ["c"], ["y"], name="lrn", size=5, alpha=1e-3, beta=0.75, bias=1.0)]
    m = model(nodes, [tensor("x", [1, 3, 7, 6])], [tensor("y", [1, 16, 7, 6])], i1)
    assert _rules(_compile(m)) == {"dnnl.conv2d_bias", "dnnl.lrn"}


def test_lrn_of_a_3d_tensor_runs_as_its_ops():
    """TVM imports a rank-3 LRN with avg_pool2d, not the NCHW form oneDNN's LRN is matched on:
    its ops go to dnnl one by one (onnxruntime has no rank-3 LRN to compare with)."""
    m = single_op("LRN", {"x": [2, 6, 5]}, [2, 6, 5], {"size": 3})
    plan = byoc.partition(m, ["dnnl"])
    rules = {d.rule for d in plan.decisions.values() if d.rule}
    assert plan.host_ops == [] and "dnnl.lrn" not in rules and {"dnnl.avg_pool2d", "dnnl.power"} <= rules


# -- a scalar constant operand over a conv output in a blocked layout ------------------------------
@pytest.mark.parametrize("op,scalar_first", [
    ("Add", False), ("Add", True), ("Sub", False), ("Sub", True), ("Mul", False), ("Div", False), ("Div", True)])
def test_scalar_operand_of_a_blocked_conv_output(op, scalar_first):
    """x+c, c+x, x-c, c-x, x*c and x/c run as one eltwise_linear over the conv's blocked output (oneDNN's binary
    would broadcast the scalar with its reference kernel); c/x as one eltwise_pow (c * x^-1)."""
    conv, inits = _conv("x", "a", 3, 8, "c1", seed=3)
    operands = ["c", "a"] if scalar_first else ["a", "c"]
    # the conv's output is read twice, so the scalar op cannot be one of its post-ops
    nodes = [conv, helper.make_node(op, operands, ["b"], name="scalar_op"), helper.make_node("Mul", ["b", "a"], ["s"]),
             helper.make_node("Tanh", ["s"], ["y"])]
    m = model(nodes, [tensor("x", [1, 3, 24, 96])], [tensor("y", [1, 8, 24, 96])],
              inits + [const("c", np.array(0.75, np.float32))])
    _compile(m, inputs={"x": _f(1, 3, 24, 96)}, scale=1.0)


@pytest.mark.parametrize("op,channels", [("Add", 8), ("Mul", 8), ("Add", 24), ("Mul", 20)])
def test_per_channel_constant_over_a_blocked_conv_output(op, channels):
    """x + c and x * c with c of shape (1, C, 1, 1) over a channel-blocked conv output: the constant is reordered
    into the same blocking (plain, oneDNN runs its reference kernel: DenseNet-121 538 of 620 ms), C not a multiple
    of the block included."""
    conv, inits = _conv("x", "a", 3, channels, "c1", seed=4)
    # the conv's output is read twice, so the op cannot be one of its post-ops
    nodes = [conv, helper.make_node(op, ["a", "c"], ["b"], name="channel_op"), helper.make_node("Mul", ["b", "a"], ["s"]),
             helper.make_node("Tanh", ["s"], ["y"])]
    c = np.random.default_rng(5).uniform(0.5, 1.5, (1, channels, 1, 1)).astype(np.float32)
    m = model(nodes, [tensor("x", [1, 3, 24, 40])], [tensor("y", [1, channels, 24, 40])], inits + [const("c", c)])
    _compile(m, inputs={"x": _f(1, 3, 24, 40)}, scale=1.0)


@pytest.mark.parametrize("ops", [("Add",), ("Mul",), ("Mul", "Add"), ("Add", "Relu")])
def test_constant_ops_after_a_conv_are_its_post_ops(ops):
    """A per-channel add or multiply by a constant (and what follows it), each a node of its own after the conv,
    runs inside the conv as post-ops (onnxruntime folds them into the conv's bias and weights): no binary or
    eltwise primitive of their own."""
    conv, inits = _conv("x", "v0", 3, 16, "c1", seed=9)
    nodes, constants = [conv], []
    for i, op in enumerate(ops):
        inputs = [f"v{i}"] + ([f"k{i}"] if op != "Relu" else [])
        nodes.append(helper.make_node(op, inputs, [f"v{i + 1}"], name=f"after_{i}"))
        if op != "Relu":
            constants.append(const(f"k{i}", rng(i).uniform(0.5, 1.5, (1, 16, 1, 1)).astype(np.float32)))
    m = model(nodes, [tensor("x", [1, 3, 20, 24])], [tensor(f"v{len(ops)}", [1, 16, 20, 24])], inits + constants)
    _compile(m)
    executed = [line.split(",")[3] for line in _onednn_exec(m)]
    assert executed.count("convolution") == 1 and "binary" not in executed and "eltwise" not in executed, executed


# -- GELU's tanh form ---------------------------------------------------------------------------
@pytest.mark.parametrize("spelling", ["keras", "torch", "wrong"])
def test_gelu_tanh_in_any_spelling_is_one_eltwise(spelling):
    """The tanh form of GELU runs as one step whatever order and grouping the exporter wrote (Magika: nine
    primitives each time): oneDNN's eltwise_gelu_tanh, or byoc's kernel where oneDNN runs no AVX-512 (its AVX2 one
    reads tables with gathers); with another constant it is not GELU and runs op by op."""
    conv, inits = _conv("x", "a", 3, 8, "c1", seed=6)
    nodes, scalars = _gelu_tanh_nodes(spelling, "a", "y")
    m = model([conv, *nodes], [tensor("x", [1, 3, 10, 12])], [tensor("y", [1, 8, 10, 12])], inits + scalars)
    artifact = _compile(m)
    gelu = [x for x in _onednn_exec(m) if "eltwise_gelu_tanh" in x]
    kernels = str(artifact.profile(random_inputs(m), runs=1)).count("byoc:gelu_tanh")
    assert len(gelu) + kernels == (0 if spelling == "wrong" else 1), (gelu, kernels)


# -- the kernel guarantee: a broadcast op never runs on oneDNN's reference kernel --------------------
def _squeeze_excite(channels, group):
    """A grouped conv (a channel-blocked output) times sigmoid(mean over H, W): a run-time [1, C, 1, 1] scale."""
    conv, inits = _conv("x", "y", channels, channels, "conv", group=group)
    n = helper.make_node
    nodes = [conv, n("GlobalAveragePool", ["y"], ["g"], name="gap"), n("Sigmoid", ["g"], ["s"], name="sig"),
             n("Mul", ["y", "s"], ["z"], name="scale")]
    return model(nodes, [tensor("x", [1, channels, 14, 14])], [tensor("z", [1, channels, 14, 14])], inits)


def _window_mask_add(mask_is_input):
    """Swin's shifted windows: scores [1, nW, heads, T, T] + mask [1, nW, 1, T, T], a broadcast of a middle dim."""
    scores, mask = [1, 4, 3, 49, 49], [1, 4, 1, 49, 49]
    inputs, inits = [tensor("s", scores)], []
    if mask_is_input:
        inputs.append(tensor("m", mask))
    else:
        inits.append(const("m", _f(*mask, seed=3)))
    nodes = [helper.make_node("Add", ["s", "m"], ["a"], name="mask"),
             helper.make_node("Softmax", ["a"], ["y"], name="softmax", axis=-1)]
    return model(nodes, inputs, [tensor("y", scores)], inits)


BROADCASTS = {"squeeze-excite after a grouped conv": lambda: _squeeze_excite(48, 6),
              "squeeze-excite after a depthwise conv": lambda: _squeeze_excite(40, 40),
              "window mask, an input": lambda: _window_mask_add(True),
              "window mask, a constant": lambda: _window_mask_add(False)}


@pytest.mark.parametrize("isa", ["AVX2", None], ids=["avx2", "native"])
@pytest.mark.parametrize("case", list(BROADCASTS))
def test_a_broadcast_op_never_runs_on_the_reference_kernel(case, isa):
    """oneDNN has no jit binary kernel for a plain [1, C, 1, 1] operand over a channel-blocked tensor (RegNet's
    squeeze-and-excitation: 16x onnxruntime) nor for a broadcast middle dim (Swin's mask: 40x); the runtime
    takes another form of the same op (the operand in the blocked layout, dims merged where they broadcast
    alike). Held to AVX2 and at the machine's own ISA, whose blocked layouts differ (8 and 16 channels)."""
    m = BROADCASTS[case]()
    _compile(m)  # the outputs against onnxruntime
    executed = _onednn_exec(m, env={"ONEDNN_MAX_CPU_ISA": isa} if isa else None)
    assert any(",binary," in line for line in executed), executed
    assert not [line for line in executed if ",ref:" in line], executed


def test_an_artifact_names_what_runs_each_step():
    """``Artifact.implementations``: per dnnl partition, each step's primitive kind and oneDNN implementation,
    as its verbose log names them; byoc's own kernels (the sigmoid's, without AVX-512), which oneDNN does not log,
    as "kernel byoc:<name>"."""
    m = _squeeze_excite(48, 6)
    artifact = _compile(m)
    (steps,) = artifact.implementations().values()
    logged = [line.split(",") for line in _onednn_exec(m)]
    assert [s for s in steps if not s.startswith("kernel byoc:")] == [f"{fields[3]} {fields[4]}" for fields in logged]
    assert all(s in ("kernel byoc:logistic",) for s in steps if s.startswith("kernel byoc:"))
    for vendors in (["json_runtime"], ["c_source"]):  # runtimes that do not report are left out
        other = byoc.compile(m, vendors=vendors)
        other.run(random_inputs(m))
        assert other.plan.partitions and other.implementations() == {}


# -- ops of opsets 18-21 that today's exporters write -------------------------------------------------
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_the_gelu_op_of_opset_20(approximate):
    """torch's dynamo exporter writes nn.GELU as ONNX's Gelu op (opset 20): oneDNN's gelu_erf / gelu_tanh, as
    a post-op of the matmul before it."""
    n = helper.make_node
    nodes = [n("MatMul", ["x", "w"], ["h"], name="fc"), n("Gelu", ["h"], ["y"], name="gelu", approximate=approximate)]
    m = model(nodes, [tensor("x", [2, 7, 16])], [tensor("y", [2, 7, 24])], [const("w", _f(16, 24, seed=2))], opset=20)
    artifact = _compile(m, scale=2.0)
    assert {"dnnl.gelu_op" if approximate == "none" else "dnnl.gelu_tanh_op"} <= _rules(artifact)


@pytest.mark.parametrize("op,groups,shape", [
    ("InstanceNormalization", None, [2, 8, 50]),      # wav2vec2's first conv block, as the legacy exporter writes it
    ("InstanceNormalization", None, [1, 6, 5, 7]),
    ("GroupNormalization", 8, [2, 8, 50]),
    ("GroupNormalization", 2, [1, 8, 6, 6]),
])
def test_group_and_instance_norm(op, groups, shape):
    """GroupNormalization-21 and InstanceNormalization (imported as a group norm of one group per channel):
    oneDNN 3.2 has no group norm, so a layer norm over each group's rows, then the per-channel affine."""
    channels = shape[1]
    attrs = {"num_groups": groups} if groups else {}
    node = helper.make_node(op, ["x", "s", "b"], ["y"], name="norm", epsilon=1e-3, **attrs)
    m = model([node], [tensor("x", shape)], [tensor("y", shape)],
              [const("s", _f(channels, seed=3)), const("b", _f(channels, seed=4))], opset=21 if groups else 17)
    x = _f(*shape, seed=6, scale=3.0) + np.float32(1.0)  # a mean and scale away from 0 and 1
    artifact = _compile(m, inputs={"x": x})
    assert "dnnl.group_norm" in _rules(artifact)


def test_negation_runs_on_dnnl():
    """Rotary embeddings' rotate_half, cat(-x2, x1), as exporters write it (Llama): the Neg stays in the partition."""
    nodes = [helper.make_node("Split", ["x"], ["x1", "x2"], axis=-1, num_outputs=2),
             helper.make_node("Neg", ["x2"], ["n"]),
             helper.make_node("Concat", ["n", "x1"], ["y"], axis=-1)]
    m = model(nodes, [tensor("x", [1, 4, 6, 8])], [tensor("y", [1, 4, 6, 8])], [], opset=18)
    _compile(m)


@pytest.mark.parametrize("target, refused", [(["batch", 1, 6, 8], ""), (["batch", 3, 6, 8], ""),
                                             (["batch", "heads", 6, 8], "known only at run time")])
def test_a_broadcast_over_symbolic_dims_reads_them_by_name(target, refused):
    """A broadcast_to of [batch, 1, 6, 8]: a view to the same shape, three copies to [batch, 3, 6, 8] (a grouped-query
    attention's repeated keys), and refused with its reason for a count of copies known only at run time. The
    check reads symbolic dims by name: it once raised a TypeError on them, and the op stayed on the host."""
    nodes = [helper.make_node("Shape", ["like"], ["shape"]),
             helper.make_node("Expand", ["x", "shape"], ["e"]),
             helper.make_node("Relu", ["e"], ["y"])]
    m = model(nodes, [tensor("x", ["batch", 1, 6, 8]), tensor("like", target)], [tensor("y", target)], [])
    reasons = [d.reasons.get("dnnl", "") for d in byoc.partition(m, ["dnnl"]).host_ops if d.op == "relax.broadcast_to"]
    if refused:
        assert reasons and refused in reasons[0], reasons
        return
    assert not reasons
    artifact = byoc.compile(m, ["dnnl"], strict=True)
    for batch in (1, 2):
        x = np.random.default_rng(batch).standard_normal((batch, 1, 6, 8)).astype(np.float32)
        like = np.zeros([batch] + target[1:], np.float32)
        np.testing.assert_allclose(artifact.run({"x": x, "like": like})[0], np.maximum(np.broadcast_to(x, like.shape), 0))


@pytest.mark.parametrize("value", [0.0, -1.5])
def test_a_nan_guard_is_one_kernel(value):
    """Where(IsNaN(x), c, x), which transformers' exports put after every attention's softmax: dnnl takes it (its
    boolean mask never leaves the pattern), so a decoder layer is not cut in two around it."""
    nodes = [helper.make_node("Softmax", ["x"], ["p"], name="softmax", axis=-1),
             helper.make_node("IsNaN", ["p"], ["nan"], name="isnan"),
             helper.make_node("Where", ["nan", "c", "p"], ["y"], name="where")]
    m = model(nodes, [tensor("x", [2, 3, 7])], [tensor("y", [2, 3, 7])], [const("c", np.array(value, np.float32))])
    x = _f(2, 3, 7, seed=4)
    x[0, 1, :] = -np.inf  # a row with every key masked: the softmax is NaN there, the guard makes it c
    artifact = _compile(m, inputs={"x": x})
    assert _rules(artifact) == {"dnnl.softmax", "dnnl.nan_to"}
    assert (artifact.run({"x": x})[0][0, 1] == value).all()


# -- RMS normalization ------------------------------------------------------------------------------
def _rms_norm_model(form: str, weighted: bool = True, shape=(2, 5, 24)):
    """RMSNorm over the last axis as transformers' exports write it ("reciprocal": Pow, ReduceMean, Add, Sqrt,
    Div(1, s), Mul(x, r), then Mul(weight, .)) and as byoc imports onnxruntime's SimplifiedLayerNormalization
    ("divide": Mul(x, x), ReduceMean, Add, Sqrt, Div(x, s), then Mul(., weight)); the result goes through a Relu so
    that the norm is not the partition's output alone."""
    width = shape[-1]
    nodes = [helper.make_node("Pow", ["x", "two"], ["sq"]) if form == "reciprocal"
             else helper.make_node("Mul", ["x", "x"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1),
             helper.make_node("Add", ["ms", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["rt"])]
    if form == "reciprocal":
        nodes += [helper.make_node("Div", ["one", "rt"], ["inv"]), helper.make_node("Mul", ["x", "inv"], ["n"])]
    else:
        nodes.append(helper.make_node("Div", ["x", "rt"], ["n"]))
    if weighted:
        nodes.append(helper.make_node("Mul", ["w", "n"] if form == "reciprocal" else ["n", "w"], ["nw"]))
    nodes.append(helper.make_node("Relu", ["nw" if weighted else "n"], ["y"]))
    weights = [const("two", np.array(2.0, np.float32)), const("eps", np.array(1e-6, np.float32)),
               const("one", np.array(1.0, np.float32)), const("w", 1 + 0.1 * _f(width, seed=9))]
    return model(nodes, [tensor("x", list(shape))], [tensor("y", list(shape))], weights)


@pytest.mark.parametrize("form, weighted", [("reciprocal", True), ("divide", True), ("divide", False)])
def test_an_rms_norm_spelled_as_several_ops_is_one_kernel(form, weighted):
    """Each RMSNorm a decoder runs twice a layer per token is one byoc kernel, not six or seven primitives; its
    outputs are onnxruntime's."""
    artifact = _compile(_rms_norm_model(form, weighted))
    (steps,) = artifact.implementations().values()
    assert len(steps) == 2 and steps[0] == "kernel byoc:rms_norm" and steps[1].startswith("eltwise "), steps


def test_an_rms_norm_whose_mean_is_read_elsewhere_stays_several_ops():
    """A form whose intermediate value something else reads (here the mean squares, a second output) is left as
    its ops: the kernel would not compute that value."""
    m = _rms_norm_model("divide")
    m.graph.output.append(tensor("ms", [2, 5, 1]))
    artifact = _compile(m)
    (steps,) = artifact.implementations().values()
    assert "kernel byoc:rms_norm" not in steps and len(steps) > 3, steps


# -- rotary embeddings ------------------------------------------------------------------------------
@pytest.mark.parametrize("order", ["cos_first", "sin_first"])
def test_a_rotary_embedding_spelled_as_seven_ops_is_one_kernel(order):
    """x * cos + rotate_half(x) * sin, rotate_half(x) = concat(-x[..., d/2:], x[..., :d/2]), as transformers' exports
    write it for every layer's queries and keys, with one table for every head: one byoc kernel, onnxruntime's
    outputs."""
    b, h, s, d = 2, 3, 5, 8
    ints = lambda name, v: const(name, np.array(v, np.int64))  # noqa: E731 - Slice's inputs
    nodes = [helper.make_node("Slice", ["x", "half", "end", "last"], ["hi"]),
             helper.make_node("Neg", ["hi"], ["neg"]),
             helper.make_node("Slice", ["x", "zero", "half", "last"], ["lo"]),
             helper.make_node("Concat", ["neg", "lo"], ["rot"], axis=-1),
             helper.make_node("Mul", ["x", "cos"], ["xc"]),
             helper.make_node("Mul", ["rot", "sin"] if order == "cos_first" else ["sin", "rot"], ["rs"]),
             helper.make_node("Add", ["xc", "rs"] if order == "cos_first" else ["rs", "xc"], ["emb"]),
             helper.make_node("Relu", ["emb"], ["y"])]
    m = model(nodes, [tensor("x", [b, h, s, d]), tensor("cos", [b, 1, s, d]), tensor("sin", [b, 1, s, d])],
              [tensor("y", [b, h, s, d])],
              [ints("half", [d // 2]), ints("end", [2**62]), ints("zero", [0]), ints("last", [-1])])
    artifact = _compile(m)
    (steps,) = artifact.implementations().values()
    assert len(steps) == 2 and steps[0] == "kernel byoc:rotary" and steps[1].startswith("eltwise "), steps


# -- PRelu ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("channels,slope_shape", [(10, [10, 1, 1]), (16, [16, 1, 1]), (10, [1])])
def test_prelu_after_a_conv(channels, slope_shape):
    """PRelu (MTCNN's activation) as oneDNN's PReLU: one slope per channel, or one for all. Ten channels leave
    a channel-blocked conv output half a block short, where oneDNN has only its reference kernel: the runtime
    reads it channels last instead."""
    conv, weights = _conv("x", "c", 3, channels, "conv")
    slope = rng(7).uniform(0.05, 0.5, slope_shape).astype(np.float32)
    m = model([conv, helper.make_node("PRelu", ["c", "slope"], ["y"], name="prelu")],
              [tensor("x", [2, 3, 12, 12])], [tensor("y", [2, channels, 12, 12])], weights + [const("slope", slope)])
    assert "dnnl.prelu" in _rules(_compile(m))
    assert not [line for line in _onednn_exec(m) if ",prelu," in line and "ref" in line]


def test_prelu_after_a_matmul():
    slope = rng(8).uniform(0.05, 0.5, [32]).astype(np.float32)
    m = model([helper.make_node("MatMul", ["x", "w"], ["h"], name="dense"),
               helper.make_node("PRelu", ["h", "slope"], ["y"], name="prelu")],
              [tensor("x", [4, 20])], [tensor("y", [4, 32])], [const("w", _f(20, 32)), const("slope", slope)])
    assert "dnnl.prelu" in _rules(_compile(m))


def test_a_prelu_whose_slope_is_an_input_stays_on_host():
    m = model([helper.make_node("PRelu", ["x", "slope"], ["y"], name="prelu")],
              [tensor("x", [2, 4, 3, 3]), tensor("slope", [4, 1, 1])], [tensor("y", [2, 4, 3, 3])])
    assert _reason(m, "relax.nn.prelu") == "the slope is not a float32 constant"


@pytest.mark.parametrize("scale", [0.5, 4.0, 30.0])
@pytest.mark.parametrize("op,attrs", [("Gelu", {"approximate": "tanh"}), ("Sigmoid", {})])
def test_exp_activation_kernels_match_onnxruntime_over_the_whole_range(op, attrs, scale):
    """byoc's kernels for GELU's tanh form (x / (1 + exp(-2u))) and the logistic, which CPUs without AVX-512 run,
    with a polynomial exp: against onnxruntime from the flat tails to the bend, on a length that leaves a scalar
    tail after the 8-wide loop."""
    m = model([helper.make_node(op, ["x"], ["y"], name="act", **attrs)], [tensor("x", [3, 1001])],
              [tensor("y", [3, 1001])], opset=20)
    x = _f(3, 1001, seed=12, scale=scale)
    _compile(m, inputs={"x": x})


def test_a_sigmoid_over_a_blocked_conv_output():
    """The logistic kernel reads a dense channel-blocked conv output as it is (16 channels) and a padded one (12)
    plain; the conv's output is read twice, so the sigmoid is no post-op of it."""
    for channels in (16, 12):
        conv, inits = _conv("x", "a", 3, channels, "c1", seed=13)
        nodes = [conv, helper.make_node("Sigmoid", ["a"], ["s"], name="sig"), helper.make_node("Add", ["s", "a"], ["y"])]
        m = model(nodes, [tensor("x", [1, 3, 20, 24])], [tensor("y", [1, channels, 20, 24])], inits)
        _compile(m)


# -- glue inside a layer: a mask computed from an input, relative positions gathered ----------------------------
def test_where_over_a_mask_computed_from_an_input_is_a_dnnl_op():
    """An attention's scores where a padding mask (from the int64 attention_mask input) is set, the float minimum
    elsewhere: byoc's Select kernel, the mask broadcast from [b, 1, 1, s] to [b, h, s, s]."""
    from onnx import TensorProto

    nodes = [helper.make_node("MatMul", ["q", "k"], ["scores"], name="qk"),
             helper.make_node("Unsqueeze", ["attention_mask", "axes"], ["m4"], name="unsqueeze"),
             helper.make_node("Greater", ["m4", "zero"], ["keep"], name="greater"),
             helper.make_node("Where", ["keep", "scores", "minimum"], ["masked"], name="where"),
             helper.make_node("Softmax", ["masked"], ["y"], name="softmax", axis=-1)]
    inits = [const("axes", np.array([1, 2], np.int64)), const("zero", np.array(0, np.int64)),
             const("minimum", np.array(np.finfo(np.float32).min, np.float32))]
    m = model(nodes, [tensor("q", [2, 3, 5, 8]), tensor("k", [2, 3, 8, 5]),
                      tensor("attention_mask", [2, 5], TensorProto.INT64)], [tensor("y", [2, 3, 5, 5])], inits)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int64)
    artifact = _compile(m, host_ops=["relax.expand_dims", "relax.expand_dims", "relax.greater"],
                        inputs={"q": _f(2, 3, 5, 8), "k": _f(2, 3, 8, 5, seed=6), "attention_mask": mask})
    assert {"dnnl.matmul", "dnnl.where", "dnnl.softmax"} <= _rules(artifact)


@pytest.mark.parametrize("data,index,axis", [([2, 4, 6], [2, 4, 5], -1), ([3, 5], [2, 5], 0), ([2, 3, 4], [2, 2, 4], 1)])
def test_gather_elements_by_an_index_given_at_run_time(data, index, axis):
    from onnx import TensorProto

    nodes = [helper.make_node("GatherElements", ["x", "i"], ["g"], name="gather", axis=axis),
             helper.make_node("Relu", ["g"], ["y"], name="relu")]  # a gather joins a partition of other ops
    m = model(nodes, [tensor("x", data), tensor("i", index, TensorProto.INT64)], [tensor("y", index)])
    extent = data[axis]
    i = rng(3).integers(-extent, extent, size=index).astype(np.int64)  # negative ones count from the end
    # TVM's import counts a negative index from the end on the host (Less, Add, Where of int64)
    artifact = _compile(m, host_ops=["relax.less", "relax.add", "relax.where"], inputs={"x": _f(*data), "i": i})
    assert _rules(artifact) == {"dnnl.gather_elements", "dnnl.relu"}


def test_gather_elements_of_an_index_outside_the_axis_is_an_error():
    from onnx import TensorProto

    nodes = [helper.make_node("GatherElements", ["x", "i"], ["g"], name="gather", axis=1),
             helper.make_node("Relu", ["g"], ["y"], name="relu")]
    m = model(nodes, [tensor("x", [2, 3]), tensor("i", [2, 3], TensorProto.INT64)], [tensor("y", [2, 3])])
    artifact = byoc.compile(m, vendors=["dnnl"], strict=True)
    with pytest.raises(Exception, match="outside the axis of 3"):
        artifact.run({"x": _f(2, 3), "i": np.array([[0, 1, 2], [3, 0, 0]], np.int64)})


def test_gather_elements_by_a_constant_index_is_a_dnnl_op():
    """DeBERTa's relative positions, a constant for a static length: the index travels as float32."""
    index = np.clip(np.arange(6)[None, :] - np.arange(6)[:, None] + 3, 0, 5)
    index = np.broadcast_to(index, (2, 6, 6)).astype(np.int64)
    nodes = [helper.make_node("GatherElements", ["x", "i"], ["g"], name="gather", axis=-1),
             helper.make_node("Relu", ["g"], ["y"], name="relu")]
    m = model(nodes, [tensor("x", [2, 6, 6])], [tensor("y", [2, 6, 6])], [const("i", index)])
    assert _rules(_compile(m)) == {"dnnl.gather_elements", "dnnl.relu"}


def test_a_gather_alone_stays_on_the_host():
    """A region of glue alone would be a boundary for no compute."""
    from onnx import TensorProto

    node = helper.make_node("GatherElements", ["x", "i"], ["y"], name="gather", axis=1)
    m = model([node], [tensor("x", [2, 3]), tensor("i", [2, 3], TensorProto.INT64)], [tensor("y", [2, 3])])
    assert "only join a partition of other ops" in _reason(m, "relax.gather_elements")


def _scatter_index(data, index, axis, seed=4):
    """An int64 index of shape ``index`` into ``data`` along ``axis``, no two entries of a line along the axis alike
    (duplicates leave onnxruntime's result unspecified), some negative (counted from the end)."""
    r = rng(seed)
    extent = data[axis]
    lines = np.moveaxis(np.zeros(index, np.int64), axis, -1)
    for position in np.ndindex(lines.shape[:-1]):
        lines[position] = r.permutation(extent)[:lines.shape[-1]]
    lines = np.where(r.random(lines.shape) < 0.3, lines - extent, lines)
    return np.ascontiguousarray(np.moveaxis(lines, -1, axis))


def _scatter_model(data, index, axis, data_read_again: bool):
    from onnx import TensorProto

    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),  # the data: a temp of the partition's
             helper.make_node("ScatterElements", ["r", "i", "u"], ["s"], name="scatter", axis=axis)]
    if data_read_again:  # read after the scatter: the scatter writes a copy
        nodes.append(helper.make_node("Add", ["s", "r"], ["y"], name="add"))
    else:
        nodes.append(helper.make_node("Sigmoid", ["s"], ["y"], name="sigmoid"))
    return model(nodes, [tensor("x", data), tensor("i", index, TensorProto.INT64), tensor("u", index)],
                 [tensor("y", data)])


@pytest.mark.parametrize("data,index,axis", [([2, 3, 9, 4], [2, 3, 2, 4], 2), ([3, 5], [2, 5], 0), ([2, 6], [2, 3], -1)])
@pytest.mark.parametrize("data_read_again", [False, True])
def test_scatter_elements_by_an_index_given_at_run_time(data, index, axis, data_read_again):
    """A cache's new entries written at their positions (onnxruntime-genai's GroupQueryAttention): in place into
    the data's buffer where nothing else reads it, else into a copy."""
    m = _scatter_model(data, index, axis, data_read_again)
    inputs = {"x": _f(*data), "i": _scatter_index(data, index, axis), "u": _f(*index, seed=7)}
    artifact = _compile(m, inputs=inputs)  # a negative index counted from the end by the kernel
    assert "dnnl.scatter_elements" in _rules(artifact)
    (steps,) = artifact.implementations().values()
    assert ("kernel byoc:scatter_elements" in steps) == data_read_again
    assert ("kernel byoc:scatter_elements_in_place" in steps) != data_read_again


def test_scatter_elements_of_an_index_outside_the_axis_is_an_error():
    m = _scatter_model([2, 3], [2, 1], 1, data_read_again=False)
    artifact = byoc.compile(m, vendors=["dnnl"], strict=True)
    with pytest.raises(Exception, match="outside the axis of 3"):
        artifact.run({"x": _f(2, 3), "i": np.array([[0], [3]], np.int64), "u": _f(2, 1)})


def test_scatter_elements_that_adds_stays_on_the_host():
    from onnx import TensorProto

    node = helper.make_node("ScatterElements", ["x", "i", "u"], ["s"], name="scatter", axis=1, reduction="add")
    m = model([node, helper.make_node("Relu", ["s"], ["y"], name="relu")],
              [tensor("x", [2, 3]), tensor("i", [2, 2], TensorProto.INT64), tensor("u", [2, 2])], [tensor("y", [2, 3])])
    assert "reduction 'add'" in _reason(m, "relax.scatter_elements")
