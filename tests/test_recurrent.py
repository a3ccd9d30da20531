"""byoc.pipeline.frontend.prepare.recurrent: LSTM, GRU and RNN unrolled into ops TVM's importer converts.

Every number is checked against something independent of the decomposition:
the ONNX backend node cases' expected outputs, or onnxruntime running the
original (undecomposed) model. onnxruntime has no batch-major (layout=1)
kernels, so those models are checked against onnxruntime on their
layout=0 twin with the inputs and outputs transposed.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import byoc
from byoc.errors import DynamicShapeError, InvalidModelError, ModelLoadError, UnsupportedAttributeError
from byoc.pipeline.frontend.prepare.recurrent import decompose_recurrent

PREFIXES = ("test_lstm", "test_gru", "test_rnn", "test_simple_rnn")
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
INPUTS = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]


# -- helpers ------------------------------------------------------------------------------
def backend_cases():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    return sorted((c for c in cases if c.name.startswith(PREFIXES)), key=lambda c: c.name)


CASES = {c.name: c for c in backend_cases()}


def run_ort(model: onnx.ModelProto, feed: dict) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feed)


def run_byoc(model: onnx.ModelProto, feed: dict) -> list[np.ndarray]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        artifact = byoc.compile(model, vendors=["c_source"])
    return artifact.run(feed)


def assert_close(actual, expected, rtol=1e-5, atol=1e-5):
    assert len(actual) == len(expected)
    for index, (a, e) in enumerate(zip(actual, expected)):
        a, e = np.asarray(a), np.asarray(e)
        assert a.shape == e.shape, f"output {index}: shape {a.shape}, expected {e.shape}"
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=f"output {index}")


def recurrent_model(op, *, seq=3, batch=2, inputs=4, hidden=5, direction="forward", layout=0, opset=17,
                    bias=True, initial_h=False, initial_c=False, peepholes=False, sequence_lens=None,
                    lens_as_input=False, outputs=("Y", "Y_h", "Y_c"), constant_weights=False,
                    dtype=np.float32, seed=0, name="rec", **attrs):
    """A one-node model and a feed for it; weights are graph inputs unless ``constant_weights``."""
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    gates = GATES[op] * hidden
    arrays = {"W": rng.uniform(-0.6, 0.6, (dirs, gates, inputs)), "R": rng.uniform(-0.6, 0.6, (dirs, gates, hidden))}
    if bias:
        arrays["B"] = rng.uniform(-0.5, 0.5, (dirs, 2 * gates))
    state = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
    if initial_h:
        arrays["initial_h"] = rng.uniform(-1, 1, state)
    if initial_c:
        arrays["initial_c"] = rng.uniform(-1, 1, state)
    if peepholes:
        arrays["P"] = rng.uniform(-0.5, 0.5, (dirs, 3 * hidden))
    arrays = {k: v.astype(dtype) for k, v in arrays.items()}
    if sequence_lens is not None:
        arrays["sequence_lens"] = np.array(sequence_lens, dtype=np.int32)
    names = INPUTS if op == "LSTM" else INPUTS[:6]
    node_inputs = [n if n == "X" or n in arrays else "" for n in names]
    while node_inputs[-1] == "":
        node_inputs.pop()
    node_outputs = [o if o in outputs else "" for o in (["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"])]
    while node_outputs[-1] == "":
        node_outputs.pop()
    if layout:
        attrs["layout"] = layout
    node = helper.make_node(op, node_inputs, node_outputs, name=name, hidden_size=hidden, direction=direction,
                            **attrs)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    x_shape = (seq, batch, inputs) if layout == 0 else (batch, seq, inputs)
    feed = {"X": rng.uniform(-1, 1, x_shape).astype(dtype)}
    graph_inputs = [helper.make_tensor_value_info("X", elem, x_shape)]
    initializers = []
    for key, array in arrays.items():
        constant = (constant_weights and key in ("W", "R", "B", "P")) or (key == "sequence_lens" and not lens_as_input)
        if constant:
            initializers.append(numpy_helper.from_array(array, key))
        else:
            graph_inputs.append(helper.make_tensor_value_info(key, helper.np_dtype_to_tensor_dtype(array.dtype),
                                                              array.shape))
            feed[key] = array
    graph_outputs = [helper.make_tensor_value_info(o, elem, None) for o in node_outputs if o]
    graph = helper.make_graph([node], "recurrent", graph_inputs, graph_outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model, strict_mode=True), feed


def layout0_reference(op, feed, **kwargs):
    """onnxruntime's outputs for a layout=1 model, from its layout=0 twin (onnxruntime has no layout=1)."""
    twin, _ = recurrent_model(op, layout=0, **kwargs)
    twin_feed = {k: (np.transpose(v, (1, 0, 2)) if k in ("X", "initial_h", "initial_c") else v)
                 for k, v in feed.items()}
    outputs = run_ort(twin, twin_feed)
    names = [o.name for o in twin.graph.output]
    return [np.transpose(v, (2, 0, 1, 3)) if n == "Y" else np.transpose(v, (1, 0, 2)) for n, v in zip(names, outputs)]


