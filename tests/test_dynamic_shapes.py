"""Symbolic dims: one artifact runs every shape its signature allows, on the host and on each vendor.

Numbers are compared with onnxruntime at each shape; bad calls get typed errors that name the input and the dim.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import byoc
from byoc.errors import DynamicShapeError, InputDtypeError, InputShapeError, VendorOptionError
from byoc.pipeline.frontend.dims import parse_dim_setting
from byoc.pipeline.frontend.onnx_model import DimRange

from models import const, model, tensor

SHAPES = [(1, 4), (3, 7), (2, 16)]  # (batch, seq), called round-robin and back


def _encoder_block() -> onnx.ModelProto:
    """x[batch, seq, 8] -> MatMul + bias + Relu -> Reshape to [batch, seq*16] via Shape/Gather/Concat
    (the exporters' shape arithmetic) -> Softmax; and a second input that shares `batch`."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "W"),
               numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "B"),
               numpy_helper.from_array(np.array([0], np.int64), "zero"),
               numpy_helper.from_array(np.array([-1], np.int64), "minus_one")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "B"], ["a"], name="bias"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "zero"], ["b0"], name="batch_of", axis=0),
             helper.make_node("Concat", ["b0", "minus_one"], ["target"], name="target", axis=0),
             helper.make_node("Reshape", ["r", "target"], ["flat"], name="flatten"),
             helper.make_node("Softmax", ["flat"], ["y"], name="softmax", axis=-1),
             helper.make_node("Mul", ["scale", "scale"], ["z"], name="square")]
    graph = helper.make_graph(
        nodes, "encoder_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8]),
         helper.make_tensor_value_info("scale", TensorProto.FLOAT, ["batch", 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "flat_dim"]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 2])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _inputs(batch: int, seq: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed + 10 * batch + seq)
    return {"x": rng.standard_normal((batch, seq, 8)).astype(np.float32),
            "scale": rng.standard_normal((batch, 2)).astype(np.float32)}


@pytest.fixture(scope="module")
def reference():
    session = ort.InferenceSession(_encoder_block().SerializeToString())
    return lambda feeds: session.run(None, feeds)


@pytest.mark.parametrize("vendor", ["dnnl", "json_runtime", "c_source", None])
def test_one_artifact_runs_every_shape_and_matches_onnxruntime(vendor, reference):
    artifact = byoc.compile(_encoder_block(), vendors=[vendor] if vendor else [])
    assert [s.shape for s in artifact.inputs] == [("batch", "seq", 8), ("batch", 2)]
    if vendor:  # each runtime reads the dims per call (c_source: its C takes them as run-time values)
        assert [p.vendor for p in artifact.plan.partitions] and {p.vendor for p in artifact.plan.partitions} == {vendor}
    for batch, seq in SHAPES + SHAPES[:1]:
        feeds = _inputs(batch, seq)
        for got, want in zip(artifact.run(feeds), reference(feeds)):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_the_dnnl_runtime_compiles_each_shape_once_and_keeps_a_bounded_cache():
    artifact = byoc.compile(_encoder_block(), vendors=["dnnl"])
    (block,) = [p.name for p in artifact.plan.partitions if "softmax" in p.onnx_nodes]
    (module,) = [m for m in artifact.executable.mod.imports
                 if m.kind == "byoc_dnnl" and m.get_function("get_symbol")() == block]
    for batch, seq in [(1, 4), (2, 4), (1, 4), (2, 4)]:
        artifact.run(_inputs(batch, seq))
    assert list(module.get_function("get_specializations")()) == [2, 2]  # A, B, A, B: two compiled
    for seq in range(5, 25):
        artifact.run(_inputs(1, seq))
    alive, made = module.get_function("get_specializations")()
    assert alive == 8 and made == 22  # the default bound (shape_cache 8) holds: the oldest shapes left


def test_the_shape_cache_option_sets_the_bound():
    artifact = byoc.compile(_encoder_block(), vendors=["dnnl"], vendor_options={"dnnl": {"shape_cache": 3}})
    (block,) = [p.name for p in artifact.plan.partitions if "softmax" in p.onnx_nodes]
    (module,) = [m for m in artifact.executable.mod.imports
                 if m.kind == "byoc_dnnl" and m.get_function("get_symbol")() == block]
    for seq in range(4, 10):
        artifact.run(_inputs(1, seq))
    assert list(module.get_function("get_specializations")()) == [3, 6]
    with pytest.raises(VendorOptionError, match=r"option 'shape_cache' takes an int >= 1, got 0"):
        byoc.compile(_encoder_block(), vendors=["dnnl"], vendor_options={"dnnl": {"shape_cache": 0}})


