"""Loop and Scan: unrolled (byoc.pipeline.frontend.prepare.control_flow) or run by the host with their bodies
partitioned on their own (byoc.pipeline.frontend.loop_bodies, byoc.pipeline.partitioning.host_loops), partitioned
for the vendors, and checked against onnxruntime running the model as written (with its own loop)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import jsonschema
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import byoc
from byoc.errors import StandaloneError, UnsupportedAttributeError
from byoc.tools.report import REPORT_SCHEMA
from byoc.pipeline.frontend.prepare import control_flow

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


def dense_loop(trip_nodes, trip: str, extra_inputs=(), iterations: int | str = 4,
               scan_output=True) -> onnx.ModelProto:
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


def scan_model(reverse: int, out_axis: int, batch: int | str = 2, length: int | str = 5,
               out_reverse: int = 0) -> onnx.ModelProto:
    """A running sum over the scan axis of x [batch, length, 3] (axis 1), each step's state @ W also a scan output."""
    weight = numpy_helper.from_array(RNG.standard_normal((3, 4)).astype(np.float32), "W")
    body = helper.make_graph([
        helper.make_node("Add", ["acc", "x_t"], ["acc_out"]),
        helper.make_node("MatMul", ["acc_out", "W"], ["y_t"]),
    ], "body", [tensor("acc", TensorProto.FLOAT, [batch, 3]), tensor("x_t", TensorProto.FLOAT, [batch, 3])],
        [tensor("acc_out", TensorProto.FLOAT, [batch, 3]), tensor("y_t", TensorProto.FLOAT, [batch, 4])])
    scan = helper.make_node("Scan", ["init", "x"], ["acc_final", "ys"], name="running_sum", body=body,
                            num_scan_inputs=1, scan_input_axes=[1], scan_input_directions=[reverse],
                            scan_output_axes=[out_axis], scan_output_directions=[out_reverse])
    out_shape = [length, batch, 4] if out_axis == 0 else [batch, length, 4] if out_axis in (1, -2) \
        else [batch, 4, length]
    return model_of([scan], [tensor("init", TensorProto.FLOAT, [batch, 3]),
                             tensor("x", TensorProto.FLOAT, [batch, length, 3])],
                    [tensor("acc_final", TensorProto.FLOAT, [batch, 3]), tensor("ys", TensorProto.FLOAT, out_shape)],
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


def test_a_trip_count_given_at_run_time_runs_on_the_host_with_its_body_on_dnnl():
    model = dense_loop([], "M", [tensor("M", TensorProto.INT64, [])], iterations="iterations")
    artifact = compiled(model)
    plan = artifact.plan
    assert [(p.name, p.vendor) for p in plan.partitions] == [("dnnl_loop0_0", "dnnl")]
    assert "relax.matmul" in plan.partitions[0].ops and list(plan.loops) == ["dense_loop"]
    assert [d.node.name for d in plan.host_ops if d.op == "host_loop(loop0)"] == ["dense_loop"]
    for m in (0, 1, 3, 70):  # the scan output stacks as many steps as ran, none at 0; 70 > FANOUT: two chains
        feed = {"x": RNG.standard_normal((2, 16)).astype(np.float32), "M": np.array(m, np.int64)}
        assert_matches(artifact, model, feed, tol=1e-4)


def test_a_host_loop_runs_more_iterations_than_the_call_stack_holds():
    # a chain of 2,500 calls overflows the VM's C stack: the iterations nest (host_loops.LEVELS)
    body = helper.make_graph([const("one", np.array(1.0, np.float32)), helper.make_node("Add", ["h", "one"], ["h_out"]),
                              helper.make_node("Identity", ["cond"], ["cond_out"])], "body",
                             [tensor("i", TensorProto.INT64, []), tensor("cond", TensorProto.BOOL, []),
                              tensor("h", TensorProto.FLOAT, [1])],
                             [tensor("cond_out", TensorProto.BOOL, []), tensor("h_out", TensorProto.FLOAT, [1])])
    model = model_of([helper.make_node("Loop", ["M", "", "x"], ["h_final"], name="counting", body=body)],
                     [tensor("x", TensorProto.FLOAT, [1]), tensor("M", TensorProto.INT64, [])],
                     [tensor("h_final", TensorProto.FLOAT, [1])])
    artifact = compiled(model, vendors=("c_source",))
    (out,) = artifact.run({"x": np.zeros(1, np.float32), "M": np.array(20000, np.int64)})
    assert float(np.asarray(out)[0]) == 20000.0


def test_an_unbounded_loop_is_refused_by_node_name():
    model = dense_loop([], "", scan_output=False)  # a while loop whose condition stays true
    with pytest.raises(UnsupportedAttributeError, match="Loop node 'dense_loop'.*without bound"):
        compiled(model)


def test_a_loop_too_long_to_unroll_runs_on_the_host():
    count = control_flow.MAX_UNROLLED_NODES // 5  # 4,000 iterations of 6 body nodes
    model = dense_loop([const("M", np.array(count, dtype=np.int64))], "M", scan_output=False)
    artifact = compiled(model)
    assert list(artifact.plan.loops) == ["dense_loop"]
    assert_matches(artifact, model, {"x": RNG.standard_normal((2, 16)).astype(np.float32) * 0.01}, tol=1e-4)


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


def test_a_torch_while_loop_runs_on_the_host_with_its_body_on_dnnl():
    # dynamo's while_loop: no trip count, a condition computed from an input (i < 4), a Linear and a Tanh.
    model = onnx.load(EXPORTED / "dynamo_while.onnx")
    artifact = compiled(model)
    assert [p.vendor for p in artifact.plan.partitions] == ["dnnl"]
    assert {"relax.matmul", "relax.tanh"} <= set(artifact.plan.partitions[0].ops)
    for start in (0, 2, 4, 9):  # 4, 2, 0 and 0 iterations
        assert_matches(artifact, model, {"i": np.array(start, np.int64),
                                         "x": RNG.standard_normal((2, 8)).astype(np.float32)})


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
    with pytest.raises(UnsupportedAttributeError, match=r"Loop node 'growing'.*carried value 0 enters the body as "
                                                        r"float32\[1\] and leaves it as float32\[2\]"):
        compiled(model, vendors=("c_source",))


def nested_host_loops() -> onnx.ModelProto:
    """for i < M: s = i * scale; for j < N: h = tanh(h @ W + s); y_i = sum(h)   (M and N given at run time)."""
    weight = numpy_helper.from_array((RNG.standard_normal((8, 8)) * 0.3).astype(np.float32), "W")
    inner = helper.make_graph([
        helper.make_node("MatMul", ["hi", "W"], ["mm"]), helper.make_node("Add", ["mm", "s"], ["a"]),
        helper.make_node("Tanh", ["a"], ["hi_out"]), helper.make_node("Identity", ["ci"], ["ci_out"]),
    ], "inner", [tensor("j", TensorProto.INT64, []), tensor("ci", TensorProto.BOOL, []),
                 tensor("hi", TensorProto.FLOAT, [2, 8])],
        [tensor("ci_out", TensorProto.BOOL, []), tensor("hi_out", TensorProto.FLOAT, [2, 8])])
    outer = helper.make_graph([
        helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT), helper.make_node("Mul", ["fi", "scale"], ["s"]),
        helper.make_node("Loop", ["N", "", "h"], ["h_in"], body=inner, name="inner_loop"),
        helper.make_node("ReduceSum", ["h_in"], ["total"], keepdims=0),
        helper.make_node("Identity", ["c"], ["c_out"]),
    ], "outer", [tensor("i", TensorProto.INT64, []), tensor("c", TensorProto.BOOL, []),
                 tensor("h", TensorProto.FLOAT, [2, 8])],
        [tensor("c_out", TensorProto.BOOL, []), tensor("h_in", TensorProto.FLOAT, [2, 8]),
         tensor("total", TensorProto.FLOAT, [])])
    return model_of([helper.make_node("Loop", ["M", "", "x"], ["h_final", "ys"], body=outer, name="outer_loop")],
                    [tensor("x", TensorProto.FLOAT, [2, 8]), tensor("M", TensorProto.INT64, []),
                     tensor("N", TensorProto.INT64, []), tensor("scale", TensorProto.FLOAT, [])],
                    [tensor("h_final", TensorProto.FLOAT, [2, 8]), tensor("ys", TensorProto.FLOAT, ["k"])], [weight])