def check_decomposition(model, decomposed, origin):
    """The rewrite's contract, independent of the numbers."""
    onnx.checker.check_model(decomposed, full_check=True)
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    supported = set(_get_convert_map())
    assert all(n.op_type in supported and n.domain in ("", "ai.onnx") for n in decomposed.graph.node)
    assert not any(n.op_type in ("LSTM", "GRU", "RNN") for n in decomposed.graph.node)
    recurrent = {n.name for n in model.graph.node if n.op_type in ("LSTM", "GRU", "RNN")}
    kept = {n.name for n in model.graph.node} - recurrent
    new_nodes = [n.name for n in decomposed.graph.node if n.name not in kept]
    assert set(origin) == set(new_nodes) and len(new_nodes) == len(set(new_nodes))
    assert set(origin.values()) <= recurrent
    # Unnamed recurrent nodes (the backend cases') lend their op type to the prefix.
    prefixes = tuple(f"{n.name or n.op_type}/" for n in model.graph.node if n.op_type in ("LSTM", "GRU", "RNN"))
    assert all(name.startswith(prefixes) for name in new_nodes)
    assert [o.name for o in decomposed.graph.output] == [o.name for o in model.graph.output]
    assert [i.name for i in decomposed.graph.input] == [i.name for i in model.graph.input]
    assert decomposed.opset_import == model.opset_import