_VERBOSE_RUN = """
import sys
sys.path.insert(0, {tests!r})
import byoc
from test_dynamic_shapes import _encoder_block, _inputs
artifact = byoc.compile(_encoder_block(), vendors=["dnnl"])
for batch, seq in [(1, 4), (2, 9), (1, 4), (2, 9)]:
    print(f"@@ {{batch}}x{{seq}}", flush=True)
    artifact.run(_inputs(batch, seq))
"""


def test_onednn_creates_primitives_only_at_a_shapes_first_call():
    """oneDNN's own log (ONEDNN_VERBOSE), not the runtime's counters: A, B, A, B creates at A and B, and
    nothing (no primitive, not even a hit in oneDNN's primitive cache) when a shape comes back."""
    import os
    from pathlib import Path

    code = _VERBOSE_RUN.format(tests=str(Path(__file__).parent))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "ONEDNN_VERBOSE": "all"})
    assert run.returncode == 0, run.stderr[-2000:]
    created, call = {}, None
    for line in (run.stdout + run.stderr).splitlines():  # oneDNN writes to stdout, flushed after the marks
        if line.startswith("@@ "):
            call = len(created)
            created[call] = 0
        elif call is not None and line.startswith(("onednn_verbose,create:cache_miss", "onednn_verbose,create:cache_hit")):
            created[call] += 1
    assert list(created) == [0, 1, 2, 3]
    assert created[0] > 0 and created[1] > 0, created  # a new shape: its primitives are made
    assert created[2] == 0 and created[3] == 0, created  # a shape seen before: nothing is made again


def test_two_threads_with_two_shapes_at_once(reference):
    artifact = byoc.compile(_encoder_block(), vendors=["dnnl"])
    errors = []

    def work(batch, seq):
        try:
            for _ in range(20):
                feeds = _inputs(batch, seq)
                np.testing.assert_allclose(artifact.run(feeds)[0], reference(feeds)[0], rtol=1e-5, atol=1e-6)
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=shape) for shape in [(1, 4), (3, 9)]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_each_bad_call_gets_a_typed_error_naming_the_input_and_the_dim():
    artifact = byoc.compile(_encoder_block(), vendors=["json_runtime"], dims={"seq": "2..16"})
    good = _inputs(2, 4)
    artifact.run(good)  # shapes that checked out are not checked again: the bad calls after them still are
    with pytest.raises(InputShapeError, match="'batch' = 3") as info:  # one dim, two sizes
        artifact.run({"x": good["x"], "scale": np.zeros((3, 2), np.float32)})
    assert (info.value.input, info.value.dim) == ("scale", "batch")
    with pytest.raises(InputShapeError, match=r"outside its range 2\.\.16") as info:
        artifact.run(_inputs(2, 17))
    assert info.value.dim == "seq"
    with pytest.raises(InputShapeError, match="rank 2") as info:
        artifact.run({"x": good["x"][0], "scale": good["scale"]})
    assert info.value.input == "x"
    with pytest.raises(InputShapeError, match="fixes it at 8"):
        artifact.run({"x": np.zeros((2, 4, 9), np.float32), "scale": good["scale"]})
    with pytest.raises(InputDtypeError, match="float64"):
        artifact.run({"x": good["x"].astype(np.float64), "scale": good["scale"]})


def test_fixed_and_bounded_dims():
    plan = byoc.partition(_encoder_block(), ["dnnl"], dims={"batch": 2, "seq": (1, 32)})
    assert [s.shape for s in plan.imported.inputs] == [(2, "seq", 8), (2, 2)]
    assert plan.imported.dims == {"seq": DimRange("seq", 1, 32)}
    assert plan.imported.mod["main"].attrs["tir_var_upper_bound"]["seq"] == 32
    assert parse_dim_setting("n", "..512") == DimRange("n", 1, 512)
    assert parse_dim_setting("n", "8") == 8
    for bad in ("0", "5..2", "abc", (1, "x"), True):
        with pytest.raises(DynamicShapeError):
            parse_dim_setting("n", bad)


