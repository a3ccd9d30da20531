"""float16 and bfloat16 models: computed in float32 (byoc/pipeline/frontend/prepare/half_precision.py), partitioned
to the vendors as their float32 models are, and matching onnxruntime on the same half-precision model.

Tolerances. onnxruntime's CPU provider runs a float16 node that has no float16 kernel in float32 with Casts around
it and removes the Cast pairs between such nodes, so it rounds to float16 at the model's edges and around the few
ops it has float16 kernels for (onnxruntime 1.32 on x86: the CNN's output is the float32 computation within 3e-7
of its largest value, the transformer block's within 3e-4), where byoc rounds at the edges only. The two also
differ by their float32 summation orders (oneDNN's blocked and Winograd convolutions: about 1e-5 of the output)
and by the one rounding of the result to the output's dtype, which those differences can tip to the next value.
float16 has an 11-bit significand (one ulp: 2**-10, about 1e-3, of the value), bfloat16 an 8-bit one (2**-7,
about 8e-3): each is compared within two ulps of the largest output, relative to it, which also covers outputs
near zero, where a sum's cancellation leaves a float32 difference that is large relative to the value. A float32
output of a half model (``keep_io_types=True``) gets the float16 tolerance: onnxruntime's roundings inside.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxconverter_common import float16 as converter

import byoc
from byoc.errors import HalfPrecisionError, InputError
from byoc.pipeline.frontend.prepare.half_precision import HALF_TYPES, compute_in_float32

from models import const, model, onnxruntime_outputs, random_inputs, rng, small_cnn, tensor

CNN_NODES = ["conv1", "bn1", "relu1", "pool1", "conv2", "relu2", "gap", "flatten", "fc"]


def transformer_block(seed: int = 3) -> onnx.ModelProto:
    """A pre-norm encoder block at 16 tokens of 64: LayerNormalization, Q/K/V MatMuls, 4 heads' scaled softmax
    attention, the output projection and residual, LayerNormalization, a 256-wide feed-forward with erf GELU."""
    r = rng(seed)
    seq, hidden, heads, ffn = 16, 64, 4, 256
    head = hidden // heads

    def w(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (r.standard_normal(shape) * scale / np.sqrt(shape[0])).astype(np.float32)

    inits = [
        const("ln1_g", 1 + 0.1 * r.standard_normal(hidden).astype(np.float32)), const("ln1_b", w(hidden, scale=0.1)),
        const("ln2_g", 1 + 0.1 * r.standard_normal(hidden).astype(np.float32)), const("ln2_b", w(hidden, scale=0.1)),
        const("wq", w(hidden, hidden)), const("wk", w(hidden, hidden)), const("wv", w(hidden, hidden)),
        const("bq", w(hidden, scale=0.1)), const("bk", w(hidden, scale=0.1)), const("bv", w(hidden, scale=0.1)),
        const("wo", w(hidden, hidden)), const("bo", w(hidden, scale=0.1)),
        const("w1", w(hidden, ffn)), const("b1", w(ffn, scale=0.1)), const("w2", w(ffn, hidden)),
        const("b2", w(hidden, scale=0.1)),
        const("heads_shape", np.array([1, seq, heads, head], np.int64)),
        const("hidden_shape", np.array([1, seq, hidden], np.int64)),
        const("scale", np.array(1 / np.sqrt(head), np.float32)),
        const("sqrt2", np.array(np.sqrt(2), np.float32)), const("one", np.array(1, np.float32)),
        const("half", np.array(0.5, np.float32)),
    ]
    node = helper.make_node
    nodes = [node("LayerNormalization", ["x", "ln1_g", "ln1_b"], ["ln1"], name="ln1", axis=-1, epsilon=1e-5)]
    for p in "qkv":
        nodes += [node("MatMul", ["ln1", f"w{p}"], [f"{p}_mm"], name=f"{p}_proj"),
                  node("Add", [f"{p}_mm", f"b{p}"], [f"{p}_lin"], name=f"{p}_bias"),
                  node("Reshape", [f"{p}_lin", "heads_shape"], [f"{p}_heads"], name=f"{p}_split"),
                  node("Transpose", [f"{p}_heads"], [f"{p}_t"], name=f"{p}_transpose",
                       perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3])]
    nodes += [
        node("MatMul", ["q_t", "k_t"], ["scores"], name="scores"),
        node("Mul", ["scores", "scale"], ["scaled"], name="scale_scores"),
        node("Softmax", ["scaled"], ["probs"], name="softmax", axis=-1),
        node("MatMul", ["probs", "v_t"], ["context"], name="context"),
        node("Transpose", ["context"], ["context_t"], name="merge_transpose", perm=[0, 2, 1, 3]),
        node("Reshape", ["context_t", "hidden_shape"], ["merged"], name="merge_heads"),
        node("MatMul", ["merged", "wo"], ["o_mm"], name="o_proj"),
        node("Add", ["o_mm", "bo"], ["o_lin"], name="o_bias"),
        node("Add", ["x", "o_lin"], ["res1"], name="residual1"),
        node("LayerNormalization", ["res1", "ln2_g", "ln2_b"], ["ln2"], name="ln2", axis=-1, epsilon=1e-5),
        node("MatMul", ["ln2", "w1"], ["f1_mm"], name="ffn1"),
        node("Add", ["f1_mm", "b1"], ["f1"], name="ffn1_bias"),
        node("Div", ["f1", "sqrt2"], ["g_div"], name="gelu_div"),
        node("Erf", ["g_div"], ["g_erf"], name="gelu_erf"),
        node("Add", ["g_erf", "one"], ["g_add"], name="gelu_add"),
        node("Mul", ["f1", "g_add"], ["g_mul"], name="gelu_mul"),
        node("Mul", ["g_mul", "half"], ["gelu"], name="gelu_half"),
        node("MatMul", ["gelu", "w2"], ["f2_mm"], name="ffn2"),
        node("Add", ["f2_mm", "b2"], ["f2"], name="ffn2_bias"),
        node("Add", ["res1", "f2"], ["y"], name="residual2"),
    ]
    return model(nodes, [tensor("x", [1, seq, hidden])], [tensor("y", [1, seq, hidden])], inits, opset=17,
                 name="transformer_block")


FLOAT_MODELS = {"cnn": small_cnn, "transformer": transformer_block}


@pytest.fixture(scope="module")
def built():
    """Each model's float32 plan and its float16 conversions' artifacts (dnnl), built once: {(name, keep): ...}."""
    cache: dict = {}

    def get(name: str, keep_io_types: bool | None):
        key = (name, keep_io_types)
        if key not in cache:
            m = FLOAT_MODELS[name]()
            if keep_io_types is None:
                cache[key] = (m, byoc.partition(m, vendors=["dnnl"]))
            else:
                with warnings.catch_warnings():  # "the float32 number ... will be truncated to 1e-07": its way
                    warnings.simplefilter("ignore", UserWarning)
                    half = converter.convert_float_to_float16(m, keep_io_types=keep_io_types)
                cache[key] = (half, byoc.compile(half, vendors=["dnnl"]))
        return cache[key]

    return get


def _assert_close(got: np.ndarray, want: np.ndarray) -> None:
    """Within two ulps of the largest output, of float16 (float16 and float32 outputs) or bfloat16 (module doc)."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    tolerance = 2 * 2.0**-7 if want.dtype.name == "bfloat16" else 2 * 2.0**-10
    g, w = got.astype(np.float32), want.astype(np.float32)
    np.testing.assert_allclose(g, w, rtol=tolerance, atol=tolerance * float(np.abs(w).max()))