# -- the ONNX backend node cases ------------------------------------------------------------
def test_all_recurrent_backend_cases_are_collected():
    assert len(CASES) >= 18
    assert {n.op_type for c in CASES.values() for n in c.model.graph.node} == {"LSTM", "GRU", "RNN"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_backend_case_onnxruntime(name):
    case = CASES[name]
    original = onnx.ModelProto()
    original.CopyFrom(case.model)
    decomposed, origin = decompose_recurrent(case.model)
    assert case.model == original, "the given model was modified"
    check_decomposition(case.model, decomposed, origin)
    for inputs, expected in case.data_sets:
        feed = {vi.name: x for vi, x in zip(decomposed.graph.input, inputs)}
        assert_close(run_ort(decomposed, feed), expected, case.rtol, case.atol)


@pytest.mark.parametrize("name", sorted(CASES))
def test_backend_case_byoc(name):
    case = CASES[name]
    decomposed, _ = decompose_recurrent(case.model)
    for inputs, expected in case.data_sets:
        feed = {vi.name: x for vi, x in zip(decomposed.graph.input, inputs)}
        assert_close(run_byoc(decomposed, feed), expected, case.rtol, case.atol)


# -- random weights against onnxruntime on the original model ---------------------------------
def test_bidirectional_lstm_with_initial_states_and_all_outputs():
    kwargs = dict(direction="bidirectional", initial_h=True, initial_c=True, seq=4, batch=3)
    model, feed = recurrent_model("LSTM", **kwargs)
    decomposed, origin = decompose_recurrent(model)
    check_decomposition(model, decomposed, origin)
    expected = run_ort(model, feed)
    assert [e.shape for e in expected] == [(4, 2, 3, 5), (2, 3, 5), (2, 3, 5)]
    assert_close(run_ort(decomposed, feed), expected)
    assert_close(run_byoc(decomposed, feed), expected)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("lens", [[3, 3], [1, 3]])
def test_layout_1(op, lens):
    kwargs = dict(direction="bidirectional", initial_h=True, initial_c=op == "LSTM", seq=3, batch=2,
                  sequence_lens=lens, lens_as_input=lens != [3, 3])
    model, feed = recurrent_model(op, layout=1, **kwargs)
    decomposed, origin = decompose_recurrent(model)
    check_decomposition(model, decomposed, origin)
    expected = layout0_reference(op, feed, **kwargs)
    assert expected[0].shape == (2, 3, 2, 5)  # [batch, seq, directions, hidden]
    assert_close(run_ort(decomposed, feed), expected)
    if op == "LSTM" and lens == [3, 3]:
        assert_close(run_byoc(decomposed, feed), expected)


@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_reverse_gru(linear_before_reset):
    model, feed = recurrent_model("GRU", direction="reverse", initial_h=True, seq=4,
                                  linear_before_reset=linear_before_reset)
    decomposed, origin = decompose_recurrent(model)
    check_decomposition(model, decomposed, origin)
    expected = run_ort(model, feed)
    assert_close(run_ort(decomposed, feed), expected)
    assert_close(run_byoc(decomposed, feed), expected)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_lstm_peepholes(direction):
    model, feed = recurrent_model("LSTM", direction=direction, initial_h=True, initial_c=True, peepholes=True)
    decomposed, origin = decompose_recurrent(model)
    check_decomposition(model, decomposed, origin)
    expected = run_ort(model, feed)
    assert_close(run_ort(decomposed, feed), expected)
    if direction == "bidirectional":
        assert_close(run_byoc(decomposed, feed), expected)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_initializer_weights_are_pre_split(op):
    """The real-model form: W, R, B (and P) are initializers, sliced at rewrite time, not in the graph."""
    model, feed = recurrent_model(op, direction="bidirectional", constant_weights=True, peepholes=op == "LSTM",
                                  initial_h=True, seq=5, **({"linear_before_reset": 1} if op == "GRU" else {}))
    decomposed, origin = decompose_recurrent(model)
    check_decomposition(model, decomposed, origin)
    ops = [n.op_type for n in decomposed.graph.node]
    # Sliced and transposed at rewrite time: no node reads them, and they are replaced, not duplicated.
    assert not {"W", "R", "B", "P"} & {i for n in decomposed.graph.node for i in n.input}
    assert not {"W", "R", "B", "P"} & {i.name for i in decomposed.graph.initializer}
    steps, directions = 5, 2
    # Per direction one X·W for all steps (one Split of it), then one H·R per gate and step;
    # initial_h, a graph input, is the only tensor split into directions in the graph.
    assert ops.count("MatMul") == directions * (1 + steps * GATES[op])
    assert ops.count("Split") == directions + 1
    expected = run_ort(model, feed)
    assert_close(run_ort(decomposed, feed), expected)
    assert_close(run_byoc(decomposed, feed), expected)


def test_constant_recurrence_weights_are_held_once_not_once_per_step():
    """ddddocr's OCR model: a bidirectional LSTM of 32 steps with hidden 512 made 512 MB of copies of R in
    the decomposed model, and the dnnl runtime reordered each step's copy again."""
    def weights(steps):
        return recurrent_model("LSTM", direction="bidirectional", constant_weights=True, seq=steps, hidden=40,
                               inputs=8)

    def weight_bytes(m):  # the constants too large to be shared as small ones (shapes, scalars)
        return sum(numpy_helper.to_array(i).nbytes for i in m.graph.initializer if np.prod(i.dims) > 1024)

    model, feed = weights(12)
    decomposed, _ = decompose_recurrent(model)
    assert weight_bytes(decomposed) == weight_bytes(model)  # W and R, transposed and split by gate
    held = []
    for steps in (3, 12):
        model, feed = weights(steps)
        artifact = byoc.compile(model, vendors=["dnnl"])
        assert_close(artifact.run(feed), run_ort(model, feed))
        (memory,) = artifact.runtime_memory.values()
        held.append(memory.constant_bytes)
    assert held[0] == held[1]


@pytest.mark.parametrize("hidden", [64, 128])
def test_silero_vad_like_lstm(hidden):
    """Silero VAD's decoder: one step, batch 1, LSTM weights as initializers, state in and out as tensors."""
    rng = np.random.default_rng(hidden)
    gates = 4 * hidden
    weights = [numpy_helper.from_array(rng.uniform(-0.1, 0.1, shape).astype(np.float32), name)
               for name, shape in (("W", (1, gates, hidden)), ("R", (1, gates, hidden)), ("B", (1, 2 * gates)))]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 1, hidden))
    h0 = helper.make_tensor_value_info("h0", TensorProto.FLOAT, (1, 1, hidden))
    c0 = helper.make_tensor_value_info("c0", TensorProto.FLOAT, (1, 1, hidden))
    nodes = [
        helper.make_node("LSTM", ["x", "W", "R", "B", "", "h0", "c0"], ["Y", "hn", "cn"], name="decoder/rnn",
                         hidden_size=hidden),
        helper.make_node("Squeeze", ["Y", "axes"], ["y"], name="squeeze"),
        helper.make_node("Relu", ["y"], ["out"], name="relu"),
    ]
    weights.append(numpy_helper.from_array(np.array([1], dtype=np.int64), "axes"))
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("out", "hn", "cn")]
    model = helper.make_model(helper.make_graph(nodes, "vad", [x, h0, c0], outputs, weights),
                              opset_imports=[helper.make_opsetid("", 16)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    feed = {n: rng.uniform(-1, 1, (1, 1, hidden)).astype(np.float32) for n in ("x", "h0", "c0")}
    decomposed, origin = decompose_recurrent(model)
    check_decomposition(model, decomposed, origin)
    assert set(origin.values()) == {"decoder/rnn"}
    assert sum(n.op_type == "MatMul" for n in decomposed.graph.node) == 1 + 4  # X·W, then H·R per gate
    expected = run_ort(model, feed)
    assert_close(run_ort(decomposed, feed), expected)
    assert_close(run_byoc(decomposed, feed), expected)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_sequence_lens_masks_padded_steps(op, direction):
    """Shorter sequences stop their state and output zeros past their end, as onnxruntime."""
    for lens, as_input in (([3, 1, 2], False), ([2, 3, 0], True)):
        model, feed = recurrent_model(op, direction=direction, batch=3, sequence_lens=lens, lens_as_input=as_input,
                                      initial_h=True, initial_c=op == "LSTM")
        decomposed, origin = decompose_recurrent(model)
        check_decomposition(model, decomposed, origin)
        expected = run_ort(model, feed)
        assert_close(run_ort(decomposed, feed), expected)


def test_sequence_lens_as_graph_input_through_byoc():
    model, feed = recurrent_model("GRU", direction="bidirectional", batch=3, sequence_lens=[2, 3, 1],
                                  lens_as_input=True, initial_h=True)
    decomposed, _ = decompose_recurrent(model)
    expected = run_ort(model, feed)
    assert_close(run_byoc(decomposed, feed), expected)
    feed["sequence_lens"] = np.array([3, 0, 2], dtype=np.int32)  # the same build, other lengths
    assert_close(run_byoc(decomposed, feed), run_ort(model, feed))


def test_full_constant_sequence_lens_costs_nothing():
    plain, _ = decompose_recurrent(recurrent_model("LSTM", seq=3)[0])
    full, _ = decompose_recurrent(recurrent_model("LSTM", seq=3, sequence_lens=[3, 3])[0])
    assert [n.op_type for n in plain.graph.node] == [n.op_type for n in full.graph.node]


ACTIVATIONS = ["Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh", "HardSigmoid",
               "Elu", "Softsign", "Softplus"]


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_activations(op, activation):
    per_direction = {"LSTM": 3, "GRU": 2, "RNN": 1}[op]
    for alphas in (None, [0.4, 0.7, 0.9, 1.1, 1.3, 1.6]):
        attrs = {"activations": [activation] * per_direction}
        if alphas:
            attrs.update(activation_alpha=alphas, activation_beta=[0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
        model, feed = recurrent_model(op, initial_h=True, **attrs)
        decomposed, origin = decompose_recurrent(model)
        check_decomposition(model, decomposed, origin)
        assert_close(run_ort(decomposed, feed), run_ort(model, feed), rtol=1e-4, atol=1e-4)


def test_mixed_activations_consume_alphas_in_order():
    """Alphas and betas go, in order, only to the functions that take them (across both directions)."""
    model, feed = recurrent_model(
        "LSTM", direction="bidirectional", initial_h=True,
        activations=["HardSigmoid", "Affine", "ScaledTanh", "LeakyRelu", "Elu", "Softsign"],
        activation_alpha=[0.3, 0.5, 0.7, 0.9], activation_beta=[0.2, 0.4, 0.6])
    decomposed, _ = decompose_recurrent(model)
    assert_close(run_ort(decomposed, feed), run_ort(model, feed), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_clip(op):
    model, feed = recurrent_model(op, direction="bidirectional", initial_h=True, initial_c=op == "LSTM",
                                  peepholes=op == "LSTM", clip=0.4)
    decomposed, _ = decompose_recurrent(model)
    assert "Clip" in {n.op_type for n in decomposed.graph.node}
    assert_close(run_ort(decomposed, feed), run_ort(model, feed))


@pytest.mark.parametrize("peepholes", [False, True])
def test_lstm_input_forget(peepholes):
    model, feed = recurrent_model("LSTM", direction="bidirectional", initial_c=True, peepholes=peepholes,
                                  input_forget=1)
    decomposed, _ = decompose_recurrent(model)
    assert_close(run_ort(decomposed, feed), run_ort(model, feed))


@pytest.mark.parametrize("outputs", [("Y",), ("Y_h",), ("Y_c",), ("Y", "Y_c"), ("Y_h", "Y_c")])
def test_any_subset_of_outputs(outputs):
    model, feed = recurrent_model("LSTM", direction="bidirectional", outputs=outputs)
    decomposed, origin = decompose_recurrent(model)
    check_decomposition(model, decomposed, origin)
    assert [o.name for o in decomposed.graph.output] == list(outputs)
    assert_close(run_ort(decomposed, feed), run_ort(model, feed))


@pytest.mark.parametrize("opset", [7, 9, 10, 11, 12, 13, 14, 18, 21])
def test_opsets(opset):
    """Split/Clip/ThresholdedRelu in the forms each opset defines (attributes before 11/13, inputs after)."""
    for op, activations in (("LSTM", ["ThresholdedRelu", "Tanh", "Tanh"] * 2), ("GRU", ["Sigmoid", "Tanh"] * 2)):
        model, feed = recurrent_model(op, direction="bidirectional", opset=opset, clip=0.8, sequence_lens=[2, 3],
                                      lens_as_input=True, initial_h=True, activations=activations,
                                      activation_alpha=[0.1, 0.2])
        decomposed, origin = decompose_recurrent(model)
        check_decomposition(model, decomposed, origin)
        assert_close(run_ort(decomposed, feed), run_ort(model, feed))


@pytest.mark.parametrize("opset", [7, 11, 13])
def test_opsets_through_byoc(opset):
    model, feed = recurrent_model("LSTM", direction="bidirectional", opset=opset, clip=0.8, sequence_lens=[2, 3],
                                  lens_as_input=True, initial_h=True)
    decomposed, _ = decompose_recurrent(model)
    assert_close(run_byoc(decomposed, feed), run_ort(model, feed))


def test_float16():
    model, feed = recurrent_model("GRU", dtype=np.float16, initial_h=True)
    decomposed, origin = decompose_recurrent(model)
    check_decomposition(model, decomposed, origin)
    reference, _ = recurrent_model("GRU", dtype=np.float32, initial_h=True)
    expected = run_ort(reference, {k: v.astype(np.float32) for k, v in feed.items()})
    assert_close(run_ort(decomposed, feed), expected, rtol=2e-2, atol=2e-2)


# -- the rewrite's contract ------------------------------------------------------------------
def test_model_without_recurrent_nodes_comes_back_as_a_copy():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 3))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, 3))
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x], [y]))
    out, origin = decompose_recurrent(model)
    assert origin == {} and out == model and out is not model