def test_export_and_load_in_a_fresh_process_keep_the_symbolic_signature(tmp_path):
    artifact = byoc.compile(_encoder_block(), vendors=["dnnl"], dims={"seq": "..64"})
    path = artifact.export(tmp_path / "block.so")
    feeds = _inputs(3, 5)
    np.savez(tmp_path / "in.npz", **feeds)
    script = f"""
import numpy as np, byoc
a = byoc.load({str(path)!r})
print([s.shape for s in a.inputs], a.dims["seq"].max)
f = dict(np.load({str(tmp_path / 'in.npz')!r}))
np.save({str(tmp_path / 'out.npy')!r}, a.run(f)[0])
a.run({{"x": np.zeros((2, 9, 8), np.float32), "scale": np.zeros((2, 2), np.float32)}})
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "[('batch', 'seq', 8), ('batch', 2)] 64" in done.stdout
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), artifact.run(feeds)[0], rtol=1e-6)


def test_the_report_shows_symbolic_dims():
    plan = byoc.partition(_encoder_block(), ["dnnl"])
    data = byoc.report(plan, format="json")
    assert '"batch"' in data and '"seq"' in data
    assert "x batch×seq×8 float32" in byoc.report(plan, format="text")


def test_verify_runs_several_shapes_and_the_cli_names_them(tmp_path):
    """Default: the upper bound, the lower bound and a drawn size, one build for all; --verify-dims lists runs."""
    from byoc.tools.verify import verify, verify_shapes

    runs = verify_shapes({"batch": DimRange("batch", 1, 4), "seq": DimRange("seq")})
    assert runs[:2] == [{"batch": 4, "seq": 3}, {"batch": 1, "seq": 2}] and 2 <= len(runs) <= 3
    assert all(1 <= r["batch"] <= 4 and 2 <= r["seq"] <= 16 for r in runs)
    plan = byoc.partition(_encoder_block(), ["c_source"], dims={"batch": "..4"})
    result = verify(plan)
    assert result.ok and len(result.shapes) >= 2 and "batch=4, seq=3" in result.shapes
    path = tmp_path / "block.onnx"
    onnx.save(_encoder_block(), path)
    cli = [sys.executable, "-m", "byoc.partition", str(path), "--vendor", "dnnl", "--verify", "-q"]
    run = subprocess.run(cli + ["--verify-dims", "batch=2,seq=5", "--verify-dims", "batch=1,seq=40"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "at 2 shape(s): batch=2, seq=5; batch=1, seq=40" in " ".join(run.stdout.split())
    bad = subprocess.run(cli + ["--verify-dims", "batch=2"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "missing seq; the model's symbolic dims are batch, seq" in bad.stderr


def _causal_attention_scores() -> onnx.ModelProto:
    """x[batch, seq, 8] -> scores = x W (x W)^T, masked causally by a mask built the exporters' way:
    Range(0, seq) from Shape -> Gather, compared row against column (GPT-2's and BERT's exports)."""
    rng = np.random.default_rng(1)
    weights = [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "W"),
               numpy_helper.from_array(np.array(1, np.int64), "one_axis"),
               numpy_helper.from_array(np.array(0, np.int64), "start"),
               numpy_helper.from_array(np.array(1, np.int64), "step"),
               numpy_helper.from_array(np.array([0], np.int64), "axis0"),
               numpy_helper.from_array(np.array([1], np.int64), "axis1"),
               numpy_helper.from_array(np.array(-1e9, np.float32), "minus_inf"),
               numpy_helper.from_array(np.array(0, np.float32), "zero")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["q"], name="proj"),
             helper.make_node("Transpose", ["q"], ["qt"], name="transpose", perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "qt"], ["scores"], name="scores"),
             helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "one_axis"], ["seq"], name="seq_of", axis=0),
             helper.make_node("Range", ["start", "seq", "step"], ["positions"], name="positions"),
             helper.make_node("Unsqueeze", ["positions", "axis0"], ["row"], name="row"),
             helper.make_node("Unsqueeze", ["positions", "axis1"], ["column"], name="column"),
             helper.make_node("GreaterOrEqual", ["column", "row"], ["allowed"], name="causal"),
             helper.make_node("Where", ["allowed", "zero", "minus_inf"], ["bias"], name="mask"),
             helper.make_node("Add", ["scores", "bias"], ["masked"], name="apply_mask"),
             helper.make_node("Softmax", ["masked"], ["y"], name="softmax", axis=-1)]
    graph = helper.make_graph(nodes, "causal_scores",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", "seq"])],
                              weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_mask_from_range_over_a_symbolic_dim_keeps_the_dim_and_the_partitions():
    """Range(0, seq) is an arange of length seq itself (TVM's own Range casts its length to a new
    variable, and TVM's MergeCompositeFunctions then failed on the symbolic scalar: every op stayed on the
    host). The MatMuls reach dnnl and the artifact matches onnxruntime at three shapes."""
    model = _causal_attention_scores()
    mod = byoc.import_model(model).mod
    assert "range_len" not in mod.script() and "R.arange(0, seq, 1" in mod.script()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "every op stays on the host" warning
        artifact = byoc.compile(model, vendors=["dnnl"])
    offloaded = {node for p in artifact.plan.partitions for node in p.onnx_nodes}
    assert {"proj", "scores"} <= offloaded
    session = ort.InferenceSession(model.SerializeToString())
    for batch, seq in [(1, 5), (2, 9), (1, 5), (3, 2)]:
        x = np.random.default_rng(seq).standard_normal((batch, seq, 8)).astype(np.float32)
        np.testing.assert_allclose(artifact.run({"x": x})[0], session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_memory_is_counted_at_the_bounds_and_as_a_formula_of_the_other_dims():
    """The estimate of a symbolic model equals the static build's at the same sizes: with both dims bounded
    (counted at the bounds), and through the formula left when only seq is bounded."""
    from byoc.tools.memory import estimate_memory

    keep = ["relu", "softmax"]  # host work between the partitions, so the host plans memory

    def estimate(**options):
        return estimate_memory(byoc.partition(_encoder_block(), ["dnnl"], keep_on_host=keep, **options))

    static = estimate(input_shapes={"x": [2, 8, 8], "scale": [2, 2]})
    bounded = estimate(dims={"batch": "..2", "seq": "..8"})
    assert bounded.at_bounds == {"batch": 2, "seq": 8}
    figures = ("planned_bytes", "lower_bound_bytes", "model_lower_bound_bytes")
    assert [getattr(bounded, f) for f in figures] == [getattr(static, f) for f in figures]
    assert static.lower_bound_bytes > 0
    formula = estimate(dims={"seq": "..8"})
    assert formula.at_bounds == {"seq": 8}
    for figure in figures:
        text = getattr(formula, figure)
        assert isinstance(text, str) and "batch" in text and "seq" not in text
        assert eval(text, {"__builtins__": {}, "max": max, "min": min}, {"batch": 2}) == getattr(static, figure)


def _squeeze_and_concat() -> onnx.ModelProto:
    """Relu(x[n, 4, h, w]) squeezed at h, then joined with z[n, 2, v] along the channels: it runs only where
    h = 1 and v = w, which no analysis of the dims can know (PP-OCR's recognizer joins such tensors)."""
    axes = numpy_helper.from_array(np.array([2], np.int64), "axes")
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Squeeze", ["r", "axes"], ["s"], name="squeeze"),
             helper.make_node("Concat", ["s", "z"], ["y"], name="concat", axis=1)]
    graph = helper.make_graph(nodes, "squeeze_concat",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4, "h", "w"]),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 2, "v"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 6, "w"])], [axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("vendors", [["dnnl"], []])
def test_dims_only_the_run_can_check_are_checked_when_it_runs(vendors):
    model = _squeeze_and_concat()
    artifact = byoc.compile(model, vendors)
    if vendors:
        assert {n for p in artifact.plan.partitions for n in p.onnx_nodes} >= {"squeeze", "concat"}
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(5)
    for n, w in [(1, 3), (2, 7)]:
        feeds = {"x": rng.standard_normal((n, 4, 1, w)).astype(np.float32),
                 "z": rng.standard_normal((n, 2, w)).astype(np.float32)}
        np.testing.assert_array_equal(artifact.run(feeds)[0], session.run(None, feeds)[0])
    for x_shape, z_shape in [((1, 4, 2, 3), (1, 2, 3)), ((1, 4, 1, 3), (1, 2, 4))]:  # h = 2; v != w
        bad = {"x": np.ones(x_shape, np.float32), "z": np.ones(z_shape, np.float32)}
        with pytest.raises((InputShapeError, ValueError), match=r"match_cast|different sizes|has w = 4|w"):
            artifact.run(bad)


def _strided_conv_then_flatten() -> onnx.ModelProto:
    """x[n, 3, h, w] -> Conv stride 2 -> Relu -> Reshape to (n, 8, -1) -> Softmax: with the conv on the host, the
    partition's input dims are expressions ((h-1)//2+1), and TVM passes the dims and the reshape's target as
    shape arguments."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([0, 1], np.int64), "first_two"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Shape", ["r"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "first_two"], ["nc"], name="nc", axis=0),
             helper.make_node("Concat", ["nc", "minus_one"], ["target"], name="target", axis=0),
             helper.make_node("Reshape", ["r", "target"], ["flat"], name="flatten"),
             helper.make_node("Softmax", ["flat"], ["y"], name="softmax", axis=-1)]
    graph = helper.make_graph(nodes, "conv_flatten",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8, "hw"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("vendor", ["dnnl", "json_runtime", "c_source"])
def test_a_partition_whose_dims_come_in_shape_arguments_runs_every_shape(vendor):
    model = _strided_conv_then_flatten()
    artifact = byoc.compile(model, [vendor], keep_on_host=["conv"])
    (part,) = artifact.plan.partitions
    assert part.onnx_nodes == ["relu", "flatten", "softmax"]
    session = ort.InferenceSession(model.SerializeToString())
    for shape in [(1, 3, 8, 8), (2, 3, 9, 13), (1, 3, 5, 4)]:
        x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(artifact.run({"x": x})[0], session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_tvm_passes_no_shape_the_partition_input_already_defines():
    """TVM's merge gives a partition one shape parameter per composite that took one (66 copies of
    R.shape([width, height]) for a ResNet): the ones the tensors define are written into the partition."""
    from tvm import relax

    plan = byoc.partition(_strided_conv_then_flatten(), ["dnnl"])
    (part,) = plan.partitions
    params = plan.mod[part.global_var].params
    assert [isinstance(p.ty, relax.TensorType) for p in params] == [True], [str(p.ty) for p in params]


@pytest.mark.parametrize("vendor", ["dnnl", "c_source"])
def test_a_symbolic_batch_takes_the_same_rules_as_a_static_one(vendor):
    """Checks read symbolic dims as their text: a conv's per-channel bias check once failed on a symbolic
    batch, silently, and each conv, bias and activation became an op of its own (MobileNetV2: 1.45x slower)."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from cross_models import small_cnn

    def rules(model):
        return sorted(d.rule for d in byoc.partition(model, [vendor]).decisions.values() if d.rule)

    assert rules(small_cnn(batch="batch")) == rules(small_cnn())
    assert any("bias" in r for r in rules(small_cnn(batch="batch")))