def test_a_host_loop_in_a_host_loop_reads_the_outer_body_and_survives_export(tmp_path):
    model = nested_host_loops()
    artifact = compiled(model)
    plan = artifact.plan
    assert list(plan.loops) == ["outer_loop"] and list(plan.loops["outer_loop"].loops) == ["outer_loop/inner_loop"]
    inner = plan.partition("dnnl_loop0_loop0_0")  # the inner body, which reads s from the outer one
    assert inner.ops == ["relax.matmul", "relax.add", "relax.tanh"]
    assert inner.onnx_nodes == ["outer_loop/inner_loop/MatMul_0", "outer_loop/inner_loop/Add_1",
                                "outer_loop/inner_loop/Tanh_2"]
    feeds = [{"x": RNG.standard_normal((2, 8)).astype(np.float32), "M": np.array(m), "N": np.array(n),
              "scale": np.array(0.1, np.float32)} for m, n in ((0, 2), (3, 0), (3, 4))]
    for feed in feeds:
        assert_matches(artifact, model, feed)
    artifact.export(tmp_path / "nested.so")
    assert_matches(byoc.load(tmp_path / "nested.so"), model, feeds[-1])
    report = json.loads(byoc.report(plan, format="json"))
    jsonschema.validate(report, REPORT_SCHEMA)
    assert report["loops"] == [
        {"node": "outer_loop", "partitions": ["dnnl_loop0_0", "dnnl_loop0_1", "dnnl_loop0_loop0_0"],
         "host_nodes": ["outer_loop/Cast_0", "outer_loop/inner_loop"]},
        {"node": "outer_loop/inner_loop", "partitions": ["dnnl_loop0_loop0_0"], "host_nodes": []}]
    assert "  outer_loop/inner_loop: body partitions dnnl_loop0_loop0_0; body nodes with host ops none" \
        in byoc.report(plan)