def test_names_never_collide_and_consumers_stay_wired():
    """Tensors and nodes already named like the new ones keep their names; the new ones get others."""
    model, feed = recurrent_model("LSTM", direction="bidirectional", outputs=("Y", "Y_h"))
    graph = model.graph
    # A consumer of Y and of Y_h, and tensors/nodes that squat on names the rewrite would pick.
    graph.node.extend([
        helper.make_node("Identity", ["Y_h"], ["rec/XW"], name="rec/fw/XW"),
        helper.make_node("Add", ["rec/XW", "rec/XW"], ["rec/fw/XW_bias"], name="rec/fw/t0/gates"),
    ])
    graph.output.extend([helper.make_tensor_value_info("rec/fw/XW_bias", TensorProto.FLOAT, None)])
    model = onnx.shape_inference.infer_shapes(model)
    decomposed, origin = decompose_recurrent(model)
    onnx.checker.check_model(decomposed, full_check=True)
    tensors = [o for n in decomposed.graph.node for o in n.output]
    assert len(tensors) == len(set(tensors))
    names = [n.name for n in decomposed.graph.node]
    assert len(names) == len(set(names))
    assert "rec/fw/XW" not in origin and "rec/fw/t0/gates" not in origin
    assert set(origin.values()) == {"rec"}
    assert_close(run_ort(decomposed, feed), run_ort(model, feed))