def test_winograd_weights_are_transformed_once_for_every_shape():
    """A big 3x3 conv runs as Winograd around a batched matmul; its transformed weights are shared by the
    programs of every shape (they were most of ResNet-18's first call at a new shape: 86 ms, now 16)."""
    rng = np.random.default_rng(8)
    weight = numpy_helper.from_array((rng.standard_normal((48, 48, 3, 3)) * 0.15).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])], "conv",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 48, 38, 41])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 48, 38, 41])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    artifact = byoc.compile(model, ["dnnl"])
    (module,) = [m for m in artifact.executable.mod.imports if m.kind == "byoc_dnnl"]
    session = ort.InferenceSession(model.SerializeToString())
    made = []
    for n in (1, 2, 3):
        x = np.random.default_rng(n).standard_normal((n, 48, 38, 41)).astype(np.float32)
        np.testing.assert_allclose(artifact.run([x])[0], session.run(None, {"x": x})[0], atol=3e-4)
        made.append(int(module.get_function("get_memory")()[2]))  # bytes of constants the runtime made
    assert list(module.get_function("get_specializations")()) == [3, 3]
    assert made[0] >= 36 * 48 * 48 * 4 and made == [made[0]] * 3, made  # the 6x6-point transform, once


def test_a_resize_to_the_batch_of_its_input_and_fixed_spatial_sizes():
    """torchvision's segmentation heads resize to Concat(Shape(x)[:2], [H, W]): with a symbolic batch, TVM's
    converter read the batch dim as a number and the import failed (LRASPP, DeepLabV3)."""
    start, end = (numpy_helper.from_array(np.array([v], np.int64), n) for n, v in (("start", 0), ("end", 2)))
    hw = numpy_helper.from_array(np.array([12, 10], np.int64), "hw")
    nodes = [helper.make_node("Shape", ["x"], ["shape"], name="shape"),
             helper.make_node("Slice", ["shape", "start", "end"], ["nc"], name="slice"),
             helper.make_node("Concat", ["nc", "hw"], ["sizes"], name="sizes", axis=0),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], name="resize", mode="linear")]
    graph = helper.make_graph(nodes, "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 6, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3, 12, 10])], [start, end, hw])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    artifact = byoc.compile(model, [])
    session = ort.InferenceSession(model.SerializeToString())
    for n in (1, 3):
        x = np.random.default_rng(n).standard_normal((n, 3, 6, 5)).astype(np.float32)
        np.testing.assert_allclose(artifact.run({"x": x})[0], session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_token_zero_of_a_symbolic_sequence_is_a_slice_in_the_partition():
    """BERT's pooler reads hidden[:, 0] (a Gather at index 0 over the symbolic sequence): a slice dnnl takes, so
    the pooler joins the encoder's partition (BERT: 2 partitions -> 1); TVM's Gather left index arithmetic on
    the sequence dim on the host."""
    index = numpy_helper.from_array(np.array(0, np.int64), "zero")
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Gather", ["r", "zero"], ["g"], name="cls", axis=1),
             helper.make_node("Tanh", ["g"], ["y"], name="tanh")]
    graph = helper.make_graph(nodes, "cls", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "s", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])], [index])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    artifact = byoc.compile(model, ["dnnl"])
    assert len(artifact.plan.partitions) == 1 and not artifact.plan.host_ops, artifact.plan.host_ops
    session = ort.InferenceSession(model.SerializeToString())
    for n, s in [(1, 5), (2, 1)]:
        x = np.random.default_rng(s).standard_normal((n, s, 8)).astype(np.float32)
        np.testing.assert_allclose(artifact.run({"x": x})[0], session.run(None, {"x": x})[0], rtol=1e-6)