@pytest.mark.parametrize("keep_io_types", [True, False], ids=["keep_io_types", "float16_io"])
@pytest.mark.parametrize("name", FLOAT_MODELS)
def test_float16_matches_onnxruntime(built, name, keep_io_types):
    half, artifact = built(name, keep_io_types)
    for seed in range(2):
        inputs = random_inputs(half, seed)
        assert all(a.dtype == (np.float32 if keep_io_types else np.float16) for a in inputs.values())
        got, want = artifact.run(inputs), onnxruntime_outputs(half, inputs)
        for g, w in zip(got, want):
            _assert_close(g, w)


@pytest.mark.parametrize("keep_io_types", [True, False], ids=["keep_io_types", "float16_io"])
@pytest.mark.parametrize("name", FLOAT_MODELS)
def test_vendor_takes_what_it_takes_in_float32(built, name, keep_io_types):
    """As many dnnl partitions as the float32 model, and no host op beyond the float32 model's, except the Casts
    at a float16 interface (the dnnl vendor has no astype rule: two small host ops)."""
    _, plan32 = built(name, None)
    half, artifact = built(name, keep_io_types)
    plan = artifact.plan
    assert len(plan.partitions) == len(plan32.partitions) >= 1
    assert {p.vendor for p in plan.partitions} == {"dnnl"}
    host = {n.node.name for n in plan.host_nodes if n.node is not None}
    host32 = {n.node.name for n in plan32.host_nodes if n.node is not None}
    added = host - host32
    if keep_io_types:
        assert not added
    else:
        inputs, outputs = [vi.name for vi in half.graph.input], [vi.name for vi in half.graph.output]
        assert added == {f"{inputs[0]}_to_float32", f"{outputs[0]}_to_float16"}
        assert all(n.ops == ("relax.astype",) for n in plan.host_nodes if n.node and n.node.name in added)
    assert not any("float16" in why for d in plan.decisions.values() for why in d.reasons.values())


