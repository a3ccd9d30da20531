"""Loop and Scan (byoc.pipeline.frontend.prepare.control_flow): unrolled, partitioned for the vendors, and
checked against onnxruntime running the model as written (with its own loop)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import byoc
from byoc.errors import UnsupportedAttributeError

OPSET = 17
RNG = np.random.default_rng(0)


def const(name: str, value) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name))


def tensor(name: str, elem, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def model_of(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "control_flow", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def ort_run(model: onnx.ModelProto, feed: dict) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, feed)


def compiled(model: onnx.ModelProto, vendors=("dnnl",), **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return byoc.compile(model, vendors=list(vendors), **kwargs)


def assert_matches(artifact, model, feed, tol=1e-5):
    expected = ort_run(model, feed)
    actual = artifact.run(feed)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert np.asarray(a).shape == e.shape
        np.testing.assert_allclose(np.asarray(a), e, rtol=tol, atol=tol)


def dense_body(weight: str, bias: str, scan_output: bool = True) -> onnx.GraphProto:
    """h' = relu(h @ W + b + i): W and b read from the main graph; each h' also a scan output."""
    nodes = [
        helper.make_node("MatMul", ["h", weight], ["mm"]),
        helper.make_node("Add", ["mm", bias], ["biased"]),
        helper.make_node("Cast", ["i"], ["i_f"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["biased", "i_f"], ["shifted"]),
        helper.make_node("Relu", ["shifted"], ["h_out"]),
        helper.make_node("Identity", ["cond"], ["cond_out"]),
    ]
    outputs = [tensor("cond_out", TensorProto.BOOL, []), tensor("h_out", TensorProto.FLOAT, [2, 16])]
    if scan_output:
        nodes.append(helper.make_node("Identity", ["h_out"], ["y"]))
        outputs.append(tensor("y", TensorProto.FLOAT, [2, 16]))
    return helper.make_graph(nodes, "body", [tensor("i", TensorProto.INT64, []), tensor("cond", TensorProto.BOOL, []),
                                            tensor("h", TensorProto.FLOAT, [2, 16])], outputs)


def dense_loop(trip_nodes, trip: str, extra_inputs=(), iterations=4, scan_output=True) -> onnx.ModelProto:
    weight = numpy_helper.from_array((RNG.standard_normal((16, 16)) * 0.3).astype(np.float32), "W")
    bias = numpy_helper.from_array(RNG.standard_normal(16).astype(np.float32), "b")
    outputs = [tensor("h_final", TensorProto.FLOAT, [2, 16])]
    if scan_output:
        outputs.append(tensor("ys", TensorProto.FLOAT, [iterations, 2, 16]))
    loop = helper.make_node("Loop", [trip, "", "x"], [o.name for o in outputs], name="dense_loop",
                            body=dense_body("W", "b", scan_output))
    return model_of([*trip_nodes, loop], [tensor("x", TensorProto.FLOAT, [2, 16]), *extra_inputs], outputs,
                    [weight, bias])


def test_a_loop_of_matmuls_with_a_constant_trip_count_is_one_dnnl_partition():
    model = dense_loop([const("M", np.array(4, dtype=np.int64))], "M")
    artifact = compiled(model)
    assert_matches(artifact, model, {"x": RNG.standard_normal((2, 16)).astype(np.float32)})
    plan = artifact.plan
    assert [p.vendor for p in plan.partitions] == ["dnnl"]
    assert sum(op.startswith("matmul") or "matmul" in op for op in plan.partitions[0].ops) >= 4
    assert "decomposed into" in plan.imported.prepared["dense_loop"]


def test_a_trip_count_computed_from_a_shape_unrolls_after_folding():
    # M = the input's first dim, known once the input's shape is: folding makes it the constant 4.
    nodes = [const("zero", np.array(0, np.int64)), helper.make_node("Shape", ["s"], ["s_shape"]),
             helper.make_node("Gather", ["s_shape", "zero"], ["M"], axis=0)]
    model = dense_loop(nodes, "M", [tensor("s", TensorProto.FLOAT, [4, 3])])
    artifact = compiled(model)
    feed = {"x": RNG.standard_normal((2, 16)).astype(np.float32), "s": np.zeros((4, 3), np.float32)}
    assert_matches(artifact, model, feed)


def test_a_loop_that_stops_on_a_computed_condition_keeps_its_last_state():
    # while sum(h) < limit and i < 10: h = h * 2   (stops after a number of iterations that depends on x)
    body = helper.make_graph([
        const("two", np.array(2.0, np.float32)),
        helper.make_node("Mul", ["h", "two"], ["h_out"]),
        helper.make_node("ReduceSum", ["h_out"], ["total"], keepdims=0),
        helper.make_node("Less", ["total", "limit"], ["cond_out"]),
    ], "body", [tensor("i", TensorProto.INT64, []), tensor("cond", TensorProto.BOOL, []),
                tensor("h", TensorProto.FLOAT, [3])],
        [tensor("cond_out", TensorProto.BOOL, []), tensor("h_out", TensorProto.FLOAT, [3])])
    model = model_of([const("M", np.array(10, np.int64)), const("go", np.array(True)),
                      helper.make_node("Loop", ["M", "go", "x"], ["h_final"], name="doubling", body=body)],
                     [tensor("x", TensorProto.FLOAT, [3]), tensor("limit", TensorProto.FLOAT, [])],
                     [tensor("h_final", TensorProto.FLOAT, [3])])
    artifact = compiled(model, vendors=("c_source",))
    for x, limit in (([1, 1, 1], 20.0), ([0.1, 0.2, 0.3], 1000.0), ([5, 5, 5], 1.0), ([0, 0, 0], 1.0)):
        assert_matches(artifact, model, {"x": np.array(x, np.float32), "limit": np.array(limit, np.float32)})


def scan_model(reverse: int, out_axis: int) -> onnx.ModelProto:
    """A running sum over the scan axis of x [2, 5, 3] (axis 1), each step's state @ W also a scan output."""
    weight = numpy_helper.from_array(RNG.standard_normal((3, 4)).astype(np.float32), "W")
    body = helper.make_graph([
        helper.make_node("Add", ["acc", "x_t"], ["acc_out"]),
        helper.make_node("MatMul", ["acc_out", "W"], ["y_t"]),
    ], "body", [tensor("acc", TensorProto.FLOAT, [2, 3]), tensor("x_t", TensorProto.FLOAT, [2, 3])],
        [tensor("acc_out", TensorProto.FLOAT, [2, 3]), tensor("y_t", TensorProto.FLOAT, [2, 4])])
    scan = helper.make_node("Scan", ["init", "x"], ["acc_final", "ys"], name="running_sum", body=body,
                            num_scan_inputs=1, scan_input_axes=[1], scan_input_directions=[reverse],
                            scan_output_axes=[out_axis])
    out_shape = [5, 2, 4] if out_axis == 0 else [2, 5, 4] if out_axis in (1, -2) else [2, 4, 5]
    return model_of([scan], [tensor("init", TensorProto.FLOAT, [2, 3]), tensor("x", TensorProto.FLOAT, [2, 5, 3])],
                    [tensor("acc_final", TensorProto.FLOAT, [2, 3]), tensor("ys", TensorProto.FLOAT, out_shape)],
                    [weight])