def _pre_activation_block() -> onnx.ModelProto:
    """DenseNet's layer: BatchNormalization -> Relu -> Conv, a batch norm no conv before it can absorb."""
    rng = np.random.default_rng(3)
    stats = [numpy_helper.from_array(v.astype(np.float32), n) for n, v in
             (("gamma", rng.uniform(0.5, 1.5, 4)), ("beta", rng.standard_normal(4)), ("mean", rng.standard_normal(4)),
              ("var", rng.uniform(0.5, 1.5, 4)), ("w", rng.standard_normal((6, 4, 3, 3)) * 0.3))]
    nodes = [helper.make_node("BatchNormalization", ["x", "gamma", "beta", "mean", "var"], ["n"], name="norm"),
             helper.make_node("Relu", ["n"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w"], ["y"], pads=[1] * 4, name="conv")]
    graph = helper.make_graph(nodes, "pre_activation",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 6, 8, 8])], stats)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_batch_norm_the_dnnl_codegen_rewrites_keeps_the_symbolic_dims():
    """The dnnl codegen rewrites a partition before serializing it (a batch norm no conv absorbs becomes a
    per-channel scale and shift). The rewrite once dropped the partition's symbolic dims: a strict build failed
    (a KeyError), and otherwise the vendor was dropped silently: DenseNet-121 with a symbolic batch ran on the
    host alone, at 9.7x onnxruntime."""
    block = _pre_activation_block()
    artifact = byoc.compile(block, ["dnnl"], strict=True)
    assert [p.vendor for p in artifact.plan.partitions] == ["dnnl"] and not artifact.plan.host_ops
    session = ort.InferenceSession(block.SerializeToString())
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 4, 8, 8)).astype(np.float32)
        np.testing.assert_allclose(artifact.run({"x": x})[0], session.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)