@pytest.mark.parametrize("vendor", ["c_source", "json_runtime"])
def test_the_reference_vendors_take_the_float16_cnn(vendor):
    """The reference codegens take what they take of the float32 CNN (c_source leaves its BatchNormalization on
    the host, float32 or not), and compute it within float16's tolerance of onnxruntime."""
    m = small_cnn()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        half = converter.convert_float_to_float16(m, keep_io_types=False)
    plan32 = byoc.partition(m, vendors=[vendor])
    artifact = byoc.compile(half, vendors=[vendor])
    assert len(artifact.plan.partitions) == len(plan32.partitions) >= 1
    host = {n.node.name for n in artifact.plan.host_nodes if n.node}
    assert host == {n.node.name for n in plan32.host_nodes if n.node} | {"input_to_float32", "logits_to_float16"}
    inputs = random_inputs(half, 3)
    _assert_close(artifact.run(inputs)[0], onnxruntime_outputs(half, inputs)[0])


@pytest.mark.parametrize("spelling", ["keras", "torch"])
def test_float16_gelu_in_both_forms_is_one_eltwise_op(spelling):
    """GELU's constants rounded to float16 (1.41406 for sqrt 2, 0.04471 for 0.044715) are still GELU to the dnnl
    codegen: one oneDNN eltwise op per form, as in the float32 model, within float16's tolerance of onnxruntime."""
    import json

    from byoc.codegens.dnnl import DnnlCodegen
    from byoc.codegens.dnnl.activations import ELTWISE
    from byoc.vendor.graph import partition_graph

    from dnnl_op_helpers import _conv, _gelu_tanh_nodes
    from test_dnnl_activations import _gelu_erf_nodes

    conv, inits = _conv("x", "a", 3, 8, "c1", seed=6)
    erf, erf_scalars = _gelu_erf_nodes("a", "g")
    tanh, tanh_scalars = _gelu_tanh_nodes(spelling, "g", "y")
    m = model([conv, *erf, *tanh], [tensor("x", [1, 3, 10, 12])], [tensor("y", [1, 8, 10, 12])],
              inits + erf_scalars + tanh_scalars)
    half = converter.convert_float_to_float16(m, keep_io_types=True)
    plan = byoc.partition(half, ["dnnl"])
    graphs = [partition_graph(plan.mod[p.global_var], p.name) for p in plan.partitions]
    ops = [op for g in graphs for node in json.loads(DnnlCodegen().serialize(g).json)["nodes"] for op in node["body"]]
    eltwise = [op["attrs"]["algorithm"]["value"] for op in ops if op["kernel"] == ELTWISE]
    assert eltwise == ["gelu_erf", "gelu_tanh"], [op["kernel"] for op in ops]
    inputs = random_inputs(half, 1)
    _assert_close(byoc.build(plan).run(inputs)[0], onnxruntime_outputs(half, inputs)[0])