def test_two_recurrent_layers_in_sequence():
    """A stacked model: the second LSTM reads the first one's Y, reshaped, as real exporters write it."""
    first, feed = recurrent_model("LSTM", seq=3, batch=2, inputs=4, hidden=5, constant_weights=True, name="l1",
                                  outputs=("Y",))
    second, _ = recurrent_model("GRU", seq=3, batch=2, inputs=5, hidden=6, constant_weights=True, name="l2",
                                outputs=("Y", "Y_h"), seed=1)
    graph = first.graph
    rename = {"W": "W2", "R": "R2", "B": "B2", "X": "Y_flat", "Y": "Y2"}
    for init in second.graph.initializer:
        init.name = rename[init.name]
        graph.initializer.append(init)
    node = second.graph.node[0]
    node.input[:] = [rename.get(n, n) for n in node.input]
    node.output[:] = [rename.get(n, n) for n in node.output]
    graph.initializer.append(numpy_helper.from_array(np.array([3, 2, 5], dtype=np.int64), "shape"))
    graph.node.extend([helper.make_node("Reshape", ["Y", "shape"], ["Y_flat"], name="flat"), node])
    del graph.output[:]
    graph.output.extend([helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("Y2", "Y_h")])
    model = onnx.shape_inference.infer_shapes(first, strict_mode=True)
    decomposed, origin = decompose_recurrent(model)
    onnx.checker.check_model(decomposed, full_check=True)
    assert set(origin.values()) == {"l1", "l2"}
    expected = run_ort(model, feed)
    assert_close(run_ort(decomposed, feed), expected)
    assert_close(run_byoc(decomposed, feed), expected)