def test_a_host_loop_is_refused_by_the_standalone_export_by_name(tmp_path):
    artifact = compiled(onnx.load(EXPORTED / "dynamo_while.onnx"), vendors=("c_source",))
    with pytest.raises(StandaloneError, match="Loop 'node_while_loop__1' runs on the host as a loop of calls"):
        artifact.export_standalone(tmp_path / "standalone")


def test_a_carried_value_whose_shape_changes_at_run_time_is_an_input_shape_error():
    # h' = (h ++ h)[:i + 2]: 2 long in the first iteration, 3 in the second; only the run tells
    body = helper.make_graph([
        helper.make_node("Concat", ["h", "h"], ["hh"], axis=0), const("zero", np.array([0], np.int64)),
        const("two", np.array(2, np.int64)), helper.make_node("Add", ["i", "two"], ["end0"]),
        helper.make_node("Unsqueeze", ["end0", "zero"], ["end"]), helper.make_node("Slice", ["hh", "zero", "end"], ["h_out"]),
        helper.make_node("Identity", ["cond"], ["cond_out"]),
    ], "body", [tensor("i", TensorProto.INT64, []), tensor("cond", TensorProto.BOOL, []), tensor("h", TensorProto.FLOAT, ["n"])],
        [tensor("cond_out", TensorProto.BOOL, []), tensor("h_out", TensorProto.FLOAT, ["m"])])
    model = model_of([helper.make_node("Loop", ["M", "", "x"], ["y"], body=body, name="slicing")],
                     [tensor("x", TensorProto.FLOAT, [2]), tensor("M", TensorProto.INT64, [])],
                     [tensor("y", TensorProto.FLOAT, ["k"])])
    artifact = compiled(model, vendors=("c_source",))
    assert_matches(artifact, model, {"x": np.array([1, 2], np.float32), "M": np.array(1)})  # one iteration: 2 long
    with pytest.raises(byoc.InputShapeError, match="a Loop the host runs carries whose shape changes"):
        artifact.run({"x": np.array([1, 2], np.float32), "M": np.array(3)})


@pytest.mark.parametrize("reverse,out_axis,out_reverse", [(0, 0, 0), (1, -1, 1)])
def test_a_scan_over_a_symbolic_length_and_batch_runs_on_the_host_with_its_body_on_dnnl(reverse, out_axis,
                                                                                        out_reverse):
    model = scan_model(reverse, out_axis, batch="batch", length="steps", out_reverse=out_reverse)
    artifact = compiled(model)
    (body,) = artifact.plan.loops.values()  # the Scan's, as a Loop the host runs: its body one dnnl partition
    assert list(artifact.plan.loops) == ["running_sum"] and [p.vendor for p in body.partitions] == ["dnnl"]
    assert "relax.matmul" in body.partitions[0].ops
    for batch, length in ((2, 5), (3, 1), (1, 7)):
        assert_matches(artifact, model, {"init": RNG.standard_normal((batch, 3)).astype(np.float32),
                                         "x": RNG.standard_normal((batch, length, 3)).astype(np.float32)})


@pytest.mark.parametrize("name,shapes,op", [
    # TorchScript, dynamic_axes n, h, w: the trip count is x's first dim
    ("scripted_loop_dynamic.onnx", [{"x": (3, 4, 8, 8)}, {"x": (5, 4, 6, 10)}, {"x": (1, 4, 8, 8)}],
     "relax.nn.conv2d"),
    # dynamo, dynamic_shapes steps and batch: a Scan over a symbolic length
    ("dynamo_scan_dynamic.onnx", [{"init": (2, 16), "xs": (5, 2, 16)}, {"init": (3, 16), "xs": (9, 3, 16)},
                                  {"init": (1, 16), "xs": (1, 1, 16)}], "relax.matmul"),
])
def test_loops_torch_exports_write_with_symbolic_dims_run_on_the_host_with_their_bodies_on_dnnl(name, shapes, op):
    model = onnx.load(EXPORTED / name)
    artifact = compiled(model)
    (body,) = artifact.plan.loops.values()
    assert [p.vendor for p in body.partitions] == ["dnnl"] and op in body.partitions[0].ops
    assert not artifact.plan.fallbacks
    for feed in shapes:
        assert_matches(artifact, model, {k: RNG.standard_normal(s).astype(np.float32) for k, s in feed.items()})