def _positional_conv() -> onnx.ModelProto:
    """wav2vec2's feature encoder and positional conv, reduced: features of (samples // 5 - 1) frames, a conv that
    makes one frame more, a Slice that drops it (TVM: min(max(frames, 0), frames + 1)), the sum of the two, and the
    sum's Shape as an output too."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((4, 1, 10)).astype(np.float32) * 0.3, "w0"),
               numpy_helper.from_array(rng.standard_normal((4, 4, 4)).astype(np.float32) * 0.3, "w"),
               numpy_helper.from_array(np.array([0], np.int64), "start"),
               numpy_helper.from_array(np.array([-1], np.int64), "end"),
               numpy_helper.from_array(np.array([2], np.int64), "axis"),
               numpy_helper.from_array(np.array([1], np.int64), "axis1")]
    nodes = [helper.make_node("Unsqueeze", ["x", "axis1"], ["x3"]),
             helper.make_node("Conv", ["x3", "w0"], ["f"], strides=[5], name="features"),
             helper.make_node("Conv", ["f", "w"], ["c"], pads=[2, 2], name="pos_conv"),
             helper.make_node("Slice", ["c", "start", "end", "axis"], ["cs"], name="drop_last"),
             helper.make_node("Add", ["f", "cs"], ["s"], name="add"),
             helper.make_node("Shape", ["s"], ["shape"], name="shape"),
             helper.make_node("Relu", ["s"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "positional_conv",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "samples"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, "frames"]),
                               helper.make_tensor_value_info("shape", TensorProto.INT64, [3])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_sum_of_dims_tvm_cannot_prove_equal_keeps_its_shape():
    """TVM gave up the sum's shape (its operands' frames are equal for every length, which it cannot prove), so
    ops after it had none: wav2vec2-base with a symbolic length failed to import at the Shape read after it. The
    second operand is cast to the first's dims, checked at run time; a Shape as a graph output is its ints."""
    model = _positional_conv()
    artifact = byoc.compile(model, ["dnnl"], strict=True)
    assert not artifact.plan.host_ops and len(artifact.plan.partitions) == 1
    assert [(s.name, s.shape, s.dtype) for s in artifact.outputs][1] == ("shape", (3,), "int64")
    session = ort.InferenceSession(model.SerializeToString())
    for samples in (60, 103):
        x = np.random.default_rng(samples).standard_normal((1, samples)).astype(np.float32)
        got, want = artifact.run({"x": x}), session.run(None, {"x": x})
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(got[1], want[1])