def test_shapes_are_inferred_when_value_info_lacks_them():
    model, feed = recurrent_model("RNN", direction="reverse")
    del model.graph.value_info[:]
    for vi in model.graph.output:
        vi.type.tensor_type.ClearField("shape")
    model.graph.node.insert(0, helper.make_node("Relu", ["X"], ["X_relu"], name="pre"))
    model.graph.node[1].input[0] = "X_relu"
    decomposed, _ = decompose_recurrent(model)
    assert_close(run_ort(decomposed, feed), run_ort(model, feed))


# -- errors -----------------------------------------------------------------------------------
def test_dynamic_sequence_length_is_a_typed_error():
    model, _ = recurrent_model("LSTM", name="encoder/lstm")
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "time"
    del model.graph.value_info[:]
    with pytest.raises(DynamicShapeError, match="encoder/lstm") as info:
        decompose_recurrent(model)
    assert isinstance(info.value, ModelLoadError)
    assert "static" in str(info.value) and "input_shapes" in str(info.value)


def test_unknown_activation_is_a_typed_error():
    model, _ = recurrent_model("GRU", name="ocr/gru", activations=["Sigmoid", "Gelu"])
    with pytest.raises(UnsupportedAttributeError, match="ocr/gru") as info:
        decompose_recurrent(model)
    assert info.value.node == "ocr/gru"
    assert "Gelu" in info.value.attribute and "Tanh" in str(info.value)  # says what would be accepted
    assert isinstance(info.value, byoc.ModelLoadError) and byoc.UnsupportedAttributeError is UnsupportedAttributeError


def test_attribute_the_op_does_not_have_is_a_typed_error():
    model, _ = recurrent_model("RNN", name="vad/rnn", linear_before_reset=1)  # a GRU attribute
    with pytest.raises(UnsupportedAttributeError, match="vad/rnn.*linear_before_reset") as info:
        decompose_recurrent(model)
    assert info.value.node == "vad/rnn" and "linear_before_reset" in info.value.attribute


def test_opset_before_7_is_a_typed_error():
    model, _ = recurrent_model("RNN", name="old/rnn")
    model.opset_import[0].version = 6
    with pytest.raises(UnsupportedAttributeError, match="old/rnn.*version_converter") as info:
        decompose_recurrent(model)
    assert info.value.attribute == "opset"


def test_non_float_input_is_a_typed_error():
    model, _ = recurrent_model("RNN", name="rnn_bf16")
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.BFLOAT16
    del model.graph.value_info[:]
    with pytest.raises(UnsupportedAttributeError, match="rnn_bf16.*BFLOAT16"):
        decompose_recurrent(model)