def test_report_names_the_users_nodes(built):
    """The converter's Casts are reported removed; every other node of the float16 model is in the partition."""
    half, artifact = built("cnn", True)
    casts = [n.name for n in half.graph.node if n.op_type == "Cast"]
    assert len(casts) == 2  # the converter's Cast after the input and before the output
    prepared = artifact.plan.imported.prepared
    assert {name: prepared[name] for name in casts} == {name: "removed: float16 computed as float32" for name in casts}
    (partition,) = artifact.plan.partitions
    assert list(partition.onnx_nodes) == CNN_NODES


def test_float16_artifact_exports_and_loads(built, tmp_path):
    """The exported artifact keeps the float16 interface: byoc.load takes float16 arrays, refuses float32 ones,
    and gives float16 outputs."""
    half, artifact = built("cnn", False)
    loaded = byoc.load(artifact.export(tmp_path / "cnn16.so"))
    assert [(s.name, s.dtype) for s in loaded.inputs] == [("input", "float16")]
    assert [s.dtype for s in loaded.outputs] == ["float16"]
    inputs = random_inputs(half, 5)
    _assert_close(loaded.run(inputs)[0], onnxruntime_outputs(half, inputs)[0])
    with pytest.raises(InputError, match="float16"):
        loaded.run({"input": inputs["input"].astype(np.float32)})


def test_verify_takes_a_float16_model(built):
    """byoc.tools.verify (the CLI's --verify) compares a float32 output of a float16 model with float16's tolerance:
    onnxruntime rounds around its float16 kernels, byoc does not (the transformer's LayerNormalization)."""
    from byoc.tools.verify import verify

    _, artifact = built("transformer", True)
    result = verify(artifact.plan, artifact=artifact)
    assert result.status == "ok", result.lines


def bfloat16_mlp(seed: int = 4) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """A two-layer MLP with a softmax in bfloat16, written directly: bfloat16 input ``x`` and output ``probs``,
    and ``logits`` cast to float32. Returns it and the float32 model with the same (bfloat16) weights, which
    onnxruntime runs: its CPU provider has no bfloat16 kernel for MatMul, Add, Relu or Softmax."""
    import ml_dtypes

    r = rng(seed)
    weights = {"w1": r.standard_normal((32, 64)) / np.sqrt(32), "b1": 0.1 * r.standard_normal(64),
               "w2": r.standard_normal((64, 10)) / np.sqrt(64), "b2": 0.1 * r.standard_normal(10)}
    rounded = {name: np.asarray(a, np.float32).astype(ml_dtypes.bfloat16) for name, a in weights.items()}

    def build(elem: int) -> onnx.ModelProto:
        if elem == TensorProto.BFLOAT16:
            inits = [numpy_helper.from_array(a, n) for n, a in rounded.items()]
        else:
            inits = [const(n, a.astype(np.float32)) for n, a in rounded.items()]
        nodes = [helper.make_node("MatMul", ["x", "w1"], ["h_mm"], name="fc1"),
                 helper.make_node("Add", ["h_mm", "b1"], ["h"], name="fc1_bias"),
                 helper.make_node("Relu", ["h"], ["h_relu"], name="relu"),
                 helper.make_node("MatMul", ["h_relu", "w2"], ["l_mm"], name="fc2"),
                 helper.make_node("Add", ["l_mm", "b2"], ["l"], name="fc2_bias"),
                 helper.make_node("Softmax", ["l"], ["probs"], name="softmax", axis=-1),
                 helper.make_node("Cast", ["l"], ["logits"], name="logits_cast", to=TensorProto.FLOAT)]
        return model(nodes, [tensor("x", [4, 32], elem)],
                     [tensor("probs", [4, 10], elem), tensor("logits", [4, 10])], inits, opset=17, name="mlp")

    return build(TensorProto.BFLOAT16), build(TensorProto.FLOAT)