@pytest.mark.parametrize("reverse,out_axis", [(0, 0), (1, 1), (0, -1)])
def test_scan_over_an_axis_in_either_direction(reverse, out_axis):
    model = scan_model(reverse, out_axis)
    artifact = compiled(model)
    feed = {"init": RNG.standard_normal((2, 3)).astype(np.float32),
            "x": RNG.standard_normal((2, 5, 3)).astype(np.float32)}
    assert_matches(artifact, model, feed)


def test_a_loop_inside_a_loop_with_an_if_reading_the_body():
    # outer: 3 times { inner: 2 times { h = h + 1 }; h = (i == 1) ? h * 10 : h }
    inner_body = helper.make_graph([
        const("one", np.array(1.0, np.float32)),
        helper.make_node("Add", ["h2", "one"], ["h2_out"]), helper.make_node("Identity", ["c2"], ["c2_out"]),
    ], "inner", [tensor("j", TensorProto.INT64, []), tensor("c2", TensorProto.BOOL, []),
                 tensor("h2", TensorProto.FLOAT, [2])],
        [tensor("c2_out", TensorProto.BOOL, []), tensor("h2_out", TensorProto.FLOAT, [2])])
    then_branch = helper.make_graph([const("ten", np.array(10.0, np.float32)),
                                     helper.make_node("Mul", ["stepped", "ten"], ["scaled"])],
                                    "then", [], [tensor("scaled", TensorProto.FLOAT, [2])])
    else_branch = helper.make_graph([helper.make_node("Identity", ["stepped"], ["kept"])],
                                    "else", [], [tensor("kept", TensorProto.FLOAT, [2])])
    outer_body = helper.make_graph([
        const("two", np.array(2, np.int64)),
        helper.make_node("Loop", ["two", ""], ["stepped"], name="inner", body=inner_body),
        const("k1", np.array(1, np.int64)),
        helper.make_node("Equal", ["i", "k1"], ["is_one"]),
        helper.make_node("If", ["is_one"], ["h_out"], name="choose", then_branch=then_branch,
                         else_branch=else_branch),
        helper.make_node("Identity", ["c"], ["c_out"]),
    ], "outer", [tensor("i", TensorProto.INT64, []), tensor("c", TensorProto.BOOL, []),
                 tensor("h", TensorProto.FLOAT, [2])],
        [tensor("c_out", TensorProto.BOOL, []), tensor("h_out", TensorProto.FLOAT, [2])])
    outer_body.node[1].input.append("h")
    model = model_of([const("three", np.array(3, np.int64)),
                      helper.make_node("Loop", ["three", "", "x"], ["y"], name="outer", body=outer_body)],
                     [tensor("x", TensorProto.FLOAT, [2])], [tensor("y", TensorProto.FLOAT, [2])])
    artifact = compiled(model, vendors=("c_source",))
    assert_matches(artifact, model, {"x": np.array([0.5, -1.0], np.float32)})