@pytest.mark.parametrize("lens", [[4, 1], [-1, 2]])
def test_sequence_lens_outside_the_sequence_is_an_error(lens):
    model, _ = recurrent_model("LSTM", name="lstm_lens", seq=3, sequence_lens=lens)
    with pytest.raises(InvalidModelError, match="lstm_lens.*sequence_lens"):
        decompose_recurrent(model)


def test_one_set_of_activations_for_two_directions_is_an_error():
    """The spec (and onnxruntime) want every direction's functions; guessing could compute a wrong answer."""
    model, _ = recurrent_model("LSTM", name="bi", direction="bidirectional", activations=["Sigmoid", "Tanh", "Tanh"])
    with pytest.raises(InvalidModelError, match="bi.*6"):
        decompose_recurrent(model)


def test_recurrent_nodes_inside_if_branches():
    """Silero VAD keeps its LSTMs in If branches: bodies are rewritten too, reading outer-scope tensors."""
    lstm, feed = recurrent_model("LSTM", direction="bidirectional", name="outer", outputs=("Y_h",), initial_h=True)
    rnn, _ = recurrent_model("RNN", name="then/rnn", outputs=("Y_h",), seed=1)
    gru, _ = recurrent_model("GRU", name="else/gru", outputs=("Y_h",), seed=2, hidden=5)
    graph = lstm.graph
    lstm_node = graph.node[0]
    lstm_node.output[:] = ["", "lstm_h"]
    branches = {}
    for branch, sub in (("then", rnn), ("else", gru)):
        node = sub.graph.node[0]
        weights = {n: f"{branch}_{n}" for n in ("W", "R", "B")}
        node.input[:] = [weights.get(n, n) for n in node.input]
        node.output[:] = ["", f"{branch}_h"]
        # The body holds its own weights; X comes from the outer graph.
        rng = np.random.default_rng(len(branch))
        inits = [numpy_helper.from_array(rng.uniform(-0.5, 0.5, [d.dim_value for d in vi.type.tensor_type.shape.dim])
                                         .astype(np.float32), weights[vi.name])
                 for vi in sub.graph.input if vi.name in weights]
        out = helper.make_tensor_value_info(f"{branch}_h", TensorProto.FLOAT, None)
        branches[branch] = helper.make_graph([node], f"{branch}_body", [], [out], inits)
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, ())
    graph.input.append(cond)
    graph.node.append(helper.make_node("If", ["cond"], ["branch_h"], name="if", then_branch=branches["then"],
                                       else_branch=branches["else"]))
    graph.node.append(helper.make_node("Add", ["lstm_h", "branch_h"], ["sum"], name="sum"))
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("sum", TensorProto.FLOAT, None))
    model = onnx.shape_inference.infer_shapes(lstm)
    decomposed, origin = decompose_recurrent(model)
    onnx.checker.check_model(decomposed, full_check=True)
    assert set(origin.values()) == {"outer", "then/rnn", "else/gru"}
    bodies = [a.g for n in decomposed.graph.node if n.op_type == "If" for a in n.attribute]
    assert not any(n.op_type in ("LSTM", "GRU", "RNN") for body in bodies for n in body.node)
    assert not any(n.op_type in ("LSTM", "GRU", "RNN") for n in decomposed.graph.node)
    for flag in (True, False):
        feed["cond"] = np.array(flag)
        assert_close(run_ort(decomposed, feed), run_ort(model, feed))


def test_unknown_shape_with_static_inputs_says_why():
    """Static inputs but X's shape lost in control flow: the message must not ask for input shapes."""
    model, _ = recurrent_model("RNN", name="branchy/rnn")
    del model.graph.value_info[:]
    # X now comes out of an If whose branches disagree on its shape, so inference cannot know it.
    x_in = model.graph.input[0]
    x_in.name = "X_in"
    flat = numpy_helper.from_array(np.array([3, 2, 4], dtype=np.int64), "shape_a")
    other = numpy_helper.from_array(np.array([2, 3, 4], dtype=np.int64), "shape_b")
    branches = [helper.make_graph([helper.make_node("Reshape", ["X_in", s], [f"x_{s}"])], f"b_{s}", [],
                                  [helper.make_tensor_value_info(f"x_{s}", TensorProto.FLOAT, None)])
                for s in ("shape_a", "shape_b")]
    model.graph.initializer.extend([flat, other])
    model.graph.input.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, ()))
    model.graph.node.insert(0, helper.make_node("If", ["cond"], ["X"], name="if", then_branch=branches[0],
                                                else_branch=branches[1]))
    with pytest.raises(DynamicShapeError, match="branchy/rnn") as info:
        decompose_recurrent(model)
    assert "input_shapes" not in str(info.value) and "If/Loop" in str(info.value)