def test_bfloat16_matches_onnxruntime():
    import ml_dtypes

    bf16, f32 = bfloat16_mlp()
    artifact = byoc.compile(bf16, vendors=["dnnl"])
    assert len(artifact.plan.partitions) == 1
    assert {n.node.name for n in artifact.plan.host_nodes if n.node} == {"x_to_float32", "probs_to_bfloat16"}
    assert artifact.plan.imported.prepared["logits_cast"] == "removed: bfloat16 computed as float32"
    x = rng(1).standard_normal((4, 32)).astype(ml_dtypes.bfloat16)
    probs, logits = artifact.run({"x": x})
    want_probs, want_logits = onnxruntime_outputs(f32, {"x": x.astype(np.float32)})
    assert probs.dtype == ml_dtypes.bfloat16 and logits.dtype == np.float32
    _assert_close(probs, want_probs.astype(ml_dtypes.bfloat16))
    np.testing.assert_allclose(logits, want_logits, rtol=1e-4, atol=1e-4 * float(np.abs(want_logits).max()))


def test_verify_takes_a_bfloat16_model():
    """onnxruntime's CPU provider has no bfloat16 kernels: verify runs the model computed in float32 and says so."""
    from byoc.tools.verify import verify

    bf16, _ = bfloat16_mlp()
    result = verify(byoc.partition(bf16, vendors=["dnnl"]))
    assert result.status == "ok", result.lines
    assert any("bfloat16 model: onnxruntime has no bfloat16 kernels" in line for line in result.lines)


def edge_cases() -> onnx.ModelProto:
    """float16 I/O with what the rewrite must keep straight: an output the graph also computes on (``sum``, an
    Add's result), an output written by a Cast to float16 that is read on (``scaled``), a Cast from int64 to
    float16, ConstantOfShape and EyeLike making float16 tensors, and a float32 output cast from float16."""
    h = TensorProto.FLOAT16
    w = numpy_helper.from_array((rng(6).standard_normal((8, 8)) / 3).astype(np.float16), "w")
    shift = numpy_helper.from_array(np.array([8], np.int64), "width")
    nodes = [
        helper.make_node("ConstantOfShape", ["width"], ["halves"], name="halves",
                         value=numpy_helper.from_array(np.array([0.5], np.float16))),
        helper.make_node("Add", ["x", "halves"], ["sum"], name="add_halves"),
        helper.make_node("Relu", ["sum"], ["relu"], name="relu"),
        helper.make_node("EyeLike", ["w"], ["eye"], name="eye", dtype=h),
        helper.make_node("Add", ["w", "eye"], ["w_eye"], name="w_plus_eye"),
        helper.make_node("MatMul", ["relu", "w_eye"], ["mm"], name="matmul"),
        helper.make_node("Cast", ["width"], ["width_h"], name="width_to_half", to=h),
        helper.make_node("Div", ["mm", "width_h"], ["div"], name="div"),
        helper.make_node("Cast", ["div"], ["scaled"], name="scaled_cast", to=h),
        helper.make_node("Sigmoid", ["scaled"], ["sig"], name="sigmoid"),
        helper.make_node("Cast", ["sig"], ["gate"], name="gate_cast", to=TensorProto.FLOAT),
    ]
    return model(nodes, [tensor("x", [2, 8], h)],
                 [tensor("sum", [2, 8], h), tensor("scaled", [2, 8], h), tensor("gate", [2, 8])], [shift, w],
                 opset=17, name="edges")