def test_a_trip_count_given_at_run_time_is_refused_by_node_name():
    model = dense_loop([], "M", [tensor("M", TensorProto.INT64, [])])
    with pytest.raises(UnsupportedAttributeError, match="Loop node 'dense_loop'.*trip count 'M' is computed at run"):
        compiled(model)


def test_an_unbounded_loop_is_refused_by_node_name():
    model = dense_loop([], "", scan_output=False)  # a while loop whose condition stays true
    with pytest.raises(UnsupportedAttributeError, match="Loop node 'dense_loop'.*without bound"):
        compiled(model)


def test_a_loop_unrolling_into_too_many_nodes_is_refused():
    model = dense_loop([const("M", np.array(100000, dtype=np.int64))], "M", iterations=100000)
    with pytest.raises(UnsupportedAttributeError, match="would unroll into 700000 nodes"):
        compiled(model)


# -- what torch's exporters write (tests/exported/make_loop_models.py) -----------------------------
EXPORTED = Path(__file__).parent / "exported"


@pytest.mark.parametrize("name,inputs,ops", [
    ("scripted_loop.onnx", {"x": (3, 4, 8, 8)}, "relax.nn.conv2d"),  # TorchScript: for i in range(x.size(0))
    ("dynamo_scan.onnx", {"init": (2, 16), "xs": (5, 2, 16)}, "relax.matmul"),  # torch scan, dynamo exporter
])
def test_loops_torch_exports_write_offload_their_bodies_to_dnnl(name, inputs, ops):
    model = onnx.load(EXPORTED / name)
    artifact = compiled(model)
    assert [p.vendor for p in artifact.plan.partitions] == ["dnnl"] and not artifact.plan.host_ops
    assert ops in artifact.plan.partitions[0].ops
    assert_matches(artifact, model, {k: RNG.standard_normal(s).astype(np.float32) for k, s in inputs.items()})


def test_a_torch_while_loop_is_refused_by_node_name():
    # dynamo's while_loop: no trip count, a condition computed from an input.
    with pytest.raises(UnsupportedAttributeError, match="Loop node .*no trip count"):
        compiled(onnx.load(EXPORTED / "dynamo_while.onnx"))


def test_a_loop_that_may_stop_early_and_grows_its_value_is_refused_by_name():
    # while sum(h) < limit: h = concat(h, h)   (h's length is 2**iterations: only the data tells)
    body = helper.make_graph([
        helper.make_node("Concat", ["h", "h"], ["h_out"], axis=0),
        helper.make_node("ReduceSum", ["h_out"], ["total"], keepdims=0),
        helper.make_node("Less", ["total", "limit"], ["cond_out"]),
    ], "body", [tensor("i", TensorProto.INT64, []), tensor("cond", TensorProto.BOOL, []),
                tensor("h", TensorProto.FLOAT, ["n"])],
        [tensor("cond_out", TensorProto.BOOL, []), tensor("h_out", TensorProto.FLOAT, ["m"])])
    model = model_of([const("M", np.array(3, np.int64)), const("go", np.array(True)),
                      helper.make_node("Loop", ["M", "go", "x"], ["h_final"], name="growing", body=body)],
                     [tensor("x", TensorProto.FLOAT, [1]), tensor("limit", TensorProto.FLOAT, [])],
                     [tensor("h_final", TensorProto.FLOAT, ["k"])])
    with pytest.raises(UnsupportedAttributeError, match="Loop node 'growing'.*shape its body does not declare"):
        compiled(model, vendors=("c_source",))