def test_the_recurrence_is_one_vendor_partition():
    """No Split on the state's path: the unrolled steps (MatMul/Add/Mul/Sigmoid/Tanh) offload as one region."""
    model, feed = recurrent_model("LSTM", seq=6, direction="bidirectional", constant_weights=True, initial_h=True,
                                  initial_c=True)
    decomposed, _ = decompose_recurrent(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        imported = byoc.import_model(decomposed)
        plan = byoc.partition(imported, ["c_source"])
        artifact = byoc.build(plan)
    assert len(plan.partitions) <= 2, plan
    assert_close(artifact.run(feed), run_ort(model, feed))


def test_the_last_step_of_an_lstm_builds_without_tvms_fast_mode_warning(tmp_path):
    """A torch LSTM classifier reads ``out[-1]``: a Gather with a constant index, which TVM's importer writes
    as ``take(mode="fast")``. Its C++ warning ("Fast mode segfaults when there are out-of-bounds indices")
    reached stderr twice per compile (import and host build), -q or not; the index is inside the axis, so
    there is nothing to warn about. A subprocess, because the warning is written by C++ to the fd."""
    import subprocess
    import sys

    model, feed = recurrent_model("LSTM", constant_weights=True, outputs=("Y",))
    graph = model.graph
    graph.node.extend([helper.make_node("Gather", ["Y", "last"], ["last_y"], name="last_step", axis=0),
                       helper.make_node("Relu", ["last_y"], ["out"], name="relu")])
    graph.initializer.append(numpy_helper.from_array(np.array(-1, np.int64), "last"))
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 2, 5]))  # directions, batch, hidden
    onnx.save(model, tmp_path / "lstm.onnx")
    np.savez(tmp_path / "feed.npz", **feed)
    script = (
        "import numpy as np, byoc\n"
        f"artifact = byoc.compile({str(tmp_path / 'lstm.onnx')!r}, vendors=['c_source'])\n"
        f"np.save({str(tmp_path / 'out.npy')!r}, artifact.run(dict(np.load({str(tmp_path / 'feed.npz')!r})))[0])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "Fast mode segfaults" not in done.stderr
    assert_close([np.load(tmp_path / "out.npy")], run_ort(model, feed))


# -- onnxruntime's DynamicQuantizeLSTM (quantize_dynamic of an LSTM) ----------------------------------------------


@pytest.mark.parametrize("direction, batch, per_channel", [("forward", 2, False), ("bidirectional", 3, True),
                                                           ("reverse", 1, False)])
def test_a_dynamically_quantized_lstm_matches_onnxruntime_on_one_thread(direction, batch, per_channel):
    """quantize_dynamic's DynamicQuantizeLSTM (int8 weights [directions, K, 4 * hidden], com.microsoft) unrolled
    with its products as dynamic int8 units, one dnnl partition: onnxruntime's outputs on one thread. On more
    threads onnxruntime quantizes the hidden state of each share of the batch apart, which moves its own outputs
    by about 1e-3 at a batch of 2 (same model, its thread count the only difference)."""
    from dynamic_int8_models import quantize_dynamic

    model, feed = recurrent_model("LSTM", seq=5, batch=batch, inputs=8, hidden=16, direction=direction,
                                  initial_h=True, initial_c=True, constant_weights=True)
    quantized = quantize_dynamic(model, per_channel=per_channel, op_types=("LSTM",))
    assert [(n.domain, n.op_type) for n in quantized.graph.node] == [("com.microsoft", "DynamicQuantizeLSTM")]
    artifact = byoc.compile(quantized, vendors=["dnnl"])
    assert len(artifact.plan.partitions) == 1 and not artifact.plan.host_ops
    assert "dnnl.dynamic_int8_matmul" in {d.rule.rsplit("_bias", 1)[0] for d in artifact.plan.decisions.values()
                                          if d.rule}
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(quantized.SerializeToString(), options, providers=["CPUExecutionProvider"])
    assert_close(artifact.run(feed), session.run(None, feed), rtol=1e-5, atol=1e-6)