def test_rewrite_keeps_the_interface_and_computes_in_float32():
    m = onnx.shape_inference.infer_shapes(edge_cases())
    widened, fate = compute_in_float32(m)
    assert m.graph.node[0].attribute[0].t.data_type == TensorProto.FLOAT16, "the model given is not modified"
    onnx.checker.check_model(widened, full_check=True)
    onnx.shape_inference.infer_shapes(widened, strict_mode=True)
    types = lambda vis: [(vi.name, vi.type.tensor_type.elem_type) for vi in vis]  # noqa: E731
    assert types(widened.graph.input) == types(m.graph.input)
    assert types(widened.graph.output) == types(m.graph.output)
    assert fate == {"gate_cast": "removed: float16 computed as float32"}
    # Only the interface's Casts make or read float16; everything between is float32.
    half_casts = [n.name for n in widened.graph.node if n.op_type == "Cast"
                  and helper.get_attribute_value(n.attribute[0]) in HALF_TYPES]
    assert half_casts == ["sum_to_float16", "scaled_cast"]
    inferred = onnx.shape_inference.infer_shapes(widened)
    half = {vi.name for vi in inferred.graph.value_info if vi.type.tensor_type.elem_type in HALF_TYPES}
    assert not half
    assert compute_in_float32(small_cnn()) == (small_cnn(), {}), "a float32 model is left as it is"


def test_a_float16_weight_returned_as_an_output_stays_float16():
    w = numpy_helper.from_array(np.array([1.5, -2.25], np.float16), "w")
    nodes = [helper.make_node("Mul", ["x", "w"], ["y"], name="mul")]
    m = model(nodes, [tensor("x", [2], TensorProto.FLOAT16)],
              [tensor("y", [2], TensorProto.FLOAT16), tensor("w", [2], TensorProto.FLOAT16)], [w])
    widened, _ = compute_in_float32(m)
    onnx.checker.check_model(widened, full_check=True)
    assert [t.data_type for t in widened.graph.initializer] == [TensorProto.FLOAT]
    inputs = random_inputs(m, 1)
    for got, want in zip(byoc.compile(m, vendors=["dnnl"]).run(inputs), onnxruntime_outputs(m, inputs)):
        _assert_close(got, want)


def test_edge_cases_match_onnxruntime():
    m = edge_cases()
    artifact = byoc.compile(m, vendors=["dnnl"])
    inputs = random_inputs(m, 2)
    for got, want in zip(artifact.run(inputs), onnxruntime_outputs(m, inputs)):
        _assert_close(got, want)


def test_bitcast_of_float16_is_refused_by_name():
    """A BitCast's result is the float16 bits, which computing in float32 does not keep."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("BitCast", ["r"], ["bits"], name="to_bits", to=TensorProto.INT16)]
    m = model(nodes, [tensor("x", [4], TensorProto.FLOAT16)], [tensor("bits", [4], TensorProto.INT16)], opset=26)
    with pytest.raises(HalfPrecisionError, match="'to_bits' \\(BitCast\\).*float16") as err:
        byoc.partition(m, vendors=["dnnl"])
    assert err.value.node == "to_bits"


def test_sequence_of_float16_at_the_interface_is_refused_by_name():
    seq = helper.make_tensor_sequence_value_info("parts", TensorProto.FLOAT16, [2])
    nodes = [helper.make_node("SequenceConstruct", ["x", "x"], ["parts"], name="pair")]
    m = model(nodes, [tensor("x", [2], TensorProto.FLOAT16)], [seq])
    with pytest.raises(HalfPrecisionError, match="output 'parts' is a sequence") as err:
        compute_in_float32(m)
    assert err.value.attribute == "parts"