def test_a_dim_that_may_broadcast_at_run_time_is_not_cast():
    """A static 4 against a symbolic b (which may be 1, and broadcast) is no relation the import may assume: the
    model is refused with its node named (TVM cannot type the product), not built to reject b = 1 when it runs."""
    nodes = [helper.make_node("Mul", ["x", "y"], ["z"], name="mul"), helper.make_node("Relu", ["z"], ["r"], name="relu")]
    graph = helper.make_graph(nodes, "maybe_broadcast", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
                                                         helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "b"])],
                              [helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with pytest.raises(byoc.errors.ModelLoadError, match="relu"):
        byoc.compile(model, ["dnnl"])


def test_a_range_from_a_symbolic_dim_builds_fused_and_reports_its_memory(tmp_path):
    """Range(past, past + seq), a decoder's positions: legalized, the start is a parameter of the arange's PrimFunc,
    the same TIR variable as the dim among the shapes, which TVM 0.27's FuseTIR defined twice (the memory report
    failed, the host build fell back to TVM's unfused pipeline). Such PrimFuncs stay out of fusion."""
    from byoc.tools.memory import estimate_memory

    nodes = [helper.make_node("Shape", ["x"], ["xs"]), helper.make_node("Gather", ["xs", "one"], ["past"]),
             helper.make_node("Shape", ["y"], ["ys"]), helper.make_node("Gather", ["ys", "one"], ["seq"]),
             helper.make_node("Add", ["past", "seq"], ["end"]), helper.make_node("Range", ["past", "end", "one"], ["r"]),
             helper.make_node("Cast", ["r"], ["positions"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["positions", "y"], ["z"])]
    m = model(nodes, [tensor("x", [1, "past"]), tensor("y", [1, "seq"])], [tensor("z", [1, "seq"])],
              [const("one", np.array(1, np.int64))])
    plan = byoc.partition(m, ["dnnl"])
    assert estimate_memory(plan).planned_bytes
    artifact = byoc.build(plan)
    y = np.arange(2, dtype=np.float32)[None]
    np.testing.assert_array_equal(artifact.run({"x": np.zeros((1, 3), np.float32), "y": y})[0], y + [[3, 4]])


def test_position_glue_over_a_sum_of_dims_is_one_host_function():
    """A decoder's positions and cache offsets over past + seq (Range, Less, Sub, Where, Cast): legalized, each op
    takes both dims as scalar parameters, which its buffers' shapes also name; such PrimFuncs fuse (one host call
    where there were six, each with its own allocation). The model failed to import before: TVM 0.27 has one Var
    class for Relax and TIR, and the import took Relax variables of one name for symbolic dims to rename."""
    from onnx.reference import ReferenceEvaluator

    nodes = [helper.make_node("Shape", ["past"], ["ps"]), helper.make_node("Gather", ["ps", "one"], ["p"]),
             helper.make_node("Shape", ["x"], ["xs"]), helper.make_node("Gather", ["xs", "one"], ["s"]),
             helper.make_node("Add", ["p", "s"], ["total"]), helper.make_node("Range", ["zero", "total", "one"], ["r"]),
             helper.make_node("Less", ["r", "p"], ["cached"]), helper.make_node("Sub", ["r", "p"], ["offset"]),
             helper.make_node("Where", ["cached", "r", "offset"], ["w"]),
             helper.make_node("Cast", ["w"], ["y"], to=TensorProto.FLOAT)]
    m = model(nodes, [tensor("past", [1, "past"]), tensor("x", [1, "seq"])], [tensor("y", ["total"])],
              [const("one", np.array(1, np.int64)), const("zero", np.array(0, np.int64))])
    artifact = byoc.compile(m, vendors=["dnnl"])
    computed_by = {binding: name for name, bindings in artifact.host_calls() for binding in bindings}
    assert len(set(computed_by.values())) <= 2, artifact.host_calls()  # the positions, and the past's length
    for past, seq in ((0, 1), (3, 2), (7, 1)):
        feeds = {"past": np.zeros((1, past), np.float32), "x": np.zeros((1, seq), np.float32)}
        np.testing.assert_array_equal(artifact.run(feeds)[0], ReferenceEvaluator(m).run(None, feeds)[0])


def test_a_dim_named_by_an_expression_of_other_dims_is_that_expression():
    """optimum names a decoder's attention_mask [batch, "past_sequence_length + sequence_length"]: the dim is that
    sum, so a mask of another length is refused by name before the run (it ran, and read past the mask)."""
    nodes = [helper.make_node("Concat", ["past", "x"], ["joined"], name="cache", axis=1),
             helper.make_node("Mul", ["joined", "mask"], ["y"], name="masked")]
    m = model(nodes, [tensor("x", [1, "seq"]), tensor("past", [1, "past_len"]),
                      tensor("mask", [1, "past_len + seq"])], [tensor("y", [1, "past_len + seq"])])
    artifact = byoc.compile(m, vendors=["dnnl"])
    assert artifact.inputs[2].shape == (1, "past_len + seq")
    assert artifact.dims["past_len"].min == 0  # a cache, appended to: empty before the first token
    x, past = np.ones((1, 2), np.float32), np.full((1, 3), 2.0, np.float32)
    np.testing.assert_array_equal(artifact.run({"x": x, "past": past, "mask": np.ones((1, 5), np.float32)})[0],
                                  [[2, 2, 2, 1, 1]])
    with pytest.raises(InputShapeError, match="'past_len \\+ seq' = 5") as caught:
        artifact.run({"x": x, "past": past, "mask": np.ones((1, 4), np.float32)})
    assert (caught.value.input, caught.value.dim) == ("mask", "past_len + seq")
    fixed = byoc.compile(m, vendors=["dnnl"], dims={"past_len": 3})
    assert fixed.inputs[2].shape == (1, "3 + seq")
